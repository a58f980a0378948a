"""Rolling-window rate limits: the same behaviour from the in-process and the Redis store.

Time is a plain float driven by each test; nothing sleeps. The Redis variant needs
HERALD_TEST_REDIS_URL and uses a random key prefix so parallel runs don't collide.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Sequence
from uuid import uuid4

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from herald.http.ratelimit import (
    HELD_CLOCK_KEEP_SECONDS,
    Decision,
    MemoryRateLimitStore,
    RateLimitStore,
    RedisRateLimitStore,
    Window,
    make_store,
    parse_windows,
)
from herald.http.ratelimit.core import AHEAD

T0 = 1_768_478_400.0  # 2026-01-15T12:00:00Z
KEY = "bucket:op:ws:key"
MINUTE, HOUR, DAY = 60, 3600, 86400


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def redis_url() -> str:
    url = os.environ.get("HERALD_TEST_REDIS_URL")
    if not url:
        pytest.skip("HERALD_TEST_REDIS_URL not set")
    return url


def redis_store(url: str, prefix: str) -> RedisRateLimitStore:
    return RedisRateLimitStore(Redis.from_url(url), prefix=prefix)


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[RateLimitStore]:
    if request.param == "memory":
        yield MemoryRateLimitStore()
        return
    rl = redis_store(redis_url(), prefix=f"herald:test:rl:{uuid4().hex}:")
    try:
        yield rl
    finally:
        await rl.reset()
        await rl.aclose()


async def take(store: RateLimitStore, windows: Sequence[Window], now: float, n: int = 1) -> list[Decision]:
    return [await store.acquire(KEY, windows, now) for _ in range(n)]


def admitted(decisions: Sequence[Decision]) -> int:
    return sum(d.allowed for d in decisions)


@pytest.mark.anyio
class TestRollingWindowLimits:
    async def test_admits_exactly_the_limit_within_a_window(self, store: RateLimitStore) -> None:
        windows = [Window(3, MINUTE)]
        decisions = [await store.acquire(KEY, windows, T0 + i) for i in range(5)]
        assert [d.allowed for d in decisions] == [True, True, True, False, False]
        assert [d.remaining for d in decisions] == [2, 1, 0, 0, 0]
        assert all(d.token for d in decisions[:3])
        assert len({d.token for d in decisions[:3]}) == 3
        assert decisions[3].token is None
        assert decisions[3].retry_after == 57  # the T0 entry leaves at T0+60; asked at T0+3

    async def test_wait_is_the_longest_among_full_windows_and_records_nothing(
        self, store: RateLimitStore
    ) -> None:
        windows = parse_windows("2/second;3/minute")
        assert await store.wait(KEY, windows, T0) == 0
        assert admitted(await take(store, windows, T0, 2)) == 2
        assert admitted(await take(store, windows, T0 + 1, 1)) == 1
        # The minute is full until the T0 entries leave at T0+60; the second is not full at T0+1.
        assert await store.wait(KEY, windows, T0 + 1) == 59
        assert await store.wait(KEY, windows, T0 + 59.5) == 1
        assert await store.wait(KEY, windows, T0 + 60) == 0
        assert (await store.acquire(KEY, windows, T0 + 60)).allowed  # the waits took no slot

    async def test_keys_are_limited_independently(self, store: RateLimitStore) -> None:
        windows = [Window(1, MINUTE)]
        assert (await store.acquire("a", windows, T0)).allowed
        assert (await store.acquire("b", windows, T0)).allowed
        assert not (await store.acquire("a", windows, T0)).allowed

    async def test_window_rolls_instead_of_resetting(self, store: RateLimitStore) -> None:
        windows = [Window(3, MINUTE)]
        for at in (T0, T0 + 10, T0 + 20):
            assert (await store.acquire(KEY, windows, at)).allowed
        # Less than a window after the first entry: still full.
        assert admitted(await take(store, windows, T0 + 59.999, 3)) == 0
        # The T0 entry has left; a fixed window would now admit 3, a rolling one admits 1.
        assert admitted(await take(store, windows, T0 + 60, 3)) == 1
        # T0+10 and T0+20 have left too, T0+60 is still in: exactly 2.
        assert admitted(await take(store, windows, T0 + 80, 3)) == 2

    async def test_a_clock_moved_back_does_not_count_what_it_has_not_reached(
        self, store: RateLimitStore
    ) -> None:
        # A sandbox's clock file moved back a day: the hour's three entries lie in its future. They
        # kept the key refused for 25 hours (Retry-After 90000); entries a host's clock reads a
        # little ahead (`AHEAD`) still count.
        windows = [Window(3, HOUR)]
        assert admitted(await take(store, windows, T0, 3)) == 3
        assert await store.wait(KEY, windows, T0 - AHEAD) > 0
        assert not (await store.acquire(KEY, windows, T0 - AHEAD)).allowed
        assert await store.wait(KEY, windows, T0 - AHEAD - 1) == 0
        assert admitted(await take(store, windows, T0 - DAY, 4)) == 3
        # Back where it was: the entries of the timeline it left are gone, those made since count.
        assert not (await store.acquire(KEY, windows, T0 - DAY + 1)).allowed

    async def test_refusal_by_one_window_takes_no_slot_in_another(self, store: RateLimitStore) -> None:
        windows = parse_windows("2/second;3/minute")
        assert admitted(await take(store, windows, T0, 2)) == 2
        refused = await take(store, windows, T0 + 0.5, 5)
        assert admitted(refused) == 0
        assert {(d.limit, d.remaining) for d in refused} == {(2, 0)}
        # Had the refusals been counted in the minute window it would be full; it holds only 2.
        d = await store.acquire(KEY, windows, T0 + 1)
        assert (d.allowed, d.limit, d.remaining, d.reset_at) == (True, 3, 0, T0 + 60)
        d = await store.acquire(KEY, windows, T0 + 1)
        assert (d.allowed, d.limit, d.retry_after) == (False, 3, 59)

    async def test_refusal_by_the_longer_window_takes_no_slot_in_the_shorter(
        self, store: RateLimitStore
    ) -> None:
        windows = parse_windows("2/second;2/minute")
        assert admitted(await take(store, windows, T0, 2)) == 2
        assert admitted(await take(store, windows, T0 + 59.5, 4)) == 0  # minute full, second window empty
        # At T0+60 the minute empties; had the refusals at T0+59.5 been counted in the second
        # window it would still be full.
        assert admitted(await take(store, windows, T0 + 60, 3)) == 2

    @pytest.mark.parametrize("start", [T0, T0 + 0.25, T0 + 0.999, T0 + 59.5])
    async def test_retry_after_is_exactly_long_enough(self, store: RateLimitStore, start: float) -> None:
        windows = parse_windows("2/second;3/minute")
        await take(store, windows, start, 2)
        # Refused by the second window, then (after one more) by the minute window.
        for at in (start + 0.5, start + 1.5):
            refused = await store.acquire(KEY, windows, at)
            assert not refused.allowed
            assert refused.retry_after >= 1
            assert not (await store.acquire(KEY, windows, at + (refused.retry_after - 1))).allowed
            assert (await store.acquire(KEY, windows, at + refused.retry_after)).allowed

    async def test_retry_after_waits_for_the_slowest_refusing_window(self, store: RateLimitStore) -> None:
        windows = parse_windows("1/s;2/min")
        await store.acquire(KEY, windows, T0)
        await store.acquire(KEY, windows, T0 + 1)
        d = await store.acquire(KEY, windows, T0 + 1.5)
        # Both windows are full; the headers describe the shorter, Retry-After honours the longer.
        assert (d.allowed, d.limit, d.remaining, d.reset_at, d.retry_after) == (False, 1, 0, T0 + 2, 59)

    async def test_headers_describe_the_window_nearest_exhaustion(self, store: RateLimitStore) -> None:
        windows = parse_windows("5/second;8/minute")
        d = (await take(store, windows, T0 + 0.25, 3))[-1]
        assert (d.limit, d.remaining, d.reset_at, d.retry_after) == (5, 2, T0 + 2, 0)  # ceil(T0+1.25)
        d = await store.acquire(KEY, windows, T0 + 1.25)
        # 4 left in each window: the tie goes to the shorter one, whose oldest entry is this one.
        assert (d.limit, d.remaining, d.reset_at) == (5, 4, T0 + 3)
        d = await store.acquire(KEY, windows, T0 + 2.25)
        assert (d.limit, d.remaining, d.reset_at) == (8, 3, T0 + 61)
        await take(store, windows, T0 + 3.25, 3)
        d = await store.acquire(KEY, windows, T0 + 3.25)
        assert (d.allowed, d.limit, d.remaining, d.reset_at, d.retry_after) == (False, 8, 0, T0 + 61, 57)

    async def test_headers_pick_the_same_window_whatever_order_the_windows_come_in(
        self, store: RateLimitStore
    ) -> None:
        windows = [Window(4, MINUTE), Window(3, 1)]  # longest first, unlike `parse_windows`
        await store.acquire(KEY, windows, T0 - 10)  # only the minute still counts it at T0
        d = await store.acquire(KEY, windows, T0 + 0.25)
        # 2 left in each: the tie goes to the 1-second window, whose oldest entry is this one.
        assert (d.limit, d.remaining, d.reset_at) == (3, 2, T0 + 2)
        await take(store, windows, T0 + 0.5, 2)
        d = await store.acquire(KEY, windows, T0 + 0.75)
        # Both full: the headers describe the shorter; Retry-After waits for T0-10 to leave the minute.
        assert (d.allowed, d.limit, d.remaining, d.reset_at, d.retry_after) == (False, 3, 0, T0 + 2, 50)

    async def test_release_frees_exactly_one_slot_in_every_window(self, store: RateLimitStore) -> None:
        windows = parse_windows("2/minute;3/hour")
        _, b = await take(store, windows, T0, 2)
        c = await store.acquire(KEY, windows, T0 + MINUTE)
        assert c.allowed
        assert c.token is not None
        assert b.token is not None
        assert not (await store.acquire(KEY, windows, T0 + MINUTE)).allowed  # hour full
        await store.release(KEY, windows, c.token)
        assert admitted(await take(store, windows, T0 + MINUTE, 2)) == 1
        # b has already left the minute window; releasing it frees its hour slot only.
        await store.release(KEY, windows, b.token)
        assert admitted(await take(store, windows, T0 + MINUTE, 2)) == 1
        # Releasing twice, or releasing a token never issued, frees nothing.
        await store.release(KEY, windows, b.token)
        await store.release(KEY, windows, uuid4().hex)
        assert admitted(await take(store, windows, T0 + MINUTE, 2)) == 0

    async def test_concurrent_acquires_admit_exactly_the_limit(self, store: RateLimitStore) -> None:
        windows = parse_windows("7/second;20/minute")
        decisions = await asyncio.gather(*(store.acquire(KEY, windows, T0) for _ in range(50)))
        assert admitted(decisions) == 7
        assert len({d.token for d in decisions if d.allowed}) == 7

    async def test_reset_forgets_everything(self, store: RateLimitStore) -> None:
        windows = [Window(1, DAY)]
        await store.acquire(KEY, windows, T0)
        await store.reset()
        assert (await store.acquire(KEY, windows, T0)).allowed

    async def test_contract_numbers_for_offer_reads(self, store: RateLimitStore) -> None:
        windows = parse_windows("150/minute;500/hour;1000/day")

        async def fill(start: float, n: int, step: float) -> None:
            decisions = [await store.acquire(KEY, windows, start + i * step) for i in range(n)]
            assert admitted(decisions) == n

        # 150 in 45 s; the 151st within that minute is refused by the minute window.
        await fill(T0, 150, 0.3)
        d = await store.acquire(KEY, windows, T0 + 50)
        assert (d.allowed, d.limit, d.retry_after) == (False, 150, 10)
        # 500 in the hour at 150 per minute; the 501st is refused by the hour window.
        await fill(T0 + MINUTE, 150, 0.3)
        await fill(T0 + 2 * MINUTE, 150, 0.3)
        await fill(T0 + 3 * MINUTE, 50, 0.3)
        d = await store.acquire(KEY, windows, T0 + 10 * MINUTE)
        assert (d.allowed, d.limit, d.retry_after) == (False, 500, HOUR - 10 * MINUTE)
        # Another 500 in the next hour makes 1000 in the day; the 1001st is refused by the day window.
        for m in range(4):
            await fill(T0 + HOUR + m * MINUTE, 150 if m < 3 else 50, 0.3)
        d = await store.acquire(KEY, windows, T0 + 3 * HOUR)
        assert (d.allowed, d.limit, d.retry_after) == (False, 1000, DAY - 3 * HOUR)
        assert (await store.acquire(KEY, windows, T0 + DAY)).allowed


@pytest.mark.anyio
@pytest.mark.redis
async def test_redis_clients_on_separate_connections_share_the_limit_exactly() -> None:
    url, prefix = redis_url(), f"herald:test:rl:{uuid4().hex}:"
    one, two = redis_store(url, prefix), redis_store(url, prefix)
    try:
        windows = parse_windows("10/second;25/minute")
        decisions = await asyncio.gather(
            *(s.acquire(KEY, windows, T0) for _ in range(30) for s in (one, two))
        )
        assert admitted(decisions) == 10
        decisions = await asyncio.gather(
            *(s.acquire(KEY, windows, T0 + 1) for _ in range(30) for s in (two, one))
        )
        assert admitted(decisions) == 10
    finally:
        await one.reset()
        await one.aclose()
        await two.aclose()


@pytest.mark.anyio
@pytest.mark.redis
async def test_redis_keeps_a_held_clocks_logs_past_their_window_of_real_time() -> None:
    # Redis expires keys on its own clock: a sandbox whose clock file stood still a minute of real
    # time had its minute window emptied (200 where the in-process store still refused).
    url, prefix = redis_url(), f"herald:test:rl:{uuid4().hex}:"
    admin = Redis.from_url(url)
    plain = make_store(url, prefix + "plain:")
    held = make_store(url, prefix + "held:", held_clock=True)
    try:
        windows = [Window(1, MINUTE)]
        for store in (plain, held):
            assert (await store.acquire(KEY, windows, T0)).allowed
        assert 0 < await admin.ttl(f"{prefix}plain:{{{KEY}}}:{MINUTE}") <= MINUTE
        assert await admin.ttl(f"{prefix}held:{{{KEY}}}:{MINUTE}") > HELD_CLOCK_KEEP_SECONDS - MINUTE
    finally:
        for store in (plain, held):
            await store.reset()
            await store.aclose()
        await admin.aclose()


@pytest.fixture
async def redis_pair() -> AsyncIterator[tuple[RedisRateLimitStore, Redis]]:
    """A Redis store whose acquire connection has a name of its own, and a client to look at it."""
    url, prefix, name = redis_url(), f"herald:test:rl:{uuid4().hex}:", f"herald-test-{uuid4().hex}"
    store, admin = (
        RedisRateLimitStore(Redis.from_url(url, client_name=name), prefix=prefix),
        Redis.from_url(url),
    )
    try:
        yield store, admin
    finally:
        await store.reset()
        await store.aclose()
        await admin.aclose()


async def acquire_connections(admin: Redis, store: RedisRateLimitStore) -> list[dict[str, str]]:
    name = store._client.connection_pool.connection_kwargs["client_name"]
    return [c for c in await admin.client_list() if c["name"] == name]


@pytest.mark.anyio
@pytest.mark.redis
async def test_redis_acquires_of_one_turn_share_one_connection_and_keep_their_own_replies(
    redis_pair: tuple[RedisRateLimitStore, Redis],
) -> None:
    store, admin = redis_pair
    windows = [Window(100, MINUTE)]
    for i in range(8):  # key i holds i entries, so each reply says whose it is
        for _ in range(i):
            await store.acquire(f"key-{i}", windows, T0)
    decisions = await asyncio.gather(*(store.acquire(f"key-{i}", windows, T0) for i in range(8)))
    assert [d.remaining for d in decisions] == [100 - (i + 1) for i in range(8)]
    assert len(await acquire_connections(admin, store)) == 1  # one connection, all the calls pipelined


@pytest.mark.anyio
@pytest.mark.redis
async def test_redis_callers_cancelled_before_and_after_the_send_leave_the_others_their_replies(
    redis_pair: tuple[RedisRateLimitStore, Redis],
) -> None:
    store, _ = redis_pair
    windows = [Window(100, MINUTE)]
    await store.acquire("warm-up", windows, T0)  # connected, the sender waiting for the next turn
    tasks = [asyncio.ensure_future(store.acquire(f"key-{i}", windows, T0)) for i in range(6)]
    await asyncio.sleep(0)  # the callers queued their commands; the sender writes on the next turn
    tasks[1].cancel()  # before the send: its command is not sent
    await asyncio.sleep(0)  # the sender wrote the batch
    tasks[4].cancel()  # after the send: its script runs, its reply is skipped
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(done[1], asyncio.CancelledError)
    assert isinstance(done[4], asyncio.CancelledError)
    assert [d.remaining for i, d in enumerate(done) if i not in (1, 4)] == [99] * 4  # type: ignore[union-attr]
    again = [await store.acquire(f"key-{i}", windows, T0) for i in range(6)]
    assert [d.remaining for d in again] == [98, 99, 98, 98, 98, 98]


@pytest.mark.anyio
@pytest.mark.redis
async def test_redis_error_reply_is_its_callers_alone(redis_pair: tuple[RedisRateLimitStore, Redis]) -> None:
    store, admin = redis_pair
    windows = [Window(3, MINUTE)]
    await admin.set(store._keys("broken", windows)[0], "not a sorted set")
    results = await asyncio.gather(
        *(store.acquire(key, windows, T0) for key in ("a", "broken", "b")), return_exceptions=True
    )
    assert isinstance(results[1], ResponseError)
    assert [d.remaining for d in (results[0], results[2])] == [2, 2]  # type: ignore[union-attr]


@pytest.mark.anyio
@pytest.mark.redis
async def test_redis_store_reloads_a_flushed_script_and_stays_exact(
    redis_pair: tuple[RedisRateLimitStore, Redis],
) -> None:
    store, admin = redis_pair
    windows = parse_windows("5/second")
    assert (await store.acquire(KEY, windows, T0)).allowed
    await admin.script_flush()  # as a Redis restart does: the next EVALSHA answers NOSCRIPT
    decisions = await asyncio.gather(*(store.acquire(KEY, windows, T0) for _ in range(10)))
    assert admitted(decisions) == 4


@pytest.mark.anyio
@pytest.mark.redis
async def test_redis_store_carries_on_after_its_connection_is_killed(
    redis_pair: tuple[RedisRateLimitStore, Redis],
) -> None:
    store, admin = redis_pair
    windows = parse_windows("5/second")
    assert (await store.acquire(KEY, windows, T0)).allowed
    [connection] = await acquire_connections(admin, store)
    await admin.client_kill_filter(_id=connection["id"])
    decisions = await asyncio.gather(*(store.acquire(KEY, windows, T0) for _ in range(10)))
    assert admitted(decisions) == 4
    [replaced] = await acquire_connections(admin, store)
    assert replaced["id"] != connection["id"]


@pytest.mark.anyio
@pytest.mark.redis
async def test_redis_store_sends_a_call_lost_with_its_connection_once_more(
    redis_pair: tuple[RedisRateLimitStore, Redis],
) -> None:
    store, admin = redis_pair
    windows = parse_windows("5/second")
    assert (await store.acquire(KEY, windows, T0)).allowed
    [connection] = await acquire_connections(admin, store)
    # Writes (scripts included) wait while clients are paused: the call is in flight, unanswered,
    # when its connection dies, and never ran. (The timeout only bounds a crashed test's pause.)
    await admin.client_pause(1000, all=False)
    try:
        call = asyncio.ensure_future(store.acquire(KEY, windows, T0))
        await asyncio.sleep(0)
        await asyncio.sleep(0)  # queued, then written by the sender
        await admin.client_kill_filter(_id=connection["id"])
    finally:
        await admin.client_unpause()
    decision = await call
    assert (decision.allowed, decision.remaining) == (True, 3)


@pytest.mark.anyio
@pytest.mark.redis
async def test_redis_store_refuses_calls_after_aclose() -> None:
    store = redis_store(redis_url(), prefix=f"herald:test:rl:{uuid4().hex}:")
    await store.acquire(KEY, [Window(1, MINUTE)], T0)
    await store.reset()
    await store.aclose()
    with pytest.raises(RedisConnectionError):
        await store.acquire(KEY, [Window(1, MINUTE)], T0)


@pytest.mark.anyio
async def test_memory_store_drops_idle_keys() -> None:
    store = MemoryRateLimitStore(sweep_every=60)
    windows = parse_windows("1/second;5/minute")
    for i in range(10):
        await store.acquire(f"key-{i}", windows, T0)
    assert len(store) == 20
    await store.acquire("other", windows, T0 + MINUTE)
    assert len(store) == 2


@pytest.mark.anyio
async def test_make_store_picks_redis_only_when_configured() -> None:
    memory = make_store(None)
    assert isinstance(memory, MemoryRateLimitStore)
    remote = make_store("redis://127.0.0.1:6379/0", prefix="herald:test:rl:")
    assert isinstance(remote, RedisRateLimitStore)  # no connection is made until first use
    await remote.aclose()


class TestParseWindows:
    @pytest.mark.parametrize(
        ("spec", "expected"),
        [
            ("150/minute;500/hour;1000/day", ((150, MINUTE), (500, HOUR), (1000, DAY))),
            ("5/second", ((5, 1),)),
            ("10/s", ((10, 1),)),
            ("25/min", ((25, MINUTE),)),
            ("100/h", ((100, HOUR),)),
            ("100/day", ((100, DAY),)),
            ("100/day;5/s", ((5, 1), (100, DAY))),
            (" 10 / Minute ; 20/HOURS ", ((10, MINUTE), (20, HOUR))),
            ("150/min, 500/h, 1000/day", ((150, MINUTE), (500, HOUR), (1000, DAY))),
            ("10000/minute", ((10000, MINUTE),)),
        ],
    )
    def test_valid(self, spec: str, expected: tuple[tuple[int, int], ...]) -> None:
        assert parse_windows(spec) == tuple(Window(limit, seconds) for limit, seconds in expected)

    @pytest.mark.parametrize(
        "spec",
        [
            "",
            "   ",
            "abc",
            "10",
            "10/",
            "/minute",
            "0/minute",
            "-1/minute",
            "1.5/minute",
            "10/fortnight",
            "10/minute;",
            "10/minute;;20/hour",
            "10/minute;20/min",
            "10,000/min",
            "10/2minutes",
            "ten/minute",
        ],
    )
    def test_invalid(self, spec: str) -> None:
        with pytest.raises(ValueError, match=r"rate limit|window"):
            parse_windows(spec)

    @pytest.mark.parametrize(("limit", "seconds"), [(0, 60), (1, 0), (-1, 60)])
    def test_window_rejects_empty_limits(self, limit: int, seconds: int) -> None:
        with pytest.raises(ValueError, match="window needs"):
            Window(limit, seconds)

"""Redis rate-limit store: limits shared by every worker process and host.

One Lua script per acquire prunes, checks every window, and only then adds the entry to all of
them; Redis runs scripts one at a time, so concurrent clients cannot both take the last slot and
a refused request consumes nothing. Each window is a sorted set (score = admission time from the
caller's clock, never the server's) that expires after one window of inactivity.

The acquires of one process go out on one connection of their own (`_ScriptChannel`): every
acquire issued within one turn of the event loop is written in one send and their replies read
together. Pipelining changes nothing Redis decides (each script still runs whole, one at a time);
it removes the per-request send and the client's per-command machinery, which were a fifth of a
PostgreSQL worker's samples on `GET /v5/offers` (benchmarks/README.md, "Herald against its peers").

Every exchange is bounded by the store's `timeout` (`TIMEOUT_SECONDS`, or the client's
`socket_timeout`, e.g. `?socket_timeout=0.5` in the URL): a Redis that refuses connections, or
accepts them and never answers (a network partition, a paused host), fails the callers with a
`redis.exceptions.ConnectionError` within about that long, which the request middleware answers
503; the next call connects afresh, so the store works again as soon as Redis answers.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import re
import secrets
from collections import deque
from collections.abc import Sequence
from typing import Any

import hiredis
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from herald.http.ratelimit.core import AHEAD, Decision, Window, check_windows, decide, longest_wait
from herald.redis_clients import TIMEOUT_SECONDS

# KEYS[i]: the log of window i (shortest window first). ARGV: token, now, then per window: cutoff,
# limit, seconds; then the least time a log is kept (`keep_seconds`), and last the moment past which
# an entry is from a clock since moved back (`AHEAD`). Cutoffs are computed by the caller: Lua would format numbers with 14 digits and
# lose the sub-millisecond part of an epoch timestamp. Returns: allowed, then per window: count,
# pivot score. A pivot is looked up only where `decide` reads it: the window nearest exhaustion
# (fewest slots left, ties to the shorter window, as `decide` picks it) and every full window of a
# refusal; elsewhere it is '' (not needed), which saves a ZRANGE per other window of a request.
_ACQUIRE = """
local token, now, keep, ahead = ARGV[1], ARGV[2], tonumber(ARGV[#ARGV - 1]), ARGV[#ARGV]
local counts, limits, allowed = {}, {}, 1
for i = 1, #KEYS do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', ARGV[3 * i])
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '(' .. ahead, '+inf')
  counts[i] = redis.call('ZCARD', KEYS[i])
  limits[i] = tonumber(ARGV[3 * i + 1])
  if counts[i] >= limits[i] then allowed = 0 end
end
if allowed == 1 then
  for i = 1, #KEYS do
    redis.call('ZADD', KEYS[i], now, token)
    redis.call('EXPIRE', KEYS[i], math.max(tonumber(ARGV[3 * i + 2]), keep))
    counts[i] = counts[i] + 1
  end
end
local nearest, least, span = 1, math.huge, math.huge
for i = 1, #KEYS do
  local left, seconds = math.max(0, limits[i] - counts[i]), tonumber(ARGV[3 * i + 2])
  if left < least or (left == least and seconds < span) then nearest, least, span = i, left, seconds end
end
local out = {allowed}
for i = 1, #KEYS do
  local pivot = ''
  if counts[i] > 0 and (i == nearest or (allowed == 0 and counts[i] >= limits[i])) then
    local at = math.max(0, counts[i] - limits[i])
    pivot = redis.call('ZRANGE', KEYS[i], at, at, 'WITHSCORES')[2]
  end
  out[#out + 1] = counts[i]
  out[#out + 1] = pivot
end
return out
"""
_ACQUIRE_SHA = hashlib.sha1(_ACQUIRE.encode()).hexdigest()

# Read-only (asked on refusals only): KEYS as for _ACQUIRE; ARGV per window: cutoff, limit; last,
# as for _ACQUIRE. Returns per window: the live count (entries scored above the cutoff, up to the
# last argument) and, for a full window, the pivot `decide` reads (else '').
_WAIT = """
local out, ahead = {}, ARGV[#ARGV]
for i = 1, #KEYS do
  local after, limit = '(' .. ARGV[2 * i - 1], tonumber(ARGV[2 * i])
  local count = redis.call('ZCOUNT', KEYS[i], after, ahead)
  local pivot = ''
  if count >= limit then
    pivot = redis.call('ZRANGEBYSCORE', KEYS[i], after, ahead, 'WITHSCORES', 'LIMIT', count - limit, 1)[2]
  end
  out[#out + 1] = count
  out[#out + 1] = pivot
end
return out
"""


def store_timeout(client: Redis) -> float:
    """The bound on each exchange with Redis: the client's `socket_timeout`, else `TIMEOUT_SECONDS`."""
    given = client.connection_pool.connection_kwargs.get("socket_timeout")
    return float(given) if given else TIMEOUT_SECONDS


class RedisRateLimitStore:
    """Owns `client` and closes it in `aclose`. Keys are `<prefix>{<key>}:<window seconds>`.

    Acquires use a connection of their own, made with `client`'s connection settings on first use;
    `release` and `reset` (rare) go through `client`. `acquire` and `release` take at most about
    `timeout` (`store_timeout(client)`), or fail with a `redis.exceptions.ConnectionError`.
    """

    def __init__(self, client: Redis, prefix: str = "herald:rl:", keep_seconds: int = 0) -> None:
        self._client = client
        self._prefix = prefix
        # Redis expires an idle log on its own clock: by default once its window has passed. A
        # sandbox's clock (`HERALD_CLOCK_FILE`) may stand still meanwhile: its logs are kept
        # longer, so its windows empty as its clock moves, not as real time passes.
        self._keep_seconds = keep_seconds
        self.timeout = store_timeout(client)
        self._channel = _ScriptChannel(client, self.timeout)
        # Entry names only need to be unique among concurrent entries of one key: a random part per
        # store (process) and a counter are, and cost less than a UUID per request.
        self._token_prefix = secrets.token_hex(8) + ":"
        self._tokens = itertools.count(1)

    def _keys(self, key: str, windows: Sequence[Window]) -> list[str]:
        # The hash tag keeps every window of a key in one Redis Cluster slot, as a script requires.
        return [f"{self._prefix}{{{key}}}:{w.seconds}" for w in windows]

    async def acquire(self, key: str, windows: Sequence[Window], now: float) -> Decision:
        windows = check_windows(windows)
        token = self._token_prefix + str(next(self._tokens))
        reply = await self._channel.call(self._command(key, windows, now, token))
        return self._decision(windows, now, token, reply)

    def _command(self, key: str, windows: Sequence[Window], now: float, token: str) -> tuple[Any, ...]:
        command: list[Any] = [
            "EVALSHA",
            _ACQUIRE_SHA,
            len(windows),
            *self._keys(key, windows),
            token,
            repr(now),
        ]
        for w in windows:
            command += [repr(now - w.seconds), w.limit, w.seconds]
        return (*command, self._keep_seconds, repr(now + AHEAD))

    @staticmethod
    def _decision(windows: Sequence[Window], now: float, token: str, reply: Sequence[Any]) -> Decision:
        allowed, *rest = reply
        counts = [int(n) for n in rest[0::2]]
        pivots = [float(p) if p else None for p in rest[1::2]]
        return decide(windows, now, token if allowed else None, counts, pivots)

    async def wait(self, key: str, windows: Sequence[Window], now: float) -> int:
        windows = check_windows(windows)
        arguments: list[Any] = []
        for w in windows:
            arguments += [repr(now - w.seconds), w.limit]
        arguments.append(repr(now + AHEAD))
        try:
            async with asyncio.timeout(self.timeout):
                reply = await self._client.eval(_WAIT, len(windows), *self._keys(key, windows), *arguments)  # type: ignore[misc]
        except (TimeoutError, RedisTimeoutError) as error:
            raise RedisConnectionError(f"Redis did not answer within {self.timeout:g} s") from error
        counts = [int(n) for n in reply[0::2]]
        pivots = [float(p) if p else None for p in reply[1::2]]
        return longest_wait(windows, now, counts, pivots)

    async def release(self, key: str, windows: Sequence[Window], token: str) -> None:
        try:
            async with asyncio.timeout(self.timeout), self._client.pipeline(transaction=True) as pipe:
                for name in self._keys(key, windows):
                    pipe.zrem(name, token)
                await pipe.execute()
        except (TimeoutError, RedisTimeoutError) as error:  # the slot expires with its window
            raise RedisConnectionError(f"Redis did not answer within {self.timeout:g} s") from error

    async def reset(self) -> None:
        pattern = re.sub(r"([*?\[\]\\])", r"\\\1", self._prefix) + "*"
        batch: list[bytes | str] = []
        async for name in self._client.scan_iter(match=pattern, count=500):
            batch.append(name)
            if len(batch) >= 500:
                await self._client.unlink(*batch)
                batch.clear()
        if batch:
            await self._client.unlink(*batch)

    async def aclose(self) -> None:
        await self._channel.aclose()
        await self._client.aclose()


class _Call:
    """A queued command, the future of its reply, and whether it was sent again already."""

    __slots__ = ("command", "future", "resent")

    def __init__(self, command: tuple[Any, ...], future: asyncio.Future[Any]) -> None:
        self.command = command
        self.future = future
        self.resent = False


class _ScriptChannel:
    """One connection on which any number of callers evaluate the acquire script, pipelined.

    `call` queues a command and returns a future of its reply. One sender task, woken at most once
    per turn of the event loop, writes everything queued so far in one send, so the commands of
    one turn's callers share a round trip; one reader task resolves the futures in order as the
    replies arrive. Redis answers a connection's commands in the order it received them and runs
    each script whole, so every caller gets its own script's reply and the decisions are those of
    one command per call. A command whose caller was cancelled before the send is not sent.

    Failures: an error reply is its command's alone. NOSCRIPT (the server lost its script cache: a
    restart or SCRIPT FLUSH; the script did not run) sends the command again as EVAL, which reloads
    it. A lost connection sends the commands it carried once more on a new one, as the client's own
    retry does; a command may then count twice (never admit more than the limit). If they fail
    again, or connecting fails, the callers get a `redis.exceptions.ConnectionError`.

    Bounds (`timeout`): connecting, handshake included, takes at most `timeout`; while replies are
    due, one arrives every `timeout` at least. Otherwise the connection is dropped and every call
    waiting on it (sent or queued) fails at once, none sent again (a stalled Redis may yet run
    them); the next call connects afresh. An idle connection waits for nothing, so it has no bound.
    """

    def __init__(self, client: Redis, timeout: float) -> None:
        self._pool = client.connection_pool  # one home for the connection settings (URL, auth, TLS, db)
        self._timeout = timeout
        self._queued: list[_Call] = []
        self._sent: deque[_Call] = deque()
        self._wake: asyncio.Future[None] | None = None
        self._sender: asyncio.Task[None] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._connection: AbstractConnection | None = None
        # Armed while replies are due: `_overdue` drops the connection unless one arrived in time.
        self._watch: asyncio.TimerHandle | None = None
        self._watch_at = 0.0  # the loop time it is armed for
        # Since when (loop time) the next reply is due: the send that found none due, or the last
        # reply while more are due.
        self._due_since = 0.0
        self._closing: set[asyncio.Task[None]] = set()  # disconnects the watch started
        self._closed = False

    def call(self, command: tuple[Any, ...]) -> asyncio.Future[Any]:
        if self._closed:
            raise RedisConnectionError("the rate-limit store is closed")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue(_Call(command, future))
        return future

    def _queue(self, call: _Call) -> None:
        self._queued.append(call)
        if self._sender is None or self._sender.done():
            self._sender = asyncio.get_running_loop().create_task(self._send())
        elif self._wake is not None and not self._wake.done():
            self._wake.set_result(None)  # the sender runs on the next turn, after this turn's callers

    async def _send(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._queued:
                self._wake = loop.create_future()
                await self._wake
            batch = [call for call in self._queued if not call.future.done()]
            self._queued = []
            if not batch:
                continue
            try:
                connection = await self._connected()
            except Exception as error:
                # Nothing answers: fail this batch and what queued behind it; the next call tries again.
                waiting, self._queued = [*batch, *self._queued], []
                self._fail(waiting, error)
                continue
            if not self._sent:
                self._due_since = loop.time()
            self._sent.extend(batch)  # before the send: the reader may see the replies at once
            self._expect_replies(connection)
            try:
                await connection.send_packed_command(
                    b"".join(hiredis.pack_command(call.command) for call in batch), check_health=False
                )
            except Exception as error:
                await self._lost(connection, error)

    async def _connected(self) -> AbstractConnection:
        if self._connection is None:
            # No socket timeout: the reader waits on an idle connection for as long as it is idle
            # (the watch bounds the waits for replies). No retry: a failed connect fails its calls.
            settings = {
                **self._pool.connection_kwargs,
                "socket_timeout": None,
                "socket_connect_timeout": self._timeout,
                "retry": Retry(NoBackoff(), 0),
            }
            connection = self._pool.connection_class(**settings)
            try:
                async with asyncio.timeout(self._timeout):
                    await connection.connect()  # type: ignore[no-untyped-call]
            except BaseException as error:
                await connection.disconnect(nowait=True)
                if isinstance(error, TimeoutError):
                    raise RedisTimeoutError(f"Redis did not answer within {self._timeout:g} s") from error
                raise
            self._connection = connection
            self._reader = asyncio.get_running_loop().create_task(self._read(connection))
        return self._connection

    async def _read(self, connection: AbstractConnection) -> None:
        try:
            while True:
                try:
                    reply = await connection.read_response()
                except ResponseError as error:  # an error reply: its command's alone
                    reply = error
                self._due_since = asyncio.get_running_loop().time()
                call = self._sent.popleft()  # a reply nothing was sent for breaks the connection too
                if isinstance(reply, NoScriptError) and call.command[0] == "EVALSHA":
                    call.command = ("EVAL", _ACQUIRE, *call.command[2:])
                    self._queue(call)
                elif call.future.done():  # its caller was cancelled after the send
                    pass
                elif isinstance(reply, ResponseError):
                    call.future.set_exception(reply)
                else:
                    call.future.set_result(reply)
        except Exception as error:
            await self._lost(connection, error)

    def _expect_replies(self, connection: AbstractConnection, delay: float | None = None) -> None:
        """Replies are due on `connection`: watch that one arrives every `timeout` (the first
        check after `delay`, by default a whole `timeout`)."""
        if self._watch is None:
            loop = asyncio.get_running_loop()
            self._watch_at = loop.time() + (self._timeout if delay is None else delay)
            self._watch = loop.call_at(self._watch_at, self._overdue, connection)

    def _overdue(self, connection: AbstractConnection) -> None:
        self._watch = None
        if connection is not self._connection or not self._sent:
            return  # dropped already, or every reply due has arrived
        now = asyncio.get_running_loop().time()
        if now - self._watch_at > self._timeout / 4:
            # This process was held up (a synchronous step kept the loop): a reply may be waiting
            # unread. It is not Redis that is late: a whole period more.
            self._expect_replies(connection)
            return
        left = self._due_since + self._timeout - now
        if left > 0:
            # A reply came since the watch was armed: the next is due a whole period after it
            # (not after this check: a watch armed before a stall then gave a call twice the bound).
            self._expect_replies(connection, left)
            return
        error = RedisTimeoutError(f"Redis did not answer within {self._timeout:g} s")
        if self._drop(connection, error, resend=False):
            closing = asyncio.get_running_loop().create_task(connection.disconnect(nowait=True))
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)

    async def _lost(self, connection: AbstractConnection, error: Exception) -> None:
        """`connection` broke: send what it carried once more on a new one (or fail it)."""
        if self._drop(connection, error, resend=True):
            await connection.disconnect(nowait=True)

    def _drop(self, connection: AbstractConnection, error: Exception, *, resend: bool) -> bool:
        """Forget `connection` (False: it was already) and settle the calls it carried: sent once
        more if `resend` and not sent twice already, else failed, and with no `resend` the calls
        queued for it fail too."""
        if self._connection is not connection:
            return False  # already handled, by the reader, the sender or the watch
        self._connection = None
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        reader, self._reader = self._reader, None
        if reader is not None and reader is not asyncio.current_task():
            reader.cancel()
        carried = list(self._sent)
        self._sent.clear()
        if not resend:
            carried += self._queued
            self._queued = []
        again = [call for call in carried if resend and not call.resent and not self._closed]
        self._fail([call for call in carried if call not in again], error)
        for call in again:
            call.resent = True
            self._queue(call)
        return True

    @staticmethod
    def _fail(calls: list[_Call], error: Exception) -> None:
        for call in calls:
            if not call.future.done():
                lost = RedisConnectionError(f"rate-limit exchange with Redis failed: {error!r}")
                lost.__cause__ = error
                call.future.set_exception(lost)

    async def aclose(self) -> None:
        self._closed = True
        for task in (self._sender, self._reader):
            if task is not None:
                task.cancel()
        self._sender = self._reader = None
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        closed = RedisConnectionError("the rate-limit store was closed")
        self._fail([*self._sent, *self._queued], closed)
        self._sent.clear()
        self._queued = []
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.disconnect(nowait=True)

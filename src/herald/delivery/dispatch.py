"""Sending through a connector and recording it: the one path every message takes.

A `Dispatcher` lives for one batch of sends (one C8 request, one campaign run): it shares an HTTP
client between webhook calls and remembers connectors that failed as a whole, so later messages
through them fail at once with the same reason instead of each waiting for a timeout.

Campaign messages go through `deliver` (one) or `deliver_many` (a window of them, attempted side
by side): a transient failure is attempted again later (bounded attempts, exponential backoff on
the injected clock), and failed attempts in a row are counted per connector, by all workers
together (`streaks.py`), so the engine can pause an execution whose connector keeps failing. A
window is handed over at most
`delivery_concurrency` webhook requests (`delivery_smtp_connections` SMTP sessions) at a time; a
webhook connector with a `batch_size` gets that many messages per POST; SMTP connections are kept
between messages (`smtp.SmtpSessions`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Self

from sqlalchemy.exc import IntegrityError

from herald.clock import Clock
from herald.config import Settings
from herald.db import Database
from herald.delivery import outbox
from herald.delivery.config import is_smtp
from herald.delivery.connectors import open_secrets
from herald.delivery.crypto import SecretKeyError
from herald.delivery.lane import Lane
from herald.delivery.messages import Envelope, Outcome
from herald.delivery.models import Connector
from herald.delivery.smtp import SmtpSessions
from herald.delivery.streaks import Streaks, Tally, recorded
from herald.delivery.webhook import new_lane, send_webhook, send_webhook_batch
from herald.direct_writes import Transaction, Writer
from herald.joined_writes import FirstWrite, Joined
from herald.wake import wakes


class Lanes:
    """At most `count` webhook requests in flight, each on a lane of its own (`webhook.new_lane`):
    one kept-alive connection. (One pool of that many connections, on httpcore, walked its whole
    pool twice per request, quadratically in its size: at a few hundred messages a second that walk
    was most of the worker's time. A lane per request in flight keeps any client's pool trivial.)
    At most `smtp` SMTP sessions at once (`smtp_flight`; the connections are `SmtpSessions`')."""

    def __init__(self, count: int, smtp: int) -> None:
        self.count = max(1, count)
        self.flight = asyncio.Semaphore(self.count)
        self.smtp = max(1, smtp)
        self.smtp_flight = asyncio.Semaphore(self.smtp)
        self._idle: list[Lane] = []
        self._all: list[Lane] = []

    @classmethod
    def of(cls, settings: Settings) -> Lanes:
        """The lanes `settings` allow (`delivery_concurrency`, `delivery_smtp_connections`)."""
        return cls(settings.delivery_concurrency, settings.delivery_smtp_connections)

    async def take(self) -> Lane:
        """A lane to send one request on, held until `give_back` (the last one given back first:
        its connection is the likeliest to be open still). Not a context manager: one per message
        cost more than the lane's bookkeeping."""
        await self.flight.acquire()
        return self._idle.pop() if self._idle else self._new_lane()

    def give_back(self, lane: Lane) -> None:
        self._idle.append(lane)
        self.flight.release()

    def _new_lane(self) -> Lane:
        lane = new_lane()
        self._all.append(lane)
        return lane

    async def aclose(self) -> None:
        # Side by side: one after the other, each close waits a turn of the (maybe busy) loop.
        lanes, self._all, self._idle = self._all, [], []
        await asyncio.gather(*(lane.close() for lane in lanes))


# How long a request waits for a place that other workers' requests hold (`Dispatcher._room`)
# before it asks again; a place this process gives back, or an answer it gets, ends the wait sooner.
_PLACES_POLL_SECONDS = 0.05


class _Risk:
    """The requests through one connector on their way, unanswered (`Dispatcher._room`)."""

    def __init__(self) -> None:
        self.unanswered = 0
        self.healthy = False  # the last answer was a success
        self._answer = asyncio.Event()

    def answered(self, outcome: Outcome | None) -> None:
        """A request's answer came (`outcome`: None when it raised)."""
        self.unanswered -= 1
        if outcome is None or outcome.attempted:
            self.healthy = outcome is not None and outcome.sent
        self._answer.set()

    def given_back(self) -> None:
        """A window's places in the shared row were given back (`Dispatcher.record_window`)."""
        self._answer.set()

    async def wait(self, seconds: float | None = None) -> None:
        """Until the next answer or places given back (or `seconds`, when given)."""
        self._answer.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._answer.wait(), seconds)


class _Places:
    """A window's places in its connector's shared row (`Streaks.reserve`), taken for its requests
    while the connector is not known to answer well: `left()`, how many it wants (its requests not
    made yet, the one asking included, at most those it can have on their way at once); taken by
    one of its senders at a time."""

    def __init__(self, tally: Tally, left: Callable[[], int]) -> None:
        self.tally = tally
        self.left = left
        self.taking = asyncio.Lock()
        self.used = 0  # places kept by requests on their way or failed (a success frees its own)
        self.out = 0  # of them, those of requests not answered yet

    @property
    def free(self) -> bool:
        """The window holds a place no request keeps."""
        return self.used < self.tally.places

    def use(self) -> bool:
        """One place the window holds used by a request, if one is left."""
        if not self.free:
            return False
        self.used += 1
        self.out += 1
        return True

    def answered(self, sent: bool) -> None:
        """A request that used a place was answered. A success ended the streak: its place serves
        the window's next request (a failure keeps its place until the window is recorded, where
        it is counted instead)."""
        self.out -= 1
        if sent:
            self.used -= 1

    @property
    def spent(self) -> bool:
        """Every place the window holds is kept by a failure: none frees before the window is
        recorded, which waits for its requests left."""
        return bool(self.tally.places) and not self.out and not self.free


class Dispatcher:
    def __init__(
        self,
        settings: Settings,
        clock: Clock,
        database: Database,
        request_id: str | None = None,
        lanes: Lanes | None = None,
        stop: asyncio.Event | None = None,
        streaks: Streaks | None = None,
    ) -> None:
        """`lanes`: shared with other dispatchers (and closed by their owner); by default, lanes
        of this dispatcher's own, closed with it. `stop`: set when the process is to stop (SIGTERM);
        the engine then claims no new batch (`stopping`). `streaks`: the failed attempts in a row
        per connector, kept by the worker across its ticks; by default, counted from zero. When
        the dispatcher closes, the counts that reached the error threshold start again."""
        self._settings = settings
        self._clock = clock
        self._database = database
        self._request_id = request_id
        self._down: dict[str, str] = {}
        self._streaks = Streaks() if streaks is None else streaks
        self._risks: dict[str, _Risk] = {}
        self._secrets: dict[str, dict[str, str] | SecretKeyError] = {}
        self._own_lanes = lanes is None
        self._lanes = Lanes.of(settings) if lanes is None else lanes
        self._smtp = SmtpSessions()
        self._stop = stop
        self._turn: tuple[float, int, bool] | None = None
        # A campaign's dispatch gave way at the end of its turn with users left (`give_way`).
        self.gave_way = False

    def give_way(self) -> None:
        """The campaign in hand gives way (`yielding`), users left: the tick goes on to the rest."""
        self.gave_way = True

    def now(self) -> datetime:
        """The moment, as the dispatcher's clock says it now (a long send checks the campaign's
        expiry against it before each window)."""
        return self._clock.now()

    @property
    def stopping(self) -> bool:
        """The process is stopping: finish the window in hand, hand over and claim no other."""
        return self._stop is not None and self._stop.is_set()

    def begin_turn(self, seen: int, others_waiting: bool = False) -> None:
        """A campaign's turn in the tick begins (`yielding`). `seen`: the wake-ups counted
        (`wake.wakes`) when the tick began to look for work, before it read the events waiting:
        one that came after (while other campaigns had their turn) is work this tick has not
        seen. `others_waiting`: work known to wait already (events left in the inbox for the next
        tick), which the turn gives way to as to work woken during it."""
        self._turn = (time.monotonic(), seen, others_waiting)

    @property
    def yielding(self) -> bool:
        """Finish the window in hand and hand over no other: the process is stopping, or the campaign in
        hand has had its turn (`delivery_turn_seconds`) and other work was woken since the tick began. A
        worker sending a million users sent nothing else meanwhile, not even an event-triggered
        message due within a second; it now gives way, and its tick goes on to the rest (the
        event-triggered campaigns first, `engine.tick`) before taking the campaign up again."""
        if self.stopping:
            return True
        if self._turn is None:
            return False
        began, seen, others_waiting = self._turn
        woken = others_waiting or wakes() != seen
        return woken and time.monotonic() - began >= self._settings.delivery_turn_seconds

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._streaks.start_again_at(self._settings.delivery_error_threshold)
        if self._own_lanes:
            await self._lanes.aclose()
        await self._smtp.close()

    async def send(
        self,
        connector: Connector,
        envelope: Envelope,
        first: FirstWrite | None = None,
        last: Callable[[Outcome], Joined | None] | None = None,
    ) -> Outcome:
        """Record PENDING (with `first`), attempt, record the outcome (with `last` of it). Raises
        if the PENDING row cannot be written, in which case nothing was sent, and, with `last`,
        if the outcome cannot be recorded."""
        await _first_write(
            first,
            lambda joined: outbox.record_pending(
                self._database, envelope, connector, self._request_id, joined
            ),
        )
        outcome = await self._attempt(connector, envelope)
        joined = last(outcome) if last is not None else None
        await outbox.record_outcome(self._database, envelope, outcome, self._clock.now(), joined)
        return outcome

    async def deliver(self, connector: Connector, envelope: Envelope) -> Outcome:
        """A campaign message: attempted unless already settled; a transient failure below the
        attempt limit stays PENDING and comes back with `retry_at`, anything else is recorded."""
        now = self._clock.now()
        attempt = await outbox.begin_attempt(self._database, envelope, connector, now)
        if attempt.settled is not None:
            return attempt.settled
        tried = await self._attempt(connector, envelope)
        self._count(connector, tried)
        outcome = self._settle(connector, attempt.number, tried, now)
        if outcome.retry_at is None:
            await outbox.record_outcome(self._database, envelope, outcome, self._clock.now())
        else:
            reason = outcome.reason or "The send failed."
            await outbox.record_retry(self._database, envelope, reason, outcome.retry_at, self._clock.now())
        tally = Tally()
        tally.count(tried)
        write = recorded(connector, tally, self._clock.now())
        if write is not None:
            async with self._database.writes.transaction() as connection:
                await write(connection)
            await self._refresh(connector, tally)
        return outcome

    async def deliver_many(
        self,
        connector: Connector,
        envelopes: Sequence[Envelope],
        allowed: Callable[[Transaction], Awaitable[bool]],
        also: Callable[[list[Outcome]], Callable[[Writer], Awaitable[None]]],
        *,
        engine: bool = False,
    ) -> list[Outcome] | None:
        """`deliver` for a window of campaign messages: their attempts begun in one transaction
        that first asks `allowed` (None, nothing written or sent, when it says no), the messages
        handed over side by side, their outcomes recorded in one transaction together with what
        `also(outcomes)` writes (the engine's state of the users; `engine`, see `record_window`)."""
        window = await self.begin_window(connector, envelopes, allowed)
        if window is None:
            return None
        await self.send_window(window)
        return await self.record_window(window, also, engine=engine)

    async def begin_window(
        self,
        connector: Connector,
        envelopes: Sequence[Envelope],
        allowed: Callable[[Transaction], Awaitable[bool]],
        first: bool = False,
        guard: outbox.Guard | None = None,
    ) -> Window | None:
        """The first step of `deliver_many`: the window's attempts begun (its outbox rows written)
        in one transaction that first asks `allowed`; None, nothing written, when it says no. A
        window begun is handed over: `send_window` and `record_window` must follow. `first`: no
        message of the window was attempted before; `guard`: `allowed` as one statement's condition
        (both: `outbox.begin_attempts`)."""
        now = self._clock.now()
        attempts = await outbox.begin_attempts(
            self._database, envelopes, connector, now, allowed, first, guard
        )
        if attempts is None:
            return None
        return Window(connector, envelopes, attempts, now)

    async def send_window(self, window: Window, senders: int | None = None, halt: Halt | None = None) -> None:
        """The second step of `deliver_many`: the window's messages not settled already handed
        to the connector side by side (each request on a lane of its own), by at most `senders`
        requests at once (default: as many as the connector may have in flight). `halt` is asked
        before each request: once it gives a reason, the window's requests not made yet are not
        made (their messages due again at once, their attempts not used: `outbox.Settled`)."""
        attempts, envelopes = window.attempts, window.envelopes
        todo = [index for index, attempt in enumerate(attempts) if attempt.settled is None]
        requests = await self._attempt_many(
            window.connector, [envelopes[index] for index in todo], window.tally, senders, halt
        )
        # A retry's wait runs from the answer, not from the window's start: a request that took
        # the whole time limit to fail was otherwise due again as soon as it failed.
        answered = self._clock.now()
        indexes = iter(todo)
        for outcome, count in requests:
            for index in itertools.islice(indexes, count):
                number = attempts[index].number
                final = self._settle(window.connector, number, outcome, answered)
                # A message never handed to the connector (halted, or its connector down earlier
                # in the window) used no attempt: the row's count goes back to the attempts made.
                made = None if final.attempted else number - 1
                window.settled.append(outbox.Settled(envelopes[index], final, final.retry_at, made))
                window.outcomes[index] = final

    async def record_window(
        self,
        window: Window,
        also: Callable[[list[Outcome]], Callable[[Writer], Awaitable[None]]],
        *,
        engine: bool = False,
    ) -> list[Outcome]:
        """The last step of `deliver_many`: the outcomes recorded in one transaction together with
        what `also(outcomes)` writes (`engine`: it takes SQLAlchemy's path, so the transaction is
        the engine's: `DirectWrites.transaction`); each message's outcome, in the window's order."""
        ended = [outcome for outcome in window.outcomes if outcome is not None]
        now = self._clock.now()
        streak = recorded(window.connector, window.tally, now)
        await outbox.record_settled(
            self._database, window.settled, now, _both(also(ended), streak), engine=engine
        )
        if window.tally.places:
            self._risks.setdefault(window.connector.id, _Risk()).given_back()
        await self._refresh(window.connector, window.tally)
        return ended

    async def _refresh(self, connector: Connector, tally: Tally) -> None:
        """After a window with failures, the connector's streak as all workers have it; after one
        that ended with a success, none (its write ended it)."""
        if tally.failures and self._settings.delivery_error_threshold > 0:
            await self._streaks.refresh(self._database, connector)
        elif tally.succeeded:
            self._streaks.ended(connector.id)

    def _settle(self, connector: Connector, number: int, outcome: Outcome, now: datetime) -> Outcome:
        """What attempt `number` comes to: sent, failed for good, or to be attempted again
        (`retry_at`) after a transient failure below the attempt limit (the caller counts the
        attempt in the connector's streak: `_count`)."""
        if outcome.sent or not outcome.transient:
            return outcome
        if not outcome.attempted and outcome.retry_at is not None:
            return outcome  # halted: due again at once (`_halted`)
        reason = outcome.reason or "The send failed."
        if number >= self._settings.delivery_max_attempts and outcome.attempted:
            return Outcome(False, f"Gave up after {number} attempts: {reason}")
        delay = retry_delay(self._settings, number)
        if outcome.asked_wait is not None:
            # The receiver's Retry-After, within the longest wait; never sooner than the backoff.
            longest = timedelta(seconds=self._settings.delivery_retry_max_seconds)
            delay = max(delay, min(outcome.asked_wait, longest))
        return Outcome(False, reason, outcome.connector_down, True, now + delay, outcome.attempted)

    def requests(self, connector: Connector | None) -> int:
        """How many requests (webhook POSTs, SMTP sessions) can be in flight at once through
        `connector`."""
        return self._lanes.smtp if connector is not None and is_smtp(connector.type) else self._lanes.count

    @staticmethod
    def per_request(connector: Connector | None) -> int:
        """Messages per request through `connector` (a batched webhook's `batch_size`, else 1)."""
        if connector is None or is_smtp(connector.type):
            return 1
        return max(1, int((connector.settings or {}).get("batch_size") or 1))

    def window(self, connector: Connector | None) -> int:
        """How many messages `deliver_many` can have on the way at once through `connector`."""
        return self.requests(connector) * self.per_request(connector)

    def failing(self, connector: Connector) -> str | None:
        """Why `connector` counts as failing (its error threshold reached), else None."""
        threshold = self._settings.delivery_error_threshold
        count, reason = self._streaks.of(connector.id)
        if threshold <= 0 or count < threshold:
            return None
        return f"Connector '{connector.name}' failed {count} attempts in a row; the last: {reason}"

    def _count(self, connector: Connector, outcome: Outcome) -> None:
        self._streaks.count(connector.id, outcome)

    async def unsent(
        self,
        connector: Connector | None,
        envelope: Envelope,
        reason: str,
        first: FirstWrite | None = None,
        last: Callable[[Outcome], Joined | None] | None = None,
    ) -> Outcome:
        """Record a message that cannot be attempted (e.g. its recipient has no address), with
        `first` and `last` of its outcome as `send` writes them."""
        outcome = Outcome(False, reason)
        ending = last(outcome) if last is not None else None
        await _first_write(
            first,
            lambda joined: outbox.record_unsent(
                self._database, envelope, connector, self._request_id, reason, joined, ending
            ),
        )
        return outcome

    async def _attempt_many(
        self,
        connector: Connector,
        envelopes: Sequence[Envelope],
        tally: Tally,
        senders: int | None = None,
        halt: Halt | None = None,
    ) -> list[tuple[Outcome, int]]:
        """Each request's outcome and how many of the messages, in order, it carried: at most
        `senders` (at most `requests(connector)`) requests in flight; a batched webhook carries
        `batch_size` messages per request (and answers for all of them). Each sender takes the next
        request when its last is answered, rather than a task per request: a window holds several
        requests per lane (`engine.run.ROUNDS`). A request that `halt` stops is not made: its
        messages not attempted, due again at once. Each answer is counted in the connector's
        streak as it comes (and in `tally`, the window's), and a request waits for room under the
        error threshold first (`_room`)."""
        size = self.per_request(connector)
        groups = [envelopes[start : start + size] for start in range(0, len(envelopes), size)]
        outcomes: list[tuple[Outcome, int]] = [(_NOT_MADE, 0)] * len(groups)
        made = 0  # requests taken by the senders (each about to be made, or made)
        waiting = iter(enumerate(groups))
        risk = self._risks.setdefault(connector.id, _Risk())
        count = min(len(groups), self.requests(connector), senders or len(groups))
        # Places are taken for the requests the window can have on their way at once.
        places = _Places(tally, lambda: min(len(groups) - made + 1, count))

        async def may_go() -> str | None:
            # Asked again once the request has its lane: one let on its way while the connector
            # answered well, then kept waiting for a lane, is not made once the failures reach the
            # threshold (a receiver gone with every lane in flight: the 16 waiting went out too).
            if (why := self._reached(connector)) is not None:
                return why
            return await halt() if halt is not None else None

        async def sender() -> None:
            nonlocal made
            for index, group in waiting:
                made += 1
                why, placed = await self._room(connector, risk, places)
                if why is not None:
                    outcomes[index] = (self._halted(why), len(group))
                    continue
                answer: Outcome | None = None
                try:
                    outcome = answer = await self._attempt(
                        connector, group[0], None if size == 1 else group, may_go
                    )
                finally:
                    risk.answered(answer)
                    if placed:
                        places.answered(answer is not None and answer.sent)
                # The connector's error streak counts requests: a batched POST that failed is one
                # failure, not one per message it carried.
                self._count(connector, outcome)
                tally.count(outcome)
                outcomes[index] = (outcome, len(group))

        await asyncio.gather(*(sender() for _ in range(count)))
        return outcomes

    async def _room(self, connector: Connector, risk: _Risk, places: _Places) -> tuple[str | None, bool]:
        """Wait until one more request through `connector` may go unanswered. Once its last answer
        was a success with no failure counted since, every lane may be used. Until then (at the
        start of a tick, after a failure, or while other workers count failures) a request goes
        only with a place in the connector's shared row (`Streaks.reserve`): the failures in a row
        and every worker's requests on their way stay under the error threshold, so no more than
        the threshold fail before the pause, however many workers send (the windows of 32 lanes
        sent 192 before the first answer was counted; three workers counting their own requests on
        the way, 40-60 against a threshold of 20). None, with the request counted as on its way (and
        whether it used one of the window's places); or, once the threshold is reached, why the
        request is not made."""
        threshold = self._settings.delivery_error_threshold
        while True:
            if (why := self._reached(connector)) is not None:
                return why, False
            count, _ = self._streaks.of(connector.id)
            if threshold <= 0 or (risk.healthy and not count):
                risk.unanswered += 1
                return None, False
            if places.use():
                risk.unanswered += 1
                return None, True
            async with places.taking:
                if not places.free:
                    wanted = places.left()
                    lease = timedelta(seconds=self._settings.delivery_lease_seconds)
                    places.tally.places += await self._streaks.reserve(
                        self._database, connector, wanted, threshold, self._clock.now(), lease
                    )
            if places.free:
                continue
            if places.spent:
                # The window's failures and the rest fill the threshold: its requests left are
                # not made (due again at once), so that it is recorded and its failures counted.
                spent = (
                    f"connector '{connector.name}': its failures and requests on their way fill the threshold"
                )
                return self._reached(connector) or spent, False
            # Every place is held: by requests on their way (this process's, or other workers'),
            # or by windows answered and not recorded yet.
            await risk.wait(_PLACES_POLL_SECONDS)

    def _reached(self, connector: Connector) -> str | None:
        """Why no request is made through `connector` (its error threshold reached), else None."""
        threshold = self._settings.delivery_error_threshold
        count, _ = self._streaks.of(connector.id)
        if threshold > 0 and count >= threshold:
            return f"connector '{connector.name}' failed {count} attempts in a row"
        return None

    def _halted(self, why: str) -> Outcome:
        """A request not made (`halt`): its messages not attempted, due again at once (the next
        batch sends them as the campaign is then; a campaign stopped leaves them unsent)."""
        reason = f"Not handed over: {why}."
        return Outcome(False, reason, transient=True, retry_at=self._clock.now(), attempted=False)

    def _open_secrets(self, connector: Connector) -> dict[str, str]:
        """The connector's secrets, opened once per dispatcher. Raises SecretKeyError."""
        if connector.id not in self._secrets:
            try:
                self._secrets[connector.id] = open_secrets(connector, self._settings.secret_key)
            except SecretKeyError as exc:
                self._secrets[connector.id] = exc
        found = self._secrets[connector.id]
        if isinstance(found, SecretKeyError):
            raise found
        return found

    async def _attempt(
        self,
        connector: Connector,
        envelope: Envelope,
        batch: Sequence[Envelope] | None = None,
        halt: Halt | None = None,
    ) -> Outcome:
        """One request: `envelope` alone, or every message of `batch` (a batched webhook); not made
        when `halt`, asked once the request has its lane, gives a reason (see `_halted`)."""
        if connector.id in self._down:
            return Outcome(
                False, f"Not attempted: {self._down[connector.id]}", transient=True, attempted=False
            )
        try:
            secrets = self._open_secrets(connector)
        except SecretKeyError as exc:
            # Fixable by the operator (the key is rotated back in): later, not never.
            outcome = Outcome(False, str(exc), connector_down=True, transient=True)
        else:
            settings = connector.settings or {}
            time_limit = float(settings.get("timeout") or self._settings.delivery_timeout_seconds)
            if is_smtp(connector.type):
                async with self._lanes.smtp_flight:
                    if halt is not None and (why := await halt()) is not None:
                        return self._halted(why)
                    outcome = await self._smtp.send(connector.id, settings, secrets, envelope, time_limit)
            else:
                lane = await self._lanes.take()
                try:
                    if halt is not None and (why := await halt()) is not None:
                        return self._halted(why)
                    if batch is not None:
                        outcome = await send_webhook_batch(lane, settings, secrets, batch, time_limit)
                    else:
                        outcome = await send_webhook(lane, settings, secrets, envelope, time_limit)
                finally:
                    self._lanes.give_back(lane)
        if outcome.connector_down and outcome.reason:
            self._down[connector.id] = (
                f"connector '{connector.name}' failed earlier in this batch: {outcome.reason}"
            )
        return outcome


async def _first_write(first: FirstWrite | None, write: Callable[[Joined | None], Awaitable[None]]) -> None:
    """`write`, carrying `first` when given. Refused on `first`'s insert (IntegrityError: e.g. the
    request's idempotency key taken meanwhile), nothing was written: `first.refused` decides (it
    raises, or the insert is no longer needed) and `write` goes alone."""
    if first is None:
        await write(None)
        return
    try:
        await write(first.joined)
    except IntegrityError:
        await first.refused()
        await write(None)
        return
    first.written()


# Whether the next request of a window may be made: None, or why not (`send_window`).
Halt = Callable[[], Awaitable[str | None]]

# The placeholder of a request not made yet (`_attempt_many` fills in every one before returning).
_NOT_MADE = Outcome(False, "Not attempted.", attempted=False)


class Window:
    """A window of campaign messages begun by `Dispatcher.begin_window`: their attempts, and as
    `send_window` settles them, their outcomes."""

    def __init__(
        self,
        connector: Connector,
        envelopes: Sequence[Envelope],
        attempts: list[outbox.Attempt],
        began: datetime,
    ) -> None:
        self.connector = connector
        self.envelopes = envelopes
        self.attempts = attempts
        self.began = began
        self.outcomes: list[Outcome | None] = [attempt.settled for attempt in attempts]
        self.settled: list[outbox.Settled] = []
        self.tally = Tally()  # its attempts, for the connector's shared streak


def _both(
    first: Callable[[Writer], Awaitable[None]], then: Callable[[Writer], Awaitable[None]] | None
) -> Callable[[Writer], Awaitable[None]]:
    """Two writes of one transaction, in order."""
    if then is None:
        return first

    async def write(connection: Writer) -> None:
        await first(connection)
        await then(connection)

    return write


def retry_delay(settings: Settings, attempts: int) -> timedelta:
    """The wait after the `attempts`-th failed attempt: the base, doubled each time, capped."""
    base = settings.delivery_retry_seconds * 2 ** max(0, attempts - 1)
    return timedelta(seconds=min(base, settings.delivery_retry_max_seconds))

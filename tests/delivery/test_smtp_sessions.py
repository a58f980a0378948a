"""Kept SMTP connections against a server that misbehaves on purpose: slow answers, connections
closed while idle or in the middle of a message (`smtp.SmtpSessions`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from herald.delivery.messages import Outcome
from herald.delivery.smtp import SmtpSessions
from tests.delivery.test_senders import EMAIL, _envelope


@dataclass
class _Peer:
    """A plain-text SMTP server answering every command after `delay` seconds. Messages are counted
    across connections; the message numbered `cut_before_answer` is stored and its connection
    closed before the answer to its data, the one numbered `close_after` is answered and then its
    connection closed (as a server closes one that idles)."""

    delay: float = 0.0
    cut_before_answer: int | None = None
    close_after: int | None = None
    stored: list[bytes] = field(default_factory=list)
    connections: int = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self._session(reader, writer)
        finally:
            writer.close()

    async def _answer(self, writer: asyncio.StreamWriter, *lines: str) -> None:
        await asyncio.sleep(self.delay)
        writer.write("".join(f"{line}\r\n" for line in lines).encode())
        await writer.drain()

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._answer(writer, "220 peer ESMTP")
        while line := await reader.readline():
            command = line.decode().strip().upper()
            if command.startswith("EHLO"):
                await self._answer(writer, "250-peer", "250 8BITMIME")
            elif command == "DATA":
                await self._answer(writer, "354 go ahead")
                data = b""
                while (chunk := await reader.readline()) not in (b".\r\n", b""):
                    data += chunk
                self.stored.append(data)
                if len(self.stored) == self.cut_before_answer:
                    return
                await self._answer(writer, "250 stored")
                if len(self.stored) == self.close_after:
                    return
            elif command == "QUIT":
                await self._answer(writer, "221 bye")
                return
            else:  # HELO, MAIL, RCPT, RSET, NOOP
                await self._answer(writer, "250 ok")


@contextlib.asynccontextmanager
async def _serving(peer: _Peer) -> AsyncIterator[dict[str, Any]]:
    server = await asyncio.start_server(peer.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield {"host": "127.0.0.1", "port": port, "security": "none"}
    finally:
        server.close()
        await server.wait_closed()


def _message(number: int) -> Any:
    return _envelope({**EMAIL, "cc_ids": [], "bcc_ids": [], "subject": f"Message {number}"}, test=False)


async def _send_in_turn(peer: _Peer, count: int, time_limit: float = 5) -> list[Outcome]:
    """`count` messages one after the other, over the kept connections of one `SmtpSessions`."""
    sessions = SmtpSessions()
    async with _serving(peer) as settings:
        try:
            return [
                await sessions.send("c", settings, {}, _message(n), time_limit) for n in range(1, count + 1)
            ]
        finally:
            await sessions.close()


async def test_the_time_limit_bounds_a_whole_message_not_each_answer() -> None:
    # Each answer comes well within the limit; the six of a message (greeting, EHLO, MAIL, RCPT,
    # DATA, the data's end) do not.
    [outcome] = await _send_in_turn(_Peer(delay=0.15), 1, time_limit=0.5)
    assert not outcome.sent
    assert outcome.transient
    assert outcome.connector_down
    assert "no final answer within 0.5 s" in str(outcome.reason)


async def test_a_connection_closed_while_idle_is_replaced_for_the_next_message() -> None:
    peer = _Peer(close_after=1)
    first, second = await _send_in_turn(peer, 2)
    assert first.sent, first.reason
    assert second.sent, second.reason
    assert len(peer.stored) == 2
    assert peer.connections == 2


async def test_a_connection_closed_after_the_data_is_an_attempt_that_failed_not_sent_again_at_once() -> None:
    # The server may have taken the message before it closed: sending it again at once, on a new
    # connection, would be a second copy outside any backoff and not counted as an attempt.
    peer = _Peer(cut_before_answer=2)
    first, second = await _send_in_turn(peer, 2)
    assert first.sent
    assert not second.sent
    assert second.transient
    assert len(peer.stored) == 2  # no third copy
    assert peer.connections == 1

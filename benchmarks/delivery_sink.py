"""The local sinks of `benchmarks.delivery`, in a process of their own so that Herald and the bare
script are measured against the same receiver, which does not share their interpreter.

    python -m benchmarks.delivery_sink --http-port P --smtp-port Q

- HTTP (a raw asyncio server, keep-alive): every POST is answered 204 and its messages are counted
  by delivery id (`X-Herald-Delivery` for a single message, each object's `id` in a batch, which
  is a JSON array). `GET /stats` answers the counts, the number of repeated ids and the wall-clock
  times of the first and last message; `POST /reset` (header `X-Sink-Reset`) clears them.
- SMTP (aiosmtpd on the same event loop): every message is counted by its `X-Herald-Delivery`
  header, and every session (connection) too, so connection reuse shows.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import orjson
from aiosmtpd.smtp import SMTP, Envelope, Session


class Counts:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.posts = 0
        self.ids: set[str] = set()
        self.repeats = 0
        self.first_at: float | None = None
        self.last_at: float | None = None
        self.smtp_sessions = 0
        self.smtp_messages = 0

    def seen(self, ids: list[str]) -> None:
        now = time.time()
        if self.first_at is None:
            self.first_at = now
        self.last_at = now
        for one in ids:
            if one in self.ids:
                self.repeats += 1
            else:
                self.ids.add(one)

    def view(self) -> dict[str, Any]:
        return {
            "posts": self.posts,
            "messages": len(self.ids),
            "repeats": self.repeats,
            "first_at": self.first_at,
            "last_at": self.last_at,
            "smtp_sessions": self.smtp_sessions,
            "smtp_messages": self.smtp_messages,
        }


COUNTS = Counts()
_NO_CONTENT = b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n"


async def _http_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path = lines[0].split(" ")[:2]
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            if method == "GET" and path == "/stats":
                payload = orjson.dumps(COUNTS.view())
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                    + str(len(payload)).encode()
                    + b"\r\n\r\n"
                    + payload
                )
            elif method == "POST" and "x-sink-reset" in headers:
                COUNTS.reset()
                writer.write(_NO_CONTENT)
            else:
                COUNTS.posts += 1
                if body.startswith(b"["):
                    COUNTS.seen([str(item["id"]) for item in orjson.loads(body)])
                else:
                    COUNTS.seen([headers.get("x-herald-delivery", "")])
                writer.write(_NO_CONTENT)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


class _Mail:
    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content = envelope.original_content or b""
        marker = content.find(b"X-Herald-Delivery: ")
        found = content[marker + 19 : content.find(b"\r\n", marker)].decode() if marker >= 0 else ""
        COUNTS.smtp_messages += 1
        COUNTS.seen([found])
        return "250 OK"


class _CountingSMTP(SMTP):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        COUNTS.smtp_sessions += 1
        super().connection_made(transport)


async def serve(http_port: int, smtp_port: int) -> None:
    loop = asyncio.get_running_loop()
    http = await asyncio.start_server(_http_client, "127.0.0.1", http_port, backlog=1024)
    smtp = await loop.create_server(
        lambda: _CountingSMTP(_Mail(), hostname="sink.local", data_size_limit=None),
        "127.0.0.1",
        smtp_port,
        backlog=1024,
    )
    print("ready", flush=True)
    async with http, smtp:
        await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--smtp-port", type=int, required=True)
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve(args.http_port, args.smtp_port))


if __name__ == "__main__":
    main()

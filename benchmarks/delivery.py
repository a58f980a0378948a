"""One-time delivery, side by side with bare asyncio scripts, against local sinks this benchmark
starts itself (`benchmarks.delivery_sink`: an HTTP receiver and aiosmtpd, in a process of their own).

    python -m benchmarks.delivery [--users 100000] [--email-users 20000] [--audience-users 1000000]
                                  [--concurrency 32] [--smtp-connections 8] [--batch-size 100]
                                  [--workers 1] [--database-url URL]

Herald runs as it is deployed: `herald serve` (the engine embedded, on SQLite) or `herald serve` plus
`--workers` `herald worker` processes (PostgreSQL; each claims batches of its own), all with an
hourly poll, so a publish is picked up only by the wake-up on commit. On SQLite, `--workers` above
1 counts the served engine: `herald serve` and that many less one `herald worker` processes beside
it on the same file (one engine process per core). Each bare script is one
process, whatever `--workers` says. Each figure is timed from the publish request to the last
message at the sink:
1. Push to `--users` users through a webhook connector, one message per POST, then the same with
   the connector's `batch_size` (many messages per POST) — each against a bare script that reads the
   same users, renders the same title for each, and POSTs the same signed payloads (on Herald's
   webhook client, `herald.delivery.lane`: a kept-alive connection per request in flight,
   `--concurrency` of them; batched the same way for the batched figure);
2. Email to `--email-users` users through SMTP, against a bare aiosmtplib script with as many
   connections at once (`--smtp-connections`), each connection reused for as many messages as the
   connector's sessions carry;
3. publish → first message at the sink (worst of the three campaigns);
4. resolving the audience of an execution of `--audience-users` users, each with the ANDROID token
   ingestion keeps for it (materialising it, in-process; the segmentation engine's count of it),
   against the bare SQL count of the same users.
The sink counts messages by delivery id, so a repeat or a lost message shows.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime, formataddr
from pathlib import Path
from typing import Any

import aiosmtplib
import httpx
import orjson
import uvloop
from cryptography.fernet import Fernet
from jinja2.sandbox import SandboxedEnvironment
from sqlalchemy import func, insert, select, true
from sqlalchemy.ext.asyncio import create_async_engine

from benchmarks.common import (
    Credentials,
    Figure,
    argument_parser,
    prepare_workspace,
    start_afresh,
    summary,
    table,
    vacuum_analyze,
)
from herald.audience.ingest import CustomerWrite
from herald.audience.models import User
from herald.audience.store import sync_push_tokens
from herald.campaigns.models import Campaign
from herald.campaigns.schemas.common import Channel, DeliveryType
from herald.campaigns.validation import load_document
from herald.config import Settings
from herald.db import create_database
from herald.delivery.config import DEFAULT_SESSION_MESSAGES as SMTP_SESSION_MESSAGES
from herald.delivery.config import ConnectorInput
from herald.delivery.connectors import add_connector
from herald.delivery.engine.resolve import LiveCampaign, prepare, resolve, resolve_chunk, start_execution
from herald.delivery.engine.resolve import _count as audience_count
from herald.delivery.lane import Lane
from herald.delivery.smtp import plain_text

CHUNK = 10_000
SECRET = "s" * 32
TITLE = "Hi {{UserAttribute['first_name'] | default('there')}}"
MESSAGE = "The sale ends tonight"
SUBJECT = "Hi {{UserAttribute['first_name'] | default('there')}}"
HTML = (
    "<html><body><p>Hello {{UserAttribute['first_name'] | default('friend')}},</p>"
    "<p>The spring sale ends tonight.</p></body></html>"
)
SENDER = "news@shop.example"
RATIO = 0.5
FIRST_MESSAGE_S = 1.0
RESOLVE_RATIO = 2.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _engine(url: str) -> str:
    return "sqlite" if url.startswith("sqlite") else "postgresql"


# --- set-up -----------------------------------------------------------------------------------


async def add_users(settings: Settings, workspace_id: str, count: int, *, tokens: bool = False) -> None:
    """`count` users `u00000000`... with an e-mail address and a `push_id` with platform ANDROID;
    with `tokens`, also their ANDROID token, as ingestion keeps it (`store.sync_push_tokens`)."""
    database = create_database(settings)
    now = datetime.now(UTC)
    try:
        for start in range(0, count, CHUNK):
            rows = [
                {
                    "workspace_id": workspace_id,
                    "customer_id": f"u{i:08d}",
                    "first_name": f"Name{i}",
                    "email": f"u{i:08d}@users.example",
                    "push_id": f"tok-{i:08d}",
                    "attributes": {"platform": "ANDROID"},
                    "email_opt_out": False,
                    "push_opt_out": False,
                    "sms_opt_out": False,
                    "created_at": now,
                    "updated_at": now,
                }
                for i in range(start, min(count, start + CHUNK))
            ]
            async with database.writer() as session:
                await session.execute(insert(User), rows)
                if tokens:
                    writes = [
                        CustomerWrite(f"u{i:08d}", {"push_id": f"tok-{i:08d}"}, {"platform": "ANDROID"})
                        for i in range(start, min(count, start + CHUNK))
                    ]
                    await sync_push_tokens(session, workspace_id, writes, now)
                await session.commit()
    finally:
        await database.dispose()


async def add_workspace_connector(settings: Settings, workspace_id: str, given: ConnectorInput) -> None:
    database = create_database(settings)
    try:
        async with database.writer() as session:
            await add_connector(session, datetime.now(UTC), workspace_id, given, settings.secret_key)
            await session.commit()
    finally:
        await database.dispose()


async def _workspace(
    settings: Settings, prefix: str, users: int, connector: ConnectorInput, *, tokens: bool = False
) -> Credentials:
    workspace_id = f"{prefix}{uuid.uuid4().hex[:8].upper()}"
    credentials = await prepare_workspace(settings, workspace_id)
    await add_users(settings, workspace_id, users, tokens=tokens)
    await add_workspace_connector(settings, workspace_id, connector)
    return credentials


def _push_body(name: str) -> dict[str, Any]:
    return {
        "channel": "PUSH",
        "campaign_delivery_type": "ONE_TIME",
        "created_by": "bench@example.com",
        "basic_details": {"name": name, "platforms": ["ANDROID"]},
        "campaign_content": {
            "content": {
                "push": {
                    "android": {
                        "template_type": "BASIC",
                        "basic_details": {"title": TITLE, "message": MESSAGE},
                    }
                }
            }
        },
        "segmentation_details": {"is_all_user_campaign": True},
        "scheduling_details": {"delivery_type": "ASAP"},
    }


def _email_body() -> dict[str, Any]:
    return {
        "channel": "EMAIL",
        "campaign_delivery_type": "ONE_TIME",
        "created_by": "bench@example.com",
        "basic_details": {
            "name": "Spring",
            "content_type": "TRANSACTIONAL",
            "user_attribute_identifier": "email",
        },
        "campaign_content": {
            "content": {
                "email": {
                    "subject": SUBJECT,
                    "sender_name": "Shop",
                    "from_address": SENDER,
                    "html_content": HTML,
                }
            }
        },
        "connector": {"connector_type": "CUSTOM_SMTP", "connector_name": "mail"},
        "segmentation_details": {"is_all_user_campaign": True},
        "scheduling_details": {"delivery_type": "ASAP"},
    }


# --- the served Herald and the sink -----------------------------------------------------------


class Processes:
    def __init__(self) -> None:
        self.running: list[tuple[subprocess.Popen[bytes], bool]] = []  # (process, under py-spy)

    def start(self, command: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE)
        self.running.append((process, Path(command[0]).name == "py-spy"))
        return process

    def stop(self) -> None:
        for process, profiled in self.running:
            process.send_signal(signal.SIGINT if profiled else signal.SIGTERM)
        for process, _ in self.running:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


async def _wait_ready(client: httpx.AsyncClient, url: str) -> None:
    for _ in range(300):
        try:
            if (await client.get(url)).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} did not answer")


class Sink:
    def __init__(self, client: httpx.AsyncClient, http_port: int, smtp_port: int) -> None:
        self.client = client
        self.base = f"http://127.0.0.1:{http_port}"
        self.hook = f"{self.base}/hook"
        self.smtp_port = smtp_port

    async def reset(self) -> None:
        await self.client.post(f"{self.base}/reset", headers={"X-Sink-Reset": "1"})

    async def stats(self) -> dict[str, Any]:
        found: dict[str, Any] = (await self.client.get(f"{self.base}/stats")).json()
        return found

    async def wait_for(self, count: int, limit_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + limit_s
        while True:
            found = await self.stats()
            if found["messages"] >= count or time.monotonic() > deadline:
                return found
            await asyncio.sleep(0.1)


async def _create(client: httpx.AsyncClient, headers: dict[str, str], body: dict[str, Any]) -> str:
    write = {**headers, "Idempotency-Key": str(uuid.uuid4())}
    created = await client.post("/v5/campaigns", json=body, headers=write)
    assert created.status_code == 201, created.text
    return str(created.json()["data"]["id"])


async def _publish(client: httpx.AsyncClient, headers: dict[str, str], campaign_id: str) -> None:
    body = {"request_id": str(uuid.uuid4()), "updated_by": "bench@example.com", "status": "PUBLISH"}
    published = await client.patch(f"/core-services/v1/campaigns/{campaign_id}", json=body, headers=headers)
    assert published.status_code == 204, published.text


@dataclass(frozen=True)
class Run:
    """What the sink saw of one side's run, timed from `started` (the publish, or the script's start)."""

    messages: int
    seconds: float
    first_s: float
    repeats: int
    posts: int
    smtp_sessions: int
    # CPU seconds the side's own process spent (Herald: the process running the engine; bare: the
    # script's): steadier than the rates on a shared machine, where the wall clock mostly measures
    # the neighbours. None when not measured (Herald under py-spy).
    cpu_s: float | None = None

    @classmethod
    def of(cls, found: dict[str, Any], started: float, cpu_s: float | None = None) -> Run:
        last = found["last_at"] or time.time()
        first = found["first_at"] or last
        return cls(
            found["messages"],
            last - started,
            first - started,
            found["repeats"],
            found["posts"],
            found["smtp_sessions"],
            cpu_s,
        )

    @property
    def cpu_us_per_message(self) -> float | None:
        return self.cpu_s / self.messages * 1e6 if self.cpu_s is not None and self.messages else None

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0


def _limit_s(count: int) -> float:
    return 120 + count / 20


def _cpu_s(pid: int | None) -> float | None:
    """CPU seconds (user and system) process `pid` has used so far (Linux); None without /proc."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _herald_run(
    api: httpx.AsyncClient,
    headers: dict[str, str],
    sink: Sink,
    campaign_id: str,
    count: int,
    engine_pids: list[int],
) -> Run:
    await sink.reset()
    before = _cpu_of(engine_pids)
    started = time.time()
    await _publish(api, headers, campaign_id)
    found = await sink.wait_for(count, _limit_s(count))
    after = _cpu_of(engine_pids)
    return Run.of(found, started, after - before if after is not None and before is not None else None)


def _cpu_of(pids: list[int]) -> float | None:
    """CPU seconds the processes `pids` used so far together; None when not measured."""
    used = [_cpu_s(pid) for pid in pids]
    return sum(cpu for cpu in used if cpu is not None) if used and None not in used else None


# --- the bare scripts -------------------------------------------------------------------------


async def _read_users(settings: Settings, workspace_id: str) -> list[Any]:
    database = create_database(settings)
    try:
        async with database.reader() as session:
            query = select(User.customer_id, User.first_name, User.email, User.push_id, User.gaid).where(
                User.workspace_id == workspace_id
            )
            return list((await session.execute(query)).all())
    finally:
        await database.dispose()


def _signed(body: bytes, delivery: str) -> bytes:
    """The signed POST's header lines (those `Lane.post` takes)."""
    stamp = str(int(time.time()))
    mac = hmac.new(SECRET.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return (
        "Content-Type: application/json\r\nUser-Agent: Bare/1\r\n"
        f"X-Herald-Timestamp: {stamp}\r\nX-Herald-Signature: sha256={mac}\r\n"
        f"X-Herald-Delivery: {delivery}\r\n"
    ).encode()


def _bare_id(customer_id: str, platform: str) -> str:
    return hashlib.sha256(f"bare\x00{customer_id}\x00{platform}".encode()).hexdigest()[:24]


async def _bare_push(
    settings: Settings, workspace_id: str, sink: Sink, concurrency: int, batch_size: int
) -> Run:
    """Read the users, render the title for each, POST the payloads (`batch_size` per POST)."""
    await sink.reset()
    started, cpu = time.time(), time.process_time()
    users = await _read_users(settings, workspace_id)
    title = SandboxedEnvironment().from_string(TITLE)
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")

    def payload(user: Any) -> dict[str, Any]:
        attributes = {"first_name": user.first_name} if user.first_name else {}
        return {
            "id": _bare_id(user.customer_id, "ANDROID"),
            "test": False,
            "workspace_id": workspace_id,
            "campaign_id": "bare",
            "channel": "PUSH",
            "platform": "ANDROID",
            "locale": "default",
            "variation": "variation_1",
            "recipient": {
                "address": user.push_id,
                "customer_id": user.customer_id,
                "push_id": user.push_id,
                "gaid": user.gaid,
            },
            "message": {
                "template_type": "BASIC",
                "basic_details": {"title": title.render(UserAttribute=attributes), "message": MESSAGE},
            },
            "created_at": now,
        }

    def requests() -> Iterator[tuple[bytes, str]]:
        if batch_size <= 1:
            for user in users:
                one = payload(user)
                yield orjson.dumps(one), one["id"]
            return
        for start in range(0, len(users), batch_size):
            many = [payload(user) for user in users[start : start + batch_size]]
            yield orjson.dumps(many), many[0]["id"]

    pending = requests()

    async def worker() -> None:
        # One kept-alive connection per request in flight, on the HTTP client Herald's webhooks
        # use (`herald.delivery.lane`), so the ratio compares the same client on both sides.
        async with Lane(ssl.create_default_context()) as lane:
            for body, delivery in pending:
                status = await lane.post(sink.hook, _signed(body, delivery), body, 10)
                if not 200 <= status < 300:
                    raise RuntimeError(f"the sink answered {status}")

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return Run.of(await sink.wait_for(len(users), 10), started, time.process_time() - cpu)


async def _bare_email(
    settings: Settings, workspace_id: str, sink: Sink, concurrency: int, per_session: int
) -> Run:
    """Read the users, render subject and HTML for each, send over SMTP connections that each
    carry up to `per_session` messages."""
    await sink.reset()
    started, cpu = time.time(), time.process_time()
    users = await _read_users(settings, workspace_id)
    environment = SandboxedEnvironment(autoescape=True)
    subject, html = environment.from_string(SUBJECT), environment.from_string(HTML)

    def message(user: Any) -> EmailMessage:
        attributes = {"first_name": user.first_name} if user.first_name else {}
        body = html.render(UserAttribute=attributes)
        built = EmailMessage()
        built["From"] = formataddr(("Shop", SENDER))
        built["To"] = user.email
        built["Subject"] = subject.render(UserAttribute=attributes)
        built["Date"] = format_datetime(datetime.now(UTC))
        delivery = _bare_id(user.customer_id, "EMAIL")
        built["Message-ID"] = f"<{delivery}@shop.example>"
        built["X-Herald-Delivery"] = delivery
        built.set_content(plain_text(body))
        built.add_alternative(body, subtype="html")
        return built

    pending = iter(users)

    async def worker() -> None:
        smtp: aiosmtplib.SMTP | None = None
        carried = 0
        for user in pending:
            if smtp is None or carried >= per_session:
                if smtp is not None:
                    await smtp.quit()
                smtp = aiosmtplib.SMTP(hostname="127.0.0.1", port=sink.smtp_port, start_tls=False)
                await smtp.connect()
                carried = 0
            await smtp.send_message(message(user))
            carried += 1
        if smtp is not None:
            await smtp.quit()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return Run.of(await sink.wait_for(len(users), 10), started, time.process_time() - cpu)


# --- resolution -------------------------------------------------------------------------------


async def _resolution(
    settings: Settings, api: httpx.AsyncClient, users: int
) -> tuple[float, float, float, float, int, int]:
    """Seconds until the first users of an execution are dispatchable (counts, control group, first
    chunk written), seconds to materialise its whole audience, seconds of the engine's count of it
    (the segmentation engine's query), seconds of the bare count, both sizes."""
    given = ConnectorInput("sink", "CUSTOM_API", channel="push", url="http://127.0.0.1:9/hook", secret=SECRET)
    # The users hold the ANDROID token ingestion writes for them: the engine's count reads it.
    credentials = await _workspace(settings, "RES", users, given, tokens=True)
    workspace_id = credentials.workspace_id
    await _steady_state(settings)
    campaign_id = await _create(api, credentials.headers(settings, campaigns=True), _push_body("Resolve"))
    database = create_database(settings)
    try:
        async with database.reader() as session:
            row = await session.scalar(
                select(Campaign).where(
                    Campaign.workspace_id == workspace_id,
                    Campaign.campaign_id == campaign_id,
                    Campaign.is_latest,
                )
            )
            assert row is not None
            document, problems = load_document(Channel.PUSH, DeliveryType.ONE_TIME, row.components)
            assert document is not None, problems
        campaign = LiveCampaign(workspace_id, campaign_id, "PUSH", document, dict(row.components or {}))
        bare = select(func.count()).where(
            User.workspace_id == workspace_id,
            User.push_id.is_not(None),
            User.push_opt_out.is_not(true()),
        )
        bare_s = float("inf")
        counted = 0
        for _ in range(3):
            begun = time.perf_counter()
            async with database.reader() as session:
                counted = int(await session.scalar(bare) or 0)
            bare_s = min(bare_s, time.perf_counter() - begun)
        now = datetime.now(UTC)
        count_s = float("inf")  # timed as the bare count is (best of three, each in its session)
        selected = 0
        for _ in range(3):
            begun = time.perf_counter()
            async with database.reader() as session:
                selected = await audience_count(
                    session, campaign, now, with_opted_out=False, reachable_only=True
                )
            count_s = min(count_s, time.perf_counter() - begun)
        begun = time.perf_counter()
        execution = await start_execution(database, campaign, now)
        execution = await prepare(database, campaign, execution, now, streaming=True)
        await resolve_chunk(database, campaign, execution, now)
        first_s = time.perf_counter() - begun  # the first users are dispatchable from here on
        await resolve(database, campaign, execution, now)
        herald_s = time.perf_counter() - begun
        execution = await start_execution(database, campaign, now)
        assert selected == counted, (selected, counted)
        return first_s, herald_s, count_s, bare_s, execution.audience, counted
    finally:
        await database.dispose()


async def _steady_state(settings: Settings) -> None:
    """PostgreSQL: the users' tables as autovacuum leaves them after an import (this server runs
    without it): planner statistics that know the new workspace, and no dead row versions (ingestion
    writes a user's row, then its `push_platforms`). Without statistics for the workspace the planner
    estimates one row and picks whichever index it ties on, for the bare and the engine's count
    alike. SQLite stays as Herald leaves it (no statistics)."""
    if _engine(settings.database_url) != "postgresql":
        return
    engine = create_async_engine(settings.database_url)
    try:
        await vacuum_analyze(engine, "audience_users, audience_push_tokens")
    finally:
        await engine.dispose()


# --- the run ----------------------------------------------------------------------------------


async def run(args: Any, settings: Settings, key: str) -> list[Figure]:
    processes = Processes()
    http_port, smtp_port, api_port = _free_port(), _free_port(), _free_port()
    sink_process = processes.start(
        [
            sys.executable,
            "-m",
            "benchmarks.delivery_sink",
            "--http-port",
            str(http_port),
            "--smtp-port",
            str(smtp_port),
        ]
    )
    assert sink_process.stdout is not None
    sink_process.stdout.readline()  # "ready"
    figures: list[Figure] = []
    try:
        async with httpx.AsyncClient(timeout=60) as plain:
            sink = Sink(plain, http_port, smtp_port)
            started = time.perf_counter()
            hook = ConnectorInput(
                "sink", "CUSTOM_API", channel="push", url=sink.hook, secret=SECRET, timeout=30
            )
            batched = ConnectorInput(
                "sink",
                "CUSTOM_API",
                channel="push",
                url=sink.hook,
                secret=SECRET,
                timeout=30,
                batch_size=args.batch_size,
            )
            mail = ConnectorInput(
                "mail", "CUSTOM_SMTP", host="127.0.0.1", port=smtp_port, security="none", timeout=30
            )
            push_one = await _workspace(settings, "PSH", args.users, hook)
            push_many = await _workspace(settings, "PSB", args.users, batched)
            email = await _workspace(settings, "EML", args.email_users, mail)
            print(
                f"set up {2 * args.users + args.email_users:,} users in {time.perf_counter() - started:.0f}s"
            )
            env = {
                **os.environ,
                "HERALD_DATABASE_URL": args.database_url,
                "HERALD_SECRET_KEY": key,
                "HERALD_LOG_LEVEL": "warning",
                "HERALD_WORKER_INTERVAL_SECONDS": "3600",
                "HERALD_DELIVERY_CONCURRENCY": str(args.concurrency),
                "HERALD_DELIVERY_SMTP_CONNECTIONS": str(args.smtp_connections),
            }
            env.pop("HERALD_REDIS_URL", None)
            serve = [sys.executable, "-m", "herald", "serve", "--port", str(api_port)]
            worker = [sys.executable, "-m", "herald", "worker"]
            engine = worker if _engine(args.database_url) == "postgresql" else serve
            if args.profile:
                # The process running the engine, with py-spy as its parent: it writes its samples
                # when the benchmark stops it (SIGINT).
                engine[:0] = [
                    # The environment's own (a virtualenv's bin is not always on PATH).
                    shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy")),
                    "record",
                    *(["--gil"] if not os.environ.get("BENCH_WALL") else ["--threads"]),
                    "--idle",
                    "-r",
                    "200",
                    "-f",
                    "raw",
                    "-o",
                    args.profile,
                    "--",
                ]
            served = processes.start(serve, env)
            engine_pids = [served.pid]
            if _engine(args.database_url) == "postgresql":
                engine_pids = [processes.start(worker, env).pid for _ in range(args.workers)]
            else:
                # On SQLite the served process runs the engine too: `--workers` counts it.
                engine_pids += [processes.start(worker, env).pid for _ in range(args.workers - 1)]
            if args.profile:
                engine_pids = []  # py-spy's own process: the engine is its child
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{api_port}", timeout=60) as api:
                await _wait_ready(api, "/healthz")
                campaigns = {
                    "push": await _create(api, push_one.headers(settings, campaigns=True), _push_body("One")),
                    "batched": await _create(
                        api, push_many.headers(settings, campaigns=True), _push_body("Many")
                    ),
                    "email": await _create(api, email.headers(settings, campaigns=True), _email_body()),
                }
                runs: list[tuple[str, Run, Run]] = []
                for name, credentials, count in (
                    ("push", push_one, args.users),
                    ("batched", push_many, args.users),
                    ("email", email, args.email_users),
                ):
                    if args.only and name not in args.only:
                        continue
                    headers = credentials.headers(settings, campaigns=True)
                    herald = await _herald_run(api, headers, sink, campaigns[name], count, engine_pids)
                    if name == "email":
                        bare = await _bare_email(
                            settings,
                            credentials.workspace_id,
                            sink,
                            args.smtp_connections,
                            args.smtp_session_messages,
                        )
                    else:
                        size = args.batch_size if name == "batched" else 1
                        bare = await _bare_push(
                            settings, credentials.workspace_id, sink, args.concurrency, size
                        )
                    runs.append((name, herald, bare))
                    print(_side_by_side(name, count, herald, bare), flush=True)
                resolution = None
                if not args.only or "resolution" in args.only:
                    resolution = await _resolution(settings, api, args.audience_users)
        if resolution is not None:
            figures += _resolution_figures(args.audience_users, *resolution)
        # Several workers (the production topology: one per core) are named in each figure.
        workers = f" ({args.workers} workers)" if args.workers > 1 else ""
        labels = {
            "push": f"Push webhook{workers}",
            "batched": f"Push webhook, {args.batch_size} per POST{workers}",
            "email": f"Email SMTP{workers}",
        }
        for name, herald, bare in runs:
            figures.append(Figure(f"{labels[name]}: Herald msg/s", herald.rate, "/s"))
            figures.append(Figure(f"{labels[name]}: bare msg/s", bare.rate, "/s"))
            figures.append(Figure(f"{labels[name]}: Herald / bare", herald.rate / bare.rate, at_least=RATIO))
            for side, run_ in (("Herald", herald), ("bare", bare)):
                if run_.cpu_us_per_message is not None:
                    figures.append(
                        Figure(f"{labels[name]}: {side} CPU per message", run_.cpu_us_per_message, "us")
                    )
        worst_first = max((herald.first_s for _, herald, _ in runs), default=0.0)
        figures.append(
            Figure(
                "publish -> first message (worst)", worst_first * 1000, "ms", at_most=FIRST_MESSAGE_S * 1000
            )
        )
        counts = {"push": args.users, "batched": args.users, "email": args.email_users}
        lost = sum(max(0, counts[name] - herald.messages) + herald.repeats for name, herald, _ in runs)
        figures.append(Figure("messages lost or repeated", float(lost), at_most=0))
    finally:
        processes.stop()
    return figures


def _resolution_figures(
    users: int, first_s: float, herald_s: float, count_s: float, bare_s: float, audience: int, counted: int
) -> list[Figure]:
    print(
        table(
            f"resolution of {users:,} users",
            [
                (
                    "Herald: execution started, first users dispatchable",
                    f"{first_s * 1000:.1f} ms",
                ),
                (
                    "Herald: execution started, audience materialised",
                    f"{herald_s:.2f} s ({audience:,} users)",
                ),
                ("Herald: the audience counted (segmentation engine)", f"{count_s * 1000:.1f} ms"),
                ("bare SQL count", f"{bare_s * 1000:.1f} ms ({counted:,} users)"),
                ("first users dispatchable / bare count", f"{first_s / bare_s:.1f}"),
                ("materialised / bare count", f"{herald_s / bare_s:.1f}"),
                ("counted / bare count", f"{count_s / bare_s:.2f}"),
            ],
        )
    )
    # Sending starts once the first chunk is written (the rest is written while it goes out):
    # that is the resolution a publish waits for; the whole materialisation is shown beside it.
    return [
        Figure(f"resolve {users:,} to first send / bare count", first_s / bare_s, at_most=RESOLVE_RATIO),
        Figure(f"materialise {users:,} / bare count", herald_s / bare_s),
        Figure(f"count {users:,} (engine) / bare count", count_s / bare_s, at_most=RESOLVE_RATIO),
    ]


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} us"


def _side_by_side(name: str, count: int, herald: Run, bare: Run) -> str:
    rows = [
        ("Herald msg/s", f"{herald.rate:,.0f} ({herald.messages:,} in {herald.seconds:.1f} s)"),
        ("bare msg/s", f"{bare.rate:,.0f} ({bare.messages:,} in {bare.seconds:.1f} s)"),
        ("Herald / bare", f"{herald.rate / bare.rate:.2f} (target >= {RATIO:g})" if bare.rate else "-"),
        ("Herald publish -> first message", f"{herald.first_s * 1000:.0f} ms"),
        ("Herald repeats at the sink", str(herald.repeats)),
        ("POSTs Herald / bare", f"{herald.posts:,} / {bare.posts:,}"),
        ("SMTP sessions Herald / bare", f"{herald.smtp_sessions:,} / {bare.smtp_sessions:,}"),
        (
            "CPU per message Herald / bare",
            f"{_us(herald.cpu_us_per_message)} / {_us(bare.cpu_us_per_message)}",
        ),
    ]
    return table(f"{name}: {count:,} users", rows)


def main() -> None:
    parser = argument_parser(__doc__, "herald-bench-delivery.db")
    parser.add_argument("--users", type=int, default=100_000, help="users of the Push campaigns")
    parser.add_argument("--email-users", type=int, default=20_000, help="users of the Email campaign")
    parser.add_argument(
        "--audience-users", type=int, default=1_000_000, help="users of the resolved audience"
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=Settings.delivery_concurrency,
        help="webhook requests in flight, both sides",
    )
    parser.add_argument(
        "--smtp-connections",
        type=int,
        default=Settings.delivery_smtp_connections,
        help="SMTP connections at once, both sides",
    )
    parser.add_argument("--batch-size", type=int, default=100, help="messages per POST in batched mode")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="engine processes sharing the work: `herald worker` processes on PostgreSQL; on SQLite, "
        "`herald serve` and that many less one beside it",
    )
    parser.add_argument(
        "--smtp-session-messages",
        type=int,
        default=SMTP_SESSION_MESSAGES,
        help="messages per SMTP connection (bare)",
    )
    parser.add_argument(
        "--only",
        type=lambda given: set(given.split(",")),
        help="run only these of push,batched,email,resolution (comma-separated)",
    )
    parser.add_argument(
        "--profile",
        help="record the engine's process (`herald serve` on SQLite, `herald worker` on PostgreSQL) "
        "with py-spy --gil --idle into this file (raw; BENCH_WALL=1: every thread, GIL or not)",
    )
    args = parser.parse_args()
    if args.profile and args.workers > 1:
        parser.error("--profile records one worker: leave --workers at 1")
    key = Fernet.generate_key().decode()
    args.database_url = asyncio.run(start_afresh(args.database_url, "delivery"))
    settings = Settings(database_url=args.database_url, redis_url=None, secret_key=key)
    # The bare scripts run on the event loop Herald's engine runs on (uvloop): the same loop on both sides.
    figures = uvloop.run(run(args, settings, key))
    summary("delivery", _engine(args.database_url), figures)


if __name__ == "__main__":
    main()

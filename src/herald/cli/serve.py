"""`herald serve`: uvicorn with Herald's logging, metrics directory and graceful shutdown."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile

import typer

from herald.config import Settings


def serve(host: str, port: int, workers: int) -> None:
    settings = Settings()
    if settings.is_sqlite and workers == 1:
        # One process owns the SQLite file: it also runs the scheduled transitions.
        os.environ.setdefault("HERALD_IN_PROCESS_WORKER", "true")
    if settings.is_sqlite and workers > 1 and os.environ.get("HERALD_IN_PROCESS_WORKER") is None:
        # Several processes share the file: none runs the engine unless told to, and nothing says
        # so otherwise (published campaigns would wait for a `herald worker` never started).
        typer.secho(
            "note: on SQLite with --workers > 1 no delivery runs in the server; run `herald worker` "
            "beside it (or one process: --workers 1)",
            fg=typer.colors.YELLOW,
            err=True,
        )
    if workers > 1 and settings.in_process_worker:
        # Told to: then every process runs it (exactly once still holds: they claim as workers do).
        typer.secho(
            f"note: HERALD_IN_PROCESS_WORKER is on: each of the {workers} server processes runs the "
            "delivery engine",
            fg=typer.colors.YELLOW,
            err=True,
        )
    if workers > 1 and not settings.redis_url:
        typer.secho(
            "note: without HERALD_REDIS_URL each worker keeps its own rate-limit counters",
            fg=typer.colors.YELLOW,
            err=True,
        )
    metrics_dir = None
    if workers > 1:
        # Each worker process writes its metrics here and /metrics sums them. A fresh directory per
        # run: files left by an earlier run would be counted again. Set before any worker starts
        # (prometheus_client picks its mode when first imported).
        metrics_dir = tempfile.mkdtemp(prefix="herald-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    # uvicorn drains in-flight requests on SIGTERM and then re-raises the signal with the handler
    # it found; with this one in place, a drained shutdown ends with status 0, not "killed by SIGTERM".
    signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        _run(settings, host, port, workers)
    finally:
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def _run(settings: Settings, host: str, port: int, workers: int) -> None:
    import uvicorn

    from herald.http.server import HeraldHttpProtocol
    from herald.ops.logs import logging_config

    uvicorn.run(
        "herald.main:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_config=logging_config(settings.log_level, settings.log_format),
        # Herald's request middleware writes one line per request (route template, request id).
        access_log=False,
        timeout_graceful_shutdown=settings.shutdown_timeout_seconds,
        timeout_keep_alive=settings.keepalive_seconds,
        proxy_headers=False,
        # The gateway's answers at the socket (503 for control characters, 431, 408, 400); a class,
        # not a name, is pickled by reference into every worker process.
        http=HeraldHttpProtocol,
        # No WebSocket route: an `Upgrade: websocket` request is plain HTTP (RFC 9110 §7.8 lets a
        # server ignore Upgrade). With the library installed, uvicorn took it over: a 400 as a
        # connection's first request, a bare 403 from the library after another.
        ws="none",
        # uvloop, accepting every waiting connection per turn of the loop (see the module).
        loop="herald.http.accept:accepting_loop",
    )

"""Log lines: readable `key=value` text, or JSON lines (`HERALD_LOG_FORMAT=json`).

Every line written while a request is being served carries that request's id: the request middleware
(`herald.ops.observe`) puts the request's state into a context variable, and a filter on the handler
copies the id (and the workspace, once authenticated) into each record. The state is read when the
line is written, so the id is the one the middleware chose for the response, whenever it chose it.

The same configuration is given to uvicorn (`log_config`), whose own access log is off: the request
middleware writes one line per request instead, with the route template and the request id.
"""

from __future__ import annotations

import logging
import re
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

import orjson

# The per-request state dict (`scope["state"]`) of the request being served, if any.
request_state: ContextVar[dict[str, Any] | None] = ContextVar("herald_request_state", default=None)

# No line shows the process id, and reading it is a system call per record.
logging.logProcesses = False

_NEEDS_QUOTES = re.compile(r'[\s"=]')
# Record attributes the access line sets through `extra=`; written in this order.
ACCESS_FIELDS = ("method", "route", "status", "duration_ms")
# The attributes of any LogRecord: everything else on a record came from `extra=` (uvicorn adds a
# copy of its message with terminal colours, left out).
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "color_message"}


class RequestContext(logging.Filter):
    """Adds `request_id` and `workspace_id` (None outside a request) to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        state = request_state.get()
        if not hasattr(record, "request_id"):
            record.request_id = state.get("request_id") if state is not None else None
        if not hasattr(record, "workspace_id"):
            record.workspace_id = state.get("workspace_id") if state is not None else None
        return True


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    """The record's `extra=` fields, access fields first."""
    extra = {key: value for key, value in record.__dict__.items() if key not in _STANDARD}
    ordered = {key: extra.pop(key) for key in ACCESS_FIELDS if key in extra}
    return {**ordered, **extra}


def _timestamp(record: logging.LogRecord) -> str:
    return (
        datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, then the record's fields."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **_fields(record),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


def _text_value(value: Any) -> str:
    text = str(value)
    if not text or _NEEDS_QUOTES.search(text):
        return orjson.dumps(text).decode()
    return text


class TextFormatter(logging.Formatter):
    """`<time> <LEVEL> <logger> <message> key=value ...` (values with spaces are JSON-quoted; fields
    without a value, such as the request id outside a request, are left out)."""

    def format(self, record: logging.LogRecord) -> str:
        pairs = " ".join(
            f"{key}={_text_value(value)}" for key, value in _fields(record).items() if value is not None
        )
        line = f"{_timestamp(record)} {record.levelname} {record.name} {record.getMessage()} {pairs}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def logging_config(level: str, log_format: str) -> dict[str, Any]:
    """A `logging.config.dictConfig` for the server and its uvicorn loggers (stderr, one format)."""
    formatter = JsonFormatter if log_format.lower() == "json" else TextFormatter
    handler = {
        "class": "logging.StreamHandler",
        "formatter": "herald",
        "filters": ["request"],
        "stream": "ext://sys.stderr",
    }
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request": {"()": RequestContext}},
        "formatters": {"herald": {"()": formatter}},
        "handlers": {"stderr": handler},
        "root": {"handlers": ["stderr"], "level": level.upper()},
        "loggers": {
            # Propagate to the root handler: one format, one filter, no duplicate lines.
            "uvicorn": {"handlers": [], "level": level.upper(), "propagate": True},
            "uvicorn.error": {"handlers": [], "level": level.upper(), "propagate": True},
            "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
            # Reading the migration scripts' head at start-up logs each plugin it sets up.
            "alembic": {"level": "WARNING"},
        },
    }

"""The Typer application: top-level commands and the admin groups.

Every command group lives in a module that imports what its commands need (SQLAlchemy, the domain
services, sometimes the whole web app). The groups are therefore registered by name and loaded on
first use (`LazyGroup`): `herald --help` imports only Typer, and `herald keys list` only the settings
and its one statement on the database driver (no SQLAlchemy). The one-line help shown in listings is kept
here, so that listing a command never imports it (tests/test_cli_startup.py checks that it matches
the command's own help).

Before any command runs, `LazyGroup` reads the settings (and the clock file, and on SQLite looks for
a migrated database), and it turns the errors an operator makes, not Herald, into one `error: ...`
line: a bad setting or an argument that is not UTF-8 text exits 2 (as a bad option does), a
database without its tables or out of reach, a missing or unreadable file exits 1. Anything else
is a bug and keeps its traceback (`_operator_error`).
`connectors keygen` skips those checks: it reads nothing (`_SELF_CONTAINED`).
"""

from __future__ import annotations

import importlib
import os
import re
import traceback
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from typer.core import TyperGroup


@dataclass(frozen=True)
class Lazy:
    """A command loaded on first use: `module:attribute` is a Typer (a group) or a function."""

    target: str
    help: str

    def load(self, name: str) -> Any:
        module, _, attribute = self.target.partition(":")
        found = getattr(importlib.import_module(module), attribute)
        command: Any
        if isinstance(found, typer.Typer):
            command = typer.main.get_group(found)
        else:
            single = typer.Typer()
            single.command(name)(found)
            command = typer.main.get_group(single).commands[name]
        command.name = name
        return command


# In the order `herald --help` lists them, after the top-level commands below.
LAZY: dict[str, Lazy] = {
    "workspaces": Lazy(
        "herald.cli.workspaces:workspaces", "Create and list workspaces (tenants); their delivery settings."
    ),
    "keys": Lazy("herald.cli.workspaces:keys", "Issue, list and revoke API keys."),
    "features": Lazy("herald.cli.admin:features", "Per-workspace feature flags."),
    "limits": Lazy("herald.cli.admin:limits", "Per-workspace rate-limit overrides."),
    "tags": Lazy("herald.cli.admin:tags", "Offer tags."),
    "templates": Lazy("herald.cli.admin:templates", "Offer templates."),
    "offers": Lazy("herald.cli.offers:offers", "Offerings."),
    "campaigns": Lazy("herald.cli.campaigns:campaigns", "Import and review campaigns."),
    "worker": Lazy(
        "herald.cli.campaigns:worker",
        "Run the background worker: scheduled campaign transitions (SCHEDULED → ACTIVE, expiry, ...).",
    ),
    "connectors": Lazy(
        "herald.cli.delivery:connectors", "Delivery connectors: SMTP servers and signed webhooks."
    ),
    "outbox": Lazy("herald.cli.delivery:outbox_app", "The outbox: every message sent, test or real."),
    "content": Lazy(
        "herald.cli.content:content",
        "Personalization resources: content blocks, product sets, content APIs, templates.",
    ),
    "audience": Lazy("herald.cli.audience:audience", "Users and events: bulk import."),
    "segments": Lazy("herald.cli.audience:segments", "Custom segments (filter-based or static lists)."),
    "events": Lazy("herald.cli.events:events", "Business events: start the campaigns waiting for one."),
}


class OperatorError(Exception):
    """What an operator can fix, said in one line (`error: ...`, exit 1)."""


class ArgumentError(OperatorError):
    """An argument the command line cannot take, whatever the command (`error: ...`, exit 2, as a
    bad option is)."""


def _check_arguments(args: list[str]) -> None:
    """Every argument is text: a byte that is not UTF-8 (the shell passes bytes; Python keeps each
    such byte as a lone surrogate) was stored as it came by some commands, which then could not
    list or send it (a business event's attribute left its run failing at every attempt), and
    made others fail with a traceback."""
    for argument in args:
        try:
            argument.encode("utf-8")
        except UnicodeEncodeError:
            shown = argument.encode("utf-8", "surrogateescape").decode("ascii", "backslashreplace")
            raise ArgumentError(f"the argument '{shown}' is not UTF-8 text") from None


# A statement on a table that is not there: SQLite's words, and PostgreSQL's (asyncpg, SQLAlchemy).
_MISSING_TABLE = re.compile(r'no such table: (\S+)|relation "([^"]+)" does not exist')
# Commands that need no migrated database: `migrate` makes it, `serve` reports it (`/readyz`).
_WITHOUT_SCHEMA = frozenset({"migrate", "serve"})
# Subcommands that read neither the settings nor the database: `connectors keygen` makes the key an
# operator is about to put in the settings, often before there is a database at all.
_SELF_CONTAINED = frozenset({("connectors", "keygen")})


def _self_contained(command: str, rest: list[str]) -> bool:
    return (command, rest[0] if rest else "") in _SELF_CONTAINED


def _preflight(command: str) -> None:
    """Refuse at start-up what would fail later: a bad setting or clock file (`SettingsError`), a
    SQLite database that is not there or not migrated (without creating an empty file), a
    `migrate` into a directory that does not exist."""
    from herald.config import Settings

    settings = Settings()
    if settings.clock_file:
        from herald.clock import FileClock

        FileClock(settings.clock_file)
    if not settings.is_sqlite:
        return
    from herald.plain_sql import sqlite_file_key, sqlite_path

    path = sqlite_path(settings.database_url)
    if sqlite_file_key(path) is None or path.startswith("file:"):
        return
    if command == "migrate":
        directory = os.path.dirname(path) or "."
        if not os.path.isdir(directory):
            raise OperatorError(f"cannot create the database {path}: no directory {directory}")
        # A file SQLite cannot use (a directory, no database) is told before the migration's
        # driver opens it: its thread answered the failure after the command's loop had closed,
        # and printed a traceback beside the error line.
        if os.path.isdir(path):
            raise OperatorError(_UNUSABLE_FILE.format(f"{path} is a directory"))
        if os.path.exists(path):
            _migrated(path)
    elif command not in _WITHOUT_SCHEMA:
        if not os.path.isfile(path):
            raise OperatorError(f"no database at {path}: run `herald migrate` first")
        if not _migrated(path):
            raise OperatorError(f"the database {path} is not migrated: run `herald migrate` first")


def _migrated(path: str) -> bool:
    """Whether the SQLite database at `path` was migrated (True when another process's lock keeps
    this check from saying); OperatorError for a file SQLite cannot use."""
    import sqlite3
    from urllib.parse import quote

    try:
        connection = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True)
        try:
            found = connection.execute("SELECT 1 FROM sqlite_master WHERE name = 'alembic_version'")
            return found.fetchone() is not None
        finally:
            connection.close()
    except sqlite3.Error as exc:
        if _unusable_sqlite_file(exc):  # before an engine opens it (and its pool keeps a half-open one)
            raise OperatorError(_UNUSABLE_FILE.format(exc)) from None
        return True  # not for this check to say (locked): the command will


def _operator_error(exc: BaseException) -> tuple[str, int] | None:
    """The one line and exit status for an error the operator made; None for anything else."""
    from herald.config import SettingsError
    from herald.workspaces.errors import AdminError

    if isinstance(exc, SettingsError | ArgumentError):
        return str(exc), 2
    if isinstance(exc, OperatorError | AdminError):
        return str(exc), 1
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text ({exc.reason} at byte {exc.start})", 1
    unreadable = FileNotFoundError | IsADirectoryError | NotADirectoryError | PermissionError
    if isinstance(exc, unreadable) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror}", 1
    cause: BaseException | None = exc
    for _ in range(10):  # the exception and what it was raised from (a chain may loop)
        if cause is None:
            break
        missing = _MISSING_TABLE.search(str(cause))
        if missing:
            table = missing.group(1) or missing.group(2)
            return f"the database has no table {table}: run `herald migrate` first", 1
        if _unreachable_database(cause):
            return f"cannot reach the database (HERALD_DATABASE_URL): {cause}", 1
        if _unusable_sqlite_file(cause):
            return _UNUSABLE_FILE.format(cause), 1
        cause = cause.__cause__ or cause.__context__
    return None


# PostgreSQL's classes of errors about the connection itself: 08 connection exception, 28 invalid
# authorization, 3D000 no such database, 53 insufficient resources (53300: too many connections),
# 57P03 cannot connect now (starting up, shutting down).
_CONNECTION_STATES = ("08", "28", "3D000", "53", "57P03")


def _unreachable_database(exc: BaseException) -> bool:
    """The PostgreSQL server could not be reached or would not let us in: the driver's own refusal,
    or a socket error raised while it connected (its frames are in the traceback)."""
    state = str(getattr(exc, "sqlstate", "") or "")
    if state and type(exc).__module__.startswith("asyncpg") and state.startswith(_CONNECTION_STATES):
        return True
    if not isinstance(exc, OSError):
        return False
    frames = traceback.extract_tb(exc.__traceback__)
    return any("asyncpg" in frame.filename and "connect" in frame.name for frame in frames)


_UNUSABLE_FILE = "cannot use the database file (HERALD_DATABASE_URL): {}"
# SQLite's words for a file that is no database, and for one it cannot open (a directory, a
# folder that does not exist or may not be written).
_UNUSABLE_SQLITE_FILE = ("file is not a database", "unable to open database file")


def _unusable_sqlite_file(exc: BaseException) -> bool:
    import sqlite3

    return isinstance(exc, sqlite3.DatabaseError) and str(exc) in _UNUSABLE_SQLITE_FILE


def _debugging() -> bool:
    return os.environ.get("HERALD_LOG_LEVEL", "").lower() == "debug"


def _refusal(exc: BaseException) -> bool:
    """An administrative action Herald refused in its own words (`AdminError`: an unknown workspace,
    a bad setting value): never a traceback, even at debug, as no failure is behind it."""
    from herald.workspaces.errors import AdminError

    return isinstance(exc, AdminError)


class LazyGroup(TyperGroup):
    """A group whose `LAZY` commands are imported when resolved, and only described when listed."""

    _listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return [*self.commands, *(name for name in LAZY if name not in self.commands)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in self.commands or cmd_name not in LAZY:
            return self.commands.get(cmd_name)
        if self._listing:
            # Listing needs a name and a help line, not the command's imports.
            return typer.core.TyperCommand(cmd_name, help=LAZY[cmd_name].help)
        command = LAZY[cmd_name].load(cmd_name)
        self.commands[cmd_name] = command
        return command

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        _check_arguments(args)
        name, command, rest = super().resolve_command(ctx, args)
        # Not while completing a command line, nor for a command's help.
        if (
            name is not None
            and not ctx.resilient_parsing
            and "--help" not in rest
            and not _self_contained(name, rest)
        ):
            _preflight(name)
        return name, command, rest

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.exceptions.TyperException):
            raise  # the command line's own: usage errors, --help, exit statuses
        except Exception as exc:
            found = _operator_error(exc)
            if found is None or (_debugging() and not _refusal(exc)):
                raise
            typer.secho(f"error: {found[0]}", fg=typer.colors.RED, err=True)
            raise typer.Exit(found[1]) from None

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    cls=LazyGroup,
    help="Herald: the Offer Listing and Campaign Draft API (v5).",
    no_args_is_help=True,
    # Plain help for the top-level listing: rich's help renderer costs more to import than the rest.
    rich_markup_mode=None,
)


@app.command()
def migrate() -> None:
    """Upgrade the database to the latest schema."""
    from herald import migrate as migrations
    from herald.config import Settings

    settings = Settings()
    try:
        migrations.upgrade(settings.database_url)
    except migrations.SchemaAhead as exc:
        raise OperatorError(str(exc)) from exc
    typer.echo(f"database at head: {settings.database_url}")


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.", min=1, max=65535)] = 8000,
    workers: Annotated[int, typer.Option(help="Worker processes.", min=1)] = 1,
) -> None:
    """Serve the API with uvicorn."""
    from herald.cli.serve import serve as run

    run(host, port, workers)


@app.command()
def demo() -> None:
    """Create the demo workspace (first run) and print its credentials and a curl line."""
    from herald.cli.demo import ensure_demo

    ensure_demo()

"""API-key authentication: the credentials check every API request starts with.

A key's row (and its workspace's settings) is read once and kept for `ttl` seconds per process
(`HERALD_CREDENTIALS_CACHE_SECONDS`, default 1 s), so a busy key costs no query per request. That
bounds the lag of an administrative change: a revoked key, a removed scope, a changed rate limit or
feature flag takes effect in every process at most `ttl` after it commits. The secret itself is
checked on every request against the stored hash (constant time), cached or not.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from sqlalchemy import bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession

from herald.workspaces.models import ApiKey, Workspace
from herald.workspaces.scopes import Scope, expand

KEY_PREFIX = "hk"
# Bounds the memory of the cache; past it, the oldest entries go first.
_MAX_ENTRIES = 10_000


def secret_hash(secret: str) -> str:
    # Keys are 192-bit random, so a fast hash is enough.
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class WorkspaceView:
    """The settings of a workspace a request reads (never written through)."""

    id: str
    features: Mapping[str, bool]
    rate_limits: Mapping[str, str]


@dataclass(frozen=True)
class KeyView:
    id: str
    scopes: frozenset[Scope]  # expanded: implied scopes included
    secret_hash: str
    revoked: bool


@dataclass(frozen=True)
class Credentials:
    workspace: WorkspaceView
    key: KeyView


# Built once: every cache miss runs it.
_CREDENTIALS = select(
    Workspace.features,
    Workspace.rate_limits,
    ApiKey.scopes,
    ApiKey.secret_hash,
    ApiKey.revoked_at,
).where(
    Workspace.id == bindparam("workspace_id"),
    ApiKey.workspace_id == Workspace.id,
    ApiKey.id == bindparam("key_id"),
)


def split_secret(presented: str) -> tuple[str, str] | None:
    """(key id, secret) of a presented `hk_<id>_<secret>`, or None when it has not that form."""
    prefix, _, rest = presented.partition("_")
    key_id, _, secret = rest.partition("_")
    if prefix != KEY_PREFIX or not key_id or not secret:
        return None
    return key_id, secret


def proves(found: Credentials | None, secret: str) -> bool:
    """Whether `secret` proves the key `found` (its credentials, as `load` reads them): it exists,
    is not revoked, and `secret` hashes to its hash."""
    if found is None or found.key.revoked:
        return False
    return hmac.compare_digest(found.key.secret_hash, secret_hash(secret))


async def load(session: AsyncSession, workspace_id: str, key_id: str) -> Credentials | None:
    connection = await session.connection()
    row = (await connection.execute(_CREDENTIALS, {"workspace_id": workspace_id, "key_id": key_id})).first()
    if row is None:
        return None
    workspace = WorkspaceView(
        id=workspace_id,
        features=MappingProxyType(dict(row.features or {})),
        rate_limits=MappingProxyType(dict(row.rate_limits or {})),
    )
    key = KeyView(
        id=key_id,
        scopes=expand(row.scopes or ()),
        secret_hash=row.secret_hash,
        revoked=row.revoked_at is not None,
    )
    return Credentials(workspace, key)


Loader = Callable[[str, str], Awaitable[Credentials | None]]


class CredentialsCache:
    """Credentials by (workspace, key id), each kept `ttl` seconds of `monotonic` time.

    Requests that miss the same entry while it is being loaded wait for that load rather than each
    running its own: when an entry expires under load, every request of the next few milliseconds
    missed it, and each paid a pooled connection and three statements. A load is shared only
    with requests that arrive less than `ttl` after it began, so the bound on an administrative
    change's lag holds for them too.
    """

    def __init__(self, ttl: float, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self._monotonic = monotonic
        self._entries: dict[tuple[str, str], tuple[float, Credentials | None]] = {}
        self._loading: dict[tuple[str, str], tuple[float, asyncio.Future[Credentials | None]]] = {}

    async def verify(self, workspace_id: str, presented: str, load: Loader) -> Credentials | None:
        """The credentials the presented secret proves, or None (unknown, revoked or wrong secret)."""
        parts = split_secret(presented)
        if parts is None:
            return None
        key_id, secret = parts
        found = await self._get(workspace_id, key_id, load)
        return found if proves(found, secret) else None

    async def _get(self, workspace_id: str, key_id: str, load: Loader) -> Credentials | None:
        if self.ttl <= 0:
            return await load(workspace_id, key_id)
        now = self._monotonic()
        entry = self._entries.get((workspace_id, key_id))
        if entry is not None and entry[0] > now:
            return entry[1]
        while (loading := self._loading.get((workspace_id, key_id))) is not None and loading[
            0
        ] + self.ttl > now:
            try:
                return await asyncio.shield(loading[1])
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not loading[1].cancelled() or (task is not None and task.cancelling()):
                    raise
                # The request that was loading was cancelled (its client left): look again, the
                # first of those that waited loads for the others.
        return await self._load(workspace_id, key_id, load, now)

    async def _load(self, workspace_id: str, key_id: str, load: Loader, now: float) -> Credentials | None:
        key = (workspace_id, key_id)
        shared: asyncio.Future[Credentials | None] = asyncio.get_running_loop().create_future()
        self._loading[key] = (now, shared)
        try:
            found = await load(workspace_id, key_id)
        except BaseException as error:
            if isinstance(error, asyncio.CancelledError):
                shared.cancel()
            else:
                shared.set_exception(error)
                shared.exception()  # retrieved: no request may be waiting for it
            raise
        finally:
            if self._loading.get(key, (0.0, None))[1] is shared:
                del self._loading[key]
        shared.set_result(found)
        if len(self._entries) >= _MAX_ENTRIES:
            self._entries = {k: v for k, v in self._entries.items() if v[0] > now}
            if len(self._entries) >= _MAX_ENTRIES:
                self._entries.clear()
        # An unknown key is remembered too: guessing costs no query per attempt either.
        self._entries[key] = (now + self.ttl, found)
        return found

"""Connector secrets at rest: sealed with Fernet under `HERALD_SECRET_KEY`, opened only to send.

The key is never derived or defaulted: without one, secrets cannot be stored (the demo workspace's
connector has none; tests set a key). `HERALD_SECRET_KEY` may list several keys, comma-separated:
the first seals, every one opens, so keys can be rotated without losing what was sealed before.
"""

from __future__ import annotations

from datetime import datetime

import orjson
from cryptography.fernet import Fernet, InvalidToken, MultiFernet

KEY_SETTING = "HERALD_SECRET_KEY"


class SecretKeyError(Exception):
    """The secret key is missing, malformed, or does not open a sealed value."""


def new_key() -> str:
    """A fresh key for `HERALD_SECRET_KEY`."""
    return Fernet.generate_key().decode()


class SecretBox:
    def __init__(self, keys: str) -> None:
        parts = [part.strip() for part in keys.split(",") if part.strip()]
        if not parts:
            raise SecretKeyError(f"{KEY_SETTING} is empty.")
        try:
            self._fernet = MultiFernet([Fernet(part.encode()) for part in parts])
        except ValueError:
            raise SecretKeyError(
                f"{KEY_SETTING} must hold Fernet keys (32 url-safe base64 bytes each); "
                "make one with `herald connectors keygen`."
            ) from None

    def seal(self, values: dict[str, str], now: datetime) -> str:
        # Fernet stamps the token with a time; it comes from the injected clock, not the wall clock.
        return self._fernet.encrypt_at_time(orjson.dumps(values), int(now.timestamp())).decode()

    def resealed(self, token: str) -> str:
        """`token` sealed again with the first key (its moment kept), whichever key sealed it: after
        every sealed value is resealed, the keys after the first can be dropped. Raises
        SecretKeyError when none of the keys opens it."""
        try:
            return self._fernet.rotate(token.encode()).decode()
        except InvalidToken:
            raise SecretKeyError(f"None of the keys in {KEY_SETTING} opens it.") from None

    def open(self, token: str) -> dict[str, str]:
        try:
            opened = orjson.loads(self._fernet.decrypt(token.encode()))
        except (InvalidToken, orjson.JSONDecodeError):
            raise SecretKeyError(
                f"The connector's secrets cannot be opened with {KEY_SETTING} (was the key changed?)."
            ) from None
        return {str(key): str(value) for key, value in opened.items()}


def secret_box(secret_key: str | None) -> SecretBox:
    """The box for the configured key; raises SecretKeyError when none is configured."""
    if secret_key is None or not secret_key.strip():
        raise SecretKeyError(
            f"{KEY_SETTING} is not set, so connector secrets cannot be stored or read. "
            "Make a key with `herald connectors keygen` and set it in the environment."
        )
    return SecretBox(secret_key)

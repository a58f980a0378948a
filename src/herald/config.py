"""Settings, read from `HERALD_*` environment variables (and `.env`)."""

from __future__ import annotations

from functools import cached_property

from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HERALD_", env_file=".env", extra="ignore")

    database_url: str = "sqlite+aiosqlite:///./herald.db"
    redis_url: str | None = None
    # Deployments may match the header names of their clients (`X-<token>-Request-Id`, `<token>-APPKEY`).
    header_token: str = "SVC"
    base_url: str = "http://127.0.0.1:8000"
    max_body_bytes: int = 1024 * 1024
    max_json_depth: int = 32
    # Ordinarily the database pool is sized for a web worker; benchmarks and large deployments raise it.
    db_pool_size: int = 10
    log_level: str = "info"
    # Sandbox time travel and multi-process tests: read "now" from this file (epoch seconds).
    clock_file: str | None = None

    @cached_property
    def request_id_header(self) -> str:
        return f"X-{self.header_token}-Request-Id"

    @cached_property
    def app_key_header(self) -> str:
        return f"{self.header_token}-APPKEY"

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

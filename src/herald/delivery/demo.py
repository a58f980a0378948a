"""The demo workspace's delivery setup: an SMTP connector for a local catcher on port 1025.

Run any SMTP catcher there (e.g. `python -m aiosmtpd -n -l localhost:1025`) to read test sends.
It has no password, so the demo needs no HERALD_SECRET_KEY.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession

from herald.delivery.config import ConnectorInput
from herald.delivery.connectors import add_connector

DEMO_SMTP = ConnectorInput(
    name="local-smtp", type="CUSTOM_SMTP", host="localhost", port=1025, security="none", timeout=5.0
)


async def seed_demo_delivery(session: AsyncSession, now: datetime, workspace_id: str) -> None:
    await add_connector(session, now, workspace_id, DEMO_SMTP, secret_key=None)

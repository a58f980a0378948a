"""Pausing an execution whose connector keeps failing, and resuming it.

A one-time campaign has no PAUSE in the lifecycle (contract §5: PAUSE and RESUME are for periodic
and event-triggered campaigns), so the campaign stays SENDING and its *execution* pauses: no user is
claimed until an operator resumes it (`herald campaigns resume-delivery`), typically after fixing
the connector. The reason is on the execution (campaign stats) and in the worker's log. STOP still
ends a paused execution.
"""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession

from herald.db import Database
from herald.delivery import streaks
from herald.delivery.engine.models import Execution
from herald.delivery.models import Connector
from herald.wake import wake_on_commit

log = logging.getLogger("herald.delivery.engine")

PAUSED = "PAUSED"
DISPATCHING = "DISPATCHING"


async def pause(
    database: Database, execution: Execution, connector: Connector, reason: str, now: datetime
) -> None:
    """DISPATCHING → PAUSED with the reason, `connector` failing (a no-op when another worker
    paused it first). The connector's shared streak starts again with the pause, so an execution
    resumed once it is fixed gets a whole threshold of attempts."""
    async with database.writer() as session:
        await streaks.start_again(await session.connection(), connector.workspace_id, connector.id, now)
        result = await session.execute(
            update(Execution)
            .where(
                Execution.workspace_id == execution.workspace_id,
                Execution.id == execution.id,
                Execution.status == DISPATCHING,
            )
            .values(status=PAUSED, reason=reason, updated_at=now)
            .execution_options(synchronize_session=False)
        )
        await session.commit()
    if getattr(result, "rowcount", 0) == 1:
        log.error(
            "campaign %s/%s: delivery paused: %s", execution.workspace_id, execution.campaign_id, reason
        )


async def resume(session: AsyncSession, workspace_id: str, campaign_id: str, now: datetime) -> int:
    """PAUSED → DISPATCHING for the campaign's paused executions; how many were resumed. The caller
    commits; the workers wake at the commit."""
    result = await session.execute(
        update(Execution)
        .where(
            Execution.workspace_id == workspace_id,
            Execution.campaign_id == campaign_id,
            Execution.status == PAUSED,
        )
        .values(status=DISPATCHING, reason=None, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    resumed = int(getattr(result, "rowcount", 0) or 0)
    if resumed:
        await wake_on_commit(session, workspace_id)
    return resumed

"""An execution's conversion figures (a Herald extension of the campaign stats): per variation of
the users SENT, and for the control users (HELD_OUT: campaign and global control group), counted by
the database from the attribution windows and conversions (`engine.conversions`).

- `users`: users with an attribution window (sent, or held out, while the campaign had goals);
- `converted_users`: of them, those with at least one conversion; `conversions`: (window, goal)
  pairs, a window being a user's, or in an event-triggered campaign each message's;
- `revenue`: the sum of the conversions' revenue (a goal's `revenue_attribute`, numbers only);
- `conversion_rate` = converted_users / users (null when users is 0);
- `uplift` = (rate_variation - rate_control) / rate_control: null when there is no control user or
  the control group's rate is 0.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sqlalchemy import distinct, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from herald.delivery.engine.conversions import goals_of, window_length
from herald.delivery.engine.models import AttributionWindow, Conversion, Execution

_CONTROL = "\x00control"


def _rate(converted: int, users: int) -> float | None:
    return converted / users if users else None


def uplift(rate: float | None, control: float | None) -> float | None:
    """(rate - control) / control; None without a control rate or when it is 0."""
    if rate is None or control is None or control == 0:
        return None
    return (rate - control) / control


def _figures(users: int, converted: int, conversions: int, revenue: float) -> dict[str, Any]:
    return {
        "users": users,
        "converted_users": converted,
        "conversions": conversions,
        "revenue": revenue,
        "conversion_rate": _rate(converted, users),
    }


async def execution_conversions(
    session: AsyncSession, execution: Execution, components: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The execution's conversions block; None when its campaign has no conversion goals."""
    details = goals_of(components)
    if details is None:
        return None
    mine = (
        AttributionWindow.workspace_id == execution.workspace_id,
        AttributionWindow.execution_id == execution.id,
    )
    users: dict[str, int] = defaultdict(int)
    for held_out, variation, count in (
        await session.execute(
            select(
                AttributionWindow.held_out,
                AttributionWindow.variation,
                func.count(distinct(AttributionWindow.customer_id)),
            )
            .where(*mine)
            .group_by(AttributionWindow.held_out, AttributionWindow.variation)
        )
    ).all():
        users[_CONTROL if held_out else str(variation)] += int(count)
    converted: dict[str, tuple[int, int, float]] = {}
    for held_out, variation, people, count, revenue in (
        await session.execute(
            select(
                Conversion.held_out.is_not(None),
                Conversion.variation,
                func.count(distinct(Conversion.customer_id)),
                func.count(),
                func.coalesce(func.sum(Conversion.revenue), 0.0),
            )
            .where(Conversion.workspace_id == execution.workspace_id, Conversion.execution_id == execution.id)
            .group_by(Conversion.held_out.is_not(None), Conversion.variation)
        )
    ).all():
        key = _CONTROL if held_out else str(variation)
        before = converted.get(key, (0, 0, 0.0))
        converted[key] = (before[0] + int(people), before[1] + int(count), before[2] + float(revenue))
    control = _figures(users[_CONTROL], *converted.get(_CONTROL, (0, 0, 0.0)))
    variations = []
    for name in sorted(key for key in {*users, *converted} if key != _CONTROL):
        figures = _figures(users[name], *converted.get(name, (0, 0, 0.0)))
        figures["uplift"] = uplift(figures["conversion_rate"], control["conversion_rate"])
        variations.append({"variation": name, **figures})
    sent_users = sum(v["users"] for v in variations)
    sent = _figures(
        sent_users,
        sum(v["converted_users"] for v in variations),
        sum(v["conversions"] for v in variations),
        sum(v["revenue"] for v in variations),
    )
    sent["uplift"] = uplift(sent["conversion_rate"], control["conversion_rate"])
    return {
        "attribution_window_in_hours": int(window_length(details).total_seconds() // 3600),
        "goals": [goal.goal_name for goal in details.goals or []],
        "sent": sent,
        "control": control,
        "variations": variations,
    }

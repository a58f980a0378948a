"""What an update may change in each campaign state (spec: "Editability by state").

Pure: compares the components a request sends with the stored ones and names every field whose
change the state forbids. Sending a component unchanged is not a change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from herald.campaigns.schemas.common import CampaignStatus
from herald.problems import Problem

# Live states follow the ACTIVE row of the table: a paused or sending campaign is still live.
LIVE = frozenset({CampaignStatus.ACTIVE, CampaignStatus.PAUSED, CampaignStatus.SENDING})
FROZEN = frozenset({CampaignStatus.STOPPED, CampaignStatus.ARCHIVED, CampaignStatus.SENT})
LOCKED_WHEN_LIVE = ("trigger_condition", "segmentation_details", "conversion_goal_details")


def _not_editable(target: str, status: CampaignStatus) -> Problem:
    return Problem(
        "NOT_EDITABLE", target, f"'{target}' cannot be changed while the campaign is {status.value}."
    )


def _scheduling_field(stored: Mapping[str, Any], sent: Mapping[str, Any], field: str) -> bool:
    """True when `scheduling_details.<field>` differs between stored and sent."""
    before = (stored.get("scheduling_details") or {}).get(field)
    after = (sent.get("scheduling_details") or {}).get(field)
    return before != after


def not_editable(status: CampaignStatus, stored: Mapping[str, Any], sent: Mapping[str, Any]) -> list[Problem]:
    """One NOT_EDITABLE problem per field the request would change but the state forbids.

    `stored` and `sent` map component names to their JSON; `sent` holds only what the request carried.
    """
    changed = [name for name, value in sent.items() if stored.get(name) != value]
    if status in FROZEN:
        return [_not_editable(name, status) for name in (changed or list(sent) or ["campaign"])]
    problems: list[Problem] = []
    if status in LIVE:
        problems += [_not_editable(name, status) for name in LOCKED_WHEN_LIVE if name in changed]
    if "scheduling_details" in changed and status in (LIVE | {CampaignStatus.SCHEDULED}):
        if _scheduling_field(stored, sent, "delivery_type"):
            problems.append(_not_editable("scheduling_details.delivery_type", status))
        if status in LIVE and _scheduling_field(stored, sent, "start_time"):
            problems.append(_not_editable("scheduling_details.start_time", status))
    return problems

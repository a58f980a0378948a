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
# What fires a business-event or location campaign, as `trigger_condition` fires the others: locked
# with it. The rest of `basic_details` (platforms, names, tags) stays editable.
BASIC_LOCKED_WHEN_LIVE = ("business_event", "geofences")


def _not_editable(target: str, status: CampaignStatus) -> Problem:
    return Problem(
        "NOT_EDITABLE", target, f"'{target}' cannot be changed while the campaign is {status.value}."
    )


def run_not_editable(stored: Mapping[str, Any], sent: Mapping[str, Any]) -> list[Problem]:
    """The NOT_EDITABLE problems of an update of a periodic run's child campaign: every field the
    request would change (or, changing none, every one it sends), as for a frozen campaign."""
    changed = [name for name, value in sent.items() if stored.get(name) != value]
    return [
        Problem("NOT_EDITABLE", name, f"'{name}' of a run of a periodic campaign cannot be changed.")
        for name in (changed or list(sent) or ["campaign"])
    ]


def _field_changed(stored: Mapping[str, Any], sent: Mapping[str, Any], component: str, field: str) -> bool:
    """True when `<component>.<field>` differs between stored and sent (absent counts as null)."""
    before = (stored.get(component) or {}).get(field)
    after = (sent.get(component) or {}).get(field)
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
        if "basic_details" in changed:
            problems += [
                _not_editable(f"basic_details.{field}", status)
                for field in BASIC_LOCKED_WHEN_LIVE
                if _field_changed(stored, sent, "basic_details", field)
            ]
    if "scheduling_details" in changed and status in (LIVE | {CampaignStatus.SCHEDULED}):
        if _field_changed(stored, sent, "scheduling_details", "delivery_type"):
            problems.append(_not_editable("scheduling_details.delivery_type", status))
        if status in LIVE and _field_changed(stored, sent, "scheduling_details", "start_time"):
            problems.append(_not_editable("scheduling_details.start_time", status))
    return problems

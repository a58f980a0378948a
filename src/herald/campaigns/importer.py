"""Bulk import of existing campaigns from JSON Lines (`herald campaigns import FILE --workspace W`).

One JSON object per line: the stored campaign as C2 shows it, of any channel (SMS, WHATSAPP,
FACEBOOK, GOOGLE ADS and CONNECTORS too) and any status, with the fields v5 cannot create:
`parent_id` (periodic children), `flow_id`/`flow_name` (flow nodes), `sender_name` (SMS),
`version_number`, `created_at`, `rejection_comment`. Push and Email components are read with the
campaign models (so they are stored exactly as the API would store them); the components of other
channels, whose shapes the spec does not show, are stored as given.

All or nothing: every line is checked first and every problem reported with its line number;
then the rows are written with bulk inserts in one transaction.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, Field, Strict, ValidationError
from pydantic_core import PydanticCustomError
from sqlalchemy import insert, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from herald.campaigns.models import Campaign
from herald.campaigns.schemas.campaign import COMPONENT_NAMES
from herald.campaigns.schemas.common import (
    CREATABLE_CHANNELS,
    DELIVERY_TYPES_BY_CHANNEL,
    CampaignStatus,
    Channel,
    DeliveryType,
    resolve_datetime,
)
from herald.campaigns.service import derived_columns
from herald.campaigns.validation import parse_update
from herald.email_address import EmailAddress
from herald.http.guards import BeyondADouble, NotAJsonNumber, read_json_text
from herald.ids import OBJECT_ID, object_id
from herald.json_numbers import IntegralFloat
from herald.problems import Problem
from herald.pydantic_errors import problems_from_validation_error
from herald.schemas import APIModel
from herald.timefmt import parse_iso_datetime
from herald.workspaces.models import Workspace

BATCH = 1000
_CAMPAIGNS = Campaign.metadata.tables["campaigns"]
_TAGS = Campaign.metadata.tables["campaign_tags"]
JsonObject = dict[str, Any]


def _object_id(value: str) -> str:
    if not OBJECT_ID.fullmatch(value):
        raise PydanticCustomError("INVALID_TYPE", "Expected a 24-character lowercase hexadecimal id.")
    return value


def _timestamp(value: str) -> str:
    if parse_iso_datetime(value) is None:
        raise PydanticCustomError(
            "INVALID_TYPE", "Expected an ISO 8601 date-time, or YYYY-MM-DD HH:MM:SS.ffffff (UTC)."
        )
    return value


ObjectId = Annotated[str, Strict(), AfterValidator(_object_id)]
Timestamp = Annotated[str, Strict(), AfterValidator(_timestamp)]
ShortText = Annotated[str, Strict(), Field(min_length=1, max_length=200)]


class ImportedCampaign(APIModel):
    id: ObjectId | None = None
    campaign_id: ObjectId | None = None
    version_number: Annotated[int, Strict(), Field(ge=1), IntegralFloat] = 1
    channel: Channel
    campaign_delivery_type: DeliveryType
    status: CampaignStatus = CampaignStatus.DRAFT
    paused_from: CampaignStatus | None = None
    created_by: EmailAddress
    created_at: Timestamp | None = None
    updated_by: EmailAddress | None = None
    updated_at: Timestamp | None = None
    sent_time: Timestamp | None = None
    parent_id: ObjectId | None = None
    flow_id: Annotated[str, Strict(), Field(min_length=1, max_length=64)] | None = None
    flow_name: ShortText | None = None
    sender_name: ShortText | None = None
    rejection_comment: Annotated[str, Strict(), Field(min_length=1, max_length=2000)] | None = None
    request_id: Annotated[str, Strict(), Field(max_length=128)] | None = None
    # Components: checked per channel below.
    basic_details: JsonObject | None = None
    campaign_content: JsonObject | None = None
    connector: JsonObject | None = None
    trigger_condition: JsonObject | None = None
    segmentation_details: JsonObject | None = None
    scheduling_details: JsonObject | None = None
    delivery_controls: JsonObject | None = None
    conversion_goal_details: JsonObject | None = None
    control_group_details: JsonObject | None = None
    utm_params: JsonObject | None = None
    campaign_audience_limit: JsonObject | None = None
    advanced: JsonObject | None = None


@dataclass
class Parsed:
    """Rows ready to insert, or the problems that stop the import."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    tags: list[dict[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _instant(value: str | None, default: datetime) -> datetime:
    if value is None:
        return default
    return resolve_datetime(value)  # checked by Timestamp


def _rules(line: ImportedCampaign) -> list[Problem]:
    problems: list[Problem] = []
    allowed = DELIVERY_TYPES_BY_CHANNEL.get(line.channel)
    if allowed is not None and line.campaign_delivery_type not in allowed:
        problems.append(
            Problem(
                "INVALID_ENUM_VALUE",
                "campaign_delivery_type",
                f"{line.channel.value} campaigns cannot be {line.campaign_delivery_type.value}.",
            )
        )
    if line.sender_name is not None and line.channel is not Channel.SMS:
        problems.append(Problem("UNKNOWN_FIELD", "sender_name", "sender_name belongs to SMS campaigns only."))
    if line.rejection_comment is not None and line.status is not CampaignStatus.DRAFT:
        problems.append(
            Problem(
                "UNKNOWN_FIELD", "rejection_comment", "rejection_comment belongs to DRAFT campaigns only."
            )
        )
    if line.paused_from is not None and (
        line.status is not CampaignStatus.PAUSED
        or line.paused_from not in (CampaignStatus.ACTIVE, CampaignStatus.SCHEDULED)
    ):
        problems.append(
            Problem(
                "INVALID_ENUM_VALUE",
                "paused_from",
                "paused_from is ACTIVE or SCHEDULED, on PAUSED campaigns.",
            )
        )
    if line.version_number > 1 and line.campaign_id is None:
        problems.append(
            Problem(
                "REQUIRED_FIELD_MISSING", "campaign_id", "A version after the first needs its campaign_id."
            )
        )
    if line.version_number == 1 and line.id and line.campaign_id and line.id != line.campaign_id:
        problems.append(
            Problem(
                "INVALID_TYPE",
                "campaign_id",
                "The first version's id is the campaign_id; they must be equal.",
            )
        )
    return problems


def _components(line: ImportedCampaign, raw: JsonObject) -> tuple[JsonObject, list[Problem]]:
    sent = {name: raw[name] for name in COMPONENT_NAMES if name in raw and raw[name] is not None}
    if line.channel not in CREATABLE_CHANNELS:
        return sent, []  # shapes not shown by the spec: kept as given
    body, problems = parse_update(
        sent, stored_channel=line.channel, stored_delivery_type=line.campaign_delivery_type
    )
    if body is None:
        return {}, problems
    stored = {name: getattr(body, name).model_dump(mode="json", exclude_unset=True) for name in sent}
    return stored, []


def parse_line(
    number: int, text: str, workspace_id: str, now: datetime
) -> tuple[dict[str, Any] | None, list[str]]:
    """One line as a `campaigns` row (without `is_latest`), or its problems as printable text."""
    # Numbers as the API reads a body's: none beyond a double (it became null), a whole number
    # beyond 64 bits the double nearest it.
    try:
        raw = read_json_text(text)
    except NotAJsonNumber as exc:
        return None, [f"line {number}: not JSON ({exc} is no JSON number)"]
    except BeyondADouble as exc:
        return None, [
            f"line {number}: {exc.path or 'line'}: numbers must fit a double (at most about 1.8e308)"
        ]
    except json.JSONDecodeError as exc:
        return None, [f"line {number}: not JSON ({exc.msg})"]
    except ValueError:  # an integer beyond the interpreter's digit limit (4,300)
        return None, [f"line {number}: holds a number of more digits than can be read"]
    if not isinstance(raw, dict):
        return None, [f"line {number}: expected a JSON object"]
    try:
        line = ImportedCampaign.model_validate(raw)
    except ValidationError as exc:
        found = problems_from_validation_error(exc, raw)
        return None, [f"line {number}: {p.target or 'line'}: {p.message}" for p in found]
    components, found = _components(line, raw)
    found = _rules(line) + found
    if found:
        return None, [f"line {number}: {p.target or 'line'}: {p.message}" for p in found]
    created_at = _instant(line.created_at, now)
    row_id = line.id or (
        line.campaign_id if line.version_number == 1 and line.campaign_id else object_id(created_at)
    )
    return {
        "workspace_id": workspace_id,
        "id": row_id,
        "campaign_id": line.campaign_id or row_id,
        "version_number": line.version_number,
        "revision": 1,
        "channel": line.channel.value,
        "delivery_type": line.campaign_delivery_type.value,
        "status": line.status.value,
        "paused_from": line.paused_from.value if line.paused_from else None,
        "created_by": line.created_by,
        "created_at": created_at,
        "updated_by": line.updated_by,
        "updated_at": _instant(line.updated_at, created_at),
        "sent_time": _instant(line.sent_time, now) if line.sent_time else None,
        "request_id": line.request_id,
        "flow_id": line.flow_id,
        "flow_name": line.flow_name,
        "parent_id": line.parent_id,
        "sender_name": line.sender_name,
        "rejection_comment": line.rejection_comment,
        "components": components,
        **derived_columns(components),
    }, []


def parse_lines(lines: Iterable[str], workspace_id: str, now: datetime) -> Parsed:
    parsed = Parsed()
    seen_ids: dict[str, int] = {}
    seen_versions: dict[tuple[str, int], int] = {}
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        row, problems = parse_line(number, text, workspace_id, now)
        parsed.problems += problems
        if row is None:
            continue
        version = (row["campaign_id"], row["version_number"])
        if row["id"] in seen_ids:
            parsed.problems.append(f"line {number}: id: {row['id']} is also on line {seen_ids[row['id']]}")
        elif version in seen_versions:
            parsed.problems.append(
                f"line {number}: version_number: version {version[1]} of {version[0]} is also on line "
                f"{seen_versions[version]}"
            )
        seen_ids.setdefault(row["id"], number)
        seen_versions.setdefault(version, number)
        parsed.rows.append(row)
    latest: dict[str, int] = {}
    for row in parsed.rows:
        latest[row["campaign_id"]] = max(latest.get(row["campaign_id"], 0), row["version_number"])
    for row in parsed.rows:
        row["is_latest"] = row["version_number"] == latest[row["campaign_id"]]
        parsed.tags += [
            {"workspace_id": workspace_id, "tag": tag, "campaign_row_id": row["id"]}
            for tag in dict.fromkeys(row["tags"])
        ]
    return parsed


async def existing_problems(session: AsyncSession, workspace_id: str, parsed: Parsed) -> list[str]:
    """What the database already holds that the import would collide with."""
    if await session.get(Workspace, workspace_id) is None:
        return [f"workspace {workspace_id} does not exist"]
    problems: list[str] = []
    ids = [row["id"] for row in parsed.rows]
    campaign_ids = sorted({row["campaign_id"] for row in parsed.rows})
    for start in range(0, max(len(ids), len(campaign_ids)), BATCH):
        id_batch, campaign_batch = ids[start : start + BATCH], campaign_ids[start : start + BATCH]
        query = select(Campaign.id, Campaign.campaign_id).where(
            Campaign.workspace_id == workspace_id,
            or_(Campaign.id.in_(id_batch), Campaign.campaign_id.in_(campaign_batch)),
        )
        for row_id, campaign_id in (await session.execute(query)).all():
            problems.append(
                f"campaign {campaign_id} (version document {row_id}) already exists in {workspace_id}"
            )
    return problems


async def insert_rows(
    session: AsyncSession, parsed: Parsed, progress: Callable[[int], None] | None = None
) -> None:
    """Bulk-insert the parsed rows and their tags, `BATCH` at a time."""
    for start in range(0, len(parsed.rows), BATCH):
        batch = parsed.rows[start : start + BATCH]
        await session.execute(insert(_CAMPAIGNS), batch)
        if progress is not None:
            progress(len(batch))
    for start in range(0, len(parsed.tags), BATCH):
        await session.execute(insert(_TAGS), parsed.tags[start : start + BATCH])

"""Wire shapes of the ingestion API (`/v1/customer`, `/v1/event`, `/v1/transition`) and of import lines.

They follow the production Data API's request shapes. The models check structure and scalar types;
attribute values and event times are checked by `attributes` and `ingest` with clearer messages, so
those fields are typed loosely here and documented with `WithJsonSchema`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, Strict, WithJsonSchema
from pydantic_core import PydanticCustomError

from herald.audience.attributes import (
    MAX_ATTRIBUTES,
    MAX_NAME_LENGTH,
    NUL,
    NUL_MESSAGE,
    RESERVED_NAMES,
    STRING_COLUMNS,
    is_printable_name,
)
from herald.control_characters import CLASS
from herald.email_address import RECIPIENT_PATTERN, RECIPIENT_RULE
from herald.json_numbers import IntegralFloat
from herald.schemas import APIModel, ResponseModel

MAX_ELEMENTS = 1000  # per transition
MAX_ACTIONS = 1000  # per event object

Flag = Annotated[bool, Strict()]
# `attributes.is_printable_name` as the OpenAPI document's pattern.
_PRINTABLE_NAME = f"^[^{CLASS}]*[^\\s{CLASS}][^{CLASS}]*$"


def _printable(message: str) -> AfterValidator:
    """`attributes.is_printable_name` as a field's check, refused with `message`."""

    def check(value: str) -> str:
        if not is_printable_name(value):
            raise PydanticCustomError("INVALID_TYPE", message)
        return value

    return AfterValidator(check)


# A user's id travels in webhook bodies, mail headers, logs and command output: as action names,
# not blank and without control characters (a newline in one forged lines of a log).
CustomerId = Annotated[
    str,
    Strict(),
    Field(min_length=1, max_length=200, json_schema_extra={"pattern": _PRINTABLE_NAME}),
    _printable("A customer id must not be blank nor contain control characters."),
]


# Not blank and without control characters, as attribute names: campaigns' triggers and business
# events name actions as written, and a name no campaign can name is a mistake to report.
ACTION_NAME_LENGTH = 200
ActionName = Annotated[
    str,
    Strict(),
    Field(min_length=1, max_length=ACTION_NAME_LENGTH, json_schema_extra={"pattern": _PRINTABLE_NAME}),
    _printable("Names must not be blank nor contain control characters."),
]


def _without_nul(value: str) -> str:
    if NUL in value:
        raise PydanticCustomError("INVALID_TYPE", NUL_MESSAGE)
    return value


# Free text, stored as sent: only NUL is refused (no stored string may hold it, `attributes.NUL`).
Platform = Annotated[str, Strict(), Field(min_length=1, max_length=32), AfterValidator(_without_nul)]
AppVersion = Annotated[str, Strict(), Field(min_length=1, max_length=64), AfterValidator(_without_nul)]
TimezoneOffset = Annotated[int, Strict(), Field(ge=-14 * 3600, le=14 * 3600), IntegralFloat]

_ATTRIBUTE_VALUE = {
    "anyOf": [
        {"type": "string"},
        {"type": "number"},
        {"type": "boolean"},
        {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]}},
        {"type": "null"},
    ]
}
# What `attributes.check_name` accepts: not blank, no control characters, not the identifier's name.
_ATTRIBUTE_NAME = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_NAME_LENGTH,
    "allOf": [{"pattern": "\\S"}, {"pattern": f"^[^{CLASS}]*$"}],
    "not": {"enum": sorted(RESERVED_NAMES)},
}
_ATTRIBUTES = {
    "type": "object",
    "additionalProperties": _ATTRIBUTE_VALUE,
    "propertyNames": _ATTRIBUTE_NAME,
    "maxProperties": MAX_ATTRIBUTES,
    "description": "Attribute name (1-128 characters) to value: string, number, boolean, ISO 8601 "
    "date-time (stored as UTC `YYYY-MM-DDTHH:MM:SSZ`), or an array of those; null unsets it.",
}
# Values are typed `Any` (they come from parsed JSON): `attributes.normalise_value` checks them with
# clearer messages, and faster than a recursive JSON type would.
Attributes = Annotated[dict[str, Any], WithJsonSchema(_ATTRIBUTES)]
# A customer's: the standard `email` is the address campaigns send to (`attributes._standard`).
CustomerAttributes = Annotated[
    dict[str, Any],
    WithJsonSchema(
        {
            **_ATTRIBUTES,
            "properties": {
                "email": {
                    "anyOf": [
                        {
                            "type": "string",
                            "maxLength": STRING_COLUMNS["email"],
                            "pattern": RECIPIENT_PATTERN,
                            "description": f"An e-mail address as Herald sends to one: {RECIPIENT_RULE}.",
                        },
                        {"type": "null"},
                    ]
                }
            },
        }
    ),
]
EventTime = Annotated[
    Any,
    WithJsonSchema(
        {
            "anyOf": [{"type": "number"}, {"type": "string", "format": "date-time"}],
            "description": "Epoch seconds, or an ISO 8601 date-time (no zone = UTC).",
        }
    ),
]


class CustomerObject(APIModel):
    """Create a user or merge attributes into it: each sent key replaces that key, others stay."""

    type: Literal["customer"]
    customer_id: CustomerId
    attributes: CustomerAttributes = Field(
        default_factory=dict,
        description="Standard attributes (email, mobile, first_name, last_name, gaid, push_id, timezone "
        "(IANA), email_opt_out, push_opt_out, sms_opt_out) fill the profile; any other key is a custom "
        "attribute.",
    )
    update_existing_only: Flag = Field(
        default=False, description="When true, an unknown customer_id is skipped (nothing is created)."
    )


class EventAction(APIModel):
    action: ActionName
    attributes: Attributes = Field(default_factory=dict)
    platform: Platform | None = None
    app_version: AppVersion | None = None
    current_time: EventTime = Field(
        default=None,
        description="When the event happened; absent = when it is received. At most 5 minutes ahead.",
    )
    user_time: EventTime = Field(default=None, description="The user's local time (checked, not stored).")
    user_timezone_offset: TimezoneOffset | None = Field(
        default=None, description="Seconds east of UTC of the user's clock (checked, not stored)."
    )


class EventObject(APIModel):
    """Actions a user performed. An unknown customer_id creates the user."""

    type: Literal["event"]
    customer_id: CustomerId
    actions: Annotated[list[EventAction], Field(min_length=1, max_length=MAX_ACTIONS)]


Element = Annotated[CustomerObject | EventObject, Field(discriminator="type")]


class TransitionObject(APIModel):
    """Up to 1000 customer and event objects, applied in order, all or nothing."""

    type: Literal["transition"]
    elements: Annotated[list[Element], Field(min_length=1, max_length=MAX_ELEMENTS)]


class ImportEvent(APIModel):
    """One line of an events file for `herald audience import`."""

    customer_id: CustomerId
    action: ActionName
    attributes: Attributes = Field(default_factory=dict)
    occurred_at: EventTime
    platform: Platform | None = None
    app_version: AppVersion | None = None


# ---- responses ---------------------------------------------------------------------------------

CustomerOutcome = Literal["created", "updated", "skipped"]


class CustomerResult(ResponseModel):
    customer_id: str
    result: CustomerOutcome = Field(
        description="`skipped`: update_existing_only was set and the customer is unknown; nothing was written."
    )


class CustomerResponse(ResponseModel):
    response_id: str
    type: Literal["customer"]
    data: CustomerResult


class EventResult(ResponseModel):
    customer_id: str
    accepted: int = Field(description="Number of actions stored.")
    event_ids: list[str] = Field(description="Ids of the stored events, in the order of `actions`.")
    user_created: bool = Field(description="True when the customer was unknown and has been created.")


class EventResponse(ResponseModel):
    response_id: str
    type: Literal["event"]
    data: EventResult


class CustomerCounts(ResponseModel):
    created: int
    updated: int
    skipped: int
    skipped_customer_ids: list[str]


class EventCounts(ResponseModel):
    accepted: int
    users_created: int


class TransitionResult(ResponseModel):
    elements: int
    customers: CustomerCounts
    events: EventCounts


class TransitionResponse(ResponseModel):
    response_id: str
    type: Literal["transition"]
    data: TransitionResult

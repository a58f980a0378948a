"""Offer request bodies (contract §4): JSON shapes, types and ranges only.

These models say what is well-formed. Everything with a contract-specific code (INVALID_OFFER_NAME,
INVALID_SCHEDULING, SPLIT_KEY_MISMATCH, ...) is a rule in `herald.offers.rules`, run over the parsed
values, so that problems of different fields are all reported together. Scalars are strict (`"5"` is
not an integer) so that a parsed body dumps back to exactly the JSON that was sent, which is what
we store.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, JsonValue, Strict

from herald.campaigns.schemas.filters import FilterGroup
from herald.email_address import EmailAddress
from herald.json_numbers import Int64, IntegralFloat
from herald.offers.currencies import ISO_4217
from herald.schemas import APIModel
from herald.timefmt import ZULU_DATE_TIME_PATTERN
from herald.timezones import IANA_NAME_DESCRIPTION

Text = Annotated[str, Strict()]
NonEmptyText = Annotated[str, Strict(), Field(min_length=1)]
Flag = Annotated[bool, Strict()]
JsonObject = dict[str, JsonValue]

# The text fields below are checked by `rules`, each with its own code (INVALID_OFFER_NAME,
# INVALID_TYPE, INVALID_TIMEZONE, INVALID_CURRENCY_CODE) and with the body's other problems; their
# constraints are written into the JSON Schema only (`json_schema_extra`), for the OpenAPI document.
OFFER_NAME_PATTERN = "^[A-Za-z0-9_]{5,100}$"
OfferName = Annotated[
    str,
    Strict(),
    Field(
        description="5-100 letters, digits and underscores.",
        json_schema_extra={"minLength": 5, "maxLength": 100, "pattern": OFFER_NAME_PATTERN},
    ),
]
ZuluDateTime = Annotated[
    str,
    Strict(),
    Field(
        description="ISO 8601 in UTC with `Z` (no offset), e.g. `2026-03-01T09:30:00Z`.",
        json_schema_extra={"pattern": ZULU_DATE_TIME_PATTERN},
    ),
]
TimezoneText = Annotated[str, Strict(), Field(description=IANA_NAME_DESCRIPTION)]
CurrencyCode = Annotated[
    str,
    Strict(),
    Field(description="An ISO 4217 currency code.", json_schema_extra={"enum": sorted(ISO_4217)}),
]

VariantName = Annotated[str, Strict(), Field(min_length=1, max_length=64)]
LocaleName = Annotated[str, Strict(), Field(min_length=1, max_length=35)]


class Delivery(StrEnum):
    SCHEDULED = "scheduled"


def _never_null(*names: str) -> Callable[[dict[str, Any]], None]:
    """A model's JSON Schema with the properties `names` optional but never null: O3 refuses null
    (REQUIRED_FIELD_MISSING) for what O2 requires, and the document said null was allowed."""

    def edit(schema: dict[str, Any]) -> None:
        for name in names:
            field = schema["properties"][name]
            branches = field.pop("anyOf", None)
            if branches is None:
                continue  # a subclass requires the field: it has no null to take out
            kept = [branch for branch in branches if branch != {"type": "null"}]
            field.update(kept[0] if len(kept) == 1 else {"anyOf": kept})

    return edit


class Scheduling(APIModel):
    """Date-times stay text here; `rules.scheduling` reads them (ISO 8601 with `Z` only)."""

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        json_schema_extra=_never_null("start_datetime", "expiry_datetime"),
    )

    start_datetime: ZuluDateTime | None = None
    expiry_datetime: ZuluDateTime | None = None
    timezone: TimezoneText | None = None


class SchedulingCreate(Scheduling):
    start_datetime: ZuluDateTime
    expiry_datetime: ZuluDateTime


class SegmentFilters(APIModel):
    included_filters: FilterGroup | None = None
    excluded_filters: FilterGroup | None = None


class SegmentInfo(APIModel):
    """`{"filters": {}}` targets all users."""

    filters: SegmentFilters


class BlockType(StrEnum):
    JSON = "json"
    CONTENT_BLOCK = "content_block"
    TEMPLATE = "template"


class ContentBlock(APIModel):
    """`json`: value is a JSON text; `content_block`: a block reference; `template`: an object filling
    the fields of the template named by `meta.templateId`. Checked per type in `rules.content`."""

    type: BlockType
    value: JsonValue
    meta: JsonObject | None = None


# content slot name -> block, e.g. {"content_1": {...}}
Slots = dict[str, ContentBlock]


class LocaleContent(APIModel):
    variations: dict[VariantName, Slots]


class OfferContent(APIModel):
    """Either flat slots (`{"content_1": Block}`) or `{"locales": {...}}`, never both.

    Flat slots are the model's extra keys; their names are checked in `rules.content`.
    """

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, ContentBlock]

    locales: dict[LocaleName, LocaleContent] | None = None


class VariationType(StrEnum):
    SMV = "SMV"
    DMV = "DMV"


SplitPercentage = Annotated[int, Strict(), Field(ge=1, le=100), IntegralFloat]


class SmvDistribution(APIModel):
    split: dict[VariantName, SplitPercentage]


class ControlGroup(APIModel):
    is_enabled: Flag
    # 1-99 when enabled, 0 allowed when disabled (`rules.variations`).
    percentage: Annotated[int, Strict(), Field(ge=0, le=99), IntegralFloat] | None = None


class VariationMeta(APIModel):
    type: VariationType
    # The variant names every locale carries, e.g. ["A", "B"].
    variantsPerLocale: list[VariantName] | None = None
    smv_distribution: SmvDistribution | None = None
    control_group: ControlGroup | None = None


class CapSchedule(StrEnum):
    DAILY = "DAILY"
    WEEKLY = "WEEKLY"
    MONTHLY = "MONTHLY"


class Cap(APIModel):
    enabled: Flag
    # At least 1 when the cap is enabled (`rules.check_capping`); a disabled cap may keep a 0.
    limit_value: (
        Annotated[
            int,
            Strict(),
            Field(ge=0, description="At least 1 when the cap is enabled."),
            Int64,
            IntegralFloat,
        ]
        | None
    ) = None
    limit_schedule: CapSchedule | None = None


class CappingRules(APIModel):
    overall: Cap | None = None
    user_level: Cap | None = None


REVENUE_ATTRIBUTE_MAX = 100
# Tags an offer carries at most (contract: O2 `tags` ≤10); O1 relies on it (`repository.list_page`).
MAX_TAGS = 10

# The name of the (numeric) event attribute that carries a conversion's value, e.g. "order_value".
# Its length is a rule (`rules.check_goal`), not a parse constraint, so that a bad length is
# reported together with the goal's other problems (currency, missing fields); the bounds are
# still published in the schema.
RevenueAttribute = Annotated[
    str,
    Strict(),
    Field(json_schema_extra={"minLength": 1, "maxLength": REVENUE_ATTRIBUTE_MAX}),
]


class Goal(APIModel):
    goal_name: Annotated[str, Strict(), Field(min_length=1, max_length=100)]
    action: NonEmptyText
    attributes: JsonObject | None = None
    is_revenue_tracking: Flag | None = None
    revenue_amount: RevenueAttribute | None = Field(
        default=None,
        description="Name of the numeric event attribute that holds the conversion's value, e.g. order_value.",
    )
    revenue_currency: CurrencyCode | None = None


class Conversion(APIModel):
    primary: Goal | None = None
    secondary: list[Goal] | None = None


class OfferFields(APIModel):
    """Every offer field, none required: the shape of stored documents and of O3 changes."""

    name: OfferName | None = None
    description: Annotated[str, Strict(), Field(max_length=500)] | None = None
    priority: Annotated[int, Strict(), Field(ge=1, le=100), IntegralFloat] | None = None
    delivery: Delivery | None = None
    created_by: EmailAddress | None = None
    tags: Annotated[list[NonEmptyText], Field(max_length=MAX_TAGS)] | None = None
    scheduling: Scheduling | None = None
    segment_info: SegmentInfo | None = None
    offer_content: OfferContent | None = None
    variation_meta: VariationMeta | None = None
    capping_rules: CappingRules | None = None
    is_global_control_enabled: Flag | None = None
    imp_track_hours: Annotated[int, Strict(), Field(ge=1, le=240), IntegralFloat] | None = None
    offering_attribute_configuration: Annotated[list[JsonObject], Field(max_length=5)] | None = None
    conversion: Conversion | None = None


class OfferCreate(OfferFields):
    """O2 body. Tags are `tag_<id>` or the raw `<id>` of a workspace tag."""

    name: OfferName
    priority: Annotated[int, Strict(), Field(ge=1, le=100), IntegralFloat]
    delivery: Delivery
    created_by: EmailAddress
    scheduling: SchedulingCreate
    segment_info: SegmentInfo
    offer_content: OfferContent
    variation_meta: VariationMeta


# Fields that O2 requires and O3 may therefore not clear with null.
REQUIRED_ON_CREATE: tuple[str, ...] = tuple(
    name for name, info in OfferCreate.model_fields.items() if info.is_required()
)


class OfferUpdate(OfferFields):
    """O3 body: `updated_by` plus the fields to change. `scheduling` sub-fields change one by one;
    every other field sent replaces the stored value whole (`tags` included)."""

    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, json_schema_extra=_never_null(*REQUIRED_ON_CREATE)
    )

    updated_by: EmailAddress


class OfferArchive(APIModel):
    """O5 body (optional)."""

    updated_by: EmailAddress | None = None


# The O2 fields a draft (from `herald offers import`) must have; the rest may come later.
REQUIRED_ON_DRAFT: tuple[str, ...] = ("name", "created_by")

ImportStatus = Literal["draft", "archived", "published"]

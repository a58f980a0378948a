"""`conversion_goal_details`: the events that count as a conversion, and revenue tracking."""

from __future__ import annotations

from enum import StrEnum

from herald.campaigns.schemas.common import Flag, JsonObject, NonEmptyText, PositiveInt, Text
from herald.schemas import APIModel


class GoalAttributeDataType(StrEnum):
    STRING = "STRING"
    DOUBLE = "DOUBLE"
    BOOL = "BOOL"
    NUMBER = "NUMBER"
    GEOPOINT = "GEOPOINT"
    DATETIME = "DATETIME"
    ARRAY_DOUBLE = "ARRAY_DOUBLE"
    ARRAY_STRING = "ARRAY_STRING"
    OBJECT = "OBJECT"
    ARRAY_OBJECT = "ARRAY_OBJECT"


class GoalEventAttribute(APIModel):
    name: NonEmptyText
    condition: Text | None = None  # free text in the spec ("is", "contains", "between", ...)
    data_type: GoalAttributeDataType | None = None
    value: Text | None = None
    value1: Text | None = None  # the upper bound of `between`
    negate: Flag | None = None
    value_type: Text | None = None
    array_filter_type: Text | None = None
    filters: list[JsonObject] | None = None  # sub-filters of OBJECT / ARRAY_OBJECT attributes
    is_case_sensitive: Flag | None = None


class CampaignGoal(APIModel):
    goal_name: NonEmptyText
    goal_event_name: NonEmptyText
    goal_event_attribute: GoalEventAttribute | None = None
    is_primary_goal: Flag | None = None
    revenue_attribute: Text | None = None
    revenue_currency: Text | None = None


class ConversionGoalDetails(APIModel):
    attribution_window_in_hours: PositiveInt | None = None
    goals: list[CampaignGoal] | None = None

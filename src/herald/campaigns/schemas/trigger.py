"""`trigger_condition`: what user behaviour sends a triggered campaign, and how long after."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Discriminator, Tag

from herald.campaigns.schemas.common import Granularity, NonEmptyText, NonNegativeInt
from herald.campaigns.schemas.filters import ActionFilter, ExecutionType, FilterGroup
from herald.schemas import APIModel


class TriggerDelayType(StrEnum):
    DELAY = "DELAY"
    ASAP = "ASAP"
    INTELLIGENT_DELAY = "INTELLIGENT_DELAY"  # Push only


class TriggerRelation(StrEnum):
    BEFORE = "BEFORE"
    AFTER = "AFTER"


class TriggerAttr(APIModel):
    name: NonEmptyText | None = None


def _trigger_attr_form(value: object) -> str:
    return "label" if isinstance(value, str) else "object"


# Contract §5: the spec's object `{name}` or a plain string label (which then is the name).
TriggerAttrValue = Annotated[
    Annotated[TriggerAttr, Tag("object")] | Annotated[str, Tag("label")],
    Discriminator(_trigger_attr_form),
]


class IntelligentDelayOptimization(APIModel):
    min_delay_value: NonNegativeInt
    min_delay_granularity: Literal[Granularity.MINUTES, Granularity.HOURS]
    max_delay_value: NonNegativeInt
    max_delay_granularity: Literal[Granularity.HOURS, Granularity.DAYS]


class TriggerCondition(APIModel):
    included_filters: FilterGroup | None = None
    secondary_included_filters: FilterGroup | None = None
    trigger_delay_type: TriggerDelayType | None = None
    trigger_delay_value: NonNegativeInt | None = None
    trigger_delay_granularity: Granularity | None = None
    trigger_relation: TriggerRelation | None = None
    trigger_attr: TriggerAttrValue | None = None
    intelligent_delay_optimization: IntelligentDelayOptimization | None = None

    def trigger_attr_name(self) -> str | None:
        if isinstance(self.trigger_attr, str):
            return self.trigger_attr or None
        return self.trigger_attr.name if self.trigger_attr is not None else None


def _email_trigger_schema(schema: dict[str, Any]) -> None:
    """An Email campaign's trigger as the document shows it: DELAY or ASAP, no intelligent delay
    (the spec: "Email: DELAY, ASAP"; `intelligent_delay_optimization` is Push only). The model is
    the shared one: the channel's rules refuse the rest, each at its field (`validation.trigger`)."""
    properties = schema["properties"]
    properties.pop("intelligent_delay_optimization", None)
    email_delays = [TriggerDelayType.DELAY.value, TriggerDelayType.ASAP.value]
    properties["trigger_delay_type"] = {"anyOf": [{"type": "string", "enum": email_delays}, {"type": "null"}]}


class EmailTriggerCondition(TriggerCondition):
    model_config = ConfigDict(json_schema_extra=_email_trigger_schema)


# The fields that make up a trigger delay; a DEVICE_TRIGGERED campaign carries none of them.
DELAY_FIELDS: tuple[str, ...] = (
    "trigger_delay_type",
    "trigger_delay_value",
    "trigger_delay_granularity",
    "trigger_relation",
    "trigger_attr",
    "intelligent_delay_optimization",
)


def awaited_actions(trigger: TriggerCondition | None) -> frozenset[str]:
    """The action names whose events may fire the trigger (as `Compiler.triggering_event` reads
    them: action filters that ask for the action to have been done). The engine watches events of
    these; a trigger that names none can never fire, and is refused at publish."""
    group = trigger.included_filters if trigger is not None else None
    if group is None:
        return frozenset()
    names: set[str] = set()
    for item in group.filters:
        if not isinstance(item, ActionFilter) or item.executed is False:
            continue
        execution = item.execution
        if execution is not None and execution.type is not ExecutionType.ATLEAST and execution.count == 0:
            continue
        names.add(item.action_name)
    return frozenset(names)


def counted_actions(trigger: TriggerCondition | None) -> frozenset[str]:
    """The action names the trigger counts: those of its action filters (either filter group) that
    ask how many times the action was done, not just whether it was (`atleast` 0 or 1). As of an
    event, such a filter's verdict depends on how many of the user's events of the action came
    before it: an event stored late, earlier in time than events already judged, changes it for
    them (`engine.triggers`, "events in time order")."""
    if trigger is None:
        return frozenset()
    names: set[str] = set()
    for group in (trigger.included_filters, trigger.secondary_included_filters):
        for item in group.filters if group is not None else []:
            if not isinstance(item, ActionFilter) or item.execution is None:
                continue
            execution = item.execution
            if execution.type is ExecutionType.ATLEAST and execution.count <= 1:
                continue
            names.add(item.action_name)
    return frozenset(names)

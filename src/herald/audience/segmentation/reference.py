"""The segmentation semantics in plain Python, over users and events held in memory.

This is the specification the SQL compiler is tested against (tests/audience/
test_segmentation_equivalence.py): it shares only the reading of filter values (`conditions`,
`periods`) with the compiler, and evaluates everything else directly. It is not used to serve
requests (it would need every user in memory).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from herald.audience.models import STANDARD_ATTRIBUTES
from herald.audience.segmentation.audience import (
    ADDRESS_COLUMN,
    OPT_OUT_COLUMN,
    Segmentation,
    read_segmentation,
)
from herald.audience.segmentation.catalog import STATIC, SegmentDefinition
from herald.audience.segmentation.conditions import (
    BoolEquals,
    Criterion,
    NumberIn,
    NumberRange,
    Present,
    Relation,
    SameUserAttribute,
    TextMatch,
    TextMode,
    read_criterion,
)
from herald.audience.segmentation.periods import Period, resolve_period
from herald.campaigns.schemas.filters import (
    ActionFilter,
    ExecutionType,
    Filter,
    FilterDataType,
    FilterGroup,
    FilterJoin,
    UserAttributeFilter,
)
from herald.lowercase import lower

_DATETIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
_FLAGS = frozenset({"email_opt_out", "push_opt_out", "sms_opt_out"})
_STRINGS = frozenset(STANDARD_ATTRIBUTES) - _FLAGS | {"customer_id"}


@dataclass(frozen=True)
class RefUser:
    customer_id: str
    columns: Mapping[str, Any] = field(default_factory=dict)  # standard attributes
    attributes: Mapping[str, Any] = field(default_factory=dict)  # custom attributes (JSON)


@dataclass(frozen=True)
class RefEvent:
    customer_id: str
    action: str
    attributes: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RefSegment:
    definition: SegmentDefinition
    members: frozenset[str] = frozenset()


def _is_kind(value: Any, kind: FilterDataType) -> bool:
    if kind is FilterDataType.BOOL:
        return isinstance(value, bool)
    if kind is FilterDataType.DOUBLE:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is FilterDataType.STRING:
        return isinstance(value, str)
    return isinstance(value, str) and _DATETIME.fullmatch(value) is not None


def _user_value(user: RefUser, name: str) -> tuple[Any, bool]:
    """The user's value for `name`, and whether it is a standard column (never an array)."""
    if name == "customer_id":
        return user.customer_id, True
    if name in _FLAGS:
        return bool(user.columns.get(name, False)), True
    if name in _STRINGS:
        return user.columns.get(name), True
    return user.attributes.get(name), False


def _candidates(value: Any, may_be_array: bool, kind: FilterDataType) -> list[Any]:
    """The values a filter of `kind` sees: the value itself, or the elements of an array."""
    if may_be_array and isinstance(value, list):
        return [item for item in value if _is_kind(item, kind)]
    return [value] if _is_kind(value, kind) else []


def _instant_key(moment: datetime) -> tuple[int, ...]:
    return (
        moment.year,
        moment.month,
        moment.day,
        moment.hour,
        moment.minute,
        moment.second,
        moment.microsecond,
    )


def _text_key(text: str) -> tuple[int, ...]:
    # "YYYY-MM-DDTHH:MM:SSZ" -> (Y, M, D, h, m, s, 0): compared field by field with instants
    return (
        int(text[0:4]),
        int(text[5:7]),
        int(text[8:10]),
        int(text[11:13]),
        int(text[14:16]),
        int(text[17:19]),
        0,
    )


def _in_period(text: str, period: Period) -> bool:
    key = _text_key(text)
    if period.start is not None:
        start = _instant_key(period.start)
        if key < start or (key == start and not period.start_inclusive):
            return False
    if period.end is not None:
        end = _instant_key(period.end)
        if key > end or (key == end and not period.end_inclusive):
            return False
    return True


def _text_test(mode: str, parts: Sequence[str], case_sensitive: bool, value: str) -> bool:
    fold = (lambda text: text) if case_sensitive else lower
    text = fold(value)
    folded = [fold(part) for part in parts]
    if mode == TextMode.EQUALS.value:
        return text in folded
    if mode == TextMode.CONTAINS.value:
        return any(part in text for part in folded)
    if mode == TextMode.STARTS.value:
        return any(text.startswith(part) for part in folded)
    return any(text.endswith(part) for part in folded)


class Reference:
    """Evaluates FilterGroups and audiences over in-memory users, events and segments."""

    def __init__(
        self,
        users: Iterable[RefUser],
        events: Iterable[RefEvent],
        segments: Mapping[str, RefSegment] | None = None,
        *,
        now: datetime,
    ) -> None:
        self.users = list(users)
        self.events_by_user: dict[str, list[RefEvent]] = {}
        for event in events:
            self.events_by_user.setdefault(event.customer_id, []).append(event)
        self.segments = dict(segments or {})
        self.now = now

    # ---- groups -------------------------------------------------------------------------------------

    def matching(self, group: FilterGroup) -> set[str]:
        return {user.customer_id for user in self.users if self.matches(group, user)}

    def matches(self, group: FilterGroup, user: RefUser) -> bool:
        results = (self._filter(item, user) for item in group.filters)
        return all(results) if group.filter_operator is FilterJoin.AND else any(results)

    def _filter(self, item: Filter, user: RefUser) -> bool:
        if isinstance(item, UserAttributeFilter):
            criterion = self._criterion(item)
            value, standard = _user_value(user, criterion.name)
            return self._criterion_holds(criterion, value, not standard, user)
        if isinstance(item, ActionFilter):
            return self._action(item, user)
        segment = self.segments[item.id]
        if segment.definition.kind == STATIC:
            return user.customer_id in segment.members
        filters = segment.definition.filters
        return filters is not None and self.matches(filters, user)

    @staticmethod
    def _criterion(item: UserAttributeFilter) -> Criterion:
        criterion, problems = read_criterion(item, ())
        if criterion is None:
            raise ValueError(f"invalid filter: {problems}")
        return criterion

    # ---- user attributes ----------------------------------------------------------------------------

    def _criterion_holds(self, criterion: Criterion, value: Any, may_be_array: bool, user: RefUser) -> bool:
        values = _candidates(value, may_be_array, criterion.data_type)
        matched = any(self._test(criterion, candidate, user) for candidate in values)
        return not matched if criterion.negate else matched

    def _test(self, criterion: Criterion, value: Any, user: RefUser) -> bool:
        condition = criterion.condition
        if isinstance(condition, Present):
            return True
        if isinstance(condition, BoolEquals):
            return bool(value is condition.value)
        if isinstance(condition, NumberIn):
            return any(value == number for number in condition.values)
        if isinstance(condition, NumberRange):
            return self._in_range(value, condition)
        if isinstance(condition, TextMatch):
            return _text_test(condition.mode.value, condition.values, condition.case_sensitive, value)
        if isinstance(condition, SameUserAttribute):
            return self._relation(condition, criterion.data_type, value, user)
        return _in_period(value, resolve_period(condition, self.now))

    @staticmethod
    def _in_range(value: float, condition: NumberRange) -> bool:
        if condition.low is not None and (
            value < condition.low or (value == condition.low and not condition.low_inclusive)
        ):
            return False
        return condition.high is None or not (
            value > condition.high or (value == condition.high and not condition.high_inclusive)
        )

    @staticmethod
    def _relation(condition: SameUserAttribute, kind: FilterDataType, value: Any, user: RefUser) -> bool:
        other, standard = _user_value(user, condition.attribute)
        if not _is_kind(other, kind) or (not standard and isinstance(other, list)):
            return False
        relation = condition.relation
        if kind is FilterDataType.STRING:
            return _text_test(relation.value, [other], condition.case_sensitive, value)
        if relation is Relation.SAME_DAY:
            return bool(value[:10] == other[:10])
        if relation in (Relation.LESS, Relation.BEFORE):
            return bool(value < other)
        if relation in (Relation.GREATER, Relation.AFTER):
            return bool(value > other)
        return bool(value == other)

    # ---- actions ------------------------------------------------------------------------------------

    def _event_matches(self, group: FilterGroup, event: RefEvent, user: RefUser) -> bool:
        results = []
        for item in group.filters:
            if not isinstance(item, UserAttributeFilter):
                raise ValueError("only user_attributes filters apply to event attributes")
            criterion = self._criterion(item)
            results.append(self._criterion_holds(criterion, event.attributes.get(criterion.name), True, user))
        return all(results) if group.filter_operator is FilterJoin.AND else any(results)

    def _action(self, item: ActionFilter, user: RefUser) -> bool:
        count = sum(
            1
            for event in self.events_by_user.get(user.customer_id, [])
            if event.action == item.action_name
            and (item.attributes is None or self._event_matches(item.attributes, event, user))
        )
        if item.executed is False:
            return count == 0
        if item.execution is None:
            return count >= 1
        wanted = item.execution.count
        if item.execution.type is ExecutionType.ATLEAST:
            return count >= wanted
        if item.execution.type is ExecutionType.ATMOST:
            return count <= wanted
        return count == wanted

    # ---- audience -----------------------------------------------------------------------------------

    def audience(
        self, segmentation_details: Segmentation, channel: str, *, reachable_only: bool = False
    ) -> set[str]:
        details, problems = read_segmentation(segmentation_details)
        if details is None:
            raise ValueError(f"invalid segmentation: {problems}")
        chosen: set[str] = set()
        for user in self.users:
            included = details.included_filters
            if details.is_all_user_campaign:
                inside = True
            else:
                inside = included is not None and bool(included.filters) and self.matches(included, user)
            excluded = details.excluded_filters
            if excluded is not None and excluded.filters and self.matches(excluded, user):
                inside = False
            opt_out = OPT_OUT_COLUMN.get(channel)
            if opt_out and not details.send_campaign_to_opt_out_users and user.columns.get(opt_out, False):
                inside = False
            address = ADDRESS_COLUMN.get(channel)
            if reachable_only and address and not user.columns.get(address):
                inside = False
            if inside:
                chosen.add(user.customer_id)
        return chosen

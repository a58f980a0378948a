"""One user-attribute criterion as an SQL predicate over a row's standard columns or JSON attributes.

An attribute named like a standard column (`email`, `push_opt_out`, `customer_id`, ...) is that
column; any other name is a key of the row's JSON `attributes`. A value is only seen through the
filter's data type: a string column never matches a `double` filter, a JSON number never matches a
`string` filter, and a `datetime` is a string of the stored shape `YYYY-MM-DDTHH:MM:SSZ` (so text
order is time order and bounds are compared as text). A JSON array matches when any element does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Boolean, String, and_, case, false, func, literal, not_, or_, true
from sqlalchemy.sql.elements import ColumnElement

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
)
from herald.audience.segmentation.dialect import SqlDialect, TextRange, ValueSpec, ValueTest
from herald.audience.segmentation.periods import Period, resolve_period
from herald.campaigns.schemas.filters import FilterDataType

_SECOND = timedelta(seconds=1)


def _lower(text: ColumnElement[Any]) -> ColumnElement[Any]:
    """Unicode lower-casing on every engine (`herald.sqlite_inline` writes it so on SQLite)."""
    return func.lower(text, type_=String)


@dataclass(frozen=True, slots=True)
class StandardColumn:
    column: ColumnElement[Any]
    kind: FilterDataType  # STRING or BOOL


@dataclass(frozen=True, slots=True)
class AttributeSource:
    """Where attribute names resolve: standard columns first, then keys of the JSON document."""

    document: ColumnElement[Any]
    columns: Mapping[str, StandardColumn]


def stored_text(moment: datetime) -> str:
    """The stored date-time text of an instant (whole seconds, UTC)."""
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}"
        f"T{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}Z"
    )


def _floor(moment: datetime) -> datetime:
    return moment.replace(microsecond=0)


def _ceil(moment: datetime) -> datetime | None:
    floor = _floor(moment)
    return floor if floor == moment else _after(floor)


def _after(moment: datetime) -> datetime | None:
    try:
        return moment + _SECOND
    except OverflowError:
        return None


def text_bounds(period: Period) -> tuple[str | None, str | None] | None:
    """`lo <= t < hi` on stored text equivalent to `period` for whole-second instants t; None: empty."""
    low: str | None = None
    high: str | None = None
    if period.start is not None:
        first = _ceil(period.start) if period.start_inclusive else _after(_floor(period.start))
        if first is None:
            return None  # starts after the last representable second
        low = stored_text(first)
    if period.end is not None:
        limit = _after(_floor(period.end)) if period.end_inclusive else _ceil(period.end)
        high = stored_text(limit) if limit is not None else None
    if low is not None and high is not None and low >= high:
        return None
    return low, high


class ClockNeeded(Exception):
    """A predicate depends on the instant (a relative time window) and none was given."""


class Predicates:
    """Builds criterion predicates for one dialect at one instant. Without an instant (`now` None),
    a predicate that depends on one raises ClockNeeded: what is built then holds at any instant."""

    def __init__(self, dialect: SqlDialect, now: datetime | None) -> None:
        self.dialect = dialect
        self.now = now

    def criterion(
        self, criterion: Criterion, subject: AttributeSource, user: Callable[[], AttributeSource]
    ) -> ColumnElement[bool]:
        test, spec = self._test(criterion, user)
        positive = (
            false() if test is None else self._match(subject, criterion.name, criterion.data_type, test, spec)
        )
        if criterion.negate:
            return not_(func.coalesce(positive, false(), type_=Boolean))
        return positive

    def _match(
        self,
        source: AttributeSource,
        name: str,
        kind: FilterDataType,
        test: ValueTest,
        spec: ValueSpec | None,
    ) -> ColumnElement[bool]:
        standard = source.columns.get(name)
        if standard is None:
            return self.dialect.json_match(source.document, name, kind, test, spec)
        value = self._column_value(standard, kind)
        return false() if value is None else test(value)

    def _column_value(self, standard: StandardColumn, kind: FilterDataType) -> ColumnElement[Any] | None:
        if standard.kind is kind:
            return standard.column
        if kind is FilterDataType.DATETIME and standard.kind is FilterDataType.STRING:
            return case((self.dialect.is_datetime_text(standard.column), standard.column))
        return None

    def _scalar(self, source: AttributeSource, name: str, kind: FilterDataType) -> ColumnElement[Any] | None:
        """The scalar value of `name` read as `kind`; None when it can never be of that kind."""
        standard = source.columns.get(name)
        if standard is None:
            return self.dialect.json_scalar(source.document, name, kind)
        return self._column_value(standard, kind)

    def _fold(self, case_sensitive: bool) -> Callable[[ColumnElement[Any]], ColumnElement[Any]]:
        return (lambda value: value) if case_sensitive else _lower

    def _text_test(
        self,
        mode: TextMode | Relation,
        parts: Sequence[ColumnElement[Any]],
        fold: Callable[[ColumnElement[Any]], ColumnElement[Any]],
    ) -> ValueTest:
        dialect = self.dialect

        def test(value: ColumnElement[Any]) -> ColumnElement[bool]:
            text = fold(value)
            folded = [fold(part) for part in parts]
            if mode in (TextMode.EQUALS, Relation.EQUALS):
                return text == folded[0] if len(folded) == 1 else text.in_(folded)
            match = {
                TextMode.CONTAINS: dialect.contains,
                TextMode.STARTS: dialect.starts_with,
                TextMode.ENDS: dialect.ends_with,
            }[TextMode(mode.value)]
            return or_(*(match(text, part) for part in folded))

        return test

    def _test(
        self, criterion: Criterion, user: Callable[[], AttributeSource]
    ) -> tuple[ValueTest | None, ValueSpec | None]:
        """The test of one typed value (None when nothing can match), and the same test as data."""
        condition = criterion.condition
        if isinstance(condition, Present):
            return (lambda value: value.is_not(None)), condition
        if isinstance(condition, BoolEquals):
            return (lambda value: value == literal(condition.value, Boolean)), condition
        if isinstance(condition, NumberIn):
            numbers = [self.dialect.number(number) for number in condition.values]
            return (lambda value: value == numbers[0] if len(numbers) == 1 else value.in_(numbers)), condition
        if isinstance(condition, NumberRange):
            return self._range_test(condition), condition
        if isinstance(condition, TextMatch):
            parts = [literal(text, String) for text in condition.values]
            return self._text_test(condition.mode, parts, self._fold(condition.case_sensitive)), condition
        if isinstance(condition, SameUserAttribute):
            other = self._scalar(user(), condition.attribute, criterion.data_type)
            if other is None:
                return None, None
            return self._relation_test(condition, criterion.data_type, other), None
        if self.now is None:
            raise ClockNeeded
        bounds = text_bounds(resolve_period(condition, self.now))
        if bounds is None:
            return None, None
        low, high = bounds

        def within(value: ColumnElement[Any]) -> ColumnElement[bool]:
            limits: list[ColumnElement[bool]] = []
            if low is not None:
                limits.append(value >= literal(low, String))
            if high is not None:
                limits.append(value < literal(high, String))
            return and_(*limits) if limits else value.is_not(None)

        return within, TextRange(low, high)

    def _range_test(self, condition: NumberRange) -> ValueTest:
        number = self.dialect.number

        def test(value: ColumnElement[Any]) -> ColumnElement[bool]:
            limits: list[ColumnElement[bool]] = []
            if condition.low is not None:
                low = number(condition.low)
                limits.append(value >= low if condition.low_inclusive else value > low)
            if condition.high is not None:
                high = number(condition.high)
                limits.append(value <= high if condition.high_inclusive else value < high)
            return and_(*limits) if limits else true()

        return test

    def _relation_test(
        self, condition: SameUserAttribute, kind: FilterDataType, other: ColumnElement[Any]
    ) -> ValueTest:
        relation = condition.relation
        if kind is FilterDataType.STRING:
            return self._text_test(relation, [other], self._fold(condition.case_sensitive))
        if relation is Relation.SAME_DAY:
            return lambda value: func.substr(value, 1, 10) == func.substr(other, 1, 10)
        if relation in (Relation.LESS, Relation.BEFORE):
            return lambda value: value < other
        if relation in (Relation.GREATER, Relation.AFTER):
            return lambda value: value > other
        return lambda value: value == other

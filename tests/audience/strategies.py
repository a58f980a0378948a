"""Hypothesis strategies: small random audiences (users, events, segments) and FilterGroups over them.

Values are drawn from small pools close to each other (a few letters in two cases and with accents,
numbers around the filter values, instants a second either side of the filters' bounds) so that
filters often sit exactly on the edge of what they select, and every type meets every data type.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import strategies as st

from herald.audience.segmentation.catalog import SegmentDefinition
from herald.audience.segmentation.periods import UNITS
from herald.audience.segmentation.predicates import stored_text
from herald.audience.segmentation.reference import RefEvent, RefSegment, RefUser
from herald.campaigns.schemas.filters import OPERATORS_BY_DATA_TYPE, FilterDataType, FilterGroup

NOW = datetime(2026, 1, 15, 12, 0, 0, tzinfo=UTC)
_INDIA = timezone(timedelta(hours=5, minutes=30))
USER_KEYS = ("s", "n", "b", "d", "m")
EVENT_KEYS = ("s", "n", "d")
STANDARD_NAMES = ("email", "first_name", "push_opt_out", "customer_id")
ACTIONS = ("view", "buy")

_INSTANTS = sorted(
    {
        NOW + timedelta(days=days, seconds=seconds)
        for days in (-40, -31, -7, -2, -1, 0, 1, 2, 7, 31, 60)
        for seconds in (-3600, -1, 0, 1, 7200)
    }
    | {datetime(2026, 1, day, tzinfo=UTC) + timedelta(seconds=s) for day in (14, 15, 16) for s in (-1, 0)}
)
_DATES = ["2025-12-15", "2026-01-08", "2026-01-14", "2026-01-15", "2026-01-16", "2026-02-14"]

# Letters in both cases (with an accent; and "İ", whose lower case is "i"), and characters that mean
# something in LIKE, regular expressions, JSON strings or SQL/JSON paths.
_LETTERS = st.sampled_from("aAaAéÉiIİ")
_CHARACTERS = st.one_of(_LETTERS, _LETTERS, _LETTERS, st.sampled_from(".*$^\\\"'%_( "))
texts = st.text(alphabet=_CHARACTERS, max_size=2)
needles = st.text(alphabet=_CHARACTERS, min_size=1, max_size=2)
numbers = st.sampled_from([-1, 0, 0.5, 1, 2, 250])
stored_times = st.sampled_from(_INSTANTS).map(stored_text)
scalars = st.one_of(
    texts,
    numbers,
    st.booleans(),
    stored_times,
    st.sampled_from(["2026-01-15", "soon", "2026-01-15T12:00:00+00:00"]),
)
json_values = st.one_of(
    scalars,
    st.lists(scalars, max_size=3),
    st.just(None),
    st.just({"k": "a"}),
    st.lists(st.lists(texts, max_size=1), min_size=1, max_size=1),
)
# Mostly values of the key's own type (so that filters of that type have something to select),
# sometimes an array of them, sometimes anything at all.
_TYPED = {"s": texts, "n": numbers, "b": st.booleans(), "d": stored_times, "m": scalars}


def _value_of(key: str) -> st.SearchStrategy[Any]:
    typed = _TYPED[key]
    return st.sampled_from([typed, typed, typed, st.lists(typed, max_size=3), json_values]).flatmap(
        lambda s: s
    )


@st.composite
def _attributes(draw: st.DrawFn, keys: tuple[str, ...]) -> dict[str, Any]:
    return {key: draw(_value_of(key)) for key in keys if draw(st.integers(0, 4)) > 0}


@st.composite
def users(draw: st.DrawFn) -> list[RefUser]:
    count = draw(st.integers(3, 8))
    found = []
    for index in range(count):
        columns = {
            "email": draw(st.sampled_from([None, "a@x.io", "A@x.io", "é@x.io", ""])),
            "first_name": draw(st.one_of(st.none(), texts)),
            "push_id": draw(st.sampled_from([None, "p1", ""])),
            "mobile": draw(st.sampled_from([None, "+91"])),
            "push_opt_out": draw(st.booleans()),
            "email_opt_out": draw(st.booleans()),
            "sms_opt_out": draw(st.booleans()),
        }
        found.append(RefUser(f"u{index}", columns, draw(_attributes(USER_KEYS))))
    return found


@st.composite
def events(draw: st.DrawFn, customer_ids: list[str]) -> list[RefEvent]:
    owners = st.sampled_from([*customer_ids, "ghost"])
    return [
        RefEvent(draw(owners), draw(st.sampled_from(ACTIONS)), draw(_attributes(EVENT_KEYS)))
        for _ in range(draw(st.integers(0, 16)))
    ]


def _moment_text(moment: datetime, style: int) -> str:
    if style == 0:
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    if style == 1:  # half a second later
        return (moment + timedelta(microseconds=500_000)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if style == 2:  # no zone: read as UTC
        return moment.strftime("%Y-%m-%dT%H:%M:%S")
    return moment.astimezone(_INDIA).isoformat()


@st.composite
def moments(draw: st.DrawFn) -> tuple[str, datetime]:
    """A date or date-time of a filter, and the instant it starts at (to order pairs)."""
    if draw(st.booleans()):
        day = draw(st.sampled_from(_DATES))
        return day, datetime.fromisoformat(day).replace(tzinfo=UTC)
    moment = draw(st.sampled_from(_INSTANTS))
    style = draw(st.integers(0, 3))
    start = moment + timedelta(microseconds=500_000) if style == 1 else moment
    return _moment_text(moment, style), start


@st.composite
def values(draw: st.DrawFn, data_type: FilterDataType, operator: str) -> Any:
    def some(items: st.SearchStrategy[Any]) -> Any:
        return draw(st.one_of(items, st.lists(items, min_size=1, max_size=3)))

    if operator in ("exists", "today"):
        return None
    if data_type is FilterDataType.BOOL:
        return draw(st.booleans())
    if data_type is FilterDataType.DOUBLE:
        if operator == "in":
            return some(numbers)
        if operator == "between":
            return sorted([draw(numbers), draw(numbers)])
        return draw(numbers)
    if data_type is FilterDataType.STRING:
        if operator == "is":
            return draw(texts)
        if operator == "in":
            return some(texts)
        if operator == "contains":
            return draw(needles)
        return some(needles)
    if operator in ("inTheLast", "inTheNext"):
        amount = draw(st.sampled_from([0, 1, 2, 7, 31]))
        if draw(st.booleans()):
            return amount
        return {"value": amount, draw(st.sampled_from(["unit", "value_type"])): draw(st.sampled_from(UNITS))}
    if operator == "between":
        pair = sorted([draw(moments()), draw(moments())], key=lambda item: item[1])
        return [text for text, _ in pair]
    return draw(moments())[0]


_DYNAMIC = {
    FilterDataType.STRING: {"is", "in", "contains", "containsInTheFollowing", "startWithInTheFollowing"},
    FilterDataType.DOUBLE: {"in", "lessThan", "greaterThan"},
    FilterDataType.BOOL: {"is"},
    FilterDataType.DATETIME: {"on", "before", "after"},
}


# Names whose values are mostly of each data type (others are tried too, less often).
_NAMES_OF = {
    FilterDataType.STRING: ("s", "m", "email", "first_name", "customer_id"),
    FilterDataType.DOUBLE: ("n", "m"),
    FilterDataType.BOOL: ("b", "m", "push_opt_out"),
    FilterDataType.DATETIME: ("d", "m"),
}


@st.composite
def attribute_filters(draw: st.DrawFn, names: tuple[str, ...]) -> dict[str, Any]:
    data_type = draw(st.sampled_from(list(FilterDataType)))
    operator = draw(st.sampled_from(sorted(op.value for op in OPERATORS_BY_DATA_TYPE[data_type])))
    fitting = [name for name in _NAMES_OF[data_type] if name in names]
    name = draw(st.sampled_from(fitting if fitting and draw(st.integers(0, 5)) > 0 else names))
    item: dict[str, Any] = {
        "filter_type": "user_attributes",
        "data_type": data_type.value,
        "name": name,
        "operator": operator,
    }
    if operator in _DYNAMIC[data_type] and draw(st.integers(0, 4)) == 0:
        other = draw(st.sampled_from(USER_KEYS + STANDARD_NAMES))
        item["value"] = f"{{{{UserAttribute['{other}']}}}}"
        item["is_dynamic_value"] = True
    else:
        value = draw(values(data_type, operator))
        if value is not None:
            item["value"] = value
    for flag in ("negate", "case_sensitive"):
        choice = draw(st.sampled_from([None, False, True]))
        if choice is not None:
            item[flag] = choice
    return item


@st.composite
def action_filters(draw: st.DrawFn) -> dict[str, Any]:
    item: dict[str, Any] = {
        "filter_type": "actions",
        "action_name": draw(st.sampled_from([*ACTIONS, "never"])),
    }
    executed = draw(st.sampled_from([None, True, False]))
    if executed is not None:
        item["executed"] = executed
    if draw(st.booleans()):
        item["execution"] = {
            "type": draw(st.sampled_from(["atleast", "atmost", "exactly"])),
            "count": draw(st.integers(0, 3)),
        }
    if draw(st.booleans()):
        item["attributes"] = {
            "filter_operator": draw(st.sampled_from(["and", "or"])),
            "filters": draw(st.lists(attribute_filters(EVENT_KEYS), min_size=1, max_size=2)),
        }
    return item


def groups(
    segment_ids: list[str], *, with_actions: bool = True, min_filters: int = 1
) -> st.SearchStrategy[dict[str, Any]]:
    kinds = [attribute_filters(USER_KEYS + STANDARD_NAMES)]
    if with_actions:
        kinds.append(action_filters())
    if segment_ids:
        kinds.append(
            st.sampled_from(segment_ids).map(
                lambda sid: {"filter_type": "custom_segments", "name": sid, "id": sid}
            )
        )
    return st.fixed_dictionaries(
        {
            "filter_operator": st.sampled_from(["and", "or"]),
            "filters": st.lists(st.one_of(*kinds), min_size=min_filters, max_size=3),
        }
    )


@st.composite
def segments(draw: st.DrawFn, customer_ids: list[str]) -> list[RefSegment]:
    members = draw(st.frozensets(st.sampled_from([*customer_ids, "ghost"]), max_size=4))
    static = RefSegment(SegmentDefinition("static", "Static", "static"), members)
    filters = FilterGroup.model_validate(draw(groups(["static"], min_filters=0)))
    dynamic = RefSegment(SegmentDefinition("dynamic", "Dynamic", "filter", filters))
    return [static, dynamic]


@st.composite
def nows(draw: st.DrawFn) -> datetime:
    return NOW + timedelta(microseconds=draw(st.sampled_from([0, 500_000, 1_000_000])))

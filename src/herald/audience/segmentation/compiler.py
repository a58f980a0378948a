"""FilterGroup -> one SQL SELECT of customer ids, run in the database.

The query reads `audience_users` once. Each distinct action filter (action name + attribute filters)
becomes a LEFT JOIN to the per-user count of matching events, so counts of zero are seen (they are
the users without a joined row) and `atmost`/`exactly`/`executed: false` need no anti-join. When
the compiler evaluates a few given users (a trigger's batch), "did it / did it not" is instead an
EXISTS per user, which stops at the first event instead of counting the user's history. Custom
segments are inlined: a filter segment's own FilterGroup is compiled into the same WHERE clause, a
static one is an EXISTS on its member list. `and`/`or` nest as the groups do; a group without
filters is true for `and` and false for `or`.

Problems (operator not allowed for the data type, bad value shape, unknown or cyclic segment, a
filter type that does not apply to event attributes) are collected with dot paths; a group with
problems compiles to no query.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache, lru_cache

from sqlalchemy import Select, Table, and_, case, exists, false, func, literal, not_, or_, select, true
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.selectable import FromClause, Subquery

from herald.audience.models import STANDARD_ATTRIBUTES, Event, SegmentMember, User
from herald.audience.segmentation.catalog import MAX_SEGMENT_DEPTH, STATIC, SegmentCatalog
from herald.audience.segmentation.conditions import ON_EVENTS_ONLY_USER_ATTRIBUTES, read_criterion
from herald.audience.segmentation.dialect import SqlDialect, dialect_for
from herald.audience.segmentation.predicates import AttributeSource, Predicates, StandardColumn
from herald.campaigns.schemas.filters import (
    ActionFilter,
    CustomSegmentFilter,
    ExecutionType,
    Filter,
    FilterDataType,
    FilterGroup,
    FilterJoin,
    UserAttributeFilter,
)
from herald.problems import Problem, join_path
from herald.sql_lists import ListParameter

Path = tuple[str | int, ...]
_FLAGS = frozenset({"email_opt_out", "push_opt_out", "sms_opt_out"})


@cache
def _alias(table: Table, name: str) -> FromClause:
    """The alias `name` of `table`, one object per process: an alias's column collection (a proxy
    per column, made on first use) cost a tenth of the trigger worker's time when every compiler
    made its own. Made whole here (`.c`), so threads sharing it find nothing left to make."""
    alias = table.alias(name)
    alias.c  # noqa: B018 - the collection made now, not on a first use that may race
    return alias


@lru_cache(maxsize=64)  # its arguments are the aliases of `_alias`
def user_source(users: FromClause) -> AttributeSource:
    """A user row's attributes: the standard columns (and `customer_id`), then its JSON."""
    columns = {
        name: StandardColumn(users.c[name], FilterDataType.BOOL if name in _FLAGS else FilterDataType.STRING)
        for name in (*STANDARD_ATTRIBUTES, "customer_id")
    }
    return AttributeSource(users.c.attributes, columns)


@dataclass(frozen=True)
class _Scope:
    """What a filter's names refer to: the subject row, and the user a dynamic value reads."""

    subject: AttributeSource
    user: Callable[[], AttributeSource]
    on_events: bool


class Compiler:
    """Compiles FilterGroups over one `audience_users` alias; the joins it needs accumulate."""

    def __init__(
        self,
        dialect: SqlDialect,
        workspace_id: str,
        now: datetime | None,
        segments: SegmentCatalog | None = None,
        customers: Sequence[str] | ListParameter | None = None,
        as_of: FromClause | None = None,
        uncounted: Callable[[FromClause], ColumnElement[bool]] | None = None,
    ) -> None:
        self.dialect = dialect
        # When set, only these users are evaluated: their events alone are counted (a trigger asks
        # about the few users who just acted, not the whole workspace). A list parameter instead
        # of the list: a statement built once and run for each batch's users.
        self.customers: list[str] | ListParameter | None = (
            list(customers)
            if customers is not None and not isinstance(customers, ListParameter)
            else customers
        )
        self.workspace_id = workspace_id
        # A trigger's events (rows with `occurred_at` and `id`, joined to the user row): when set,
        # action filters count only the user's events up to the one evaluated, in (time, id)
        # order. A trigger asks "had the user done it n times when this event happened", and the
        # worker may read the event after later ones were stored (it lagged, another worker had
        # it, they came in one request): counted to the present, "at least twice" fired on the
        # first of two purchases read late, "exactly once" on neither.
        self.as_of = as_of
        # With `as_of`: which events (a condition on an events table) action filters do not count,
        # though stored. A later event is judged again when earlier ones arrive late; without them
        # counted, its verdict is the one it had before they came (`engine.triggers`, "events in
        # time order").
        self.uncounted = uncounted
        # Without `now`, building a predicate that needs the instant raises `ClockNeeded`.
        self.predicates = Predicates(dialect, now.astimezone(UTC) if now is not None else None)
        self.segments = segments or {}
        self.users = _alias(User.__table__, "u")
        self.problems: list[Problem] = []
        self._counts: dict[str, Subquery] = {}
        self._exists: dict[str, ColumnElement[bool]] = {}
        self._as_of_counts: dict[str, ColumnElement[int]] = {}
        self._segment_chain: list[str] = []
        source = user_source(self.users)
        self._user_scope = _Scope(source, lambda: source, on_events=False)

    # ---- public ---------------------------------------------------------------------------------

    def where(self, group: FilterGroup, path: Path) -> ColumnElement[bool]:
        """The predicate of `group` over the user row (problems are added to `self.problems`)."""
        return self._group(group, path, self._user_scope)

    def from_clause(self) -> FromClause:
        joined: FromClause = self.users
        for counts in self._counts.values():
            joined = joined.outerjoin(counts, counts.c.customer_id == self.users.c.customer_id)
        return joined

    def in_workspace(self) -> ColumnElement[bool]:
        if self.customers is not None:
            return and_(self.users.c.workspace_id == self.workspace_id, self._among(self.users.c.customer_id))
        return self.users.c.workspace_id == self.workspace_id

    def _among(self, column: ColumnElement[str]) -> ColumnElement[bool]:
        """`column` is one of the given customers (`self.customers` is set)."""
        assert self.customers is not None
        if isinstance(self.customers, ListParameter):
            return self.customers.among(column)
        return column.in_(self.customers)

    def triggering_event(self, group: FilterGroup, events: FromClause, path: Path) -> ColumnElement[bool]:
        """Whether one row of `events` (joined to this compiler's user row) is an action the group
        waits for: the action of one of its action filters that asks for the action to have been
        done (not `executed: false`, not `exactly`/`atmost` 0), with the attributes that filter asks for."""
        scope = _Scope(
            AttributeSource(events.c.attributes, {}), lambda: user_source(self.users), on_events=True
        )
        parts: list[ColumnElement[bool]] = []
        for index, item in enumerate(group.filters):
            if not isinstance(item, ActionFilter) or item.executed is False:
                continue
            execution = item.execution
            if execution is not None and execution.type is not ExecutionType.ATLEAST and execution.count == 0:
                continue
            test = events.c.action == item.action_name
            if item.attributes is not None:
                test = and_(
                    test, self._group(item.attributes, (*path, "filters", index, "attributes"), scope)
                )
            parts.append(test)
        return or_(*parts) if parts else false()

    # ---- groups and filters ---------------------------------------------------------------------

    def _group(self, group: FilterGroup, path: Path, scope: _Scope) -> ColumnElement[bool]:
        parts = [
            self._filter(item, (*path, "filters", index), scope) for index, item in enumerate(group.filters)
        ]
        if group.filter_operator is FilterJoin.AND:
            return and_(*parts) if parts else true()
        return or_(*parts) if parts else false()

    def _filter(self, item: Filter, path: Path, scope: _Scope) -> ColumnElement[bool]:
        if isinstance(item, UserAttributeFilter):
            criterion, problems = read_criterion(item, path)
            self.problems += problems
            if criterion is None:
                return false()
            return self.predicates.criterion(criterion, scope.subject, scope.user)
        if scope.on_events:
            self.problems.append(
                Problem(
                    "INVALID_ENUM_VALUE",
                    join_path(*path, "filter_type"),
                    ON_EVENTS_ONLY_USER_ATTRIBUTES,
                )
            )
            return false()
        if isinstance(item, ActionFilter):
            return self._action(item, path)
        return self._segment(item, path)

    # ---- actions --------------------------------------------------------------------------------

    def _action(self, item: ActionFilter, path: Path) -> ColumnElement[bool]:
        execution = item.execution
        if self.as_of is not None:
            return self._counted_as_of(item, path)
        if self.customers is not None:
            # A few users (a trigger's batch): whether each has one matching event is a probe of
            # the (workspace, action, customer) index that stops at the first row, where a count
            # reads the user's whole history of the action (a trigger's cost grew with it).
            if item.executed is False or (
                execution is not None and execution.type is ExecutionType.EXACTLY and execution.count == 0
            ):
                return ~self._event_exists(item, path)
            if execution is None or (execution.type is ExecutionType.ATLEAST and execution.count == 1):
                return self._event_exists(item, path)
        counts = self._event_counts(item, path)
        if item.executed is False:
            return counts.c.customer_id.is_(None)
        if execution is None:
            return counts.c.customer_id.is_not(None)
        wanted = execution.count
        if execution.type is ExecutionType.ATLEAST:
            return true() if wanted == 0 else counts.c.n >= wanted
        if execution.type is ExecutionType.ATMOST:
            return func.coalesce(counts.c.n, 0) <= wanted
        return counts.c.customer_id.is_(None) if wanted == 0 else counts.c.n == wanted

    def _counted_as_of(self, item: ActionFilter, path: Path) -> ColumnElement[bool]:
        """The filter over the user's events up to the evaluated one (`self.as_of`): "did it" is
        an EXISTS that stops at the first event, a count a correlated count of those events."""
        execution = item.execution
        if item.executed is False or (
            execution is not None and execution.type is ExecutionType.EXACTLY and execution.count == 0
        ):
            return ~self._event_exists(item, path)
        if execution is None:
            return self._event_exists(item, path)
        wanted = execution.count
        if execution.type is ExecutionType.ATLEAST and wanted <= 1:
            return true() if wanted == 0 else self._event_exists(item, path)
        if execution.type is ExecutionType.ATLEAST:
            return self._count_as_of(item, path) >= wanted
        if execution.type is ExecutionType.ATMOST:
            return self._count_as_of(item, path) <= wanted
        return self._count_as_of(item, path) == wanted

    def _count_as_of(self, item: ActionFilter, path: Path) -> ColumnElement[int]:
        """The number of the user's events of this action whose attributes match, up to the
        evaluated one (`self.as_of`)."""
        key = _action_key(item)
        known = self._as_of_counts.get(key)
        if known is not None:
            return known
        events, source, conditions = self._matching_events(item, path, f"c{len(self._as_of_counts)}")
        counted = (
            select(func.count())
            .select_from(source)
            .where(*conditions, events.c.customer_id == self.users.c.customer_id, self._up_to(events))
            .scalar_subquery()
        )
        self._as_of_counts[key] = counted
        return counted

    def _up_to(self, events: FromClause) -> ColumnElement[bool]:
        """`events` is the evaluated event (`self.as_of`) or came before it: (time, id) order, the
        order the user's position history is read in (`engine.location`); and is not one of
        `self.uncounted`."""
        assert self.as_of is not None
        at, event_id = self.as_of.c.occurred_at, self.as_of.c.id
        up_to = or_(events.c.occurred_at < at, and_(events.c.occurred_at == at, events.c.id <= event_id))
        if self.uncounted is not None:
            return and_(up_to, not_(self.uncounted(events)))
        return up_to

    def _event_counts(self, item: ActionFilter, path: Path) -> Subquery:
        """Per user, the number of their events of this action whose attributes match."""
        key = _action_key(item)
        known = self._counts.get(key)
        if known is not None:
            return known
        name = f"{len(self._counts)}"
        events, source, conditions = self._matching_events(item, path, name)
        if self.customers is not None:
            conditions.append(self._among(events.c.customer_id))
        counts = (
            select(events.c.customer_id, func.count().label("n"))
            .select_from(source)
            .where(*conditions)
            .group_by(events.c.customer_id)
            .subquery(f"a{name}")
        )
        self._counts[key] = counts
        return counts

    def _event_exists(self, item: ActionFilter, path: Path) -> ColumnElement[bool]:
        """Whether the user row has an event of this action whose attributes match."""
        key = _action_key(item)
        known = self._exists.get(key)
        if known is not None:
            return known
        events, source, conditions = self._matching_events(item, path, f"x{len(self._exists)}")
        found = exists(
            select(literal(1))
            .select_from(source)
            .where(
                *conditions,
                events.c.customer_id == self.users.c.customer_id,
                *([self._up_to(events)] if self.as_of is not None else []),
            )
        )
        self._exists[key] = found
        return found

    def _matching_events(
        self, item: ActionFilter, path: Path, name: str
    ) -> tuple[FromClause, FromClause, list[ColumnElement[bool]]]:
        """An alias of the events (`e<name>`), what to select them from (with their user when a
        dynamic value asks for it) and the conditions of this action with its attributes."""
        events = _alias(Event.__table__, f"e{name}")
        owner: list[FromClause] = []

        def user() -> AttributeSource:
            # a dynamic value compares with the event's own user, joined only when asked for
            if not owner:
                owner.append(_alias(User.__table__, f"eu{name}"))
            return user_source(owner[0])

        of_action = events.c.action == item.action_name
        conditions = [events.c.workspace_id == self.workspace_id, of_action]
        if item.attributes is not None:
            scope = _Scope(AttributeSource(events.c.attributes, {}), user, on_events=True)
            # Only events of the action pay for their attribute tests: PostgreSQL orders a WHERE
            # clause's tests by estimated cost, rates a JSON path no dearer than an equality and
            # ran it on every event of the workspace first (twice the hand-written count's time at
            # 10M events). A CASE fixes the order.
            matched = self._group(item.attributes, (*path, "attributes"), scope)
            conditions.append(case((of_action, matched), else_=false()))
        source: FromClause = events
        if owner:
            source = events.join(
                owner[0],
                and_(
                    owner[0].c.workspace_id == events.c.workspace_id,
                    owner[0].c.customer_id == events.c.customer_id,
                ),
            )
        return events, source, conditions

    # ---- custom segments ------------------------------------------------------------------------

    def _segment(self, item: CustomSegmentFilter, path: Path) -> ColumnElement[bool]:
        target = join_path(*path, "id")
        definition = self.segments.get(item.id)
        if definition is None:
            self.problems.append(
                Problem(
                    "INVALID_ENUM_VALUE",
                    target,
                    f"No custom segment with id '{item.id}' exists in this workspace.",
                )
            )
            return false()
        if definition.kind == STATIC:
            members = SegmentMember.__table__
            return exists(
                select(literal(1)).where(
                    members.c.workspace_id == self.workspace_id,
                    members.c.segment_id == definition.id,
                    members.c.customer_id == self.users.c.customer_id,
                )
            )
        if item.id in self._segment_chain or len(self._segment_chain) >= MAX_SEGMENT_DEPTH:
            chain = " -> ".join([*self._segment_chain, item.id])
            self.problems.append(
                Problem(
                    "OUT_OF_RANGE",
                    target,
                    f"Custom segments refer to each other too deeply or in a cycle: {chain}.",
                )
            )
            return false()
        outer, self.problems = self.problems, []
        self._segment_chain.append(item.id)
        try:
            predicate = false() if definition.filters is None else self.where(definition.filters, ())
        finally:
            self._segment_chain.pop()
            inner, self.problems = [*definition.problems, *self.problems], outer
        for problem in inner:
            message = (
                f"Custom segment '{definition.name}' cannot be evaluated: {problem.target}: {problem.message}"
            )
            self.problems.append(Problem(problem.code, target, message))
        return predicate


def _action_key(item: ActionFilter) -> str:
    """One key per distinct action filter (its name and attribute filters): compiled once."""
    attributes = None if item.attributes is None else item.attributes.model_dump(mode="json")
    return json.dumps([item.action_name, attributes], sort_keys=True)


def compile_filter_group(
    group: FilterGroup,
    *,
    workspace_id: str,
    now: datetime,
    dialect: str | SqlDialect,
    segments: SegmentCatalog | None = None,
    path: Path = (),
    customers: Sequence[str] | None = None,
) -> tuple[Select[tuple[str]] | None, list[Problem]]:
    """One SELECT of the customer ids of `workspace_id` that `group` matches, or its problems.

    `path` prefixes every problem target (e.g. `("segmentation_details", "included_filters")`).
    `segments` must hold every segment the group refers to (see `catalog.load_segments`).
    `customers`: only these users are evaluated.
    """
    compiler = Compiler(
        dialect_for(dialect) if isinstance(dialect, str) else dialect, workspace_id, now, segments, customers
    )
    where = compiler.where(group, path)
    if compiler.problems:
        return None, compiler.problems
    query = (
        select(compiler.users.c.customer_id)
        .select_from(compiler.from_clause())
        .where(compiler.in_workspace(), where)
    )
    return query, []


def event_predicate(
    group: FilterGroup,
    events: FromClause,
    *,
    workspace_id: str,
    now: datetime,
    dialect: str | SqlDialect,
    path: Path = (),
) -> tuple[ColumnElement[bool] | None, list[Problem]]:
    """The predicate of `group` over the attributes of a row of `events` (an `audience_events`
    alias), as an action filter's `attributes` would test them: for callers that test given events
    (conversion goals) rather than count a user's. Dynamic values are not allowed here."""
    compiler = Compiler(
        dialect_for(dialect) if isinstance(dialect, str) else dialect, workspace_id, now, None
    )
    subject = AttributeSource(events.c.attributes, {})
    dynamic: list[bool] = []

    def user() -> AttributeSource:
        dynamic.append(True)
        return subject

    predicate = compiler._group(group, path, _Scope(subject, user, on_events=True))
    if dynamic:
        compiler.problems.append(
            Problem("INVALID_TYPE", join_path(*path), "A dynamic value cannot be used on a given event.")
        )
    if compiler.problems:
        return None, compiler.problems
    return predicate, []

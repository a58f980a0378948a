"""A component that failed to parse, read without its faulty values, so that its rules can still be
checked (contract §3: all violations in one response).

A type fault (`negate: "z"` in one filter) made the whole component unreadable, and every rule of
it went unreported until the client fixed the type (another filter's operator, another platform's
template). Here each faulty value is left out of a copy of the component (`salvage`); a rule's problem
in the object that held a value left out is not the client's to hear (`concerns`): it may be judged
on what the client did not send. The problems of the component's other objects are.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any


def salvage(value: Any, component: str, targets: Iterable[str]) -> tuple[Any, frozenset[str]] | None:
    """A copy of the component `value` (named `component`) without the values at `targets` (dot
    paths from the body root, inside it), and those paths; None when one cannot be left out alone:
    the component itself, an item of a list (the items after it would move), or a value that is
    not there (a required one missing)."""
    found = copy.deepcopy(value)
    left_out: set[str] = set()
    for target in targets:
        steps = target.split(".")[1:]
        if not steps or steps[-1].isdigit():
            return None
        parent = _at(found, steps[:-1])
        if not isinstance(parent, dict) or steps[-1] not in parent:
            return None
        del parent[steps[-1]]
        left_out.add(target)
    return found, frozenset(left_out)


def concerns(target: str, left_out: Iterable[str]) -> bool:
    """Whether a problem at `target` may be about a value left out: it lies in the object that held
    one (a sibling is judged with it missing: `is_all_user_campaign` left out made "no audience" of
    an all-users campaign, a `timezone` left out read the times in UTC), or around it."""
    for path in left_out:
        holder = path.rpartition(".")[0]
        if target == holder or target.startswith(holder + ".") or path.startswith(target + "."):
            return True
    return False


def _at(value: Any, steps: list[str]) -> Any:
    for step in steps:
        if isinstance(value, dict) and step in value:
            value = value[step]
        elif isinstance(value, list) and step.isdigit() and int(step) < len(value):
            value = value[int(step)]
        else:
            return None
    return value

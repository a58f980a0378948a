"""A validation problem: what pure rule functions return, and what error details are made of."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Problem:
    code: str
    target: str
    message: str

    def as_detail(self) -> dict[str, str]:
        return {"code": self.code, "target": self.target, "message": self.message}


def join_path(*parts: str | int) -> str:
    """Dot path from the body root; array indexes are plain numbers."""
    return ".".join(str(part) for part in parts if part != "")


def fields_at_fault(problems: Iterable[Problem]) -> set[str]:
    """The top-level fields of a body that `problems` lie in ("" for the body as a whole)."""
    return {problem.target.split(".", 1)[0] for problem in problems}

"""How much work one personalization may do, and the errors raised when it would do more.

A template is code written by a client. Every render shares one `Budget`: a step counter (loop
iterations, calls, lookups and output pieces each take a step), a wall-clock deadline checked at
every step, and a count of characters produced anywhere (including text buffered by macros and
`{% set %}` blocks). Values are bounded too (see `guards`), so no single step can be expensive. The
checks are cooperative: a runaway template stops itself at its next step, no thread is left behind.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Limits:
    steps: int = 200_000
    seconds: float = 2.0
    # Characters produced by the whole personalization, and by one field.
    output_chars: int = 4_000_000
    field_chars: int = 1_000_000
    # Size of one intermediate value: characters of a string, or of everything inside a container.
    value_size: int = 1_000_000
    # Elements of a list made by repetition, and the length of `range()`.
    items: int = 100_000
    # Bits of an integer made by `*` or `**` (int -> str conversion is capped by Python as well).
    int_bits: int = 10_000
    # Content blocks may use content blocks, this deep.
    block_depth: int = 3


DEFAULT_LIMITS = Limits()


class RenderLimitExceeded(Exception):
    """A template would exceed a limit; the message says which (reported as RENDER_LIMIT_EXCEEDED)."""


class RenderFailed(Exception):
    """A template failed for this data (reported as TEMPLATE_RENDER_FAILED)."""


class Budget:
    """Steps, deadline and output characters left for one personalization."""

    __slots__ = ("_clock", "_deadline", "limits", "output_left", "steps_left")

    def __init__(
        self, limits: Limits = DEFAULT_LIMITS, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        # A render budget measures elapsed execution time, not business time: it needs a monotonic
        # clock rather than the application clock.
        self.limits = limits
        self._clock = clock
        self._deadline = clock() + limits.seconds
        self.steps_left = limits.steps
        self.output_left = limits.output_chars

    def step(self) -> None:
        self.steps_left -= 1
        if self.steps_left < 0:
            raise RenderLimitExceeded(
                f"The template does more than {self.limits.steps} steps (loop iterations, calls and lookups)."
            )
        # Reading the clock costs more than a step; every 64th step is often enough.
        if not self.steps_left & 63 and self._clock() > self._deadline:
            raise RenderLimitExceeded(f"Rendering takes longer than {self.limits.seconds:g} seconds.")

    def charge(self, chars: int) -> None:
        """Count characters produced (output, or text buffered for later output)."""
        self.output_left -= chars
        if self.output_left < 0:
            raise RenderLimitExceeded(
                f"The template produces more than {self.limits.output_chars} characters."
            )

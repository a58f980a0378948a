"""`heap.settle`: what a long-running process has built is frozen, and the young generation is
collected less often (in a process of its own: the collector's settings are the whole process's)."""

from __future__ import annotations

import subprocess
import sys

from herald.ops import heap

_SETTLE = """
import gc
from herald.ops import heap
built = [[n] for n in range(50_000)]  # lives as long as the process, like its modules
_, older, oldest = gc.get_threshold()
heap.settle()
print(gc.get_freeze_count() >= 50_000, gc.get_threshold() == (heap.YOUNG_GENERATION, older, oldest))
"""


def test_settle_freezes_what_was_built_and_collects_the_young_generation_less_often() -> None:
    ran = subprocess.run([sys.executable, "-c", _SETTLE], capture_output=True, text=True, check=True)
    assert ran.stdout.split() == ["True", "True"]
    assert heap.YOUNG_GENERATION > 700  # Python's default, which walked a delivery's batches

"""The garbage collector's settings for a long-running process (`herald serve`, `herald worker`)."""

from __future__ import annotations

import gc

# Allocations between two collections of the youngest generation (Python's default: 700). A
# delivery keeps its batches alive across many allocations (the batch claimed ahead, the windows on
# the wire: a few hundred thousand objects), so they outlived the young generations and each full
# collection walked them all again: 37 full collections (0.6 s) of 9.4 s of worker CPU over 30,000
# users one per POST and 30,000 batched on PostgreSQL. At 10,000 the same sends ran 2 (0.04 s);
# the young collections cost about what they did (0.32 -> 0.34 s), the collector in all 1.12 ->
# 0.53 s. The request path did not move (O1, C2) or gained (C1 613-602 -> 650-652 req/s on
# SQLite; benchmarks/README.md, the twenty-third pass).
YOUNG_GENERATION = 10_000


def settle() -> None:
    """Take what the process has built by now (modules, app, routes, models, schemas, ~160,000
    objects) out of the collector's sight: it lives as long as the process, and a full collection
    no longer walks it each time (a quarter of a second on `herald serve`, the long tail of every
    request that waited behind one; a quarter of a delivery's CPU on `herald worker`). Then collect
    the young generation less often (`YOUNG_GENERATION`)."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION, older, oldest)

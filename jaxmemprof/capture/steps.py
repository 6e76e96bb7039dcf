"""Snapshots keyed to the program's steps (``jaxmemprof.mark``).

A program that marks its steps gets a snapshot at fixed step numbers, taken
in the program's own thread as the marker is placed, so that each sees the
program at the same point of the same step in every run, whatever the
machine's load. Which steps: every step from the second to ``2 *
PER_LEVEL``, then ``PER_LEVEL`` snapshots per doubling of the step count, at
multiples of a stride that doubles (steps 2..8, 10, 12, 14, 16, 20, 24, 28,
32, 40, ..., 64, 80, ... with ``PER_LEVEL`` 4): about ``PER_LEVEL *
log2(n / PER_LEVEL)`` by step n (22 by step 120, 36 by 1,500, 40 by 3,000,
61 by 100,000), never more, so
their cost shrinks as a share of a long loop; a fixed function of the step
count, never of time.

While the program steps, timed snapshots stand back (they would land at
moments that differ from run to run): one comes only when the last snapshot
is older than ``STALE_S`` (a long run whose grid has grown sparse), and the
interval's pace resumes once no marker has come for ``quiet_s()`` (set-up,
an evaluation, the end). Timed snapshots before the first marker (the
set-up) are taken as before, the first of them once arrays have been there
for an interval with no marker (a program whose first step makes its first
arrays takes its first snapshot at step 2).

A program that takes its own snapshots (``jaxmemprof.snapshot()``) keeps
to them: from its first, markers take none.

The holder search (capture/py_holders.py, its own budget) runs after the
step snapshots at steps ``2 * PER_LEVEL * 4**k`` only (8, 32, 128, 512,
2048, ...), so that the search that stands for the peak is at the same step
in every run while its budget holds.
"""

from __future__ import annotations

import threading
import time

# Snapshots per doubling of the step count (after the first 2 * PER_LEVEL steps, each taken).
PER_LEVEL = 4
# While the program steps, a timed snapshot only when the last snapshot is older than this.
STALE_S = 30.0
# The program is between steps (timed snapshots resume) once no marker has come for this long, or
# for four times the last gap between two markers when that is longer.
QUIET_S = 1.0


def stride(n: int, per_level: int = PER_LEVEL) -> int:
    """The grid's stride at step ``n`` (1, 2, ...): 1 up to ``2 * per_level``,
    then ``2**k`` for n in (per_level * 2**k, per_level * 2**(k+1)]."""
    if n <= 2 * per_level:
        return 1
    return 1 << (((n - 1) // per_level).bit_length() - 1)


def on_grid(n: int, per_level: int = PER_LEVEL) -> bool:
    """Whether step ``n`` (the n-th marker, from 1) gets a snapshot. Not
    the first: a program that snapshots each step itself (``mark`` then
    ``jaxmemprof.snapshot()``) has said so by the second."""
    return n >= 2 and n % stride(n, per_level) == 0


def grid(last: int, per_level: int = PER_LEVEL) -> list:
    """The steps up to ``last`` that get a snapshot."""
    return [n for n in range(1, last + 1) if on_grid(n, per_level)]


def searched(n: int, per_level: int = PER_LEVEL) -> bool:
    """Whether the holder search runs after step ``n``'s snapshot: steps
    ``2 * per_level * 4**k``."""
    m = 2 * per_level
    while m < n:
        m *= 4
    return m == n


class Steps:
    """The markers a run has seen and when: the sampler's count of steps."""

    def __init__(self, per_level: int = PER_LEVEL):
        self.per_level = per_level
        self.count = 0  # markers placed so far
        self.last: float | None = None  # time.monotonic() of the last marker
        self.gap = 0.0  # seconds between the last two markers
        self.own = False  # the program took a snapshot itself (jaxmemprof.snapshot): no grid from then on
        self._lock = threading.Lock()

    def placed(self) -> int:
        """Count a marker placed now; its number (1, 2, ...)."""
        now = time.monotonic()
        with self._lock:
            self.count += 1
            if self.last is not None:
                self.gap = now - self.last
            self.last = now
            return self.count

    def quiet_s(self) -> float:
        return max(QUIET_S, 4.0 * self.gap)

    def stepping(self, now: float) -> bool:
        """Whether the program is in its steps, its markers taking the
        snapshots: a marker came within ``quiet_s()`` (and the program takes
        none itself)."""
        last = self.last
        return last is not None and not self.own and now - last < self.quiet_s()

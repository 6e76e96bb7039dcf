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

Timed snapshots also stand back while a call of the program's jitted
functions is in progress (its inputs and outputs both alive, the jit probe's
work on a sampled call included), unless the last snapshot is ``STALE_S``
old: the live peak is then a moment between the program's statements, the
same in every run.

The holder search (capture/py_holders.py, its own budget) runs after each
step snapshot whose live bytes are a new high, in the program's thread, so
that it reads the locals of the program's frames (capture/frame_locals.py),
within its budget (the first 0.5 s of searches always allowed, then 1 % of
the run): a small program's searches are at the same steps in every run,
and the holders shown beside a later peak come from the last of them, said
so (analysis/py_holders.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

# Snapshots per doubling of the step count (after the first 2 * PER_LEVEL steps, each taken).
PER_LEVEL = 4
# While the program steps, a timed snapshot only when the last snapshot is older than this.
STALE_S = 30.0
# The program is between steps (timed snapshots resume) once no marker has come for this long, or
# for four times the last gap between two markers when that is longer.
QUIET_S = 1.0
# A timed snapshot due while a call of the program's jitted functions is in progress looks again this often.
IN_CALL_POLL_S = 0.02


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


class StepSnapshots:
    """The sampler's snapshots keyed to the program's steps (mixed into
    capture/sampler.py's ``Sampler``, which has the rest): the step's
    snapshot taken in the program's thread, its cost there counted, and the
    timed snapshots held back while the program steps or is inside a call of
    a jitted function."""

    steps: Steps
    failed: str | None
    in_flight: Callable[[], list] | None
    program_thread: dict
    _last_mono: float
    _t0: float
    _lock: threading.RLock
    _pending_search: tuple | None

    def next_due(self) -> float:
        raise NotImplementedError

    def jax_up(self) -> bool:
        raise NotImplementedError

    def snapshot(self, trigger: str, label: str | None = None, live: list | None = None,
                 wait: bool | None = None, search: bool = True) -> int | None:
        raise NotImplementedError

    def search_holders(self) -> None:
        raise NotImplementedError

    def timed_due(self) -> float:
        """When the next timed snapshot is due: ``next_due()``; while the
        program steps not before the last snapshot is ``STALE_S`` old or the
        markers stop (checked again then); and while a call of the program's
        jitted functions is in progress (its inputs and its outputs both
        alive: a moment that differs from run to run), not before it ended
        ``IN_CALL_POLL_S`` ago, unless the last snapshot is ``STALE_S`` old."""
        due, s, now, last = self.next_due(), self.steps, time.monotonic(), self._last_mono or self._t0
        if s.stepping(now) and s.last is not None:
            due = max(due, min(last + STALE_S, s.last + s.quiet_s()))
        if due <= now and self.in_flight is not None and now - last < STALE_S:
            if self.in_flight():
                due = now + IN_CALL_POLL_S
            else:
                # A call that ended a moment ago may not have its outputs in the program's names yet (the
                # eval breaker can hand the GIL over as the call returns): wait, letting the program run on.
                ended = getattr(getattr(self.in_flight, "__self__", None), "call_ended", 0.0)
                if type(ended) is float and now < ended + IN_CALL_POLL_S:
                    due = ended + IN_CALL_POLL_S
        return due

    def step(self, n: int) -> None:
        """Marker ``n`` (``steps.placed()``) is in the journal, in the
        program's thread: a snapshot now when its step is on the grid, and
        the holder search after it (its budget permitting), which reads the
        locals of this thread's frames (capture/frame_locals.py)."""
        if self.failed or self.steps.own or not on_grid(n, self.steps.per_level) or not self.jax_up():
            return
        w0, c0 = time.perf_counter(), time.thread_time()
        with self._lock:
            if self.snapshot("step", search=False) is not None:
                self.search_holders()
            self._pending_search = None
        self.in_program_thread(w0, c0)

    def in_program_thread(self, w0: float, c0: float) -> None:
        """A snapshot the program's thread took (at a step, or asked for), its
        holder search included, began at ``w0`` (perf_counter) and ``c0``
        (thread_time): its wall and CPU time, counted where the run says
        what it cost the program (the manifest's ``program_thread``)."""
        own = self.program_thread
        own["snapshots"] += 1
        own["wall_s"] = round(own["wall_s"] + time.perf_counter() - w0, 6)
        own["cpu_s"] = round(own["cpu_s"] + time.thread_time() - c0, 6)

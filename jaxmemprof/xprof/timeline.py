"""A memory profile's events as moments: each device's bytes in use over
time, the moments a report reads (thinned, each device's peak and the sum's
peak kept), and what was live on each device at a moment.

The allocator's own figure after each event (``bytes_allocated``, plus its
stack reservation ``bytes_reserved``: XProf's "heap + stack") is the bytes in
use; where a profile leaves it out, the running sum of the allocations'
bytes stands for it. Plain Python: no pandas, no jax.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import itertools
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from jaxmemprof.xprof.xplane import MemoryEvents

MOMENTS = 200  # moments kept for the timeline, each device's peak among them


@dataclass
class Series:
    """One memory's bytes in use after each event."""

    memory: str
    t_ps: Sequence
    in_use: Sequence
    limit: int  # in use + available at the peak (0: not said)
    lifetime_peak: int  # the allocator's own peak over its lifetime, as the last event says (0: not said)

    @functools.cached_property
    def peak(self) -> tuple[int, int]:
        """(index of the first event at the peak, bytes)."""
        if not len(self.in_use):
            return -1, 0
        top = max(self.in_use)
        return self.in_use.index(top), top

    def at(self, t_ps: int) -> int:
        i = bisect.bisect_right(self.t_ps, t_ps) - 1
        return self.in_use[i] if i >= 0 else 0


def series(ev: MemoryEvents) -> Series:
    said = any(ev.in_use) or any(ev.reserved)
    in_use, running = [], 0
    for k in range(len(ev.t_ps)):
        if said:
            in_use.append(ev.in_use[k] + ev.reserved[k])
        else:
            running += ev.bytes[k] if ev.allocation[k] else -ev.bytes[k]
            in_use.append(max(running, 0))
    s = Series(ev.memory, ev.t_ps, array("q", in_use), 0, ev.peak[-1] if len(ev.peak) else 0)
    i, top = s.peak
    if i >= 0 and ev.available[i]:
        s.limit = top + ev.available[i]
    return s


def moments(all_series: list, limit: int = MOMENTS, peak_t: int | None = None) -> list:
    """The moments (ps) the timeline keeps: every event's where there are
    few, else ``limit`` spread evenly, with each memory's peak and the
    moment the sum over memories peaks (``peak_t``, where the caller has it)."""
    times = sorted({t for s in all_series for t in s.t_ps})
    if not times:
        return []
    keep = set(times) if len(times) <= limit else {times[round(i * (len(times) - 1) / (limit - 1))]
                                                   for i in range(limit)}
    for s in all_series:
        i, _ = s.peak
        if i >= 0:
            keep.add(s.t_ps[i])
    keep.add(sum_peak(all_series)[0] if peak_t is None else peak_t)
    return sorted(keep)


def sum_peak(all_series: list, times: list | None = None) -> tuple[int, int]:
    """(moment, bytes) where the sum over the memories is highest: one sweep
    over every memory's events in time order (``times``: not used; kept for
    callers that have them)."""
    merged = heapq.merge(*(zip(s.t_ps, itertools.repeat(k), s.in_use) for k, s in enumerate(all_series)))
    current = [0] * len(all_series)
    total, best, last_t = 0, (0, -1), None
    for t, k, v in merged:
        if last_t is not None and t != last_t and total > best[1]:
            best = (last_t, total)
        total += v - current[k]
        current[k] = v
        last_t = t
    if last_t is not None and total > best[1]:
        best = (last_t, total)
    return best if best[1] >= 0 else (0, 0)


def live_at(ev: MemoryEvents, t_ps: int) -> list:
    """The allocations live at ``t_ps``: [(bytes, op, region, dtype, shape)],
    an allocation's free matched by its address (XProf's rule)."""
    live: dict = {}
    unmatched = 0
    for k in range(len(ev.t_ps)):
        if ev.t_ps[k] > t_ps:
            break
        addr = ev.address[k]
        if ev.allocation[k]:
            key = addr if addr not in live else (addr, k)
            live[key] = (ev.bytes[k], ev.op[k], ev.region[k], ev.dtype[k], ev.shape[k])
        elif addr in live:
            del live[addr]
        else:
            unmatched += 1
    return list(live.values())

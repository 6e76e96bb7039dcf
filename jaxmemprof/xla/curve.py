"""A program's memory in program order: the bytes live at each position of
its schedule, in total and by what made them (XProf's memory viewer, in the
user's stacks), and its peak: the first position of most bytes.

Both readers of XLA's figures (the executable's protos, ``executable.py``; a
dump, ``dump.py``) give each value to :func:`sweep`: its live range in the
sequence, its own bytes and its buffer, the slice of an allocation it was
placed in (None where it shares none). Values of one slice are one buffer:
where their ranges meet (an op writing its output over an operand that dies
there, a loop's carried value and what it was made from, a donated argument
and the output in its place) the buffer holds one of them, so at each
position it counts once, as the largest of its values live there. What the
sweep adds up at a position is then the bytes of memory XLA has placed
values in at that moment, and the peak is the top of the curve by
construction (docs/jax-facts.md, "The peak").

A long sequence is kept to ``points`` positions: the sequence in equal
buckets, each by its position of most bytes, so the peak is always one of
them, and so is every local top that is the highest of its bucket.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from itertools import accumulate
from collections.abc import Iterable, Sequence

POINTS = 256  # positions kept of a longer sequence
STACKS = 24  # stacks kept by name; the rest are summed as "other"


def curve_key(buffer) -> tuple:
    """What a value is counted under in the curve: its kind and the Python
    stack that made it, or its op where it has no stack (an argument's name)."""
    frames = tuple(tuple(f) for f in buffer.frames)
    return buffer.kind, frames, "" if frames else (buffer.op or "")


@dataclass
class Sweep:
    """The bytes at every position of a sequence, each buffer once."""

    segments: list  # (start, end, bytes, value index): stretches where a value stands for its buffer
    total: list  # bytes at each position 0 .. len(total) - 1
    peak_position: int  # the first position of most bytes
    peak_bytes: int
    at_peak: list  # indices of the values counted at the peak (one per buffer), in the order given


def sweep(values: Sequence[tuple], length: int) -> Sweep:
    """``values``: (start, end, bytes, buffer) per value, ``buffer`` None for
    a value in no shared slice. A value with no range (start < 0 or end <
    start) counts nowhere. Where values of one buffer are live together, the
    largest counts (the first given of equal ones)."""
    segments: list[tuple] = []
    by_buffer: dict = {}
    for i, (start, end, size, buffer) in enumerate(values):
        if start < 0 or end < start:
            continue
        if buffer is None:
            segments.append((start, end, size, i))
        else:
            by_buffer.setdefault(buffer, []).append((start, end, size, i))
    for vs in by_buffer.values():
        if len(vs) == 1:
            segments.extend(vs)
            continue
        cuts = sorted({s for s, _, _, _ in vs} | {e + 1 for _, e, _, _ in vs})
        for a, b in zip(cuts, cuts[1:]):
            live = [(size, -i) for s, e, size, i in vs if s <= a and b - 1 <= e]
            if live:
                size, first = max(live)
                segments.append((a, b - 1, size, -first))
    end_of = max([length, *(e for _, e, _, _ in segments)]) + 1  # positions 0 .. end_of - 1
    diff = [0] * (end_of + 1)
    for s, e, size, _ in segments:
        diff[s] += size
        diff[e + 1] -= size
    total = list(accumulate(diff[:-1]))
    peak = max(total)
    at = total.index(peak)
    at_peak = sorted(i for s, e, _, i in segments if s <= at <= e)
    return Sweep(segments=segments, total=total, peak_position=at, peak_bytes=peak, at_peak=at_peak)


def curve(swept: Sweep, keys: Sequence, *, points: int = POINTS, stacks: int = STACKS) -> dict:
    """The curve of a sweep, ``keys[i]`` (a hashable (kind, frames, op) that
    the caller can turn into JSON) naming what made value i. Returns
    ``{"positions": [...], "bytes": [...], "stacks": [[key, [bytes at each
    position]], ...], "other": [...]}``: the stacks by their largest bytes,
    first."""
    total = swept.total
    end_of = len(total)
    if end_of <= points:
        kept = list(range(end_of))
    else:
        kept = []
        for k in range(points):
            lo, hi = k * end_of // points, (k + 1) * end_of // points
            if hi > lo:
                bucket = total[lo:hi]
                kept.append(lo + bucket.index(max(bucket)))

    # Each key's bytes at the kept positions.
    per_key: dict = {}
    for s, e, size, i in swept.segments:
        a, b = bisect.bisect_left(kept, s), bisect.bisect_right(kept, e)
        if a < b:
            key = keys[i]
            d = per_key.get(key)
            if d is None:
                d = per_key[key] = [0] * (len(kept) + 1)
            d[a] += size
            d[b] -= size
    rows = [(key, list(accumulate(d[:-1]))) for key, d in per_key.items()]
    rows.sort(key=lambda r: (-max(r[1]), repr(r[0])))
    other = [0] * len(kept)
    if len(rows) > stacks:
        other = [sum(column) for column in zip(*(run for _, run in rows[stacks:]))]
    return {"positions": kept, "bytes": [total[t] for t in kept], "stacks": [list(r) for r in rows[:stacks]],
            "other": other}


def program_curve(values: Iterable[tuple], length: int, *, points: int = POINTS, stacks: int = STACKS) -> dict:
    """The curve of ``values``: (start, end, bytes, buffer, key) per value
    (:func:`sweep`, :func:`curve`)."""
    values = list(values)
    return curve(sweep([v[:4] for v in values], length), [v[4] for v in values], points=points, stacks=stacks)

"""A program's memory in program order: the bytes live at each position of
its schedule, in total and by what made them (XProf's memory viewer, in the
user's stacks).

Both readers of XLA's figures (the executable's protos, ``executable.py``; a
dump, ``dump.py``) give the same thing to :func:`program_curve`: each value's
live range in the sequence, its own bytes, its buffer (the allocation slice
it lives in: values of one slice are one buffer, counted once) and a key for
what made it (kind, and the Python stack or else the op). The bytes at a
position are those of every buffer live there, each buffer once, as the
largest of its values live there: at the peak position they are the peak's
bytes, the buffers that the peak lists (docs/jax-facts.md).

A long sequence is kept to ``points`` positions: the sequence in equal
buckets, each by its position of most bytes, so the peak is always one of
them, and so is every local top that is the highest of its bucket.
"""

from __future__ import annotations

import bisect
from itertools import accumulate
from typing import Iterable

POINTS = 256  # positions kept of a longer sequence
STACKS = 24  # stacks kept by name; the rest are summed as "other"


def curve_key(buffer) -> tuple:
    """What a value is counted under in the curve: its kind and the Python
    stack that made it, or its op where it has no stack (an argument's name)."""
    frames = tuple(tuple(f) for f in buffer.frames)
    return buffer.kind, frames, "" if frames else (buffer.op or "")


def program_curve(values: Iterable[tuple], length: int, *, points: int = POINTS, stacks: int = STACKS) -> dict:
    """``values``: (start, end, bytes, buffer, key) per value, ``buffer``
    None for a value in no shared slice, ``key`` a hashable (kind, frames,
    op) that the caller can turn into JSON. Returns ``{"positions": [...],
    "bytes": [...], "stacks": [[key, [bytes at each position]], ...],
    "other": [...]}``: the stacks by their largest bytes, first."""
    # Each buffer's share at each moment: its largest value live then.
    segments: list[tuple] = []  # (start, end, bytes, key), ranges that do not overlap within a buffer
    by_buffer: dict = {}
    for start, end, size, buffer, key in values:
        if start < 0 or end < start:
            continue
        if buffer is None:
            segments.append((start, end, size, key))
        else:
            by_buffer.setdefault(buffer, []).append((start, end, size, key))
    for vs in by_buffer.values():
        if len(vs) == 1:
            segments.extend(vs)
            continue
        cuts = sorted({s for s, _, _, _ in vs} | {e + 1 for _, e, _, _ in vs})
        for a, b in zip(cuts, cuts[1:]):
            live = [(size, -i, key) for i, (s, e, size, key) in enumerate(vs) if s <= a and b - 1 <= e]
            if live:
                size, _, key = max(live, key=lambda x: (x[0], x[1]))
                segments.append((a, b - 1, size, key))
    end_of = max([length, *(e for _, e, _, _ in segments)]) + 1  # positions 0 .. end_of - 1

    # Bytes at every position (a difference array), then the kept positions.
    diff = [0] * (end_of + 1)
    for s, e, size, _ in segments:
        diff[s] += size
        diff[e + 1] -= size
    total = list(accumulate(diff[:-1]))
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
    for s, e, size, key in segments:
        i, j = bisect.bisect_left(kept, s), bisect.bisect_right(kept, e)
        if i < j:
            d = per_key.get(key)
            if d is None:
                d = per_key[key] = [0] * (len(kept) + 1)
            d[i] += size
            d[j] -= size
    rows = [(key, list(accumulate(d[:-1]))) for key, d in per_key.items()]
    rows.sort(key=lambda r: (-max(r[1]), repr(r[0])))
    other = [0] * len(kept)
    if len(rows) > stacks:
        other = [sum(column) for column in zip(*(run for _, run in rows[stacks:]))]
    return {"positions": kept, "bytes": [total[t] for t in kept], "stacks": [list(r) for r in rows[:stacks]],
            "other": other}

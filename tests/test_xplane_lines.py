"""xprof/xplane.py parses a host plane's line only where its bytes may hold
a memory event: the pattern never misses one (any metadata id, any event
length, any stats), so what is read equals reading every line."""

from __future__ import annotations

import random

from jaxmemprof.xprof import xplane_pb2 as pb
from jaxmemprof.xprof.xplane import _memory_event_pattern, lines


def _plane(rng: random.Random, ids: list[int], memory_ids: set[int]) -> tuple[bytes, list[bool]]:
    """A plane of lines of random events (random metadata ids, stats of
    random sizes) written as XProf writes them, and which lines hold an
    event of ``memory_ids``."""
    space = pb.XSpaceLean()
    plane = space.planes.add(id=1, name="/host:CPU")
    holds = []
    for n in range(rng.randint(1, 12)):
        line = plane.lines.add(id=n, name=f"thread {n}", timestamp_ns=rng.randint(0, 1 << 40))
        found = False
        for _ in range(rng.randint(0, 30)):
            mid = rng.choice(ids)
            event = line.events.add(metadata_id=mid, offset_ps=rng.randint(0, 1 << 50))
            for _ in range(rng.randint(0, 6)):
                value = rng.choice([pb.XStat(metadata_id=rng.choice(ids), int64_value=rng.randint(-(1 << 40), 1 << 40)),
                                    pb.XStat(metadata_id=rng.choice(ids), str_value="x" * rng.randint(0, 300)),
                                    pb.XStat(metadata_id=rng.choice(ids), ref_value=abs(rng.choice(ids)))])
                event.stats.append(value.SerializeToString())
            found = found or mid in memory_ids
        holds.append(found)
    return pb.XSpaceLines.FromString(space.SerializeToString()).planes[0], holds


def test_no_line_with_a_memory_event_is_left_unparsed():
    rng = random.Random(65)
    for case in range(300):
        ids = rng.sample([1, 2, 5, 34, 127, 128, 300, 16384, 2**31 + 7, -3], rng.randint(2, 6))
        memory_ids = set(rng.sample(ids, rng.randint(1, len(ids) - 1)))
        plane, holds = _plane(rng, ids, memory_ids)
        parsed = {line.id for line in lines(plane, _memory_event_pattern(memory_ids))}
        wanted = {i for i, h in enumerate(holds) if h}
        assert wanted <= parsed, (case, ids, memory_ids)
        # and each line parsed is the line as written
        assert [line.id for line in lines(plane)] == list(range(len(holds)))


def test_the_lines_without_one_are_skipped():
    rng = random.Random(7)
    plane, holds = _plane(rng, [5, 6], {300})  # no event of 300 anywhere
    assert list(lines(plane, _memory_event_pattern({300}))) == []
    assert len(list(lines(plane, _memory_event_pattern({0})))) == len(holds)  # id 0 is not written: every line

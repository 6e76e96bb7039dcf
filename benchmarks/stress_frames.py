"""Stress the holder search's frame reading (issue 62, What to build 7): a busy
multi-threaded program with an audit hook (``sys.addaudithook``), a trace
function in one worker, ``sys.monitoring`` (3.12+), and generators and
coroutines created, run and finalised in threads, while

- the main thread reads its own frames' locals (capture/frame_locals.py) in
  small calls, the way a step's snapshot does, and
- a thread named as jaxmemprof's runs holder searches (capture/py_holders.py),
  which read no frame of another thread: module globals, and suspended
  generators' locals as the garbage collector lists them.

It needs no JAX. It prints the program's own result (the same whatever the
reads) and, on stderr, the reads made. Exit 0 only when the result is the
one computed without any read.

    python benchmarks/stress_frames.py --reads 1000000     # the long form (each Python)
    python benchmarks/stress_frames.py --reads 20000       # tests/test_frames_stress.py
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import threading
import time
import weakref

AUDITED = [0]
KEPT: list = []  # a global the searches walk into
HELD: list = []  # the suspended generator holding what the searches look for


def hook(event, args):  # the program's audit hook: runs bytecode on every audited event
    if event.startswith(("ctypes", "sys._getframe", "object.")):
        AUDITED[0] += 1


def gen_worker(stop: threading.Event, out: list) -> None:
    def numbers(n):
        box = [object() for _ in range(3)]
        for i in range(n):
            yield i + len(box)

    async def coro(n):
        held = [n] * 4
        await asyncio.sleep(0)
        return sum(held)

    total = 0
    while not stop.is_set():
        g = numbers(50)
        total += next(g) + next(g)
        g.close()  # finalised half-way
        c = coro(3)
        try:
            c.send(None)
        except StopIteration:
            pass
        c.close()
        total += sum(numbers(5))
        KEPT.append(numbers(3))  # suspended generators the searches meet
        if len(KEPT) > 64:
            del KEPT[:32]
    out.append(total)


def traced_worker(stop: threading.Event, out: list) -> None:
    calls = [0]

    def tracer(frame, event, arg):
        if event == "call":
            calls[0] += 1
        _ = frame.f_locals  # a debugger's read of its own frames, written back by the trampoline
        return None

    sys.settrace(tracer)

    def small(x):
        y = x * 2
        return y + 1

    n = 0
    while not stop.is_set():
        n = small(n) % 1000
    sys.settrace(None)
    out.append(calls[0] > 0)


def monitored() -> object:
    if sys.version_info < (3, 12):
        return None
    mon = sys.monitoring
    tool = 3
    mon.use_tool_id(tool, "stress")
    seen = [0]

    def on_start(code, offset):
        seen[0] += 1

    mon.register_callback(tool, mon.events.PY_START, on_start)
    mon.set_events(tool, mon.events.PY_START)
    return tool


def searches(stop: threading.Event, counts: list) -> None:
    from jaxmemprof.capture.py_holders import searched

    ref = KEPT_TARGET[0]
    targets = {id(ref()): (ref, 1)}  # held only by a suspended generator's local: found through gc's referents
    while not stop.is_set():
        s = searched(targets, 0.05, library=False)
        counts[0] += 1
        counts[1] += len(s.found)


class Marker:
    """What the searches look for (held by a generator's local and a global)."""


KEPT_TARGET: list = []  # a weak reference to it


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reads", type=int, default=20000, help="own-frame reads by the main thread")
    args = parser.parse_args()
    sys.path.insert(0, __file__.rsplit("/benchmarks/", 1)[0])
    from jaxmemprof.capture.frame_locals import frame_locals, own_stack

    sys.addaudithook(hook)
    tool = monitored()
    target = Marker()
    KEPT_TARGET.append(weakref.ref(target))

    def holding(x):
        inner = x
        yield inner

    kept_gen = holding(target)
    next(kept_gen)
    HELD.append(kept_gen)
    del target, kept_gen

    stop = threading.Event()
    outs: list = []
    counts = [0, 0]
    workers = [threading.Thread(target=gen_worker, args=(stop, outs)) for _ in range(2)]
    workers.append(threading.Thread(target=traced_worker, args=(stop, outs)))
    workers.append(threading.Thread(target=searches, args=(stop, counts), name="jaxmemprof-stress-search"))
    for w in workers:
        w.start()

    def leaf(i, reads):
        value = [i]  # a local the read sees, rebound each call
        names = [k for k, _ in frame_locals(own_stack(1)[0])]
        reads[0] += 1
        assert "value" in names and "i" in names, names
        return value[0]

    def middle(i, reads):
        acc = i * 3
        return leaf(acc, reads) - acc + i

    t0 = time.perf_counter()
    reads = [0]
    expected = got = 0
    i = 0
    want = max(3, args.reads // 5000)  # searches meanwhile
    def stepping(i, reads):  # a generator running in this thread: its frame read while it executes
        acc = yield middle(i, reads)
        yield acc

    while reads[0] < args.reads or (counts[0] < want and time.perf_counter() - t0 < 600):
        if i % 10:
            got += middle(i % 97, reads)
        else:
            g = stepping(i % 97, reads)
            got += next(g)
            g.close()
        expected += i % 97
        i += 1
        if i % 5000 == 0:
            gc.collect()
    stop.set()
    for w in workers:
        w.join(60)
    if tool is not None:
        sys.monitoring.set_events(tool, 0)
        sys.monitoring.free_tool_id(tool)
    took = time.perf_counter() - t0
    print(f"result {got == expected} {len(outs)}")
    sys.stderr.write(f"python {sys.version.split()[0]}: {reads[0]} own-frame reads, {counts[0]} searches "
                     f"(the held object found in {counts[1]}), {AUDITED[0]} audit events, {took:.1f} s\n")
    return 0 if got == expected and len(outs) == 3 and counts[1] > 0 else 1


if __name__ == "__main__":
    sys.exit(main())

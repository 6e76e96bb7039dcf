"""What one snapshot costs, by part (issue 54 item 5), in process on the CPU
backend: JAX's device_memory_profile(), the list of live arrays, the sampler's
work on it (set differences, describing new arrays), reading the profile's
totals, memory_stats(), the loaded executables (first seen, and known), the journal write (profile
file and one SQLite transaction), and the holder search. Medians of --repeat
snapshots of N live arrays, all known (the steady state: no new array), and
the cost of describing N new arrays once.

    JAX_PLATFORMS=cpu python benchmarks/bench_snapshot_parts.py [--arrays 100 3000 10000] [--repeat 7]
    python benchmarks/bench_snapshot_parts.py --wall      # on a TPU machine: the chip's
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import git_state


# CPU time of the sampling thread (the steady figure on a loaded machine); --wall: wall time, for a
# machine whose thread clock is coarse (a TPU host's ticks every 10 ms).
CLOCK = time.thread_time


def _median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        c0 = CLOCK()
        fn()
        times.append(CLOCK() - c0)
    return 1e3 * statistics.median(times)


def measure(n: int, repeat: int) -> dict:
    import jax
    import jax.numpy as jnp

    from jaxmemprof.capture.device_reads import LoadedExecutables, memory_stats_rows, profile_buffers
    from jaxmemprof.capture.py_holders import Searches
    from jaxmemprof.capture.sampler import Sampler
    from jaxmemprof.store.writer import RunWriter

    step = jax.jit(lambda x: x * 2.0 + 1.0)
    step(jnp.ones((8,))).block_until_ready()
    kept = [jnp.full((256,), i, jnp.float32) for i in range(n)]  # noqa: F841 (held by the program)
    with tempfile.TemporaryDirectory() as tmp:
        w = RunWriter(Path(tmp) / "run", {"argv": ["bench"]})
        s = Sampler(w, interval=1e9)
        s.py_holders = Searches(w)
        c0 = CLOCK()
        s.snapshot("api", wait=False, search=False)  # describes the n arrays once
        first = 1e3 * (CLOCK() - c0)
        out = {"arrays": n, "first snapshot (describing each array)": first}
        profile = jax.profiler.device_memory_profile()
        out["device_memory_profile()"] = _median_ms(jax.profiler.device_memory_profile, repeat)
        out["jax.live_arrays()"] = _median_ms(jax.live_arrays, repeat)
        out["profile's totals (protobuf)"] = _median_ms(lambda: profile_buffers(profile), repeat)
        out["memory_stats()"] = _median_ms(lambda: memory_stats_rows(jax), repeat)
        # Each executable's module name and code size are read once (device_reads.LoadedExecutables): the
        # first reading of them all, then a snapshot's (the same executables, known).
        out["executables, first seen"] = _median_ms(lambda: LoadedExecutables().rows(jax, lambda tb: None), repeat)
        out["executables"] = _median_ms(lambda: s._executables.rows(jax, lambda tb: None), repeat)

        def collect_and_write():
            with s._lock:
                rec = s._collect(jax, "api", None, time.time(), time.monotonic(), None, wait=False)
                t = CLOCK()
                w.add_snapshot(rec)
                return CLOCK() - t

        writes = []
        whole = []
        for _ in range(repeat):
            c0 = CLOCK()
            writes.append(collect_and_write())
            whole.append(CLOCK() - c0)
        out["journal write (file + transaction)"] = 1e3 * statistics.median(writes)
        out["whole snapshot, arrays known"] = 1e3 * statistics.median(whole)
        out["sampler's own (the rest)"] = (out["whole snapshot, arrays known"] - out["journal write (file + transaction)"]
                                            - out["device_memory_profile()"] - out["jax.live_arrays()"]
                                            - out["profile's totals (protobuf)"] - out["memory_stats()"]
                                            - out["executables"])

        def search():
            s.py_holders.searched_bytes = 0
            s.py_holders.spent = 0.0
            s.py_holders.after(jax, s._tracked, w.snapshots, "api", 1, (), s._viewed)

        out["holder search"] = _median_ms(search, max(3, repeat // 2))
        w.finish()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arrays", type=int, nargs="+", default=[100, 3000, 10000])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--wall", action="store_true", help="wall time instead of the thread's CPU time")
    args = ap.parse_args()
    import os

    import jax

    global CLOCK
    if args.wall:
        CLOCK = time.perf_counter
    print(f"jaxmemprof at {git_state()}; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; "
          f"{jax.default_backend()}; {'wall' if args.wall else 'CPU'} ms ({'perf_counter' if args.wall else 'thread time'})")
    rows = [measure(n, args.repeat) for n in args.arrays]
    for key in rows[0]:
        print(f"{key:42s}" + "".join(f"{r[key]:>12.2f}" if key != "arrays" else f"{r[key]:>12d}" for r in rows))


if __name__ == "__main__":
    main()

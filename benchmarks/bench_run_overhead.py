"""Capture overhead of ``jaxmemprof run``, measured side by side.

    python benchmarks/bench_run_overhead.py [--repeat K] [--out CSV] [--quick]

Two parts (``--only run`` / ``--only snapshot`` runs one):

run
    Whole-process wall time of ``python -m jaxmemprof run -q -o TMPDIR SCRIPT``
    against ``python SCRIPT``, K times each (default 5), alternating which goes
    first, on the workloads in ``benchmarks/workloads/``: ``trivial.py``
    (start-up alone), ``no_jax.py`` (a script that never imports JAX: run's
    fixed cost, target <= 0.1 s CPU over python), ``mlp_train.py`` (a small MLP, few arrays) and
    ``many_arrays.py`` (20,000 live small arrays while a step loop runs). The
    training workloads do a fixed number of steps, calibrated once (plain, in
    a separate process) to take about ``--seconds`` here. Reported: median wall
    and CPU time (the child's user + system), the ratio of medians, and from
    each run directory (``jaxmemprof.load_run(dir).snapshots``) the number of
    snapshots and the sums of ``cost_s`` (the sampler thread's CPU time) and
    ``wall_s``. Target: wall ratio <= 1.02 at default settings.

snapshot
    In a fresh process per case, with N live arrays: bare
    ``jax.profiler.device_memory_profile()`` against one full jaxmemprof
    snapshot (``Sampler.snapshot("api")`` writing to a ``RunWriter``): the
    first snapshot (every array new), a steady-state one (every array already
    tracked) and one after 10% of the arrays were replaced. Both
    ``time.perf_counter`` and ``time.thread_time``; medians; per live array.
    Target: steady state <= 2x the bare profile taken before jaxmemprof
    looked. Also checks that the sampler's ``live_bytes`` equals the
    profile's buffer bytes (it must: same buffers) and that
    ``jax.live_arrays()`` is the same after a snapshot as before, and (unless
    ``--no-cprofile``) shows where one snapshot's time goes.

Results: ``benchmarks/data/run_overhead.csv`` (columns ``benchmark, case,
value, unit, reference, ratio, target, met``), the cProfile tables in
``benchmarks/data/run_overhead_cprofile.txt``, and a summary on stdout.
About 13 minutes at default settings on 2 idle cores; ``--quick`` about 2.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from _common import Results, git_state

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORKLOADS = HERE / "workloads"
DATA = HERE / "data"
DEFAULT_OUT = DATA / "run_overhead.csv"
CPROFILE_OUT = DATA / "run_overhead_cprofile.txt"

RUN_RATIO_TARGET = 1.02
SNAPSHOT_RATIO_TARGET = 2.0
DEFAULT_MAX_OVERHEAD = 0.02  # jaxmemprof run's default --max-overhead
NOISE_LIMIT = 0.05  # plain runs' max/min - 1 above which a wall-ratio verdict is "unsure"
CHECK = "check: = 1"  # a correctness check rather than a speed target
CHECK_AT_MOST_1 = "check: <= 1"
COLUMNS = ("benchmark", "case", "value", "unit", "reference", "ratio", "target", "met")


# -- results -----------------------------------------------------------------


NO_JAX_EXTRA_CPU_S = 0.1  # run's CPU over python's for a script that never imports JAX


def _median(xs):
    return statistics.median(xs) if xs else float("nan")


def _log(msg):
    print(msg, file=sys.stderr, flush=True)


# -- part 1: whole runs --------------------------------------------------------


@dataclass
class RunStats:
    wall: list = field(default_factory=list)
    cpu: list = field(default_factory=list)
    snapshots: list = field(default_factory=list)
    cost_sum: list = field(default_factory=list)
    wall_sum: list = field(default_factory=list)
    cost_max: list = field(default_factory=list)


def timed_run(cmd: list[str], env: dict) -> tuple[float, float]:
    """Wall time (spawn to exit) and CPU time (user + system, with threads) of
    one child process; raises if it fails."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n"
                           f"{proc.stderr[-2000:].decode('utf-8', 'replace')}")
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return wall, cpu


def calibrate(script: Path, seconds: float, extra: list[str], env: dict) -> int:
    out = subprocess.run([sys.executable, str(script), *extra, "--calibrate", str(seconds)],
                         cwd=REPO, env=env, capture_output=True, text=True, check=True).stdout
    info = json.loads(out.strip().splitlines()[-1])
    _log(f"  {script.name}: {info['steps']} steps of {info['step_s'] * 1e3:.3f} ms for {seconds:g} s")
    return int(info["steps"])


def read_run(directory: str) -> tuple[int, float, float, float]:
    import jaxmemprof

    snaps = jaxmemprof.load_run(directory).snapshots
    return (len(snaps), float(snaps["cost_s"].sum()), float(snaps["wall_s"].sum()),
            float(snaps["cost_s"].max()) if len(snaps) else 0.0)


def measure_pair(script: Path, args: list[str], repeat: int, env: dict, run_opts: list[str]):
    plain, ours = RunStats(), RunStats()
    plain_cmd = [sys.executable, str(script), *args]
    for r in range(repeat):
        order = ("plain", "ours") if r % 2 == 0 else ("ours", "plain")
        for side in order:
            if side == "plain":
                wall, cpu = timed_run(plain_cmd, env)
                plain.wall.append(wall)
                plain.cpu.append(cpu)
                continue
            run_dir = tempfile.mkdtemp(prefix="jmp-bench-run-")
            try:
                cmd = [sys.executable, "-m", "jaxmemprof", "run", "-q", *run_opts, "-o", run_dir,
                       str(script), *args]
                wall, cpu = timed_run(cmd, env)
                n, cost, wsum, cmax = read_run(run_dir)
            finally:
                shutil.rmtree(run_dir, ignore_errors=True)
            ours.wall.append(wall)
            ours.cpu.append(cpu)
            ours.snapshots.append(n)
            ours.cost_sum.append(cost)
            ours.wall_sum.append(wsum)
            ours.cost_max.append(cmax)
        _log(f"  {script.name} round {r + 1}/{repeat}: plain {plain.wall[-1]:.2f} s, "
             f"run {ours.wall[-1]:.2f} s ({ours.snapshots[-1]} snapshots, "
             f"sampler CPU {ours.cost_sum[-1]:.3f} s)")
    return plain, ours


def _verdict(ratio: float, pairs: list, spread: float):
    """True/False against RUN_RATIO_TARGET, or "unsure". Every pair on one
    side of the target decides; otherwise, when plain runs alone differ by
    more than NOISE_LIMIT, a 2% verdict from the medians means nothing."""
    if min(pairs) > RUN_RATIO_TARGET:
        return False
    if max(pairs) <= RUN_RATIO_TARGET:
        return True
    if spread > NOISE_LIMIT:
        return "unsure"
    return ratio <= RUN_RATIO_TARGET


def bench_run(res: Results, args, env: dict) -> None:
    run_opts = []
    if args.interval is not None:
        run_opts += ["--interval", str(args.interval)]
    if args.max_overhead is not None:
        run_opts += ["--max-overhead", str(args.max_overhead)]
    run_opts += args.run_arg
    setting = " ".join(run_opts) or "default settings"
    _log(f"run overhead ({setting}): calibrating the workloads for {args.seconds:g} s")
    arrays_opt = ["--arrays", str(args.arrays)]
    workloads = [
        ("no_jax", WORKLOADS / "no_jax.py", []),
        ("startup", WORKLOADS / "trivial.py", []),
        ("mlp_train", WORKLOADS / "mlp_train.py",
         ["--steps", str(calibrate(WORKLOADS / "mlp_train.py", args.seconds, [], env))]),
        ("many_arrays", WORKLOADS / "many_arrays.py",
         arrays_opt + ["--steps", str(calibrate(WORKLOADS / "many_arrays.py", args.seconds, arrays_opt, env))]),
    ]
    # Warm the page cache and .pyc files of both sides (not timed).
    timed_run([sys.executable, str(WORKLOADS / "trivial.py")], env)
    with tempfile.TemporaryDirectory(prefix="jmp-bench-run-") as d:
        timed_run([sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", d, str(WORKLOADS / "trivial.py")], env)

    measured = {}
    for name, script, wargs in workloads:
        _log(f"run overhead: {name} ({args.repeat} runs each side, alternating)")
        measured[name] = measure_pair(script, wargs, args.repeat, env, run_opts)

    s_plain, s_ours = measured["startup"]
    startup_extra = _median(s_ours.wall) - _median(s_plain.wall)
    res.say(f"\n== jaxmemprof run vs python: whole-process time, median of {args.repeat} "
            f"({setting}; ratio = run / plain) ==")
    res.say(f"{'workload':12} {'plain s':>8} {'run s':>8} {'ratio':>6} {'min':>6} {'pairs: median, range':>21} "
            f"{'cpu':>6} {'snaps':>5} {'Σcost_s':>8} {'Σwall_s':>8} {'max cost':>8} {'cost/run':>8}")
    max_overhead = args.max_overhead if args.max_overhead is not None else DEFAULT_MAX_OVERHEAD
    noisy = []
    for name, _, _ in workloads:
        plain, ours = measured[name]
        pw, ow = _median(plain.wall), _median(ours.wall)
        pc, oc = _median(plain.cpu), _median(ours.cpu)
        ratio = ow / pw
        min_ratio = min(ours.wall) / min(plain.wall)
        pairs = sorted(o / p for o, p in zip(ours.wall, plain.wall))
        spread = max(plain.wall) / min(plain.wall) - 1
        if spread > NOISE_LIMIT:
            noisy.append(f"{name} {spread:.0%}")
        snaps, cost, wsum, cmax = (_median(ours.snapshots), _median(ours.cost_sum),
                                   _median(ours.wall_sum), _median(ours.cost_max))
        b = "run_overhead"
        if name == "no_jax":  # run pays for what the script uses: no JAX, protobuf or sqlite scan before it
            res.add(b, f"{name}: wall", ow, "s", pw, ow / pw, "", None)
            res.add(b, f"{name}: extra cpu", oc - pc, "s", "", "", f"<= {NO_JAX_EXTRA_CPU_S}",
                    oc - pc <= NO_JAX_EXTRA_CPU_S)
        elif name == "startup":
            res.add(b, f"{name}: wall", ow, "s", pw, ow / pw, "", None)
            res.add(b, f"{name}: extra wall", ow - pw, "s", "", "", "", None)
        else:
            verdict = _verdict(ratio, pairs, spread)
            res.add(b, f"{name}: wall", ow, "s", pw, ratio, f"<= {RUN_RATIO_TARGET}", verdict)
            # The same run without the fixed start-up difference measured on trivial.py.
            ex = (ow - startup_extra) / pw
            res.add(b, f"{name}: wall less start-up", ow - startup_extra, "s", pw, ex, "", None)
        res.add(b, f"{name}: wall, minimum of runs", min(ours.wall), "s", min(plain.wall), min_ratio)
        res.add(b, f"{name}: wall, median of paired ratios", _median(pairs), "ratio")
        res.add(b, f"{name}: plain wall spread (max/min - 1)", spread, "ratio")
        res.add(b, f"{name}: cpu", oc, "s", pc, oc / pc, "", None)
        res.add(b, f"{name}: snapshots", snaps, "count")
        # The sampler's own CPU time against the run's wall time: what
        # --max-overhead promises, and a floor under the wall-time overhead
        # when the target's main thread is bound by the GIL.
        share = cost / ow
        res.add(b, f"{name}: sum cost_s", cost, "s", ow, share, f"<= {max_overhead} (--max-overhead)",
                share <= max_overhead)
        res.add(b, f"{name}: sum wall_s", wsum, "s", ow, wsum / ow, "", None)
        res.add(b, f"{name}: max cost_s", cmax, "s")
        res.say(f"{name:12} {pw:8.3f} {ow:8.3f} {ratio:6.3f} {min_ratio:6.3f} "
                f"{_median(pairs):6.3f}, {pairs[0]:5.3f}-{pairs[-1]:<5.3f} {oc / pc:6.3f} "
                f"{snaps:5.0f} {cost:8.3f} {wsum:8.3f} {cmax:8.3f} {share:8.2%}")
    res.say(f"ratio: of medians; min: of the fastest runs; pairs: each run / the plain run beside it; "
            f"cpu: ratio of median CPU times; cost/run: Σcost_s / median run wall (target <= {max_overhead:.0%})")
    res.say(f"start-up difference (trivial.py): {startup_extra * 1e3:+.0f} ms")
    nj_plain, nj_ours = measured["no_jax"]
    res.say(f"a script without JAX (no_jax.py): {(_median(nj_ours.cpu) - _median(nj_plain.cpu)) * 1e3:+.0f} ms CPU, "
            f"{(_median(nj_ours.wall) - _median(nj_plain.wall)) * 1e3:+.0f} ms wall over python "
            f"(target <= {NO_JAX_EXTRA_CPU_S * 1e3:.0f} ms CPU)")
    if noisy:
        res.say(f"noisy machine: plain runs of one workload differ by up to {', '.join(noisy)} "
                f"(max/min); read the wall ratios with that in mind (--repeat 9 or more helps)")
    for name in ("mlp_train", "many_arrays"):
        plain, ours = measured[name]
        ratio = _median(ours.wall) / _median(plain.wall)
        spread = max(plain.wall) / min(plain.wall) - 1
        pairs = [o / p for o, p in zip(ours.wall, plain.wall)]
        v = _verdict(ratio, pairs, spread)
        if v == "unsure":
            verdict = (f"cannot tell against target <= {RUN_RATIO_TARGET} (plain runs differ by {spread:.0%}, "
                       f"pairs {min(pairs):.3f}-{max(pairs):.3f})")
        else:
            verdict = f"{'meets' if v else 'misses'} target <= {RUN_RATIO_TARGET}"
        share = _median(ours.cost_sum) / _median(ours.wall)
        res.say(f"{name}: {verdict}: ratio {ratio:.3f}, "
                f"{(_median(ours.wall) - startup_extra) / _median(plain.wall):.3f} without the start-up "
                f"difference; the sampler's own CPU time is {share:.2%} of the run")


# -- part 2: one snapshot, in process -----------------------------------------

# Each case runs in its own process (``--snapshot-child JSON``): JAX's device
# count must be set before its backend starts, and each case must start with
# no arrays but its own.
SNAPSHOT_CASES = [
    # name, live arrays, devices, how the arrays are made
    ("1k", 1_000, 1, "computed"),
    ("20k", 20_000, 1, "computed"),
    ("20k device_put", 20_000, 1, "device_put"),
    ("5k x 4 shards", 5_000, 4, "computed"),
]


def snapshot_child(spec: dict) -> dict:
    """Runs in a child process; returns the measurements as a dict."""
    import gc

    import numpy as np

    import jax

    if spec["devices"] > 1:
        jax.config.update("jax_num_cpu_devices", spec["devices"])
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec

    from jaxmemprof.capture.sampler import Sampler
    from jaxmemprof.pprof.reader import load_profile
    from jaxmemprof.store.writer import RunWriter

    n, devices, mode, repeat = spec["n"], spec["devices"], spec["mode"], spec["repeat"]
    width = 8 * devices

    if devices > 1:
        mesh = jax.make_mesh((devices,), ("x",))
        out_sharding = NamedSharding(mesh, PartitionSpec("x"))
    else:
        out_sharding = None
    take = jax.jit(lambda big, i: big[i], out_shardings=out_sharding)

    def make(count: int, start: float) -> list:
        if mode == "device_put":
            return jax.device_put([np.full(width, start + i, np.float32) for i in range(count)])
        big = jnp.arange(count * width, dtype=jnp.float32).reshape(count, width) + start
        return [take(big, i) for i in range(count)]

    class Writer(RunWriter):
        last = None

        def add_snapshot(self, rec):
            self.last = rec
            return super().add_snapshot(rec)

    tmp = tempfile.mkdtemp(prefix="jmp-bench-snap-")
    writers = []

    def sampler() -> Sampler:
        w = Writer(Path(tmp) / f"run{len(writers)}", {})
        writers.append(w)
        return Sampler(w)

    # No gc.collect() right before a timed call: a full collection empties
    # Python's free lists, which makes the next snapshot (that allocates)
    # ~60% slower than it is in a running program; once per series instead.
    def clock(f):
        c0, w0 = time.thread_time(), time.perf_counter()
        f()
        return time.perf_counter() - w0, time.thread_time() - c0

    def medians(pairs):
        return [_median([p[0] for p in pairs]), _median([p[1] for p in pairs])]

    def profile_buffer_bytes(blob: bytes) -> int:
        s = load_profile(blob).samples
        return int(s.loc[s["kind"] == "buffer", "bytes"].sum())

    held = make(n, 0.0)
    jax.block_until_ready(held)
    out = {"n": n, "devices": devices, "mode": mode, "live_before": len(jax.live_arrays())}
    gc.collect()
    jax.profiler.device_memory_profile()  # warm up, after the collection
    out["bare"] = medians([clock(jax.profiler.device_memory_profile) for _ in range(repeat)])
    out["live_arrays"] = medians([clock(jax.live_arrays) for _ in range(repeat)])

    # The first snapshot: every array new to the sampler.
    s = sampler()
    firsts = [clock(lambda: s.snapshot("api"))]
    first_rec = s.writer.last
    out["first_check"] = [first_rec.live_bytes, profile_buffer_bytes(first_rec.profile), first_rec.arrays]
    # The second one: should find nothing new.
    out["second"] = list(clock(lambda: s.snapshot("api")))
    rec = s.writer.last
    out["second_check"] = [rec.live_bytes, profile_buffer_bytes(rec.profile), rec.arrays]
    out["live_after"] = len(jax.live_arrays())
    # More first snapshots with fresh samplers, where that measures the same
    # thing again (not when the first one left a view behind).
    if out["live_after"] == out["live_before"]:
        for _ in range(min(repeat, 5) - 1):
            s2 = sampler()
            firsts.append(clock(lambda s2=s2: s2.snapshot("api")))
    out["first"] = medians(firsts)
    out["first_runs"] = len(firsts)

    gc.collect()
    s.snapshot("api")  # not timed: the first one after a collection
    # Interleaved with bare profiles, so that both see the same machine.
    pairs = [(clock(jax.profiler.device_memory_profile), clock(lambda: s.snapshot("api")))
             for _ in range(3 * repeat)]
    out["steady_bare"] = medians([p[0] for p in pairs])
    out["steady"] = medians([p[1] for p in pairs])

    # 10% of the arrays replaced by new ones (as many freed as made).
    tenth = max(1, n // 10)
    snaps, bares = [], []
    for r in range(repeat):
        lo = (r * tenth) % n
        fresh = make(tenth, float(n * (r + 1)))
        jax.block_until_ready(fresh)
        held[lo:lo + tenth] = fresh
        del fresh
        bares.append(clock(jax.profiler.device_memory_profile))
        snaps.append(clock(lambda: s.snapshot("api")))
    out["ten_pct"] = medians(snaps)
    out["ten_pct_bare"] = medians(bares)
    out["ten_pct_new"] = tenth

    if spec.get("cprofile"):
        out["cprofile"] = cprofile_snapshots(sampler, s, repeat)
    for w in writers:
        w.finish()
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def cprofile_snapshots(make_sampler, steady_sampler, repeat: int) -> dict:
    import cProfile
    import pstats

    def table(prof, label, runs):
        st = pstats.Stats(prof)
        total = st.total_tt
        rows = []
        for (file, line, func), (_cc, nc, tt, ct, _) in st.stats.items():
            rows.append((tt, ct, nc, _short(file, line, func)))
        by_tt = sorted(rows, reverse=True)[:14]
        by_ct = sorted(rows, key=lambda r: r[1], reverse=True)
        lines = [f"{label}: {total / runs * 1e3:.1f} ms per snapshot under cProfile ({runs} snapshot(s))",
                 f"  {'own ms':>8} {'cum ms':>8} {'calls':>9}  function (per snapshot)"]
        lines += [f"  {tt / runs * 1e3:8.2f} {ct / runs * 1e3:8.2f} {nc / runs:9.0f}  {name}" for tt, ct, nc, name in by_tt]
        keys = ("sampler.py", "arrays.py", "writer.py", "profiler.py", "api.py:", "array.py", "json")
        cum = [r for r in by_ct if any(k in r[3] for k in keys)][:12]
        lines.append("  cumulative, selected:")
        lines += [f"  {'':8} {ct / runs * 1e3:8.2f} {nc / runs:9.0f}  {name}" for tt, ct, nc, name in cum]
        return lines

    s = make_sampler()
    prof = cProfile.Profile()
    prof.enable()
    s.snapshot("api")
    prof.disable()
    first = table(prof, "first snapshot (all arrays new)", 1)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(repeat):
        steady_sampler.snapshot("api")
    prof.disable()
    steady = table(prof, "steady-state snapshot", repeat)
    return {"first": first, "steady": steady}


def _short(file: str, line: int, func: str) -> str:
    for marker in ("site-packages/", "/lib/python3."):
        if marker in file:
            file = file.split(marker, 1)[1]
            if marker != "site-packages/":
                file = file.split("/", 1)[-1]
            break
    else:
        try:
            file = os.path.relpath(file, REPO)
        except ValueError:
            pass
    return f"{func}" if file == "~" else f"{file}:{line}({func})"


def bench_snapshot(res: Results, args, env: dict) -> None:
    cases = SNAPSHOT_CASES
    cprofile_text = []
    res.say(f"\n== one snapshot in process vs bare device_memory_profile(), median of {args.snap_repeat} "
            "(perf_counter; thread_time in brackets) ==")
    res.say(f"{'case':16} {'bare ms':>14} {'first ms':>16} {'bare ms, then':>14} {'steady ms':>14} "
            f"{'10% new ms':>14} {'µs/array bare/first/steady/10%':>32} {'steady/bare then (thread)':>25}")
    for name, n, devices, mode in cases:
        spec = {"n": n, "devices": devices, "mode": mode, "repeat": args.snap_repeat,
                "cprofile": args.cprofile and mode == "computed" and devices == 1}
        _log(f"snapshot cost: {name}")
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--snapshot-child", json.dumps(spec)],
                              cwd=REPO, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"snapshot case {name} failed:\n{proc.stderr[-3000:]}")
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        b = "snapshot_cost"
        bare, first, steady, ten = out["bare"], out["first"], out["steady"], out["ten_pct"]
        # The steady ratio is against bare profiles taken between the steady
        # snapshots (the same machine state; a bare profile alone varies by
        # 30% from one series to the next here); "views JAX keeps" checks
        # that jaxmemprof did not make JAX's own profile slower meanwhile.
        # The other ratios are against the bare profile taken before
        # jaxmemprof looked at the arrays.
        sbare, tbare = out["steady_bare"], out["ten_pct_bare"]

        def per(x, n=n):
            return x / n * 1e6

        ratio = steady[0] / sbare[0]
        c = f"{name} ({mode}, {devices} device{'s' if devices > 1 else ''})"
        res.add(b, f"{c}: bare device_memory_profile per array", per(bare[0]), "us", "", "", "", None)
        res.add(b, f"{c}: bare device_memory_profile per array, thread_time", per(bare[1]), "us")
        res.add(b, f"{c}: live_arrays per array", per(out["live_arrays"][0]), "us", per(bare[0]),
                out["live_arrays"][0] / bare[0])
        res.add(b, f"{c}: first snapshot per array", per(first[0]), "us", per(bare[0]), first[0] / bare[0])
        res.add(b, f"{c}: first snapshot per array, thread_time", per(first[1]), "us", per(bare[1]),
                first[1] / bare[1])
        res.add(b, f"{c}: second snapshot per array", per(out["second"][0]), "us", per(bare[0]),
                out["second"][0] / bare[0])
        res.add(b, f"{c}: second snapshot per array, thread_time", per(out["second"][1]), "us", per(bare[1]),
                out["second"][1] / bare[1])
        res.add(b, f"{c}: bare device_memory_profile per array, between steady snapshots", per(sbare[0]), "us",
                per(bare[0]), sbare[0] / bare[0])
        res.add(b, f"{c}: steady snapshot per array", per(steady[0]), "us", per(sbare[0]), ratio,
                f"<= {SNAPSHOT_RATIO_TARGET}", ratio <= SNAPSHOT_RATIO_TARGET)
        res.add(b, f"{c}: steady snapshot per array, thread_time", per(steady[1]), "us", per(sbare[1]),
                steady[1] / sbare[1], f"<= {SNAPSHOT_RATIO_TARGET}", steady[1] / sbare[1] <= SNAPSHOT_RATIO_TARGET)
        res.add(b, f"{c}: 10% new snapshot per array", per(ten[0]), "us", per(bare[0]), ten[0] / bare[0])
        res.add(b, f"{c}: 10% new snapshot per array, thread_time", per(ten[1]), "us", per(bare[1]),
                ten[1] / bare[1])
        res.add(b, f"{c}: bare device_memory_profile per array, 10% new", per(tbare[0]), "us",
                per(bare[0]), tbare[0] / bare[0])
        for when in ("first", "second"):
            live, prof_bytes, arrays = out[f"{when}_check"]
            ok = live == prof_bytes
            res.add(b, f"{c}: {when} snapshot live_bytes vs profile buffer bytes", live, "bytes", prof_bytes,
                    live / prof_bytes if prof_bytes else None, CHECK, ok)
        # Reading a buffer address makes JAX keep a view of device_put and
        # sharded arrays; --addresses auto (the default) makes at most one,
        # for the first array of a device_put line (the workload has one).
        res.add(b, f"{c}: views JAX keeps after the first snapshot (at most 1)",
                out["live_after"] - out["live_before"], "count", 1, None, CHECK_AT_MOST_1,
                out["live_after"] - out["live_before"] <= 1)

        def ms(p):
            return f"{p[0] * 1e3:6.1f} ({p[1] * 1e3:5.1f})"

        thread_ratio = steady[1] / sbare[1]
        res.say(f"{name:16} {ms(bare):>14} {ms(first):>16} {ms(sbare):>14} {ms(steady):>14} {ms(ten):>14} "
                f"{per(bare[0]):6.2f}/{per(first[0]):6.2f}/{per(steady[0]):5.2f}/{per(ten[0]):5.2f}   "
                f"{ratio:5.2f} ({thread_ratio:4.2f}) "
                f"{'ok' if max(ratio, thread_ratio) <= SNAPSHOT_RATIO_TARGET else 'MISSED'}")
        extra = []
        if out["live_after"] != out["live_before"]:
            extra.append(f"jax.live_arrays() grew from {out['live_before']} to {out['live_after']} "
                         f"after the first snapshot; the bare profile then took {sbare[0] * 1e3:.1f} ms "
                         f"({sbare[0] / bare[0]:.1f}x)")
        if out["second_check"][0] != out["second_check"][1]:
            extra.append(f"second snapshot live_bytes {out['second_check'][0]} != profile buffer bytes "
                         f"{out['second_check'][1]} (arrays {out['second_check'][2]} for {n} made); "
                         f"second snapshot {out['second'][0] * 1e3:.0f} ms")
        for e in extra:
            res.say(f"{'':16} ! {e}")
        if "cprofile" in out:
            cprofile_text += [f"case {name}: {n} arrays, {mode}"] + out["cprofile"]["first"] + [""]
            cprofile_text += out["cprofile"]["steady"] + [""]
    if cprofile_text:
        CPROFILE_OUT.parent.mkdir(parents=True, exist_ok=True)
        CPROFILE_OUT.write_text("\n".join(cprofile_text) + "\n", encoding="utf-8")
        res.say("\ncProfile of one snapshot (cProfile inflates Python-heavy parts), top by own time:")
        shown = 0
        for line in cprofile_text:
            if line.startswith("  cumulative"):
                shown = -1  # the rest of this table is in the file only
            elif not line.startswith("  ") or line.startswith("  " + " " * 4 + "own"):
                shown = 0
                res.say(line)
            elif 0 <= shown < 10:
                shown += 1
                res.say(line)
        res.say(f"(also in {CPROFILE_OUT.relative_to(REPO)})")


# -- main ------------------------------------------------------------------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, metavar="K",
                    help="runs of each side per workload (default 5)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT,
                    help=f"CSV file (default {DEFAULT_OUT.relative_to(REPO)})")
    ap.add_argument("--quick", action="store_true",
                    help="about 2 minutes: 2 s workloads, fewer in-process repeats")
    ap.add_argument("--only", choices=("run", "snapshot"), default=None, help="run one part only")
    ap.add_argument("--seconds", type=float, default=None,
                    help="how long each training workload runs plain (default 30, --quick 2)")
    ap.add_argument("--arrays", type=int, default=20_000, help="live arrays in many_arrays.py (default 20000)")
    ap.add_argument("--interval", type=float, default=None, help="pass --interval to jaxmemprof run")
    ap.add_argument("--max-overhead", type=float, default=None, help="pass --max-overhead to jaxmemprof run")
    ap.add_argument("--run-arg", action="append", default=[], metavar="ARG",
                    help="pass ARG to jaxmemprof run too (repeatable), e.g. --run-arg=--no-jit-probe")
    ap.add_argument("--no-cprofile", dest="cprofile", action="store_false", help="skip the cProfile tables")
    ap.add_argument("--snapshot-child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.snapshot_child is not None:
        print(json.dumps(snapshot_child(json.loads(args.snapshot_child))))
        return 0
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    if args.seconds is None:
        # A training loop runs for minutes; 30 s keeps the fixed costs (start-up,
        # describing every array once, the end of the run) in proportion
        # while a whole benchmark stays under a quarter of an hour.
        args.seconds = 2.0 if args.quick else 30.0
    args.snap_repeat = 3 if args.quick else 7

    env = dict(os.environ)
    env.setdefault("JAX_PLATFORMS", "cpu")
    env.pop("NO_COLOR", None)

    res = Results()
    t0 = time.perf_counter()
    res.say(f"date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    res.say(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}")
    from importlib.metadata import version

    res.say(f"python {sys.version.split()[0]}, jax {version('jax')}, JAX_PLATFORMS={env['JAX_PLATFORMS']}, "
            f"jaxmemprof {git_state()}")
    res.say(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.only in (None, "run"):
        bench_run(res, args, env)
    if args.only in (None, "snapshot"):
        bench_snapshot(res, args, env)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(res.rows)
    res.say(f"\nload average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    missed = [r["case"] for r in res.rows if r["met"] == "no" and not r["target"].startswith("check")]
    unsure = [r["case"] for r in res.rows if r["met"] == "unsure"]
    failed = [r["case"] for r in res.rows if r["met"] == "no" and r["target"].startswith("check")]
    res.say(f"targets missed: {len(missed)}" + "".join(f"\n  {m}" for m in missed))
    res.say(f"checks failed: {len(failed)}" + "".join(f"\n  {m}" for m in failed))
    if unsure:
        res.say(f"too noisy to judge: {len(unsure)}" + "".join(f"\n  {m}" for m in unsure))
    res.say(f"wrote {args.out} ({time.perf_counter() - t0:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

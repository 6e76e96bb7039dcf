"""What the jit probe costs, and whether its donation advice pays what it says.

    python benchmarks/bench_jit_probe.py [--repeat K] [--seconds S] [--sizes 4,64,256]
        [--only overhead|micro|donation] [--out CSV]

Three parts, all on ``benchmarks/workloads/jit_probe_train.py`` (an MLP trained
with SGD, ``params, loss = step(params, x, y)``):

overhead
    Whole-process wall time of
    ``python -m jaxmemprof run -q --interval 1000 --max-overhead 0 -o TMP SCRIPT``
    with the jit probe (the default) against the same command with
    ``--no-jit-probe``: the sampler does the same work on both sides (a first
    and an exit snapshot only), so the difference is the probe's. One untimed
    warm-up of each side, then K runs of each, alternating which goes first.
    Two workloads, each calibrated (plain ``python SCRIPT --calibrate S``) to
    train for about ``--seconds``: ``mlp`` (4 layers of 256, batch 64, about
    1.4 ms a step: a few thousand jitted calls) and ``tiny`` (2 layers of 8,
    batch 4, tens of microseconds a step, bound by Python dispatch: the worst
    case for a per-call cost). Reported: medians and their ratio for the wall
    time, the training loop's own time (timed inside the script, so without
    start-up), the main thread's CPU time in that loop (``time.thread_time``:
    the probe runs on the caller's thread, and CPU time is less disturbed by
    other processes than wall time) and the child's CPU time (all threads);
    the median of per-pair ratios; and the wall ratio that the per-call cost
    measured in ``micro`` predicts (calls x cost over the no-probe wall time).
    Target: wall ratio <= 1.01; the verdict is "unsure" when the no-probe runs
    differ by more than 3% (a 1% effect cannot be seen), and the predicted
    ratio is judged against the same target.

micro
    In a fresh process, a ``JitProbe`` installed with a ``RunWriter`` in a
    temporary directory (as ``jaxmemprof/capture/session.py`` does), then
    ``Probed.__call__`` against the bare jitted function it wraps (the same
    compiled executable), in blocks of N calls, alternating, median of the
    blocks, after enough calls that the probe has taken all its samples (so
    the calls timed are the unsampled ones). Two functions: the ``tiny``
    training step and ``x + 1`` on 8 floats (the cheapest jitted call). Also:
    the cost of a sampled call (a probe set to sample every call), of
    ``memory_analysis`` through the AOT path after compilation (what the
    probe does once per compiled signature), and of one ``_cache_size()``
    read (the probe makes two per observed call, and one per function at each
    snapshot once its calls go straight to the jitted function).

donation
    For each parameter size (``--sizes``, MiB; depth 4, widths 512, 2048,
    4096 for 4, 64 and 256 MiB): record the loop without donation, read
    ``jaxmemprof report --json``: the "donate" finding's ``saving_bytes`` and
    its fix (``donate_argnums=(0,)``), and ``jit_memory``; apply the fix
    (``--donate 0``), record again, and compare the predicted saving with
    XLA's ``alias_bytes`` (target: within 10%), with the drop in
    ``call_peak_bytes`` (argument + output - alias + temp + code: XLA's
    temporaries may change with donation), and with the drop in the peak RSS
    of the process (``os.wait4`` of the child; on the CPU backend device
    buffers are host memory). The RSS figures are medians of K recorded runs
    of each side, alternating; the reports are read from the first pair. The
    RSS of a second set of runs with ``MALLOC_MMAP_THRESHOLD_`` fixed at 1 MiB
    is shown too (glibc otherwise serves freed 16 MiB buffers from its heap,
    whose pages it keeps, so peak RSS also counts fragmentation);
    ``--no-mmap-variant`` skips it.

Results: ``benchmarks/data/jit_probe_results.csv`` (columns ``benchmark, case,
value, unit, reference, ratio, target, met``; ``met`` is ``yes``, ``no`` or
``unsure`` when the machine was too noisy to tell) and a summary on stdout.
About 7 minutes at default settings on 2 cores.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _common import Results, git_state

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORKLOAD = HERE / "workloads" / "jit_probe_train.py"
DATA = HERE / "data"
DEFAULT_OUT = DATA / "jit_probe_results.csv"

OVERHEAD_TARGET = 1.01
ALIAS_TOLERANCE = 0.10
NOISE_LIMIT = 0.03  # spread (max/min - 1) of the no-probe runs above which a missed target is "unsure"
COLUMNS = ("benchmark", "case", "value", "unit", "reference", "ratio", "target", "met")

OVERHEAD_CASES = {
    "mlp": ["--width", "256", "--depth", "4", "--batch", "64"],
    "tiny": ["--width", "8", "--depth", "2", "--batch", "4"],
}
DEPTH = 4
DONATION_STEPS = 8  # call 1 compiles; 2-4 are sampled; 5 checks what became of 4's inputs
DONATION_BATCH = 4
MIB = 1024 ** 2


# -- results -----------------------------------------------------------------


def say(line=""):
    print(line, flush=True)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def median(xs):
    return statistics.median(xs) if xs else float("nan")


# -- running a child -------------------------------------------------------------


@dataclass
class Child:
    wall_s: float
    cpu_s: float
    maxrss_bytes: int
    stdout: str
    returncode: int


def spawn(cmd: list[str], env: dict, cwd: str) -> Child:
    """Run ``cmd`` to the end; its wall time, CPU time and peak RSS (its own,
    from ``wait4``, not every child's so far)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {p.returncode}:\n{stderr[-3000:]}")
    return Child(wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024, stdout, p.returncode)


def last_json(text: str) -> dict:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError(f"no JSON line in: {text[-500:]!r}")


def record_cmd(run_dir: str, probe: bool, script_args: list[str], options: tuple = ()) -> list[str]:
    return ([sys.executable, "-m", "jaxmemprof", "run", "-q", "--force", "-o", run_dir, *options]
            + ([] if probe else ["--no-jit-probe"]) + [str(WORKLOAD), *script_args])


def report_json(run_dir: str, env: dict, cwd: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "jaxmemprof", "report", run_dir, "--json"], env=env, cwd=cwd,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


# -- part 1: whole runs, probe against no probe ----------------------------------


def bench_overhead(res: Results, args, env: dict, work: str, per_call: dict) -> None:
    say("\n== overhead: jaxmemprof run -q --interval 1000 --max-overhead 0, jit probe on / off "
        f"(median of {args.repeat}) ==")
    for case, case_args in OVERHEAD_CASES.items():
        cal = last_json(spawn([sys.executable, str(WORKLOAD), *case_args, "--calibrate", str(args.seconds)],
                              env, work).stdout)
        steps = cal["steps"]
        script_args = [*case_args, "--steps", str(steps)]
        log(f"[overhead] {case}: {steps} steps ({cal['step_us']:.1f} us/step plain)")
        sides = {"probe": True, "no-probe": False}
        data = {s: {"wall": [], "loop": [], "cpu": [], "thread": []} for s in sides}
        for i in range(args.repeat + 1):  # the first round is a warm-up
            order = list(sides) if i % 2 == 0 else list(sides)[::-1]
            for side in order:
                d = os.path.join(work, f"ovh-{case}-{side}")
                c = spawn(record_cmd(d, sides[side], script_args, ("--interval", "1000", "--max-overhead", "0")),
                          env, work)
                shutil.rmtree(d, ignore_errors=True)
                if i == 0:
                    continue
                data[side]["wall"].append(c.wall_s)
                data[side]["loop"].append(last_json(c.stdout)["loop_s"])
                data[side]["thread"].append(last_json(c.stdout)["loop_cpu_s"])
                data[side]["cpu"].append(c.cpu_s)
            if i:
                log(f"[overhead] {case} round {i}: wall probe {data['probe']['wall'][-1]:.3f} s, "
                    f"no-probe {data['no-probe']['wall'][-1]:.3f} s")
        p, n = data["probe"], data["no-probe"]
        wall_ratio = median(p["wall"]) / median(n["wall"])
        loop_ratio = median(p["loop"]) / median(n["loop"])
        cpu_ratio = median(p["cpu"]) / median(n["cpu"])
        thread_ratio = median(p["thread"]) / median(n["thread"])
        pair_ratio = median([a / b for a, b in zip(p["wall"], n["wall"])])
        min_ratio = min(p["wall"]) / min(n["wall"])
        spread = max(n["wall"]) / min(n["wall"]) - 1
        step_us = median(n["loop"]) / (steps - 1) * 1e6
        overhead_us = per_call.get("tiny")  # unsampled calls do not look at the arguments: size-independent
        predicted = None
        if overhead_us is not None:
            predicted = 1 + overhead_us * (steps - 1) / 1e6 / median(n["wall"])
        met = _verdict(wall_ratio, min_ratio, pair_ratio, OVERHEAD_TARGET, spread)
        say(f"{case}: {steps} steps, {step_us:.1f} us/step without the probe")
        say(f"  wall  probe {median(p['wall']):.3f} s  no-probe {median(n['wall']):.3f} s  ratio {wall_ratio:.4f}"
            f"  (fastest runs {min_ratio:.4f}, median of pairs {pair_ratio:.4f}; no-probe spread "
            f"{spread * 100:.1f}%)  target <= {OVERHEAD_TARGET}: {met}")
        say(f"  loop  probe {median(p['loop']):.3f} s  no-probe {median(n['loop']):.3f} s  ratio {loop_ratio:.4f}")
        say(f"  main thread's CPU in the loop: probe {median(p['thread']):.3f} s  no-probe "
            f"{median(n['thread']):.3f} s  ratio {thread_ratio:.4f}")
        say(f"  process CPU (user+sys, all threads): probe {median(p['cpu']):.3f} s  no-probe "
            f"{median(n['cpu']):.3f} s  ratio {cpu_ratio:.4f}")
        if predicted is not None:
            pmet = "yes" if predicted <= OVERHEAD_TARGET else "no"
            say(f"  predicted from the per-call cost ({overhead_us:.2f} us x {steps - 1} calls over the no-probe "
                f"wall time): {predicted:.4f}  target <= {OVERHEAD_TARGET}: {pmet}")
        b = "run_overhead"
        res.add(b, f"{case}: steps", steps, "calls")
        res.add(b, f"{case}: step time without probe", step_us, "us")
        res.add(b, f"{case}: wall, median", median(p["wall"]), "s", median(n["wall"]), wall_ratio,
                f"<= {OVERHEAD_TARGET}", met)
        res.add(b, f"{case}: wall, fastest", min(p["wall"]), "s", min(n["wall"]), min_ratio)
        res.add(b, f"{case}: wall, median of per-pair ratios", None, "", None, pair_ratio)
        res.add(b, f"{case}: wall spread of no-probe runs", spread * 100, "%")
        res.add(b, f"{case}: training loop, median", median(p["loop"]), "s", median(n["loop"]), loop_ratio)
        res.add(b, f"{case}: main thread CPU in the training loop, median", median(p["thread"]), "s",
                median(n["thread"]), thread_ratio)
        res.add(b, f"{case}: process cpu (user+sys), median", median(p["cpu"]), "s", median(n["cpu"]), cpu_ratio)
        if predicted is not None:
            res.add(b, f"{case}: wall ratio predicted from the per-call cost", None, "", None, predicted,
                    f"<= {OVERHEAD_TARGET}", predicted <= OVERHEAD_TARGET)


def _verdict(ratio, fastest, pairs, target, spread):
    """A wall-time verdict only when the machine was quiet enough to resolve
    the target: the no-probe runs within NOISE_LIMIT of each other."""
    if spread > NOISE_LIMIT:
        return "unsure"
    if ratio <= target:
        return "yes"
    if fastest <= target or pairs <= target:
        return "unsure"
    return "no"


# -- part 2: per call, in process --------------------------------------------------


def micro_child(cfg: dict) -> dict:
    """Runs in a fresh process: the probe's cost per call."""
    import gc

    from jaxmemprof.capture.jit import JitProbe, Probed
    from jaxmemprof.store.writer import RunWriter

    tmp = tempfile.mkdtemp(prefix="jaxmemprof-bench-")
    writer = RunWriter(Path(tmp), {"benchmark": "bench_jit_probe micro"})
    probe = JitProbe(writer)
    probe.install()  # before jax is imported, as jaxmemprof run does

    import jax
    import jax.numpy as jnp

    sys.path.insert(0, str(WORKLOAD.parent))
    import jit_probe_train as w

    blocks, n = cfg["blocks"], cfg["calls"]
    out: dict = {}

    def tiny_setup():
        f = jax.jit(w.train_step)
        params = w.init(8, 2)
        x, y = jnp.ones((4, 8)), jnp.zeros((4, 8))

        def loop(fn, k):
            nonlocal params
            p, loss = params, None
            for _ in range(k):
                p, loss = fn(p, x, y)
            loss.block_until_ready()
            params = p

        return f, loop, lambda: (params, x, y)

    def add_one_setup():
        f = jax.jit(lambda v: v + 1)
        state = {"v": jnp.zeros(8)}

        def loop(fn, k):
            v = state.pop("v")
            for _ in range(k):
                v = fn(v)
            v.block_until_ready()
            state["v"] = v

        return f, loop, lambda: (state["v"],)

    gc.disable()  # the collector's pauses land on one side or the other
    for name, setup in (("tiny", tiny_setup), ("add_one", add_one_setup)):
        probed, loop, current = setup()
        assert isinstance(probed, Probed), type(probed)
        bare = probed._real
        # Past every sample: sample_first calls, then one in sample_every up to max_samples.
        warm = probe.sample_first + probe.sample_every * probe.max_samples + 10
        loop(probed, warm)
        loop(bare, 200)
        st = probed._state
        assert st.samples == probe.max_samples, (st.samples, probe.max_samples)
        times = {"bare": [], "probed": []}
        for i in range(blocks):
            for side in (("bare", "probed") if i % 2 == 0 else ("probed", "bare")):
                fn = bare if side == "bare" else probed
                t0 = time.perf_counter()
                loop(fn, n)
                times[side].append((time.perf_counter() - t0) / n * 1e6)
        diffs = [a - b for a, b in zip(times["probed"], times["bare"])]
        out[name] = {"bare_us": median(times["bare"]), "probed_us": median(times["probed"]),
                     "overhead_us": median(diffs), "overhead_min_us": min(times["probed"]) - min(times["bare"]),
                     "samples": st.samples, "calls": st.calls}

        # One _cache_size() read (two per observed call; per snapshot once quiet).
        k = 20000
        t0 = time.perf_counter()
        for _ in range(k):
            bare._cache_size()
        out[name]["cache_size_us"] = (time.perf_counter() - t0) / k * 1e6

        # memory_analysis through the AOT path, as the probe reads it once per signature.
        args = current()
        ma = []
        for _ in range(10):
            t0 = time.perf_counter()
            bare.lower(*args).compile().memory_analysis()
            ma.append((time.perf_counter() - t0) * 1e3)
        out[name]["memory_analysis_ms"] = median(ma)

    # A sampled call: a function jitted while the probe samples every call.
    probe.sample_first, probe.sample_every, probe.max_samples = 10 ** 9, 1, 10 ** 9
    probed, loop, _ = tiny_setup()
    bare = probed._real
    loop(probed, 5)
    m = cfg["sampled_calls"]
    times = {"bare": [], "probed": []}
    for i in range(max(3, blocks // 2)):
        for side in (("bare", "probed") if i % 2 == 0 else ("probed", "bare")):
            fn = bare if side == "bare" else probed
            t0 = time.perf_counter()
            loop(fn, m)
            times[side].append((time.perf_counter() - t0) / m * 1e6)
    out["sampled"] = {"bare_us": median(times["bare"]), "probed_us": median(times["probed"]),
                      "overhead_us": median([a - b for a, b in zip(times["probed"], times["bare"])]),
                      "samples": probed._state.samples}
    gc.enable()
    probe.uninstall()
    writer.finish(end_time=None)
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def bench_micro(res: Results, args, env: dict, work: str) -> dict:
    say(f"\n== micro: Probed.__call__ against the bare jitted function, unsampled calls "
        f"(median of {args.blocks} blocks of {args.calls} calls) ==")
    cfg = {"blocks": args.blocks, "calls": args.calls, "sampled_calls": 300}
    c = spawn([sys.executable, str(Path(__file__).resolve()), "--micro-child", json.dumps(cfg)], env, work)
    r = last_json(c.stdout)
    b = "probe_per_call"
    for name in ("tiny", "add_one"):
        d = r[name]
        say(f"{name}: bare {d['bare_us']:.2f} us/call, probed {d['probed_us']:.2f} us/call: "
            f"+{d['overhead_us']:.2f} us ({d['overhead_us'] / d['bare_us'] * 100:.1f}%; fastest blocks: "
            f"+{d['overhead_min_us']:.2f} us) "
            f"[after {d['samples']} samples]; _cache_size() {d['cache_size_us']:.3f} us; "
            f"memory_analysis (AOT, cached) {d['memory_analysis_ms']:.2f} ms")
        res.add(b, f"{name}: unsampled call", d["probed_us"], "us", d["bare_us"], d["probed_us"] / d["bare_us"])
        res.add(b, f"{name}: probe cost per unsampled call (median of block differences)", d["overhead_us"], "us")
        res.add(b, f"{name}: probe cost per unsampled call (fastest blocks)", d["overhead_min_us"], "us")
        res.add(b, f"{name}: one _cache_size() read", d["cache_size_us"], "us")
        res.add(b, f"{name}: memory_analysis through lower().compile()", d["memory_analysis_ms"], "ms")
    s = r["sampled"]
    say(f"sampled call (tiny step, every call sampled): bare {s['bare_us']:.2f} us, probed {s['probed_us']:.2f} us: "
        f"+{s['overhead_us']:.1f} us per sampled call (at most 20 per function by default)")
    res.add(b, "tiny: probe cost per sampled call", s["overhead_us"], "us", s["bare_us"])
    return {k: r[k]["overhead_us"] for k in ("tiny", "add_one")}


# -- part 3: donation, predicted against measured -----------------------------------


def _width(mib: float) -> int:
    # DEPTH layers of width x width float32 weights (plus width biases each).
    return int(round((mib * MIB / 4 / DEPTH) ** 0.5))


def _train_fn(rep: dict) -> dict:
    rows = [r for r in rep.get("jit_memory") or [] if r["function"] == "train_step"]
    if not rows:
        raise RuntimeError("no jit_memory row for train_step")
    return rows[0]


def bench_donation(res: Results, args, env: dict, work: str) -> None:
    say(f"\n== donation: predicted saving against XLA's alias, call peak and peak RSS "
        f"(RSS: median of {args.repeat} recorded runs per side) ==")
    mmap_env = dict(env, MALLOC_MMAP_THRESHOLD_=str(MIB))
    b = "donation"
    for mib in args.sizes:
        width = _width(mib)
        base = ["--width", str(width), "--depth", str(DEPTH), "--batch", str(DONATION_BATCH),
                "--steps", str(DONATION_STEPS)]
        dir_a, dir_b = os.path.join(work, f"don-{mib}-none"), os.path.join(work, f"don-{mib}-donate")
        # 1. Record without donation and read the advice.
        first = spawn(record_cmd(dir_a, True, base), env, work)
        rep_a = report_json(dir_a, env, work)
        donate = [f for f in rep_a["findings"] if f["rule"] == "donate"]
        jm_a = _train_fn(rep_a)
        state_bytes = last_json(first.stdout)["state_bytes"]
        if not donate:
            say(f"{mib} MiB: NO donate finding (findings: {[f['rule'] for f in rep_a['findings']]})")
            res.add(b, f"{mib} MiB: donate finding", 0, "findings", 1, None, "check: = 1", False)
            continue
        f = donate[0]
        predicted = int(f["saving_bytes"])
        m = re.search(r"donate_argnums=\(([\d, ]*)\)", f["fix"])
        argnums = ",".join(x.strip() for x in m.group(1).split(",") if x.strip()) if m else ""
        # 2. Apply it and record again.
        donated_args = base + ["--donate", argnums]
        second = spawn(record_cmd(dir_b, True, donated_args), env, work)
        rep_b = report_json(dir_b, env, work)
        jm_b = _train_fn(rep_b)
        left = [g["rule"] for g in rep_b["findings"] if g["rule"].startswith("don")]
        alias = int(jm_b["alias_bytes"])
        peak_drop = int(jm_a["call_peak_bytes"]) - int(jm_b["call_peak_bytes"])
        temp_change = int(jm_b["temp_bytes"]) - int(jm_a["temp_bytes"])
        # 3. Peak RSS: more recorded runs of each side, alternating.
        rss = {"none": [first.maxrss_bytes], "donate": [second.maxrss_bytes]}
        rss_mmap = {"none": [], "donate": []}
        for i in range(1, args.repeat):
            for side in (("donate", "none") if i % 2 else ("none", "donate")):
                a = base if side == "none" else donated_args
                d = dir_a if side == "none" else dir_b
                rss[side].append(spawn(record_cmd(d + "-rss", True, a), env, work).maxrss_bytes)
        if args.mmap_variant:
            for i in range(args.repeat):
                for side in (("none", "donate") if i % 2 == 0 else ("donate", "none")):
                    a = base if side == "none" else donated_args
                    d = dir_a if side == "none" else dir_b
                    rss_mmap[side].append(spawn(record_cmd(d + "-rss", True, a), mmap_env, work).maxrss_bytes)
        rss_drop = median(rss["none"]) - median(rss["donate"])
        alias_err = abs(alias - predicted) / predicted
        alias_ok = alias_err <= ALIAS_TOLERANCE
        say(f"{mib} MiB (width {width}, depth {DEPTH}; parameters {state_bytes / MIB:.2f} MiB):")
        say(f"  finding: saving_bytes {predicted:,} ({predicted / MIB:.2f} MiB), fix: donate_argnums=({argnums},)")
        say(f"  XLA alias after donating: {alias:,} bytes: {alias / predicted * 100:.2f}% of the prediction"
            f" (target within {ALIAS_TOLERANCE:.0%}: {'met' if alias_ok else 'MISSED'})")
        say(f"  call peak {int(jm_a['call_peak_bytes']) / MIB:.2f} -> {int(jm_b['call_peak_bytes']) / MIB:.2f} MiB: "
            f"drop {peak_drop / MIB:.2f} MiB = {peak_drop / predicted * 100:.1f}% of the prediction "
            f"(temporaries {int(jm_a['temp_bytes']) / MIB:.2f} -> {int(jm_b['temp_bytes']) / MIB:.2f} MiB)")
        est_a = rep_a["summary"].get("true_peak_total_bytes")
        est_b = rep_b["summary"].get("true_peak_total_bytes")
        if est_a is not None and est_b is not None:
            say(f"  report's estimated true peak {est_a / MIB:.2f} -> {est_b / MIB:.2f} MiB: drop "
                f"{(est_a - est_b) / MIB:.2f} MiB = {(est_a - est_b) / predicted * 100:.1f}% of the prediction")
        say(f"  peak RSS {median(rss['none']) / MIB:.1f} -> {median(rss['donate']) / MIB:.1f} MiB: "
            f"drop {rss_drop / MIB:.1f} MiB = {rss_drop / predicted * 100:.1f}% of the prediction "
            f"(runs: {', '.join(f'{x / MIB:.0f}' for x in rss['none'])} / "
            f"{', '.join(f'{x / MIB:.0f}' for x in rss['donate'])})")
        if args.mmap_variant:
            drop_m = median(rss_mmap["none"]) - median(rss_mmap["donate"])
            say(f"  peak RSS, MALLOC_MMAP_THRESHOLD_=1MiB: {median(rss_mmap['none']) / MIB:.1f} -> "
                f"{median(rss_mmap['donate']) / MIB:.1f} MiB: drop {drop_m / MIB:.1f} MiB = "
                f"{drop_m / predicted * 100:.1f}% of the prediction")
        say(f"  after donating: donation findings left: {left or 'none'}; training loop "
            f"{last_json(first.stdout)['loop_s']:.2f} s -> {last_json(second.stdout)['loop_s']:.2f} s")
        c = f"{mib} MiB"
        res.add(b, f"{c}: parameter bytes", state_bytes, "bytes")
        res.add(b, f"{c}: predicted saving (finding saving_bytes)", predicted, "bytes", state_bytes,
                predicted / state_bytes)
        res.add(b, f"{c}: XLA alias_bytes after donating", alias, "bytes", predicted, alias / predicted,
                f"within {ALIAS_TOLERANCE:.0%} of predicted", alias_ok)
        res.add(b, f"{c}: call_peak_bytes without donation", int(jm_a["call_peak_bytes"]), "bytes")
        res.add(b, f"{c}: call_peak_bytes with donation", int(jm_b["call_peak_bytes"]), "bytes")
        res.add(b, f"{c}: call_peak drop", peak_drop, "bytes", predicted, peak_drop / predicted)
        res.add(b, f"{c}: temp_bytes change with donation", temp_change, "bytes", predicted, temp_change / predicted)
        if est_a is not None and est_b is not None:
            res.add(b, f"{c}: true_peak_total_bytes without donation", est_a, "bytes")
            res.add(b, f"{c}: true_peak_total_bytes with donation", est_b, "bytes")
            res.add(b, f"{c}: estimated true peak drop", est_a - est_b, "bytes", predicted, (est_a - est_b) / predicted)
        res.add(b, f"{c}: peak RSS without donation, median", median(rss["none"]), "bytes")
        res.add(b, f"{c}: peak RSS with donation, median", median(rss["donate"]), "bytes")
        res.add(b, f"{c}: peak RSS drop", rss_drop, "bytes", predicted, rss_drop / predicted)
        if args.mmap_variant:
            res.add(b, f"{c}: peak RSS drop, MALLOC_MMAP_THRESHOLD_=1MiB", drop_m, "bytes", predicted,
                    drop_m / predicted)
        res.add(b, f"{c}: donation findings left after applying", len(left), "findings", 0, None, "check: = 0",
                not left)
        for d in (dir_a, dir_b, dir_a + "-rss", dir_b + "-rss"):
            shutil.rmtree(d, ignore_errors=True)


# -- main --------------------------------------------------------------------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, metavar="K", help="runs of each side (default 5)")
    ap.add_argument("--seconds", type=float, default=6.0,
                    help="training time of each overhead workload, plain (default 6)")
    ap.add_argument("--sizes", default="4,64,256", help="parameter sizes in MiB for donation (default 4,64,256)")
    ap.add_argument("--blocks", type=int, default=21, help="micro: timed blocks per side (default 21)")
    ap.add_argument("--calls", type=int, default=5000, help="micro: calls per block (default 5000)")
    ap.add_argument("--no-mmap-variant", dest="mmap_variant", action="store_false",
                    help="donation: skip the RSS runs with MALLOC_MMAP_THRESHOLD_ fixed")
    ap.add_argument("--only", choices=("overhead", "micro", "donation"), default=None)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="CSV file (default benchmarks/data/...)")
    ap.add_argument("--micro-child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.micro_child is not None:
        print(json.dumps(micro_child(json.loads(args.micro_child))))
        return 0
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    args.sizes = [float(s) if "." in s else int(s) for s in args.sizes.split(",") if s.strip()]

    env = dict(os.environ)
    env.setdefault("JAX_PLATFORMS", "cpu")
    env.pop("MALLOC_MMAP_THRESHOLD_", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    from importlib.metadata import version

    t_start = time.perf_counter()
    say(f"date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    say(f"machine: {platform.machine()}, {os.cpu_count()} CPUs; python {sys.version.split()[0]}, "
        f"jax {version('jax')}, JAX_PLATFORMS={env['JAX_PLATFORMS']}; jaxmemprof {git_state()}")
    say(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    res = Results()
    work = tempfile.mkdtemp(prefix="bench-jit-probe-")
    try:
        per_call: dict = {}
        if args.only in (None, "micro", "overhead"):
            per_call = bench_micro(res, args, env, work)
        if args.only in (None, "overhead"):
            bench_overhead(res, args, env, work, per_call)
        if args.only in (None, "donation"):
            bench_donation(res, args, env, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(res.rows)
    say(f"\nload average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    missed = [r["case"] for r in res.rows if r["met"] == "no"]
    unsure = [r["case"] for r in res.rows if r["met"] == "unsure"]
    say(f"targets missed / checks failed: {len(missed)}" + "".join(f"\n  {m}" for m in missed))
    if unsure:
        say(f"too noisy to judge: {len(unsure)}" + "".join(f"\n  {m}" for m in unsure))
    say(f"wrote {args.out} ({time.perf_counter() - t_start:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

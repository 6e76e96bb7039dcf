"""What the pytest plugin costs, measured side by side.

    python benchmarks/bench_pytest_plugin.py [--repeat K] [--out CSV] [--quick]

Each case is a whole ``python -m pytest`` process on a suite generated into a
temporary directory, run K times (default 5) with the plugin and with it
disabled (``-p no:jaxmemprof``), alternating which goes first; reported: the
median CPU times (user + system: on a machine shared with other work, wall
time measures the neighbours too) and their ratio.

collect_plain
    ``--collect-only`` of 500 trivial tests (no JAX): what installing
    jaxmemprof costs a suite that never uses it. Target: ratio <= 1.02.
run_plain
    Running those 500 tests. Target: ratio <= 1.02.
run_jax_unmarked
    20 small JAX tests (arrays and a jitted call each), no marker: the
    plugin loaded but not used. Target: ratio <= 1.02.
run_jax_marked
    The same 20 tests, each with ``limit_device_memory`` (a run recorded per
    test, XLA's dump of its jitted function read): the cost per test, in ms,
    against the unmarked suite without the plugin. No target: it is the price
    of the measurement.
run_jax_flag
    The unmarked suite with ``--jaxmemprof`` (every test recorded, no dumps).
plugin_import
    ``import jaxmemprof.pytest_plugin`` alone, in a fresh process, and which
    heavy modules it brought in (none expected: jax, pandas, numpy, capture).
optax_flag, optax_loaded
    A real absltest/parameterized suite: optax's own test files (``OPTAX_FILES``,
    shipped in the optax wheel from PyPI, 120 tests), run as a new user would:
    ``pytest FILES`` with the plugin disabled (``-p no:jaxmemprof``), loaded
    but unused, and with ``--jaxmemprof``, one after the other (off, loaded,
    flag; the next round flag, loaded, off), ``--rounds`` rounds (default 3).
    Reported: the medians of CPU and wall time, and per test the CPU time
    ``--jaxmemprof`` adds: the median of each round's difference between it
    and the mean of the two runs that measure nothing. Target: at most 20 ms a test (``optax_flag_per_test``); the
    unused plugin: ratio <= 1.02 (``optax_loaded``, against ``-p no:jaxmemprof``).

``--breakdown`` instead runs optax's files once with ``--jaxmemprof`` (and
once without) with a timing plugin: each part of the plugin's per-test work,
in thread CPU time per test (``benchmarks/data/pytest_plugin_breakdown.csv``).

Results: ``benchmarks/data/pytest_plugin.csv`` and a summary on stdout. About
3 minutes at the defaults on 2 idle cores for the generated suites, and 1 minute a
pytest run of optax's files (9 runs at the default 3 rounds); ``--quick`` (2
repeats, 2 rounds) about 7 in all; ``--optax-only`` runs the optax case alone.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from _common import Results, git_state

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
DEFAULT_OUT = DATA / "pytest_plugin.csv"
COLUMNS = ("benchmark", "case", "value", "unit", "reference", "ratio", "target", "met")
RATIO_TARGET = 1.02
PER_TEST_TARGET_MS = 20.0

# optax's test files (absltest.TestCase and parameterized.TestCase), a fixed set
# whose tests all pass on the CPU backend: relative to the installed optax package.
OPTAX_FILES = (
    "_src/base_test.py", "_src/combine_test.py", "_src/transform_test.py", "_src/update_test.py",
    "_src/lookahead_test.py", "transforms/_masking_test.py", "transforms/_conditionality_test.py",
    "transforms/_combining_test.py", "transforms/_adding_test.py", "transforms/_constraining_test.py",
    "tree_utils/_state_utils_test.py",
)

PLAIN = "\n".join(f"def test_{i}():\n    assert {i} + 1 == {i + 1}\n" for i in range(500))

JAX_TEST = '''
{marker}def test_{i}():
    x = jnp.ones((256, 256), jnp.float32) * {i}
    f = jax.jit(lambda a: (a @ a.T).sum())
    assert f(x).shape == ()
'''


def jax_suite(marked: bool) -> str:
    marker = '@pytest.mark.limit_device_memory("64 MiB")\n' if marked else ""
    head = "import jax\nimport jax.numpy as jnp\nimport pytest\n"
    return head + "".join(JAX_TEST.format(marker=marker, i=i) for i in range(20))


INI = textwrap.dedent("""
    [pytest]
    markers =
        limit_device_memory(size): registered here too, for the runs without the plugin
    addopts = -p no:cacheprovider
""")


def timed(cmd, cwd, *, wall: bool = False, output: bool = False):
    """CPU time (user + system) of one pytest process: on a machine shared with
    other work, wall time measures the neighbours as much as pytest (``wall``:
    (cpu, wall); ``output``: its output too)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    took = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} in {cwd} exited {proc.returncode}:\n"
                           f"{proc.stdout[-3000:].decode('utf-8', 'replace')}")
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    out = (cpu, took) if wall else cpu
    return (out, proc.stdout.decode("utf-8", "replace")) if output else out


def optax_files() -> list[Path]:
    """OPTAX_FILES in the installed optax (its wheel ships its tests)."""
    import importlib.util

    spec = importlib.util.find_spec("optax")
    if spec is None or not spec.origin:
        raise SystemExit("optax is not installed (pip install -e '.[test]')")
    root = Path(spec.origin).parent
    files = [root / f for f in OPTAX_FILES]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise SystemExit(f"this optax ships no {', '.join(missing)}")
    return files


def bench_optax(res: Results, rounds: int) -> None:
    """optax's own test files: without the plugin, with it unused, with
    --jaxmemprof, one after the other (the order reversed each round)."""
    import optax

    files = optax_files()
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *map(str, files)]
    modes = {"off": pytest + ["-p", "no:jaxmemprof"], "loaded": pytest, "flag": pytest + ["--jaxmemprof"]}
    names = list(modes)
    with tempfile.TemporaryDirectory(prefix="jaxmemprof-bench-optax-") as cwd:
        _, text = timed(modes["off"], cwd, output=True)  # untimed: warm the page cache and the .pyc files
        passed = re.search(r"(\d+) passed", text)
        n = int(passed.group(1)) if passed else 0
        res.say(f"optax {optax.__version__}: {len(files)} test files, {n} tests; {rounds} rounds of "
                f"{', '.join(names)} one after the other, the order reversed each round")
        cpu: dict = {m: [] for m in names}
        wall: dict = {m: [] for m in names}
        for r in range(rounds):
            # loaded beside each of the others, which runs first alternating
            for m in (names if r % 2 == 0 else names[::-1]):
                c, w = timed(modes[m], cwd, wall=True)
                cpu[m].append(c)
                wall[m].append(w)
            res.say(f"  round {r + 1}: " + ", ".join(f"{m} {cpu[m][-1]:.2f} s CPU ({wall[m][-1]:.2f} s wall)"
                                                      for m in names))
    med = {m: statistics.median(cpu[m]) for m in names}
    medw = {m: statistics.median(wall[m]) for m in names}
    # Per test: the median of each round's difference between the flag and the mean of the two runs
    # that measure nothing (the plugin off, and unused: the same cost, optax_loaded's ratio shows),
    # one after the other: a neighbour's load that changes between rounds moves it less than the
    # difference of the medians, and two references halve the noise of one.
    per_round = [(f - (o + u) / 2) / max(n, 1) * 1e3 for f, o, u in zip(cpu["flag"], cpu["off"], cpu["loaded"])]
    per_test = statistics.median(per_round)
    per_test_wall = (medw["flag"] - (medw["off"] + medw["loaded"]) / 2) / max(n, 1) * 1e3
    loaded = med["loaded"] / med["off"]
    res.add("pytest_plugin", "optax_off", med["off"], "s cpu")
    res.add("pytest_plugin", "optax_loaded", med["loaded"], "s cpu", med["off"], loaded, f"ratio <= {RATIO_TARGET}",
            loaded <= RATIO_TARGET)
    res.add("pytest_plugin", "optax_flag", med["flag"], "s cpu", med["loaded"], med["flag"] / med["loaded"])
    res.add("pytest_plugin", "optax_flag_per_test", per_test, "ms cpu", target=f"<= {PER_TEST_TARGET_MS:g} ms",
            met=per_test <= PER_TEST_TARGET_MS)
    res.add("pytest_plugin", "optax_flag_per_test_wall", per_test_wall, "ms wall")
    res.say(f"optax_off          {med['off']:7.2f} s CPU  {medw['off']:7.2f} s wall (medians)")
    res.say(f"optax_loaded       {med['loaded']:7.2f} s CPU  {medw['loaded']:7.2f} s wall   ratio {loaded:.3f} "
            f"to off (target <= {RATIO_TARGET})")
    res.say(f"optax_flag         {med['flag']:7.2f} s CPU  {medw['flag']:7.2f} s wall   ratio "
            f"{med['flag'] / med['loaded']:.3f} to loaded")
    res.say(f"optax_flag_per_test {per_test:.1f} ms CPU a test (median of the rounds: "
            f"{', '.join(f'{x:.1f}' for x in per_round)}; of the medians "
            f"{(med['flag'] - (med['off'] + med['loaded']) / 2) / max(n, 1) * 1e3:.1f}; wall {per_test_wall:.1f}); "
            f"target <= "
            f"{PER_TEST_TARGET_MS:g} ms")


# A pytest plugin (-p) that times the plugin's own parts in the thread that runs them (thread CPU
# time), for --breakdown: the names are jaxmemprof's, as of this benchmark.
BREAKDOWN_PLUGIN = r'''
import atexit, collections, gc, json, os, time

T = collections.defaultdict(float)
TESTS = [0]


def _timed(owner, attr, name):
    original = getattr(owner, attr)

    def timed(*args, **kwargs):
        t0 = time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            T[name] += time.thread_time() - t0

    setattr(owner, attr, timed)


def pytest_configure(config):
    import jaxmemprof.pytest_plugin as pp
    from jaxmemprof.capture import sampler
    from jaxmemprof.capture.jit import probe, programs

    parts = [(pp._Measure, "_enter", "the test function's start (a young-generation collection, its snapshot)"),
             (pp._Measure, "_leave", "the test function's return (its snapshot, then its locals freed)"),
             (sampler.Sampler, "_loop", "the sampler's thread (its interval snapshots)"),
             (pp._Totals, "start", "session start (probe installed, thread started)"),
             (pp._Totals, "stop", "session stop and measure_totals"),
             (programs.Programs, "_memory_analysis", "probe: memory_analysis() per compile"),
             (probe.JitProbe, "_describe_inputs", "probe: a sampled call's inputs"),
             (probe.JitProbe, "_record_call", "probe: a sampled call's row"),
             (probe.JitProbe, "_register", "probe: a jitted function's row")]
    for owner, attr, name in parts:
        _timed(owner, attr, name)
    original = pp._Totals.start

    def start(self):
        TESTS[0] += 1
        return original(self)

    pp._Totals.start = start
    snapshot = sampler.Sampler.snapshot

    def timed_snapshot(self, trigger, label=None, *args, **kwargs):
        t0 = time.thread_time()
        try:
            return snapshot(self, trigger, label, *args, **kwargs)
        finally:
            T[f"  of which snapshots: {label or trigger}"] += time.thread_time() - t0

    sampler.Sampler.snapshot = timed_snapshot
    started = {}

    def on_gc(phase, info):
        if phase == "start":
            started["t"] = time.thread_time()
        elif "t" in started:
            T[f"automatic garbage collections, generation {info['generation']}"] += time.thread_time() - started.pop("t")

    gc.callbacks.append(on_gc)


@atexit.register
def _write():
    with open(os.environ["JAXMEMPROF_BREAKDOWN"], "w") as f:
        json.dump({"tests": TESTS[0], "seconds": T}, f)
'''


def bench_breakdown(res: Results) -> None:
    """Where --jaxmemprof's time goes on optax's files: each part's thread CPU
    time per test, in one run (and the automatic garbage collections, whoever
    they came from: compare with a run without the flag)."""
    import json

    files = optax_files()
    with tempfile.TemporaryDirectory(prefix="jaxmemprof-bench-breakdown-") as tmp:
        Path(tmp, "jmp_breakdown.py").write_text(BREAKDOWN_PLUGIN)
        out = Path(tmp, "breakdown.json")
        seen = {}
        for flag in ([], ["--jaxmemprof"]):
            env = dict(os.environ, JAX_PLATFORMS="cpu", JAXMEMPROF_BREAKDOWN=str(out),
                       PYTHONPATH=os.pathsep.join([tmp, *filter(None, [os.environ.get("PYTHONPATH")])]))
            subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "jmp_breakdown",
                            *flag, *map(str, files)], cwd=tmp, env=env, stdout=subprocess.DEVNULL, check=True)
            seen[bool(flag)] = json.loads(out.read_text())
    n = max(seen[True]["tests"], 1)
    res.say(f"where --jaxmemprof's time goes, {n} tests (thread CPU time, ms a test):")
    for name, t in sorted(seen[True]["seconds"].items(), key=lambda kv: -kv[1]):
        without = seen[False]["seconds"].get(name)
        also = f"  (without the flag: {without / n * 1e3:.2f})" if without is not None else ""
        res.say(f"  {t / n * 1e3:7.2f}  {name}{also}")
        res.add("pytest_plugin_breakdown", name, t / n * 1e3, "ms cpu a test",
                None if without is None else without / n * 1e3)


def side_by_side(ours, reference, cwd, repeat, reference_cwd=None) -> tuple[float, float]:
    """Median CPU time of ``ours`` and ``reference``, alternating which runs first (one untimed warm-up each)."""
    rcwd = reference_cwd or cwd
    timed(ours, cwd), timed(reference, rcwd)
    a, b = [], []
    for k in range(repeat):
        if k % 2:
            b.append(timed(reference, rcwd))
            a.append(timed(ours, cwd))
        else:
            a.append(timed(ours, cwd))
            b.append(timed(reference, rcwd))
    return statistics.median(a), statistics.median(b)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the optax case (default 3)")
    ap.add_argument("--quick", action="store_true", help="2 repeats, 2 rounds")
    ap.add_argument("--optax-only", action="store_true", help="the optax case alone")
    ap.add_argument("--breakdown", action="store_true",
                    help="where --jaxmemprof's time goes on optax's files (each part's thread CPU time), alone")
    args = ap.parse_args()
    repeat = 2 if args.quick else args.repeat
    rounds = 2 if args.quick else args.rounds
    res = Results()
    res.say(f"jaxmemprof pytest plugin, {git_state()}, {repeat} repeats")
    if args.breakdown:
        bench_breakdown(res)
        write(res, args.out.with_name("pytest_plugin_breakdown.csv") if args.out == DEFAULT_OUT else args.out)
        return
    if args.optax_only:
        bench_optax(res, rounds)
        write(res, args.out)
        return
    pytest = [sys.executable, "-m", "pytest", "-q"]
    off = ["-p", "no:jaxmemprof"]
    with tempfile.TemporaryDirectory(prefix="jaxmemprof-bench-pytest-") as tmp:
        tmp = Path(tmp)
        plain, unmarked, marked = tmp / "plain", tmp / "unmarked", tmp / "marked"
        for d, text in ((plain, PLAIN), (unmarked, jax_suite(False)), (marked, jax_suite(True))):
            d.mkdir()
            (d / "pytest.ini").write_text(INI)
            (d / "test_suite.py").write_text(text)

        for case, cwd, extra in (("collect_plain", plain, ["--collect-only"]), ("run_plain", plain, []),
                                 ("run_jax_unmarked", unmarked, [])):
            ours, ref = side_by_side(pytest + extra, pytest + extra + off, cwd, 3 * repeat)
            ratio = ours / ref
            res.add("pytest_plugin", case, ours, "s cpu", ref, ratio, f"ratio <= {RATIO_TARGET}", ratio <= RATIO_TARGET)
            res.say(f"{case:18} plugin {ours:7.3f} s CPU   without {ref:7.3f} s   ratio {ratio:.3f}")

        # Against the unmarked suite without the plugin: what the measurement adds.
        for case, cwd, extra in (("run_jax_marked", marked, []), ("run_jax_flag", unmarked, ["--jaxmemprof"])):
            ours, ref = side_by_side(pytest + extra, pytest + off, cwd, repeat, reference_cwd=unmarked)
            per_test = (ours - ref) / 20 * 1e3
            res.add("pytest_plugin", case, ours, "s cpu", ref, ours / ref)
            res.add("pytest_plugin", case + "_per_test", per_test, "ms cpu")
            res.say(f"{case:18} plugin {ours:7.3f} s CPU   without {ref:7.3f} s   ratio {ours / ref:.3f}   "
                    f"{per_test:.1f} ms a test")

        code = ("import sys, time; t0 = time.perf_counter(); import jaxmemprof.pytest_plugin; "
                "t = time.perf_counter() - t0; heavy = [m for m in ('jax', 'pandas', 'numpy', 'jaxmemprof.capture') "
                "if m in sys.modules]; print(t, ','.join(heavy) or '-')")
        times, heavy = [], "-"
        for _ in range(repeat):
            # pytest first: the plugin's own cost on top of what pytest loads anyway.
            out = subprocess.run([sys.executable, "-c", "import pytest; " + code], capture_output=True, text=True,
                                 check=True).stdout.split()
            times.append(float(out[0]) * 1e3)
            heavy = out[1]
        t = statistics.median(times)
        res.add("pytest_plugin", "plugin_import", t, "ms", target="imports none of jax, pandas, numpy, capture",
                met=heavy == "-")
        res.say(f"plugin_import      {t:.2f} ms; heavy modules imported: {heavy}")

    bench_optax(res, rounds)
    write(res, args.out)


def write(res: Results, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(res.rows)
    res.say(f"wrote {out}")


if __name__ == "__main__":
    main()

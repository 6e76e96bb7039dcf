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

Results: ``benchmarks/data/pytest_plugin.csv`` and a summary on stdout. About
3 minutes at the defaults on 2 idle cores; ``--quick`` (2 repeats) about 1.
"""

from __future__ import annotations

import argparse
import csv
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from _common import Results, git_state  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
DEFAULT_OUT = DATA / "pytest_plugin.csv"
COLUMNS = ("benchmark", "case", "value", "unit", "reference", "ratio", "target", "met")
RATIO_TARGET = 1.02

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


def timed(cmd, cwd) -> float:
    """CPU time (user + system) of one pytest process: on a machine shared with
    other work, wall time measures the neighbours as much as pytest."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} in {cwd} exited {proc.returncode}:\n"
                           f"{proc.stdout[-3000:].decode('utf-8', 'replace')}")
    return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


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
    ap.add_argument("--quick", action="store_true", help="2 repeats")
    args = ap.parse_args()
    repeat = 2 if args.quick else args.repeat
    res = Results()
    res.say(f"jaxmemprof pytest plugin, {git_state()}, {repeat} repeats")
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

    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(res.rows)
    res.say(f"wrote {args.out}")


if __name__ == "__main__":
    main()

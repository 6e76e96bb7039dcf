"""Leaks and recompilations, found in real runs of scripts with known
behaviour: a leak of a known size per step, a steady loop that must not be
called a leak, a function compiled for several shapes, and a directory of
profiles. The statistics are checked against brute force and scipy."""

from __future__ import annotations

import dataclasses
import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import line_of, run_cli, run_script, write_script

from jaxmemprof.analysis.findings import Finding
from jaxmemprof.analysis.leaks import LEAK_COLUMNS, RECOMPILE_COLUMNS, leaks, mann_kendall, recompiles, theil_sen
from jaxmemprof.analysis.rules.leaks import leak_findings
from jaxmemprof.analysis.sites import Attribution
from jaxmemprof.store.reader import load_run
from jaxmemprof.render.findings import words
from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.options import Options

STEPS = 30

LEAK = """
import time
import jax, jax.numpy as jnp
import jaxmemprof


@jax.jit
def update(p):
    return p * 0.5


def main():
    jax.devices()
    jaxmemprof.snapshot("start")  # 1
    jaxmemprof.snapshot()  # 2, unlabelled
    params = jnp.zeros((64, 1024), jnp.float32)  # SITE-PARAMS
    history = []
    for i in range(30):
        params = update(params)  # SITE-UPDATE
        history.append(jnp.ones((1024,), jnp.float32))  # SITE-LEAK
        jaxmemprof.mark(f"step {i}")
        jaxmemprof.snapshot(f"step {i}")  # 3 + i
    # main() returns: everything is freed before the exit snapshot (33)


main()
"""

STEADY = """
import time
import numpy as np
import jax, jax.numpy as jnp
import jaxmemprof


@jax.jit
def step(params, batch):
    grads = jnp.mean(batch) * params
    return params - 0.01 * grads, jnp.sum(batch)


def main():
    jax.devices()
    jaxmemprof.snapshot("start")
    jaxmemprof.snapshot()
    params = jnp.ones((256, 256), jnp.float32)  # long-lived, replaced every step
    loss = None
    for i in range(30):
        batch = jax.device_put(np.full((128, 1024), i, np.float32))  # a per-step temporary
        scratch = jnp.zeros((64, 1024), jnp.float32) + i  # another
        params, loss = step(params, batch)
        jaxmemprof.mark(f"step {i}")
        jaxmemprof.snapshot(f"step {i}")
    print(float(loss))


main()
"""

RECOMPILE = """
import time
import numpy as np
import jax
import jaxmemprof


@jax.jit
def f(x):
    return x * 2.0


def main():
    jax.devices()
    jaxmemprof.snapshot("start")
    jaxmemprof.snapshot()
    outs = []
    for n in range(1, 6):
        x = np.zeros((n, 8), np.float32)
        outs.append(f(x))  # SITE-CALL
        jaxmemprof.snapshot(f"shape {n}")  # 3, 4, 5, 6, 7
    for _ in range(5):
        outs.append(f(np.ones((5, 8), np.float32)))  # SITE-SAME
    jaxmemprof.snapshot("same shape")  # 8
    return outs


main()
"""

PROFILES = """
import os, sys
import jax, jax.numpy as jnp

out = sys.argv[1]
params = jnp.zeros((64, 1024), jnp.float32)  # SITE-PARAMS
keep = []
for i in range(30):
    keep.append(jnp.ones((1024,), jnp.float32))  # SITE-KEEP
    jax.profiler.save_device_memory_profile(os.path.join(out, f"p{i:03d}.prof"))
"""


def _record(tmp_path_factory, name, source):
    tmp = tmp_path_factory.mktemp(name)
    script = write_script(tmp, f"{name}.py", source)
    run_cli("run", "-q", "--interval", "1000", "-o", tmp / "run", script, cwd=tmp, check=0)
    run = load_run(tmp / "run")
    return script, run, Attribution(roots=(run.manifest["cwd"],))


@pytest.fixture(scope="module")
def leak_run(tmp_path_factory):
    return _record(tmp_path_factory, "leaky", LEAK)


@pytest.fixture(scope="module")
def steady_run(tmp_path_factory):
    return _record(tmp_path_factory, "steady", STEADY)


@pytest.fixture(scope="module")
def recompile_run(tmp_path_factory):
    return _record(tmp_path_factory, "shapes", RECOMPILE)


def test_leak_of_a_known_size_per_step(leak_run):
    script, run, att = leak_run
    assert len(run.snapshots) == STEPS + 3 and run.snapshots["trigger"].iloc[-1] == "exit"
    found = leaks(attribute(run))
    assert list(found.columns) == LEAK_COLUMNS
    assert len(found) == 1  # not the params (constant), not the per-step update
    row = found.iloc[0]
    line = line_of(script, "SITE-LEAK")
    assert (row["site"], row["file"], row["line"], row["function"]) == (f"leaky.py:{line} (main)", "leaky.py",
                                                                        line, "main")
    assert row["growth_bytes_per_step"] == 4096.0
    assert row["growth_bytes_per_s"] > 0
    # The steady phase: from the first step's snapshot (the two before it are
    # the set-up, the exit snapshot is left out), so every one of its 435
    # pairs rises (tau-b 1).
    assert (row["live_bytes_first"], row["live_bytes_last"], row["arrays_last"]) == (4096, STEPS * 4096, STEPS)
    assert row["snapshots_used"] == STEPS
    assert row["tau"] == pytest.approx(1.0)
    assert row["p_value"] < 1e-8
    assert row["projected_steps"] == 1000
    assert np.isnan(row["projected_seconds"])
    assert row["projected_growth_bytes"] == 1000 * 4096
    assert row["projected_bytes_after"] == STEPS * 4096 + 1000 * 4096
    peak = STEPS * 4096 + 64 * 1024 * 4
    assert row["projected_share_of_peak"] == pytest.approx(1000 * 4096 / peak)
    assert leaks(attribute(run), steps=10).iloc[0]["projected_bytes_after"] == (STEPS + 10) * 4096


SETUP_THEN_LEAK = """
import jax, jax.numpy as jnp
import jaxmemprof


@jax.jit
def step(p):
    return p * 0.5, jnp.ones((1024,), jnp.float32)


def main():
    jax.devices()
    for k in range(8):
        jaxmemprof.snapshot(f"setup {k}")  # before the first step
    params = jnp.zeros((64, 1024), jnp.float32)
    history = []
    for i in range(12):
        params, extra = step(params)  # SITE-STEP: 256 KiB replaced, 4 KiB kept, each step
        history.append(extra)
        jaxmemprof.mark(f"step {i}")
        jaxmemprof.snapshot(f"step {i}")


main()
"""


def test_growth_per_step_leaves_out_the_setup_before_the_first_step(tmp_path_factory):
    """The line that makes the parameters (256 KiB at once, at the first
    step) also leaks 4 KiB per step: per step, the growth is 4 KiB, measured
    from the first step on, not the setup's jump."""
    script, run, att = _record(tmp_path_factory, "setup_then_leak", SETUP_THEN_LEAK)
    found = leaks(attribute(run))
    assert len(found) == 1
    row = found.iloc[0]
    assert row["line"] == line_of(script, "SITE-STEP")
    assert row["growth_bytes_per_step"] == 4096.0
    assert (row["live_bytes_first"], row["live_bytes_last"]) == (256 * 1024 + 4096, 256 * 1024 + 12 * 4096)


SETUP_THEN_FLAT = """
import jax, jax.numpy as jnp
import jaxmemprof


@jax.jit
def step(p):
    return p * 0.5


def main():
    jax.devices()
    layers = []
    for k in range(12):  # set-up: a model built layer by layer, a snapshot each
        layers.append(jnp.zeros((64, 1024), jnp.float32))  # SITE-SETUP: 256 KiB a layer
        jaxmemprof.snapshot()
    for i in range(30):  # training: the state replaced, never grown
        layers = [step(p) for p in layers]  # SITE-STEP
        jaxmemprof.snapshot()
    more = []
    for i in range(12):  # then a real leak: 64 KiB kept per step
        layers = [step(p) for p in layers]
        more.append(jnp.ones((16, 1024), jnp.float32))  # SITE-LATE
        jaxmemprof.snapshot()


main()
"""


def test_a_set_up_followed_by_a_flat_state_is_a_level_shift_not_a_leak(tmp_path_factory):
    """No markers: the set-up's rise then a flat state is a shift between
    phases (it once read as a high leak, "growing steadily"); a site that
    grows within the later phase is a leak, its rate measured there."""
    script, run, att = _record(tmp_path_factory, "setup_then_flat", SETUP_THEN_FLAT)
    found = leaks(attribute(run))
    assert found["line"].tolist() == [line_of(script, "SITE-LATE")]
    row = found.iloc[0]
    assert row["live_bytes_last"] == 12 * 64 * 1024
    # Every site that is not growing within its steady phase: none, however small.
    assert leaks(attribute(run), min_bytes=0)["line"].tolist() == [line_of(script, "SITE-LATE")]


def test_steady_start_splits_at_the_level_shift():
    from jaxmemprof.analysis.leaks import steady_start

    rise_then_flat = np.r_[np.arange(12) * 256, np.full(30, 12 * 256)]
    ramp = np.arange(42) * 10
    flat = np.full(42, 7)
    starts = steady_start(np.vstack([rise_then_flat, ramp, flat]), min_length=6)
    assert starts.tolist() == [12, 0, 0]  # the flat phase; a steady ramp and a flat row: whole
    assert mann_kendall(rise_then_flat[starts[0]:])["p_value"].iloc[0] == 1.0
    assert mann_kendall(ramp[starts[1]:])["p_value"].iloc[0] < 0.01


def test_leak_without_markers_is_measured_per_second(leak_run):
    script, run, att = leak_run
    unmarked = dataclasses.replace(run, markers=run.markers.iloc[0:0])
    row = leaks(attribute(unmarked)).iloc[0]
    assert row["line"] == line_of(script, "SITE-LEAK")
    assert np.isnan(row["growth_bytes_per_step"])
    used = run.snapshots[run.snapshots["trigger"] != "exit"]
    span = float(used["t"].iloc[-1] - used["t"].iloc[0])
    assert row["projected_seconds"] == pytest.approx(span)
    assert row["projected_growth_bytes"] == round(row["growth_bytes_per_s"] * span)
    assert row["growth_bytes_per_s"] > 0


def test_small_sites_are_left_out(leak_run):
    _, run, att = leak_run
    assert leaks(attribute(run), min_bytes=STEPS * 4096 + 1).empty
    assert len(leaks(attribute(run), min_bytes=STEPS * 4096)) == 1


def test_leak_finding(leak_run):
    script, run, att = leak_run
    found = leak_findings(leaks(attribute(run)), recompiles(attribute(run)))
    assert [f.rule for f in found] == ["leak"]
    f = found[0]
    assert isinstance(f, Finding)
    site = f"leaky.py:{line_of(script, 'SITE-LEAK')} (main)"
    assert f.site == site and site in words(f).message
    assert "4.00 KiB per step" in words(f).message
    assert f.severity == "high"  # 4 MiB more after 1000 steps, ten times the run's peak
    assert f.saving_bytes == 1000 * 4096
    assert "4.00 KiB -> 120.00 KiB over 30 snapshots" in words(f).evidence
    assert "list" in words(f).fix


def test_steady_loop_is_not_a_leak(steady_run):
    _, run, att = steady_run
    assert len(run.snapshots) == 33
    # Even sites of a few bytes: a steady loop has nothing growing.
    assert leaks(attribute(run), min_bytes=0).empty
    assert recompiles(attribute(run)).empty
    assert leak_findings(leaks(attribute(run)), recompiles(attribute(run))) == []


def test_function_compiled_for_several_shapes(recompile_run):
    script, run, att = recompile_run
    rc = recompiles(attribute(run))
    assert list(rc.columns) == RECOMPILE_COLUMNS
    row = rc.iloc[0]
    line = line_of(script, "SITE-CALL")
    assert (row["site"], row["line"], row["function"], row["name"]) == (f"shapes.py:{line} (main)", line,
                                                                       "main", "jit_f")
    assert (row["first_snapshot"], row["first_count"], row["last_count"], row["max_count"],
            row["growth"]) == (3, 1, 5, 5, 4)
    assert bool(row["suspect"])
    # The same shape five times compiles nothing new: that line is no suspect.
    same = line_of(script, "SITE-SAME")
    assert not (rc["line"] == same).any()
    assert len(rc[rc["name"] == "jit_f"]) == 1
    findings = [f for f in leak_findings(leaks(attribute(run)), rc) if f.rule == "recompile"]
    assert len(findings) == 1
    f = findings[0]
    assert f.site == row["site"] and words(f).message == f"jit_f was compiled 5 times at {row['site']}."
    assert f.severity == "low" and f.saving_bytes is None  # no code size on CPU
    assert "shape" in words(f).fix
    assert recompiles(attribute(run), min_executables=6)["suspect"].sum() == 0


def test_directory_of_profiles(tmp_path):
    script = write_script(tmp_path, "profiles.py", PROFILES)
    (tmp_path / "profs").mkdir()
    run_script(script, tmp_path / "profs")
    run = load_run(tmp_path / "profs")  # .prof files alone: no recorded directory
    found = leaks(attribute(run, Options(roots=(str(tmp_path),))))
    assert len(found) == 1
    row = found.iloc[0]
    assert row["site"] == f"profiles.py:{line_of(script, 'SITE-KEEP')} (<module>)"
    assert (row["live_bytes_first"], row["live_bytes_last"], row["arrays_last"]) == (4096, 30 * 4096, 30)
    assert row["snapshots_used"] == 30
    assert np.isnan(row["growth_bytes_per_step"]) and row["growth_bytes_per_s"] > 0
    assert row["tau"] == 1.0
    rc = recompiles(attribute(run))
    assert (rc["name"] == "").all() and not rc["suspect"].any()


# -- the statistics ----------------------------------------------------------------


def _brute_s(x):
    return sum(np.sign(x[j] - x[i]) for i, j in itertools.combinations(range(len(x)), 2))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=3, max_size=40))
def test_mann_kendall_matches_brute_force_and_scipy(values):
    from scipy import stats

    x = np.array(values, dtype=np.int64)
    mk = mann_kendall(x[None, :]).iloc[0]
    assert mk["s"] == _brute_s(x)
    n = len(x)
    _, counts = np.unique(x, return_counts=True)
    var = (n * (n - 1) * (2 * n + 5) - sum(t * (t - 1) * (2 * t + 5) for t in counts)) / 18
    assert mk["var"] == pytest.approx(var)
    if len(counts) > 1:
        assert mk["tau"] == pytest.approx(stats.kendalltau(np.arange(n), x).statistic)
    if var > 0 and mk["s"] > 0:
        z = (mk["s"] - 1) / np.sqrt(var)
        assert mk["p_value"] == pytest.approx(stats.norm.sf(z))
    if mk["s"] == 0 or var == 0:
        assert mk["p_value"] >= 0.5


def test_mann_kendall_several_series_at_once():
    rising = np.arange(20)
    flat = np.full(20, 7)
    falling = rising[::-1]
    mk = mann_kendall(np.vstack([rising, flat, falling]))
    assert mk["s"].tolist() == [190, 0, -190]
    assert mk["tau"].tolist() == [1.0, 0.0, -1.0]
    assert mk["p_value"].iloc[0] < 1e-8 and mk["p_value"].iloc[1] == 1.0 and mk["p_value"].iloc[2] > 0.999


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # scipy's confidence interval of tiny samples
@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(-1000, 1000)), min_size=2, max_size=30))
def test_theil_sen_matches_scipy(points):
    from scipy import stats

    t = np.array([p[0] for p in points], dtype=float)
    x = np.array([p[1] for p in points], dtype=float)
    slope = theil_sen(x[None, :], t)[0]
    if len(np.unique(t)) < 2:
        assert np.isnan(slope)
    else:
        assert slope == pytest.approx(stats.theilslopes(x, t).slope)


def test_theil_sen_samples_pairs_of_long_series():
    t = np.arange(2000, dtype=float)
    x = np.vstack([3.0 * t + 5, np.where(t % 2 == 0, 0.0, 1e6)])  # a line; a see-saw
    slopes = theil_sen(x, t, max_pairs=5000)
    assert slopes[0] == 3.0
    assert abs(slopes[1]) < 1e3  # no trend: half the pairwise slopes up, half down


SPIKY = """
import jax, jax.numpy as jnp
import jaxmemprof

def make(n):
    return jnp.zeros((n,), jnp.float32)  # SITE-MAKE

jax.devices()
jaxmemprof.snapshot("start")
keep = []
for i in range(30):
    keep.append(make(1024))  # 4 KiB kept each step
    if i == 3:
        spike = make(1 << 18)  # 1 MiB for one snapshot only, at the same site
    jaxmemprof.mark(f"step {i}")
    jaxmemprof.snapshot()
    if i == 3:
        del spike
"""


def test_a_transient_spike_does_not_hide_a_leak(tmp_path_factory):
    script, run, att = _record(tmp_path_factory, "spiky", SPIKY)
    found = leaks(attribute(run), min_bytes=0)
    row = found.set_index("site").loc[f"spiky.py:{line_of(script, 'SITE-MAKE')} (make)"]
    assert row["growth_bytes_per_step"] == 4096


GROWING = """
import jax, jax.numpy as jnp
import jaxmemprof


@jax.jit
def step(x):
    return jnp.concatenate([x * 0.5, jnp.ones((64,), x.dtype)])


x = jnp.ones((64,))
counts = []
for i in range(40):
    x = step(x)  # SITE-GROW
    counts.append(sum(a.ndim == 1 for a in jax.live_arrays()))  # what the program itself holds
    jaxmemprof.mark(f"step {i}")
print("live 1-d arrays each step:", sorted(set(counts)), "bytes at the end:", x.nbytes)
"""


def test_one_array_replaced_by_a_larger_one_is_no_leak_to_delete(tmp_path_factory):
    """Issue 52, item 6: one array replaced each step by a larger one (its
    shape grows; the function compiles for each shape) is not arrays kept
    alive: the program itself sees one such array at each step (its own
    jax.live_arrays()), so `del x` frees nothing it does not need. The
    finding says the shape grows, its fix keeps the shape fixed, and the
    recompilation at that line, which names the cause, leads."""
    tmp = tmp_path_factory.mktemp("growing")
    script = write_script(tmp, "growing.py", GROWING)
    said = run_cli("run", "-q", "--interval", "1000", "-o", tmp / "run", script, cwd=tmp, check=0)
    assert "live 1-d arrays each step: [1] bytes at the end: 10496" in said.stdout, said.stdout
    run = load_run(tmp / "run")
    ar = attribute(run)
    found = leaks(ar)
    site = f"growing.py:{line_of(script, 'SITE-GROW')} (<module>)"
    row = found[found["site"] == site].iloc[0]
    assert (row["arrays_first"], row["arrays_last"]) == (1, 1)
    assert row["growth_bytes_per_step"] == 256  # 64 float32 more a step
    findings = leak_findings(found, recompiles(ar))
    assert [(f.rule, f.severity) for f in findings if f.site == site] == [("leak", "low"), ("recompile", "medium")]
    leak = next(f for f in findings if f.rule == "leak")
    assert leak.case == "growing-arrays"
    said = words(leak)
    assert "grow in size, not in number (1 array alive throughout)" in said.brief
    assert said.fix.startswith("Keep the shape of what is made here fixed") and "`del`" not in said.fix
    assert "drop the reference" not in said.brief_fix
    # In the report, the recompilation comes first.
    report = run_cli("report", tmp / "run", "--json", cwd=tmp).stdout
    rules = [f["rule"] for f in json.loads(report)["findings"] if f["site"] == site]
    assert rules == ["recompile", "leak"], rules

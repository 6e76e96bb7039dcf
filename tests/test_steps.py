"""Snapshots keyed to the program's steps (capture/steps.py, issue 54): a
leak in a fast loop after a slow start is found, and a program that marks its
steps gets the same tables in repeated runs, with a busy process on each core."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from conftest import cli_batch, cpu_env, line_of, run_cli, write_script
from jaxmemprof.capture.steps import PER_LEVEL, grid, on_grid, stride
from jaxmemprof.store.reader import load_run

FAST_LEAK = """
import sys, time
import jax, jax.numpy as jnp
import jaxmemprof


def main(start_s, steps):
    time.sleep(start_s)  # a slow start with nothing on the device (a chip opening, data loading)
    kept = []
    for step in range(steps):
        x = jnp.full((1024,), step, dtype=jnp.float32)  # LINE-LEAK: 4 KiB kept each step
        kept.append(x)
        jaxmemprof.mark("step")
    print(len(kept), float(x[0]))


main(float(sys.argv[1]), int(sys.argv[2]))
"""

STEPS = 3000
# What varies from run to run: the times.
TIMES = {"arrays.csv": ["first_t", "last_t", "ended_t", "lifetime_s"],
         "lifetimes.csv": ["median_lifetime_s", "p90_lifetime_s", "max_lifetime_s", "byte_seconds"]}
TIMED_FACTS = {"growth_bytes_per_s"}


def test_the_grid_is_every_step_then_a_few_per_doubling():
    assert PER_LEVEL == 4
    assert grid(40) == [2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40]
    assert [stride(n) for n in (1, 8, 9, 16, 17, 32, 33, 3000)] == [1, 1, 2, 2, 4, 4, 8, 512]
    # Logarithmic: 4 more per doubling of the steps.
    assert [len(grid(n)) for n in (120, 1500, 3000, 6000, 100_000)] == [22, 36, 40, 44, 61]
    on = set(grid(5000))
    assert all(on_grid(n) == (n in on) for n in range(1, 5001))


def _busy(n: int) -> list:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def _facts(findings: pd.DataFrame) -> list:
    out = []
    for r in findings.itertuples():
        facts = {k: v for k, v in json.loads(r.facts).items() if k not in TIMED_FACTS}
        out.append((r.rule, r.site, r.saving_bytes, json.dumps(facts, sort_keys=True)))
    return out


START_S = 6  # the script's slow start: its sleep, after JAX's import
BUSY_AFTER_S = 5  # the busy processes start this long after the run (before its start can have ended)


def _record_beside_busy(script, out, cwd) -> None:
    """``run`` of the script, with a busy process on each core from BUSY_AFTER_S
    on: the loop (which cannot begin before START_S) runs beside them, every
    step; the start's sleep, with nothing on the device, is spared their
    CPU."""
    proc = subprocess.Popen([sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", str(out), str(script),
                             str(START_S), str(STEPS)], cwd=cwd, env=cpu_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        proc.wait(timeout=BUSY_AFTER_S)
    except subprocess.TimeoutExpired:
        pass
    busy = _busy(os.cpu_count() or 2)
    try:
        _, err = proc.communicate(timeout=300)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    assert proc.returncode == 0, err


@pytest.fixture(scope="module")
def fast_leak_runs(tmp_path_factory):
    """The issue's CPU case recorded three times, beside a busy process on
    each core: a 6 s start with nothing on the device, then 3,000 fast
    steps, each keeping a 4 KiB array (the busy processes from 5 s on:
    _record_beside_busy)."""
    tmp = tmp_path_factory.mktemp("fast_leak")
    script = write_script(tmp, "fast_leak.py", FAST_LEAK)
    runs = [tmp / f"run{i}" for i in range(3)]
    for d in runs:
        _record_beside_busy(script, d, tmp)
    cli_batch([["export", d, "--csv", tmp / f"csv-{d.name}"] for d in runs], cwd=tmp)
    return script, runs, [tmp / f"csv-{d.name}" for d in runs]


def test_a_leak_in_a_fast_loop_after_a_slow_start_is_found_in_every_run(fast_leak_runs):
    script, runs, csvs = fast_leak_runs
    line = line_of(script, "LINE-LEAK")
    for d, c in zip(runs, csvs):
        leaks = pd.read_csv(c / "leaks.csv")
        assert len(leaks) == 1, leaks
        row = leaks.iloc[0]
        assert (row["file"], row["line"], row["function"]) == ("fast_leak.py", line, "main")
        assert row["growth_bytes_per_step"] == 4096.0
        snaps = load_run(d).snapshots
        # The loop's snapshots are its steps' (none timed while it steps): 40 by step 3,000.
        assert list(snaps["trigger"]) == ["step"] * len(grid(STEPS)) + ["exit"]
        findings = pd.read_csv(c / "findings.csv")
        assert "leak" in set(findings["rule"])


def test_the_same_tables_in_repeated_runs_under_load(fast_leak_runs):
    script, runs, csvs = fast_leak_runs
    counts = {len(load_run(d).snapshots) for d in runs}
    assert counts == {len(grid(STEPS)) + 1}
    firsts = [_facts(pd.read_csv(c / "findings.csv")) for c in csvs]
    assert firsts[0] and all(f == firsts[0] for f in firsts[1:])
    for name, times in TIMES.items():
        tables = [pd.read_csv(c / name).drop(columns=times) for c in csvs]
        assert len(tables[0]) > 0
        for t in tables[1:]:
            pd.testing.assert_frame_equal(tables[0], t)
    arrays = pd.read_csv(csvs[0] / "arrays.csv")
    # Every array a step kept, seen from the step it was made at (the grid's steps: 2,560 by step 3,000).
    assert len(arrays) == grid(STEPS)[-1]
    # The array of step k is first seen at the grid's next step g >= k; it lives the steps after g.
    g = np.array(grid(STEPS))
    seen_at = g[np.searchsorted(g, np.arange(1, len(arrays) + 1))]
    assert np.array_equal(arrays["first_snapshot"].to_numpy(), np.searchsorted(g, seen_at) + 1)
    assert np.array_equal(arrays["lifetime_steps"].to_numpy(), STEPS - seen_at)


SLOW_STEPS = """
import time
import jax, jax.numpy as jnp
import jaxmemprof

x = jnp.zeros((256,), jnp.float32)
for step in range(40):
    x = x + 1.0
    time.sleep(0.02)  # 20 ms a step: many intervals of 0.05 s in the loop
    jaxmemprof.mark(f"step {step}")
time.sleep(1.5)  # after the steps: timed snapshots again
print(float(x[0]))
"""


def test_timed_snapshots_stand_back_while_the_program_steps(tmp_path):
    script = write_script(tmp_path, "slow_steps.py", SLOW_STEPS)
    run_cli("run", "-q", "--interval", "0.05", "--max-overhead", "0", "-o", tmp_path / "run", script, cwd=tmp_path,
            check=0)
    run = load_run(tmp_path / "run")
    snaps, markers = run.snapshots, run.markers
    after = snaps.loc[snaps["t_mono"] > float(markers["t_mono"].min()), "trigger"].tolist()
    n = len(grid(40))
    # In the loop, only its steps' snapshots, each taken as its marker is placed...
    assert after[:n] == ["step"] * n and (snaps["trigger"] == "step").sum() == n
    # ...and once the markers stop (for a second), the interval's pace resumes.
    assert set(after[n:]) <= {"interval", "exit"} and after[n:].count("interval") >= 3

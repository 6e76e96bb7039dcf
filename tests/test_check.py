"""`jaxmemprof check`: exit codes and lines on runs recorded for the test, whose
peaks, growth and lines are known."""

from __future__ import annotations

import json

import pytest

from conftest import cli_batch, in_parallel, line_of, run_cli, write_script

KiB, MiB = 1024, 1024 * 1024
STEPS = 12

SCRIPT = """
import sys

import jax
import jax.numpy as jnp
import jaxmemprof

rows, leak = int(sys.argv[1]), sys.argv[2] == "leak"
jax.devices()
jaxmemprof.snapshot("start")
params = jnp.zeros((rows, 1024), jnp.float32)  # LINE-PARAMS: rows * 4 KiB
step = jax.jit(lambda p: p * 0.5)
kept = []
for i in range(STEPS):
    params = step(params)  # LINE-STEP
    if leak:
        kept.append(jnp.full((16, 1024), i, jnp.float32))  # LINE-LEAK: 64 KiB a step, kept
    jaxmemprof.mark(f"step {i}")
    jaxmemprof.snapshot()
""".replace("STEPS", str(STEPS))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """good: 1 MiB of parameters, no leak; bad: 2 MiB and a leak of 64 KiB a step."""
    d = tmp_path_factory.mktemp("check")
    script = write_script(d, "grow.py", SCRIPT)
    in_parallel(  # each waits on its own process: both at once
        lambda: run_cli("run", "-q", "--interval", "1000", "-o", d / "good", script, "256", "none", cwd=d, check=0),
        lambda: run_cli("run", "-q", "--interval", "1000", "-o", d / "bad", script, "512", "leak", cwd=d, check=0))
    return d, script


def checks(d, *commands):
    """Each ``(args of check, exit status expected)`` of ``commands`` run in
    turn in one process (the CLI's entry point, tests/conftest.py cli_batch):
    the stdout lines of each (a JSON document whole, as its one line)."""
    procs = cli_batch([["check", *args] for args, _ in commands], d, workers=1)
    for (args, status), proc in zip(commands, procs):
        assert proc.returncode == status, (
            f"check {args}: exit {proc.returncode}, expected {status}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return [[proc.stdout] if "--json" in args else proc.stdout.splitlines() for (args, _), proc in zip(commands, procs)]


def test_max_peak(runs):
    d, script = runs
    params = f"grow.py:{line_of(script, 'LINE-STEP')} (<module>)"
    ok, fail, bad = checks(d, (["good", "--max-peak", "1MiB"], 0), (["good", "--max-peak", "1023KiB"], 1),
                           (["bad", "--max-peak", "2MiB"], 1))
    assert ok == [f"ok   --max-peak 1.00 MiB: peak 1.00 MiB, held by {params} 1.00 MiB"]
    assert fail == [f"FAIL --max-peak 1023.00 KiB: peak 1.00 MiB, held by {params} 1.00 MiB"]
    # The bad run: 2 MiB of parameters and 12 kept arrays of 64 KiB.
    [line] = bad
    assert line.startswith(f"FAIL --max-peak 2.00 MiB: peak 2.75 MiB, held by {params} 2.00 MiB"), line


def test_max_true_peak(runs):
    d, _ = runs
    # p * 0.5 without donation: old and new parameters (1 MiB each) during the call.
    [line], _ = checks(d, (["good", "--max-true-peak", "1.5MiB"], 1), (["good", "--max-true-peak", "2MiB"], 0))
    assert line.startswith("FAIL --max-true-peak 1.50 MiB: estimated true peak 2.00 MiB (during a call of"), line


def test_max_growth(runs):
    d, script = runs
    leak = f"grow.py:{line_of(script, 'LINE-LEAK')} (<module>)"
    fail, _, ok = checks(d, (["bad", "--max-growth", "32KiB/step"], 1), (["bad", "--max-growth", "64KiB/step"], 0),
                         (["good", "--max-growth", "1KiB"], 0))
    assert fail == [f"FAIL --max-growth 32.00 KiB/step: grows 64.00 KiB/step, at {leak} +64.00 KiB/step"]
    assert ok == ["ok   --max-growth 1.00 KiB/step: grows 0 B/step"]


def test_fail_on(runs):
    d, script = runs
    leak = f"grow.py:{line_of(script, 'LINE-LEAK')} (<module>)"
    lines, ok = checks(d, (["bad", "--fail-on", "leak"], 1), (["good", "--fail-on", "leak,recompile"], 0))
    assert len(lines) == 1 and lines[0].startswith("FAIL --fail-on leak: [") and lines[0].endswith(f"] leak at {leak}")
    assert ok == ["ok   --fail-on leak,recompile: no such finding"]


def test_baseline(runs):
    d, _ = runs
    lines, _ = checks(d, (["bad", "--baseline", "good", "--max-increase", "10%"], 1),
                      (["good", "--baseline", "good", "--max-increase", "0"], 0))
    assert lines[0].startswith("FAIL --max-increase 10%: peak 2.75 MiB is +175.0% on the baseline's 1.00 MiB"), lines


def test_json_and_several_violations(runs):
    d, _ = runs
    args = ["bad", "--max-peak", "1MiB", "--max-growth", "1KiB/step", "--fail-on", "leak"]
    json_lines, lines = checks(d, (args + ["--json"], 1), (args, 1))
    [text] = json_lines
    doc = json.loads(text)
    assert doc["command"] == "check" and doc["ok"] is False and doc["run"] == "bad"
    by = {c["check"]: c for c in doc["checks"]}
    assert by["max-peak"]["value"] == 2 * MiB + STEPS * 64 * KiB and by["max-peak"]["held"] is False
    assert by["max-growth"]["value"] == 64 * KiB and by["max-growth"]["unit"] == "bytes/step"
    assert by["fail-on"]["value"] == 1
    # Without --json: one FAIL line per violation.
    assert [line.split(":")[0] for line in lines] == ["FAIL --max-peak 1.00 MiB", "FAIL --max-growth 1.00 KiB/step",
                                                      "FAIL --fail-on leak"]


BAD_INPUT = [
    (["good", "--fail-on", "leek"], "unknown rule 'leek'"),
    (["good", "--max-peak", "lots"], "not a size: 'lots'"),
    (["good", "--max-growth", "1MiB/min"], "a growth is SIZE/step or SIZE/s"),
    (["missing", "--max-peak", "1MiB"], "jaxmemprof: error: missing: no such run directory"),
    (["good", "--baseline", "good"], "--baseline RUN and --max-increase PCT go together"),
    (["good", "--baseline", "missing", "--max-increase", "5"], "jaxmemprof: error: missing: no such run directory"),
    (["good"], "nothing to check"),
]


@pytest.fixture(scope="module")
def bad_input(runs):
    """Every BAD_INPUT case's check, in one process (the CLI's entry point, in turn)."""
    d, _ = runs
    procs = cli_batch([["check", *args] for args, _ in BAD_INPUT], d, workers=1)
    return {tuple(args): proc for (args, _), proc in zip(BAD_INPUT, procs)}


@pytest.mark.parametrize("args, message", BAD_INPUT)
def test_bad_input(bad_input, args, message):
    proc = bad_input[tuple(args)]
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_growth_per_step_needs_markers(tmp_path):
    script = write_script(tmp_path, "plain.py", """
        import jax.numpy as jnp
        import jaxmemprof
        a = jnp.ones((256, 1024))
        for _ in range(6):  # growth is measured over 6 snapshots at least
            jaxmemprof.snapshot()
    """)
    run_cli("run", "-q", "--interval", "1000", "-o", tmp_path / "r", script, cwd=tmp_path, check=0)
    proc, ok = cli_batch([["check", "r", "--max-growth", "1MiB/step"], ["check", "r", "--max-growth", "1MiB/s"]],
                         tmp_path, workers=1)
    assert (proc.returncode, ok.returncode) == (2, 0), proc.stderr + ok.stderr
    assert proc.stderr.strip() == ("jaxmemprof: error: r: has no step markers (jaxmemprof.mark() once a step): "
                                   "--max-growth SIZE/step cannot be checked; give SIZE/s")


def test_a_job_checks_every_process(runs):
    """A multi-process job directory: each process checked, against the
    baseline job's process of the same number; each line names it."""
    import shutil

    d, _ = runs
    for n, name in ((0, "good"), (1, "bad")):
        shutil.copytree(d / name, d / "job" / f"process-{n}", dirs_exist_ok=True)
        shutil.copytree(d / "good", d / "base-job" / f"process-{n}", dirs_exist_ok=True)
    peak, increase, json_lines = checks(d, (["job", "--max-peak", "2MiB"], 1),
                                        (["job", "--baseline", "base-job", "--max-increase", "10"], 1),
                                        (["job", "--max-peak", "2MiB", "--json"], 1))
    assert [line.split(" MiB:")[0] for line in peak] == ["FAIL process 1: --max-peak 2.00",
                                                         "ok   process 0: --max-peak 2.00"], peak
    lines = increase
    assert lines[0].startswith("FAIL process 1: --max-increase 10%: peak 2.75 MiB is +175.0%"), lines
    assert any(line.startswith("ok   process 0: --max-increase 10%: peak 1.00 MiB is +0.0%") for line in lines)
    [text] = json_lines
    doc = json.loads(text)
    assert [(c["process"], c["held"]) for c in doc["checks"]] == [(0, True), (1, False)]
    # One run against a job: which process is meant is not said.
    proc = run_cli("check", "good", "--baseline", "base-job", "--max-increase", "5", cwd=d, check=2)
    assert "base-job: is a multi-process job and RUN is one run" in proc.stderr

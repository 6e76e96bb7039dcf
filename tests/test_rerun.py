"""The end phase's re-traces of the program's Python (capture/jit/rerun.py,
issue 62 items 2-4): under a deadline, nothing of theirs left running, no
hook of the program's in jaxmemprof's threads.

Real runs of tests/scripts/hostile_step.py under python and under
``jaxmemprof run``, side by side; the re-trace deadline is set short through
$JAXMEMPROF_RETRACE_SECONDS so that the tests take seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import cpu_env, in_parallel

from jaxmemprof.analysis.advice.plan import build_plan
from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.options import Options
from jaxmemprof.store.reader import load_run

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(__file__).parent / "scripts" / "hostile_step.py"
DEADLINE_S = 3


def _python(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], env=cpu_env(), capture_output=True,
                          text=True, timeout=300)


def _run(out: Path, options: list, *args) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "-o", str(out), *options, str(SCRIPT),
                           *map(str, args)], env=cpu_env(JAXMEMPROF_RETRACE_SECONDS=str(DEADLINE_S)),
                          capture_output=True, text=True, timeout=600)
    return proc, time.monotonic() - t0


def _plan_errors(out: Path) -> dict:
    plan = build_plan(attribute(load_run(out), Options()))
    assert plan is not None
    points = plan.points.drop_duplicates(["variant", "batch"])
    return {(r.variant, int(r.batch)): r.error if isinstance(r.error, str) else None for r in points.itertuples()}


def _end_phase_s(out: Path) -> float:
    return json.loads((out / "manifest.json").read_text())["end_phase"]["seconds"]


def test_a_lock_held_in_a_with_block_is_free_for_the_retrace(tmp_path):
    """The program's daemon thread writes its registry holding a lock
    (``with``); the step appends to the registry under that lock when traced.
    Before, run --plan stopped the thread inside its block and the re-trace
    waited on the lock for good. Now the thread is stopped outside it: every
    figure given, the program's output and status python's."""
    py, (run, _) = in_parallel(lambda: _python("lock-with"), lambda: _run(tmp_path / "run", ["--plan"], "lock-with"))
    assert run.returncode == py.returncode == 0, run.stderr
    assert run.stdout == py.stdout
    errors = _plan_errors(tmp_path / "run")
    assert len(errors) == 9 and all(e is None for e in errors.values()), errors


@pytest.mark.parametrize("mode", ["lock-held", "loop"])
def test_a_retrace_that_does_not_return_is_given_up(tmp_path, mode):
    """A lock the parked thread holds through acquire() (not seen), and a
    step whose re-trace loops with no call in it: run --plan ends within the
    deadline and 10 s, with the program's status and output; the figures that
    needed a re-trace are not given, saying why (the first re-trace met the
    deadline; none ran after it); the run's own and the donation replayed
    are given. Before: the lock program never ended (a time-out's SIGTERM at
    150 s), the loop ran until Ctrl-C."""
    py, (run, wall) = in_parallel(lambda: _python(mode), lambda: _run(tmp_path / "run", ["--plan"], mode))
    assert run.returncode == py.returncode == 0, run.stderr
    assert run.stdout == py.stdout
    assert _end_phase_s(tmp_path / "run") < DEADLINE_S + 10
    errors = _plan_errors(tmp_path / "run")
    said = f"the program's Python did not return within {DEADLINE_S} s"
    assert {k for k, e in errors.items() if e is None} == {("recorded", 32), ("donated", 32)}, errors
    assert all(said in e for e in errors.values() if e is not None), errors
    assert said in run.stderr
    # Off a terminal too, the step that took over 2 s said what it was as it passed them (before: nothing).
    assert "jaxmemprof, after the script ended: XLA's figures and the compiles" in run.stderr


@pytest.mark.parametrize("mode", ["thread", "fdwrite"])
def test_what_a_retrace_starts_or_writes_leaves_no_trace(tmp_path, mode):
    """A re-trace that starts a printing thread, or writes to a descriptor
    the program opened: the program's output and its log are python's (6
    lines from the thread and 7 in the log after the end, before); the
    figures that needed it are not given, saying what was refused."""
    logs = tmp_path / "python.log", tmp_path / "run.log"
    py, (run, _) = in_parallel(lambda: _python(mode, logs[0]),
                               lambda: _run(tmp_path / "run", ["--plan"], mode, logs[1]))
    time.sleep(1.0)  # a thread it left would print on
    assert run.returncode == py.returncode == 0, run.stderr
    assert run.stdout == py.stdout
    if mode == "fdwrite":
        assert logs[0].read_text() == logs[1].read_text() == "traced at (32, 64)\n"
    errors = _plan_errors(tmp_path / "run")
    refused = [e for e in errors.values() if e is not None]
    assert len(refused) == 7 and all("PermissionError" in e for e in refused), errors
    assert "chatter" not in run.stderr


@pytest.mark.parametrize("mode", ["settrace", pytest.param("settrace-all", marks=pytest.mark.skipif(
    sys.version_info < (3, 12), reason="threading.settrace_all_threads is 3.12's"))])
def test_the_programs_thread_hooks_run_in_none_of_ours(tmp_path, mode):
    """threading.settrace and threading.setprofile functions that read
    __file__: under run they print nothing python does not (before:
    "Exception in thread jaxmemprof-end: NameError", that thread dead).
    Set on every thread (3.12): python prints one "Exception ignored in:
    <module 'threading'>" (its shutdown runs them once __file__ is gone), and
    run the same (before: jaxmemprof's internal error, exit 1)."""
    py, (run, _) = in_parallel(lambda: _python(mode), lambda: _run(tmp_path / "run", ["-q"], mode))
    assert run.returncode == py.returncode == 0
    assert (run.stdout, run.stderr) == (py.stdout, py.stderr)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12's")
def test_a_monitoring_tool_is_said_to_see_our_threads(tmp_path):
    """A sys.monitoring tool sees every thread, Python offers no way out: the
    threads it saw beside the program's are jaxmemprof's (named so, or a
    Dummy-N its callback made of one before it was named), and the run says
    it."""
    py, (run, _) = in_parallel(lambda: _python("monitoring"), lambda: _run(tmp_path / "run", [], "monitoring"))
    assert run.returncode == py.returncode == 0
    names = set(run.stdout.split("threads seen: ")[1].split("\n")[0].split(", "))
    programs = set(py.stdout.split("threads seen: ")[1].split("\n")[0].split(", "))
    assert programs <= names and all(n.startswith(("jaxmemprof-", "Dummy-")) for n in names - programs), names
    report = subprocess.run([sys.executable, "-m", "jaxmemprof", "report", str(tmp_path / "run")], env=cpu_env(),
                            capture_output=True, text=True, timeout=300)
    said = " ".join(report.stdout.split())
    assert "the program set sys.monitoring tool 3 ('hostile-step'), which Python runs in every thread" in said, said


ABANDON = textwrap.dedent("""
    import sys, threading, time
    sys.path.insert(0, sys.argv[1])
    from jaxmemprof.capture.jit import rerun

    ticks = []

    def loops():
        while True:
            ticks.append(1)
            time.sleep(0.01)

    t0 = time.monotonic()
    value, why = rerun.run_programs_python(loops)
    took = time.monotonic() - t0
    n = len(ticks)
    time.sleep(0.3)
    again = rerun.run_programs_python(lambda: 5)
    rerun._state["refusing"] = None  # (this test's own: a second re-trace given up on, a loop with no call)

    def spins():
        n = 0
        while n >= 0:
            n += 1

    spun = rerun.run_programs_python(spins)
    print(round(took, 1), why, "|", len(ticks) - n, "|", again[1], "|",
          [t.name for t in threading.enumerate() if t.name.startswith("jaxmemprof")], "|", spun[1], "|",
          len(rerun._parked))
""")


def test_an_abandoned_retrace_stops_and_none_runs_after_it():
    """In a process of its own: a re-trace that never returns is given up at
    the deadline, stops at its next call (its loop appends no more), stays
    listed as ours, and no re-trace runs after it; one that spins with no
    call in it is stopped too."""
    proc = subprocess.run([sys.executable, "-c", ABANDON, str(ROOT)], capture_output=True, text=True, timeout=60,
                          env=cpu_env(JAXMEMPROF_RETRACE_SECONDS="0.5"))
    assert proc.returncode == 0, proc.stderr
    took, after, again, threads, spun, parked = proc.stdout.strip().split("|")
    assert float(took.split()[0]) < 2.0
    assert "not given: the program's Python did not return within 0.5 s" in took
    assert int(after) <= 1  # stopped at its next call
    assert again.strip() == "not given: the program's Python did not return within 0.5 s"
    assert threads.strip() == "['jaxmemprof-retrace', 'jaxmemprof-retrace']"  # both stopped, listed as ours
    assert spun.strip() == again.strip() and int(parked) == 2  # the spinning one stopped too

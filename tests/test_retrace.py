"""No second run of the program's Python after it ends (issue 56): the
end-of-run compiles (the donation what-if, run --plan, run --target) lower
the jaxpr JAX traced during the run where the shapes are the run's, and
where another batch or dtype needs the step traced again, that re-trace is
shielded (its output discarded, whatever it raises contained, its file
writes refused) and checked against the run's own trace: a step that reads
a global the program changed at its end is not planned as another program.

Real runs of tests/scripts/retrace_step.py, whose step prints a marker (on
sys.stdout, sys.stderr and file descriptor 1) and appends to a file each
time its Python is traced, under python and under ``jaxmemprof run``.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import cpu_env, in_parallel

from jaxmemprof.analysis.advice.plan import build_plan
from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.options import Options
from jaxmemprof.facts import tpus
from jaxmemprof.capture.jit.rerun import run_programs_python as shielded
from jaxmemprof.capture.jit.retrace import CHANGED
from jaxmemprof.store.reader import load_run

SCRIPT = Path(__file__).parent / "scripts" / "retrace_step.py"
MARKERS = ("TRACED step\n", "TRACED step on fd 1\n")


def _python(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], env=cpu_env(), capture_output=True,
                          text=True, timeout=300)


def _run(out: Path, options: list, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "-o", str(out), *options, str(SCRIPT),
                           *map(str, args)], env=cpu_env(), capture_output=True, text=True, timeout=600)


def _points(out: Path):
    plan = build_plan(attribute(load_run(out), Options()))
    assert plan is not None
    return plan.points.drop_duplicates(["variant", "batch"]), plan.events


def _same_as_python(under_python, under_run) -> None:
    """The program's output as python gives it: each marker once, the
    program's atexit line last; its stderr marker once; python's status."""
    assert under_run.stdout == under_python.stdout, under_run.stderr
    for marker in MARKERS:
        assert under_run.stdout.count(marker) == 1
    assert under_run.stdout.endswith("program's last line\n")
    assert under_run.stderr.count("TRACED step on stderr") == under_python.stderr.count("TRACED step on stderr") == 1
    assert under_run.returncode == under_python.returncode == 0, under_run.stderr


def test_plan_traces_the_programs_python_once(tmp_path):
    """--plan of a step whose Python prints and appends to a file when
    traced: under python it does so once; under run --plan (batches 16 to
    256, donated and bfloat16: seven compiles at other shapes or dtypes)
    once too, its output the same, the file one line long. The what-if and
    the plan's compiles at the run's shapes replay the run's trace; the
    others' re-trace is refused its file write, and those figures are not
    given, the reason said."""
    logs = tmp_path / "python.log", tmp_path / "run.log"
    py, run = in_parallel(lambda: _python("steady", logs[0]),
                          lambda: _run(tmp_path / "run", ["--plan"], "steady", logs[1]))
    _same_as_python(py, run)
    assert logs[0].read_text() == logs[1].read_text() == "traced\n"
    points, events = _points(tmp_path / "run")
    given = points[points["error"].isna()]
    # the run's own figures and the donation at the run's batch (replayed): given
    assert set(zip(given["variant"], given["batch"])) == {("recorded", 32), ("donated", 32)}
    refused = points[points["error"].notna()]
    assert len(refused) == 7 and refused["error"].str.contains("PermissionError").all()
    assert any("not given" in e and "(open)" in e for e in events)


def test_plan_retraces_are_shielded_and_marked(tmp_path):
    """Without a file to write, the re-traces at other batches and in
    bfloat16 give their figures, their output discarded; the run says they
    came from a re-trace that traced the run's program, and each row says
    how it was traced."""
    py, run = in_parallel(lambda: _python("steady"), lambda: _run(tmp_path / "run", ["--plan"], "steady"))
    _same_as_python(py, run)
    points, events = _points(tmp_path / "run")
    assert points["error"].isna().all(), points["error"].tolist()
    assert sorted(set(points["batch"])) == [16, 32, 64, 128, 256]
    assert any("re-trace of the program's Python" in e and "traced the run's program" in e for e in events)
    rows = load_run(tmp_path / "run").jit.plans
    traced = {(r.variant, int(r.batch)): __import__("json").loads(r.detail).get("traced")
              for r in rows.itertuples() if isinstance(r.detail, str)}
    assert traced[("donated", 32)] == "run" and traced[("recorded", 64)] == "re-trace"
    assert traced[("bfloat16", 32)] == "re-trace"


@pytest.mark.parametrize("mode, raised", [("exit", "SystemExit(7)"), ("interrupt", "KeyboardInterrupt"),
                                          ("generator", "GeneratorExit")])
def test_what_a_retrace_raises_is_contained(tmp_path, mode, raised):
    """sys.exit(7), KeyboardInterrupt and GeneratorExit raised by the step
    once the program has set its flag: under python the program ends with
    0; under run --plan too (they became 7, 130 and 1 before), the plan's
    figures that needed a re-trace not given, saying what it raised."""
    py, run = in_parallel(lambda: _python(mode), lambda: _run(tmp_path / "run", ["--plan"], mode))
    _same_as_python(py, run)
    points, events = _points(tmp_path / "run")
    refused = points[points["error"].notna()]
    assert len(refused) == 7 and refused["error"].str.contains(raised, regex=False).all(), refused["error"].tolist()
    assert points[points["error"].isna()]["batch"].tolist() == [32, 32]
    assert any(raised in e for e in events)


def test_a_changed_global_is_not_planned_as_another_program(tmp_path):
    """The program clears TRAINING at its end, and its step traced then has
    no hidden layer (a far smaller program). The run's own figures and the
    donation replayed from the run's trace stand; the batches and dtypes
    that need a re-trace are not given, the run saying the re-trace traced a
    different program."""
    py, run = in_parallel(lambda: _python("flag"), lambda: _run(tmp_path / "run", ["--plan"], "flag"))
    _same_as_python(py, run)
    points, events = _points(tmp_path / "run")
    refused = points[points["error"].notna()]
    assert len(refused) == 7 and (refused["error"] == CHANGED).all()
    given = points[points["error"].isna()].set_index("variant")["peak_bytes"]
    assert given["donated"] < given["recorded"]  # the hidden layer's program, donated: not the smaller one's
    assert any("traced a different program" in e for e in events)
    assert "traced a different program" in run.stderr


def test_whatif_replays_the_runs_trace(tmp_path):
    """Without --plan the donation advice's compile at the end replays the
    run's trace: the program's Python is not traced again (it was, after the
    program's last line, where the steps ran inside a
    ``jax.default_matmul_precision`` context, which JAX's trace cache keys
    on), and the saving is verified."""
    py, run = in_parallel(lambda: _python("context"), lambda: _run(tmp_path / "run", [], "context"))
    _same_as_python(py, run)
    whatif = load_run(tmp_path / "run").jit.whatif
    assert len(whatif) >= 1 and whatif["error"].isna().all(), whatif.to_dict("records")
    assert "saves" in run.stderr and "(compiled)" in run.stderr


@pytest.mark.skipif(tpus.libtpu_missing(), reason="libtpu is not installed (pip install 'jaxmemprof[tpu]')")
def test_a_targets_compiles_replay_or_are_shielded(tmp_path):
    """run --target: the slice's own compile of the step and its donated
    variant replay the run's trace; the bfloat16 variant needs a re-trace,
    whose SystemExit(7) is contained: the program ends as under python, the
    two figures given, the third not, saying why."""
    py, run = in_parallel(lambda: _python("exit"), lambda: _run(tmp_path / "run", ["--target", "v5e:2x2"], "exit"))
    _same_as_python(py, run)
    rows = load_run(tmp_path / "run").jit.targets.set_index("variant")
    assert rows.loc["recorded", "error"] is None and rows.loc["donated", "error"] is None, rows.to_dict("records")
    assert "SystemExit(7)" in rows.loc["bfloat16", "error"]


def test_the_shield_discards_output_contains_an_exit_and_refuses_writes(tmp_path, capfd):
    """In process: what a re-trace writes to sys.stdout, sys.stderr and
    descriptors 1 and 2 is dropped, a file it opens for writing is refused,
    so are its writes to another descriptor and through a file object
    opened before, and a thread it starts; its atexit.register does
    nothing, its sys.exit(7) is contained; another thread's print passes
    on. Nothing of the shield is left after it (no audit hook either)."""
    written = tmp_path / "written.txt"
    log = open(tmp_path / "log.txt", "w")
    fd = os.open(tmp_path / "fd.txt", os.O_WRONLY | os.O_CREAT)
    before = atexit._ncallbacks()
    refused = []
    beside = threading.Event()

    def other():
        print("another thread's line", flush=True)
        beside.set()

    def hostile():
        print("py out")
        print("py err", file=sys.stderr)
        os.write(1, b"fd out\n")
        os.write(2, b"fd err\n")
        for what in (lambda: open(written, "w"), lambda: os.write(fd, b"x"), lambda: log.write("x"),
                     lambda: threading.Thread(target=print, args=("started",)).start()):
            try:
                what()
            except PermissionError as exc:
                refused.append(str(exc))
        atexit.register(print, "at exit")
        starter.set()
        beside.wait(10)
        sys.exit(7)

    starter = threading.Event()
    outside = threading.Thread(target=lambda: starter.wait(10) and other())
    outside.start()
    value, why = shielded(hostile)
    outside.join()
    log.close()
    os.close(fd)
    out, err = capfd.readouterr()
    assert value is None and why.endswith("raised SystemExit(7)")
    assert out == "another thread's line\n" and err == ""
    assert len(refused) == 4, refused
    assert not written.exists() and atexit._ncallbacks() == before
    assert (tmp_path / "log.txt").read_text() == "" and (tmp_path / "fd.txt").read_bytes() == b""
    assert shielded(lambda: 5) == (5, None)
    print("after")
    os.write(1, b"fd after\n")
    assert capfd.readouterr().out == "after\nfd after\n"
    assert threading.Thread.start is _THREAD_START and os.write is _OS_WRITE and open is _OPEN


_THREAD_START, _OS_WRITE, _OPEN = threading.Thread.start, os.write, open


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread()
                    or signal.getsignal(signal.SIGINT) is not signal.default_int_handler,
                    reason="SIGINT is not Python's KeyboardInterrupt in this thread")
def test_a_real_sigint_during_the_shield_is_not_swallowed():
    """A Ctrl-C that arrives during a shielded re-trace ends it, and is
    raised again once the shield is down (the program's own KeyboardInterrupt
    is contained; a real one is not lost)."""
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    result = []
    with pytest.raises(KeyboardInterrupt):
        result.append(shielded(threading.Event().wait, 30))
    timer.join()
    assert result == []

"""The end's compiles begun beside the program (capture/jit/early.py): a
kept trace replayed and compiled on a thread of ours gives the figures the
main thread's compile gives, unseen by the program's jax.monitoring
listeners and its persistent cache; a run's donation is verified while the
program runs, the end using that compile, and the program's output and
what its own listener hears are python's."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from conftest import cpu_env, in_parallel, sigint_at

from jaxmemprof.capture.jit.programs import unseen_compile
from jaxmemprof.capture.jit.retrace import replay, traced
from jaxmemprof.xla import scratch

SCRIPT = Path(__file__).parent / "scripts" / "early_step.py"


def _step(w, x):
    return w - 0.01 * jnp.tanh(x @ w)


def _figures(compiled) -> tuple:
    ma = compiled.memory_analysis()
    return (ma.argument_size_in_bytes, ma.output_size_in_bytes, ma.alias_size_in_bytes, ma.temp_size_in_bytes)


def test_a_kept_trace_is_replayed_and_compiled_on_a_thread():
    """JAX's tracing state is the thread's own: the run's jaxpr, kept in
    the main thread, replays on a thread named as jaxmemprof's and compiles
    donated to the figures the main thread's compile of the program's own
    function gives; a listener the program registered hears the main
    thread's compiles and none of the thread's, and the persistent cache is
    refused to that thread alone."""
    w = jnp.ones((128, 128), jnp.float32)
    x = jnp.ones((128, 128), jnp.float32)
    _, kept = traced(jax.jit(_step), (w, x), {})
    assert kept is not None
    shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding) for a in (w, x)]
    expected = _figures(jax.jit(_step, donate_argnums=0).lower(*shapes).compile())
    heard: list = []

    def listener(event, seconds, **kwargs):
        if event.startswith("/jax/core/compile/backend_compile"):
            heard.append(threading.current_thread().name)

    import jax._src.compilation_cache as cache

    jax.monitoring.register_event_duration_secs_listener(listener)
    out: dict = {}

    def work():
        try:
            replayed = replay(jax, _step, kept, lambda args, kwargs: (args, kwargs))
            with unseen_compile(jax):
                out["cache"] = cache.is_cache_used(jax.devices()[0].client)
                lowered = jax.jit(replayed, donate_argnums=0).lower(*shapes)
                out["figures"] = _figures(scratch.compile_own(lowered))
        except BaseException as exc:  # said by the test, not lost in the thread
            out["error"] = exc

    try:
        t = threading.Thread(target=work, name="jaxmemprof-compile")
        t.start()
        t.join(120)
        jax.jit(lambda a: a * 3.0)(w).block_until_ready()  # the program's own compile, after
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert "error" not in out, out.get("error")
    assert out["figures"] == expected
    assert out["cache"] is False
    assert heard == ["MainThread"]


def _journal(run: Path, sql: str) -> list:
    con = sqlite3.connect(run / "journal.sqlite")
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_a_runs_donation_is_verified_beside_the_program(tmp_path):
    """A step whose carried state is not donated, 40 steps with a pause
    between them: its verifying compile is made while the program runs,
    and the end takes it instead of compiling (the run's early-compiles
    event: one compile, used); the donation's figure is verified. The
    program's output, its own listener's count of XLA compiles included, is
    python's, and so is its exit status."""
    py, run = in_parallel(
        lambda: subprocess.run([sys.executable, str(SCRIPT), "40", "0.05"], env=cpu_env(), capture_output=True,
                               text=True, timeout=300),
        lambda: subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", str(tmp_path / "run"),
                                str(SCRIPT), "40", "0.05"], env=cpu_env(), capture_output=True, text=True,
                               timeout=300))
    assert run.returncode == py.returncode == 0, run.stderr
    assert run.stdout == py.stdout
    assert "compile events heard" in py.stdout
    events = _journal(tmp_path / "run", "SELECT message FROM events WHERE kind = 'early-compiles'")
    assert len(events) == 1, events
    said = json.loads(events[0][0])
    assert said["compiled"] >= 1 and said["used"] >= 1, said
    rows = _journal(tmp_path / "run", "SELECT change, error, alias_bytes FROM jit_whatif")
    assert rows and all(error is None and alias > 0 for _, error, alias in rows), rows
    assert json.loads(rows[0][0])["argnums"] == [0]


# jaxmemprof run with the executable's reader refusing every executable, as
# where XLA leaves the buffer assignment out of it (XLA:TPU): the dump stands in.
NO_BUFFERS = """
import sys
import jaxmemprof.xla.executable as executable

def refuse(*args, **kwargs):
    raise executable.ExecutableError("no buffer assignment in this executable (the test's)")

executable.read_executable = refuse
sys.argv[0] = "jaxmemprof"
from jaxmemprof.cli import main
main(prog_name="jaxmemprof")
"""


def test_the_dump_of_a_step_is_made_beside_the_program(tmp_path):
    """Where the executable lacks XLA's buffer assignment, the step's
    largest signature is dumped while the program runs (the early-compiles
    event counts it, and the end uses it), and its lines are there: a
    jit_programs row for the step's signature, none of the dumps left out."""
    run = subprocess.run([sys.executable, "-c", NO_BUFFERS, "run", "-q", "-o", str(tmp_path / "run"), str(SCRIPT),
                          "40", "0.05"], env=cpu_env(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    said = json.loads(_journal(tmp_path / "run", "SELECT message FROM events WHERE kind = 'early-compiles'")[0][0])
    assert said["compiled"] >= 2 and said["used"] >= 2, said  # the dump and the donation's compile
    events = [m for (m,) in _journal(tmp_path / "run", "SELECT message FROM events WHERE kind = 'xla-dump'")]
    assert events and not any("left out" in m for m in events), events
    rows = _journal(tmp_path / "run", "SELECT p.module, p.peak_bytes FROM jit_programs p JOIN jit_functions f "
                                      "USING (function_id) WHERE f.name = 'step'")
    assert rows and rows[0][0].startswith("jit_step") and rows[0][1] > 0, rows


# As NO_BUFFERS, with the dump on jaxmemprof's thread held until the end's
# own donation compile (in the main thread) has begun, and each compile's
# thread and times written to a file: the two overlap only where the end
# goes on beside the compile under way.
HELD_DUMP = NO_BUFFERS.replace("executable.read_executable = refuse\n", """executable.read_executable = refuse
import json, threading, time
import jaxmemprof.capture.jit.whatif as whatif
from jaxmemprof.xla import scratch

LOG = open(sys.argv.pop(1), "a")
began = threading.Event()
inside = threading.local()  # in a compile_figures call (it compiles through compile_own too)

def said(what, t0):
    LOG.write(json.dumps([what, threading.current_thread().name, t0, time.monotonic()]) + "\\n")
    LOG.flush()

def compile_figures(*args, _original=whatif.compile_figures, **kwargs):
    t0 = time.monotonic()
    if threading.current_thread() is threading.main_thread():
        began.set()
    inside.yes = True
    try:
        return _original(*args, **kwargs)
    finally:
        inside.yes = False
        said("donation", t0)

def compile_own(*args, _original=scratch.compile_own, **kwargs):
    if getattr(inside, "yes", False):
        return _original(*args, **kwargs)
    t0 = time.monotonic()
    if threading.current_thread() is not threading.main_thread():
        began.wait(60)
    try:
        return _original(*args, **kwargs)
    finally:
        said("dump", t0)

whatif.compile_figures = compile_figures
scratch.compile_own = compile_own
""")


def test_the_end_goes_on_beside_the_compile_under_way(tmp_path):
    """A program that ends while its step's dump is being made on
    jaxmemprof's thread: the end does not wait for it, nor make it again,
    but compiles the donation in the main thread beside it (on a TPU, the
    GPT's 18 s dump and 19 s donation compile one after the other made
    38 s of its end). The dump is made once, on the thread, and used (its
    lines are in the run); the donation is verified; the two compiles
    overlap."""
    log = tmp_path / "compiles.jsonl"
    run = subprocess.run([sys.executable, "-c", HELD_DUMP, str(log), "run", "-q", "-o", str(tmp_path / "run"),
                          str(SCRIPT), "2", "0"], env=cpu_env(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    compiles = [json.loads(line) for line in log.read_text().splitlines()]
    dumps = [c for c in compiles if c[0] == "dump"]
    donations = [c for c in compiles if c[0] == "donation" and c[1] == "MainThread"]
    assert len(dumps) == 1 and dumps[0][1] == "jaxmemprof-compile", compiles
    assert donations, compiles
    assert donations[0][2] < dumps[0][3], compiles  # the end's compile began before the dump was done
    said = json.loads(_journal(tmp_path / "run", "SELECT message FROM events WHERE kind = 'early-compiles'")[0][0])
    assert said["compiled"] == 1 and said["used"] == 1, said
    rows = _journal(tmp_path / "run", "SELECT p.module FROM jit_programs p JOIN jit_functions f "
                                      "USING (function_id) WHERE f.name = 'step'")
    assert rows and rows[0][0].startswith("jit_step"), rows
    whatif = _journal(tmp_path / "run", "SELECT error, alias_bytes FROM jit_whatif")
    assert whatif and all(error is None and alias > 0 for error, alias in whatif), whatif


def test_a_signal_in_the_end_does_not_wait_for_the_compile_under_way(tmp_path):
    """The end skipped by Ctrl-C while jaxmemprof's thread is in a compile
    (a dump held here for 60 s): the rest of the end is skipped, the run
    finalised, and the process exits with the script's own status (0),
    without waiting for that compile."""
    held = HELD_DUMP.replace("began.wait(60)", "began.wait(60) if False else threading.Event().wait(60)")
    log = tmp_path / "compiles.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", held, str(log), "run", "-q", "-o", str(tmp_path / "run"),
                             str(SCRIPT), "2", "0"], env=cpu_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=sigint_at())  # SIGINT as from a terminal, however pytest started
    try:
        assert proc.stdout.readline().startswith("steps"), proc.stderr.read()
        # The end phase is under way once its own compile (the donation's, in the main thread) is done;
        # the dump is held on the thread. (A signal before the end phase is the script's, at its end.)
        deadline = time.monotonic() + 120
        while not (log.exists() and '"MainThread"' in log.read_text()):
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
            time.sleep(0.05)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert took < 30, took  # the held compile lasts 60 s
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["end_phase"]["skipped_by"] == "SIGINT", manifest["end_phase"]

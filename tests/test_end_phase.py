"""run's end phase (issue 56): how the script ended is recorded before
jaxmemprof's own end (the last snapshot and its holder search, the compiles
of --plan and of the fixes, the summary); a SIGINT or SIGTERM there skips the
rest, finalises the run and keeps the script's exit status; the script's own
signal handlers never run after it, nor its daemon threads.

Real processes, real JAX on the CPU, real signals. The script
(tests/scripts/end_phase_step.py) writes a marker file in its last atexit
handler: once the marker is there, the script is over and the process is in
jaxmemprof's end phase (the compiles of --plan take seconds)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import cpu_env, sigint_at
from jaxmemprof.store import layout

SCRIPT = Path(__file__).parent / "scripts" / "end_phase_step.py"


def _start(tmp_path, *script_args, options=("--plan",), quiet=True, stderr=subprocess.PIPE):
    run = tmp_path / "run"
    marker = tmp_path / "ended"
    if "--ops" not in script_args:  # 20 ops: --plan's compiles at the end still take seconds (7 s of CPU)
        script_args = ("--ops", 20, *script_args)
    cmd = [sys.executable, "-m", "jaxmemprof", "run", *(["-q"] if quiet else []), *options, "-o", str(run),
           str(SCRIPT), str(marker), *map(str, script_args)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=cpu_env(), stdout=subprocess.PIPE, stderr=stderr, text=True,
                            preexec_fn=sigint_at(signal.SIG_DFL))
    return proc, run, marker


def _wait_for(path: Path, proc, timeout=120.0) -> float:
    """Wait until ``path`` exists (the process still running); when it appeared."""
    t0 = time.monotonic()
    while not path.exists():
        assert proc.poll() is None, f"ended before {path.name}: {proc.communicate()}"
        assert time.monotonic() - t0 < timeout, f"no {path.name} after {timeout} s"
        time.sleep(0.02)
    return time.monotonic()


def _signalled(tmp_path, sig, *script_args, delay=0.5, options=("--plan",), quiet=True, wait_for=""):
    """Run the script under ``run --plan``, send ``sig`` ``delay`` seconds
    after the script ended (its end phase still running: asserted), or after
    the file the marker's name plus ``wait_for`` names appeared (the end
    phase reached that point), and return (process, stdout, stderr, seconds
    from the signal to the end, the run directory)."""
    proc, run, marker = _start(tmp_path, *script_args, options=options, quiet=quiet)
    _wait_for(marker, proc)
    if wait_for:  # a file the script opened as it started: written once that point is reached
        said = marker.with_name(marker.name + wait_for)
        t0 = time.monotonic()
        while not (said.exists() and said.stat().st_size):
            assert proc.poll() is None, f"ended before {said.name} was written: {proc.communicate()}"
            assert time.monotonic() - t0 < 120, f"{said.name} not written after 120 s"
            time.sleep(0.02)
    time.sleep(delay)
    assert proc.poll() is None, "the end phase was over before the signal: make it longer"
    t0 = time.monotonic()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    return proc, out, err, time.monotonic() - t0, run


def _manifest(run: Path) -> dict:
    return json.loads((run / layout.MANIFEST).read_text())


def _python_status(tmp_path, *script_args) -> int:
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "py-ended"), *map(str, script_args)],
                          cwd=tmp_path, env=cpu_env(), capture_output=True, text=True, timeout=120)
    return proc.returncode


def _assert_finalised(run: Path, status: int, ended_by: str, skipped_by: str | None) -> dict:
    m = _manifest(run)
    assert m["end_time"] is not None, m  # finished
    assert (m["exit_status"], m["ended_by"]) == (status, ended_by)
    assert m["script_end"]["exit_status"] == status and m["script_end"]["ended_by"] == ended_by
    assert m["end_phase"]["skipped_by"] == skipped_by
    assert not (run / layout.LOCK).exists()
    assert not list(run.glob(".xla-dump-*"))  # jaxmemprof's XLA dumps removed on this exit path too
    return m


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_in_the_end_phase_keeps_the_scripts_exit_status(tmp_path, sig):
    # Before: Ctrl-C there said "Aborted." and exited 130 with the lock left
    # and the run unfinished; SIGTERM killed the process (-15) at once.
    proc, out, err, took, run = _signalled(tmp_path, sig, "--status", 4)
    assert proc.returncode == 4, err
    assert out == "loss 2048.0\n"
    assert err == "" and "Aborted" not in err  # -q: nothing of ours
    m = _assert_finalised(run, 4, "exit", sig.name)
    assert m["end_phase"]["seconds"] < 30
    assert took < 15, took


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_a_targets_compiles_leaves_no_dump(tmp_path, sig):
    # A --target slice's buffers need an XLA dump (a compile of its own, into
    # the run directory): a signal while it is made must leave none, whether
    # the compile's finally runs or the process ends without it.
    proc, run, marker = _start(tmp_path, "--status", 3, options=("--target", "v5e:2x2"))
    _wait_for(marker, proc)
    t0 = time.monotonic()
    while not list(run.glob(".xla-dump-*")):  # the signal lands while the dump is being made
        assert proc.poll() is None, "the end phase ended before its dump"
        assert time.monotonic() - t0 < 240, "no dump directory in the run"
        time.sleep(0.01)
    proc.send_signal(sig)
    proc.communicate(timeout=120)
    assert proc.returncode == 3
    _assert_finalised(run, 3, "exit", sig.name)


def test_the_scripts_sigterm_handler_never_runs_after_the_script(tmp_path):
    # A preemption handler (save a checkpoint, exit 3) is the script's while
    # it runs; a SIGTERM in jaxmemprof's end phase finalises the run and
    # keeps the script's status, 0. Before: the handler wrote its checkpoint
    # and the process exited 3.
    checkpoint = tmp_path / "checkpoint"
    proc, out, err, took, run = _signalled(tmp_path, signal.SIGTERM, "--term-handler", checkpoint)
    assert not checkpoint.exists(), checkpoint.read_text()
    assert proc.returncode == 0, err
    _assert_finalised(run, 0, "exit", "SIGTERM")


def test_the_scripts_other_handlers_and_timers_end_with_it(tmp_path):
    # The script's SIGALRM timer would fire 1 s after its end, in the end
    # phase: stopped with the script (under python the process was gone).
    # Its SIGUSR1 handler (a scheduler's warning) never runs after it: a
    # SIGUSR1 then ends the end phase as SIGTERM does, with the script's
    # status. Before: both handlers ran after the script.
    usr1 = tmp_path / "usr1"
    proc, out, err, took, run = _signalled(tmp_path, signal.SIGUSR1, "--status", 2, "--usr1-handler", usr1,
                                           "--alarm", 1.0, delay=1.6)
    assert not (tmp_path / "ended.alarm").exists(), (tmp_path / "ended.alarm").read_text()
    assert not usr1.exists(), usr1.read_text()
    assert proc.returncode == 2, err
    _assert_finalised(run, 2, "exit", "SIGUSR1")


def test_the_script_ended_by_ctrl_c_still_dies_by_sigint(tmp_path):
    # A script ended by an uncaught KeyboardInterrupt dies by SIGINT under
    # python (after its atexit handlers); a SIGTERM in the end phase keeps that.
    assert _python_status(tmp_path, "--interrupt", "--ops", 2) == -signal.SIGINT
    proc, out, err, took, run = _signalled(tmp_path, signal.SIGTERM, "--interrupt")
    assert proc.returncode == -signal.SIGINT, err
    assert err.rstrip().endswith("KeyboardInterrupt")  # python's traceback, and nothing of ours
    _assert_finalised(run, 128 + signal.SIGINT, "SIGINT", "SIGTERM")


@pytest.mark.parametrize("hook", [(), ("--no-excepthook",)], ids=["excepthook", "excepthook-None"])
def test_a_main_thread_that_swallows_the_interrupt_is_not_waited_for(tmp_path, hook):
    # The step's Python, traced again at the end, sleeps 20 s and swallows
    # every exception: the re-trace is given up at the signal (it runs in a
    # thread of jaxmemprof's, capture/jit/rerun.py), the run finalised and
    # the process ended with the script's status, even where the script
    # left sys.excepthook None. Before: the end phase went on (Ctrl-C
    # swallowed).
    proc, out, err, took, run = _signalled(tmp_path, signal.SIGINT, "--status", 6, "--stubborn-retrace", *hook,
                                                  wait_for=".retrace", delay=0.2)
    assert proc.returncode == 6, err
    _assert_finalised(run, 6, "exit", "SIGINT")
    assert took < 10, took


def test_the_scripts_end_is_recorded_before_the_end_phase(tmp_path):
    # While the end phase runs, the manifest already says how and when the
    # script ended (a run killed then still says it), and the run's duration
    # is the script's alone, not the compiles' after it. Before: nothing was
    # recorded until the end phase was over, and the duration included it.
    # The script's daemon thread (a heartbeat appending a line every 0.1 s)
    # stops where python would stop it, with the script: before, it went on
    # writing through the end phase's compiles (a line every 0.1 s of it).
    beats = tmp_path / "beats"
    proc, run, marker = _start(tmp_path, "--status", 5, "--ops", 10, "--heartbeat", beats,
                               options=("--plan-scales", "2"), quiet=False)
    t_start = time.monotonic()
    t_marker = _wait_for(marker, proc)
    seen = None
    while proc.poll() is None and seen is None:
        try:
            m = _manifest(run)
        except (OSError, ValueError):
            continue
        if m.get("script_end") is not None:
            seen = m
        time.sleep(0.01)
    out, err = proc.communicate(timeout=300)
    t_end = time.monotonic()
    assert proc.returncode == 5, err
    assert seen is not None, "the script's end was not in the manifest while the end phase ran"
    assert seen["end_time"] is None and seen["script_end"]["exit_status"] == 5
    assert seen["script_end"]["ended_by"] == "exit"
    m = _assert_finalised(run, 5, "exit", None)
    assert m["duration_s"] == seen["script_end"]["duration_s"] <= t_marker - t_start + 0.5
    # the compiles of --plan: not in the script's time (about 1 s here; the end's compiles begun beside the
    # program, capture/jit/early.py, leave less of them after it than before)
    assert m["end_phase"]["seconds"] > 0.3
    ended_at = float(marker.read_text())
    after = [t for t in map(float, beats.read_text().split()) if t > ended_at]
    assert len(after) <= 1, f"{len(after)} heartbeats after the script's last atexit handler"
    assert m["end_phase"]["program_threads_stopped"] == 1
    assert m["duration_s"] + m["end_phase"]["seconds"] <= t_end - t_start + 0.5
    # The summary's "SCRIPT ...: N s" is the script's time.
    said = re.search(r"end_phase_step\.py .*: ([0-9.]+) s, exit 5", err)
    assert said is not None, err
    assert abs(float(said.group(1)) - m["duration_s"]) < 0.06, (said.group(0), m["duration_s"])


def _stderr_on_a_terminal(tmp_path, *options) -> bytes:
    """What ``run OPTIONS`` writes on a stderr that is a terminal (a pty),
    the script's stdout a pipe."""
    import pty
    import select

    script = tmp_path / "tiny.py"
    script.write_text("import jax.numpy as jnp\nx = jnp.ones((1000,))\nprint('done')\n")
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "jaxmemprof", "run", *options, "-o", str(tmp_path / "run"),
                             str(script)], cwd=tmp_path, env=cpu_env(COLUMNS="200"), stdout=subprocess.PIPE,
                            stderr=slave, preexec_fn=sigint_at(signal.SIG_DFL))
    os.close(slave)
    got = b""
    while True:
        ready, _, _ = select.select([master], [], [], 120)
        assert ready, "no end"
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal's other side is closed
            break
        if not chunk:
            break
        got += chunk
    os.close(master)
    assert proc.wait(timeout=60) == 0 and proc.stdout.read() == b"done\n"
    return got


def test_the_end_phase_says_its_steps_on_a_terminal_only(tmp_path):
    # On a terminal, one line says which step of jaxmemprof's end runs (and
    # that Ctrl-C skips it), cleared before the closing lines; -q writes
    # nothing; off a terminal stderr holds the closing lines alone (the other
    # tests here, and the golden outputs). Before: nothing said.
    err = _stderr_on_a_terminal(tmp_path)
    line = (b"\r\x1b[Kjaxmemprof: the script has ended; now: XLA's figures and the compiles "
            b"(Ctrl-C skips the rest)...")
    assert line in err, err
    assert b"now: the last snapshot (Ctrl-C" in err
    cleared = err.rindex(b"\r\x1b[K")
    assert err.index(line) < cleared < err.index(b"run: "), err  # cleared before the closing lines
    assert b"tiny.py" in err[cleared:]
    assert _stderr_on_a_terminal(tmp_path, "-q", "--force") == b""

"""Interrupts at a run's end: a kernel interrupt (or Ctrl-C) while a
``%jaxmemprof`` cell or a ``profile()`` block ends (its last snapshot and
holder search, the output history, XLA's figures, the compiles of the
fixes, --plan, --target) skips the rest of that work, and the run is
finalised all the same: its sampler stopped, its manifest finished, its
lock released, so that the next cell (or block) records. And the magics
take ``run``'s options. Real signals, a real kernel (nbclient,
ipykernel), real JAX; issue 56."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys

import pytest

from conftest import cpu_env, sigint_at

# profile() in a process of its own, a real SIGINT sent to it (by an observer
# of the run, api.observers, as the notebook's kernel is one) at its start or
# its end; CASE "inside": Ctrl-C in the block, and again at its end.
PROFILE_SCRIPT = '''\
import json, os, signal, sys, threading, time

import jax
import jax.numpy as jnp

import jaxmemprof
from jaxmemprof import api
from jaxmemprof.capture import session

case, out = sys.argv[1], sys.argv[2]


class Interrupts:
    """A real SIGINT to this process as the run starts or ends (api.observers
    hears both), as a kernel interrupt or Ctrl-C would come."""

    def __init__(self, at):
        self.at, self.sent = at, 0

    def _send(self, at):
        if at == self.at and not self.sent:
            self.sent += 1
            os.kill(os.getpid(), signal.SIGINT)

    def started(self, s):
        self._send("start")

    def ending(self, s, index):
        self._send("end")
        if self.at == "swallowed" and not self.sent:
            self.sent += 1
            Finalised()  # gone at once: its finaliser runs, and the SIGINT's handler in it


class Finalised:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10000):  # Python runs the handler here: its KeyboardInterrupt is only printed
            pass

    def ended(self, s):
        pass


interrupts = Interrupts({"start": "start", "swallowed": "swallowed"}.get(case, "end"))
api.observers.append(interrupts)
p, x = jnp.ones((256, 256)), jnp.ones((256, 256))
run = jaxmemprof.profile(out, force=True)
where = "finished"
try:
    with run:
        step = jax.jit(lambda p, x: (p * 0.5 + x, (p * x).sum()))
        for i in range(3):
            p, loss = step(p, x)
        float(loss)
        if case == "inside":  # Ctrl-C in the block, then again at its end
            raise KeyboardInterrupt
except KeyboardInterrupt:
    where = "interrupted"
time.sleep(0.3)  # a sampler left running would still be there
print(json.dumps({
    "where": where,
    "sent": interrupts.sent,
    "threads": sorted(t.name for t in threading.enumerate()),
    "active": session.active() is not None,
    "recording": run.recording,
    "ended_by": run.ended_by,
}))
# Another run records in the same process.
with jaxmemprof.profile(out + "-next", force=True) as again:
    y = jnp.ones((64, 64)) + 1
print(json.dumps({"next": again.ended_by, "next_deferred": again.deferred}))
'''


def _journal(run) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{run / 'journal.sqlite'}?mode=ro", uri=True)


def _finished(run) -> dict:
    """The run as a reader sees it: finished (end_time), no lock, its events."""
    manifest = json.loads((run / "manifest.json").read_text())
    with _journal(run) as db:
        events = db.execute("SELECT kind, message FROM events").fetchall()
        triggers = [t for (t,) in db.execute("SELECT trigger FROM snapshots ORDER BY snapshot")]
    return {"end_time": manifest.get("end_time"), "ended_by": manifest.get("ended_by"),
            "lock": (run / ".jaxmemprof.lock").exists(), "events": events, "triggers": triggers}


@pytest.mark.parametrize("case", ["end", "inside", "start", "swallowed"])
def test_an_interrupted_profile_block_stops_its_sampler_and_finishes_its_run(tmp_path, case):
    script = tmp_path / "interrupted.py"
    script.write_text(PROFILE_SCRIPT)
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, str(script), case, str(out)], cwd=tmp_path, env=cpu_env(),
                          capture_output=True, text=True, timeout=240, preexec_fn=sigint_at())
    assert proc.returncode == 0, proc.stderr
    first, second = (json.loads(line) for line in proc.stdout.strip().splitlines()[-2:])
    assert first["sent"] == 1 and first["where"] == "interrupted", first
    # No sampler left, no session active, the run ended.
    assert first["threads"] == ["MainThread"], first
    assert not first["active"] and not first["recording"], first
    assert first["ended_by"] == ("exception" if case in ("inside", "start") else "exit")
    if case == "swallowed":  # raised in a finaliser, where Python only prints it: it interrupted all the same
        assert "KeyboardInterrupt" in proc.stderr, proc.stderr
    run = _finished(out)
    assert run["end_time"] is not None and not run["lock"], run
    assert run["ended_by"] == first["ended_by"]
    assert any("the end of the run was interrupted (SIGINT" in m for k, m in run["events"]), run["events"]
    # The next block in the same process records a run of its own.
    assert second == {"next": "exit", "next_deferred": False}, second
    assert _finished(tmp_path / "run-next")["end_time"] is not None


# -- in a real kernel -------------------------------------------------------------------------

# Imported here, with the tests that need them (hence noqa E402).
import threading  # noqa: E402
import time  # noqa: E402

from test_notebook import Kernel, displayed, stream  # noqa: E402

# A jitted step whose compiles take a while: --plan compiles it at four
# batches, donated and in bfloat16 too, so the end of a cell lasts seconds.
STEP = """\
import jax, jax.numpy as jnp

def step(p, x):
    h = x
    for i in range(12):
        h = jnp.tanh(h @ p + i)[::-1]
    return p - 0.001 * (h.T @ x), h.sum()

train_step = jax.jit(step)
p, x = jnp.ones((64, 64)), jnp.ones((32, 64))"""
LOOP = "for i in range(3):\n    p, loss = train_step(p, x)\nfloat(loss)"


def _ended_snapshot(run) -> bool:
    """The run's last snapshot is in its journal: its end phase has begun."""
    try:
        with _journal(run) as db:
            return db.execute("SELECT count(*) FROM snapshots WHERE trigger IN ('exit', 'exception')"
                              ).fetchone()[0] > 0
    except sqlite3.Error:
        return False


def _interrupt_at_end(k, run, said: dict) -> threading.Thread:
    """A thread that interrupts the kernel (jupyter_client's
    interrupt_kernel: SIGINT to its process) once ``run``'s end phase has
    begun, and notes when."""
    def watch():
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not _ended_snapshot(run):
            time.sleep(0.02)
        said["t"] = time.monotonic()
        k.client.km.interrupt_kernel()

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def _errors(cell) -> list:
    return [o for o in cell.outputs if o.output_type == "error"]


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    k = Kernel(tmp_path_factory.mktemp("notebook-end"))
    out = {"work": k.work}
    with k.client.setup_kernel():
        k.run("%load_ext jaxmemprof")
        k.run(STEP)
        # run's options, refused in one line each.
        out["bad"] = {line: k.run(f"%%jaxmemprof {line}\nx.sum()", allow_errors=True)
                      for line in ("--interval nan", "--bogus", "--plan --no-jit-probe", "--target v9:9",
                                   "--verify-seconds -1", "-q extra")}
        out["bad_start"] = k.run("%jaxmemprof start --plan-scales 0", allow_errors=True)
        # A cell interrupted in its end phase (its --plan compiles).
        said: dict = {}
        watcher = _interrupt_at_end(k, k.work / "runs" / "cut", said)
        out["cut"] = k.run(f"%%jaxmemprof -o runs/cut --force --plan --no-page\n{LOOP}", allow_errors=True)
        out["cut_s"] = time.monotonic() - said.get("t", float("inf"))
        watcher.join(5)
        out["stop_after_cut"] = k.run("%jaxmemprof stop", allow_errors=True)
        out["next"] = k.run(f"%%jaxmemprof -o runs/next --force --no-holders --verify-seconds 0 --plan-scales 2 "
                            f"--no-page\n{LOOP}")
        out["probe"] = k.value("import json\nfrom jaxmemprof.capture import session\n"
                               "print(json.dumps([session.active() is None, "
                               "[t.name for t in __import__('threading').enumerate() if 'jaxmemprof' in t.name]]))")
        # %jaxmemprof stop interrupted in its end phase.
        k.run("%jaxmemprof start -o runs/cells --force --plan")
        k.run(LOOP)
        said2: dict = {}
        watcher = _interrupt_at_end(k, k.work / "runs" / "cells", said2)
        out["stop_cut"] = k.run("%jaxmemprof stop --no-page", allow_errors=True)
        watcher.join(5)
        out["stop_again"] = k.run("%jaxmemprof stop", allow_errors=True)
        out["start_again"] = k.run("%jaxmemprof start -o runs/again --force")
        k.run("y = x + 1")
        out["stop_last"] = k.run("%jaxmemprof stop -q")
    return out


def test_the_magics_take_runs_options_and_refuse_bad_ones_in_one_line(interrupted):
    for line, cell in interrupted["bad"].items():
        said = stream(cell).strip()
        assert said.startswith("UsageError: ") and "\n" not in said, (line, said)
        assert not _errors(cell), (line, cell.outputs)  # no traceback
    assert "'nan' is not a finite number" in stream(interrupted["bad"]["--interval nan"])
    assert "No such option '--bogus'" in stream(interrupted["bad"]["--bogus"])
    assert "drop --no-jit-probe" in stream(interrupted["bad"]["--plan --no-jit-probe"])
    assert "--target v9:9: not a TPU slice" in stream(interrupted["bad"]["--target v9:9"])
    said = stream(interrupted["bad_start"]).strip()
    assert said.startswith("UsageError: Invalid value for '--plan-scales'") and "\n" not in said, said
    assert not (interrupted["work"] / "jaxmemprof-runs").exists()  # nothing recorded by a refused line
    # Taken: the next cell's --no-holders and --verify-seconds are its run's settings.
    settings = json.loads((interrupted["work"] / "runs" / "next" / "manifest.json").read_text())["settings"]
    assert settings["holders"] is False and settings["verify_s"] == 0 and settings["plan"]["scales"] == [2.0]
    # Its summary says what --plan compiled, as run's closing lines do.
    summary = displayed(interrupted["next"])
    assert re.search(r"^plan: step compiled for batches 32-64 \(\d+ compiles", summary, re.M), summary
    cut = json.loads((interrupted["work"] / "runs" / "cut" / "manifest.json").read_text())["settings"]
    assert cut["plan"]["scales"] == [0.5, 2.0, 4.0, 8.0]


def test_a_cell_interrupted_in_its_end_phase_is_finished_and_the_next_cell_records(interrupted):
    cut = interrupted["cut"]
    said = stream(cut)
    assert "jaxmemprof: interrupted as the run ended" in said, (said, interrupted["cut_s"],
                                                                _finished(interrupted["work"] / "runs" / "cut"))
    # The cell shows the KeyboardInterrupt (as an error; or, where IPython's traceback formatter fails on a
    # frame the interrupt caught between two lines, its own message about it, on the stream).
    errors = _errors(cut)
    assert errors and errors[0]["ename"] == "KeyboardInterrupt" or "KeyboardInterrupt" in said, cut.outputs
    run = _finished(interrupted["work"] / "runs" / "cut")
    assert run["end_time"] is not None and not run["lock"], run
    assert run["triggers"][-1] == "exit"
    assert any("the end of the run was interrupted (SIGINT" in m for _, m in run["events"]), run["events"]
    # The rest of the plan's compiles skipped: the cell ended about 2 s after the interrupt (by hand,
    # 2026-12: 2.2 s; the same cell's end uninterrupted, 17 s), within the compile it was in.
    assert interrupted["cut_s"] < 120, interrupted["cut_s"]
    # %jaxmemprof stop agrees: nothing records.
    assert stream(interrupted["stop_after_cut"]).startswith("UsageError: not recording")
    # The next cell records a run of its own.
    nxt = interrupted["next"]
    assert not _errors(nxt) and "already recording" not in stream(nxt), nxt.outputs
    run = _finished(interrupted["work"] / "runs" / "next")
    assert run["end_time"] is not None and not run["lock"] and len(run["triggers"]) >= 1, run
    assert interrupted["probe"] == [True, []]  # no session active, no sampler thread


def test_stop_interrupted_in_its_end_phase_ends_the_recording_for_good(interrupted):
    errors = _errors(interrupted["stop_cut"])
    assert errors and errors[0]["ename"] == "KeyboardInterrupt", interrupted["stop_cut"].outputs
    run = _finished(interrupted["work"] / "runs" / "cells")
    assert run["end_time"] is not None and not run["lock"], run
    assert any("the end of the run was interrupted (SIGINT" in m for _, m in run["events"]), run["events"]
    assert stream(interrupted["stop_again"]).startswith("UsageError: not recording")
    assert stream(interrupted["start_again"]).startswith("jaxmemprof: recording into runs/again")
    assert _finished(interrupted["work"] / "runs" / "again")["end_time"] is not None
    assert interrupted["stop_last"].outputs == []  # -q: nothing shown

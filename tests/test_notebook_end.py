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

    def ended(self, s):
        pass


interrupts = Interrupts("start" if case == "start" else "end")
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


@pytest.mark.parametrize("case", ["end", "inside", "start"])
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
    assert first["ended_by"] == ("exit" if case == "end" else "exception")
    run = _finished(out)
    assert run["end_time"] is not None and not run["lock"], run
    assert run["ended_by"] == first["ended_by"]
    assert any("the end of the run was interrupted (KeyboardInterrupt)" in m for k, m in run["events"]), run["events"]
    # The next block in the same process records a run of its own.
    assert second == {"next": "exit", "next_deferred": False}, second
    assert _finished(tmp_path / "run-next")["end_time"] is not None

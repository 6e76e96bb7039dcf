"""capture/jit/calllive.py: the bytes live before every call of a user's
function, sampled or quiet, held to ``jax.live_arrays()`` summed in the
same process; the calls past the counts' budget said as not counted; and
the header's words where the figure is a bound (render/answer.py)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from conftest import cpu_env, interrupted_as_a_lock_is_taken

from jaxmemprof.analysis.answer import Answer
from jaxmemprof.render.answer import true_peak_line

PROGRAM = """
import json, sys, sqlite3
from pathlib import Path
from jaxmemprof.capture.jit import JitProbe
from jaxmemprof.store.writer import RunWriter

out = Path(sys.argv[1])
writer = RunWriter(out, {"test": "call_live"})
probe = JitProbe(writer, max_samples=4)  # quiet from the 5th call: its calls go through QuietCounted
probe.install()
import jax, jax.numpy as jnp

@jax.jit
def step(x):
    return x * 2.0

x = jnp.ones((1024,), jnp.float32)
live = []
for i in range(30):
    if i == 12:
        kept = jnp.ones((4096,), jnp.float32)
    if i == 20 and sys.argv[2] == "over":
        probe.live.spent = float("inf")  # past the counts' budget from the 21st call on
    live.append(sum(a.nbytes for a in jax.live_arrays()))
    x = step(x)
print(json.dumps({"live": live, "quiet": type(step).__name__}))
probe.uninstall()  # its end work waited for (the compile begun beside the program, early.py)
writer.finish(end_time=None)
"""


def _record(tmp_path, mode):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(PROGRAM))
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / mode), mode], capture_output=True, text=True,
                          env=cpu_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    oracle = json.loads(proc.stdout.strip().splitlines()[-1])
    with sqlite3.connect(tmp_path / mode / "journal.sqlite") as con:
        rows = con.execute("SELECT call, live_before, counted, seen, kind FROM jit_call_live ORDER BY rowid").fetchall()
    return oracle, rows


def _one_device(live: str) -> int:
    (value,) = json.loads(live).values()
    return value


def test_every_call_is_counted_and_the_calls_with_more_live_are_written(tmp_path):
    oracle, rows = _record(tmp_path, "all")
    assert oracle["quiet"] == "QuietCounted"  # its calls went straight to XLA before: now counted as they begin
    # one device, named as JAX names it (cpu:0; TFRT_CPU_0 under JAX 0.6)
    written = {call: _one_device(live) for call, live, _, _, kind in rows if kind == "max"}
    # the first call (sampled, but no sampler here to count its live bytes for jit_calls) and the 13th, quiet,
    # the first with the kept array: their bytes as jax.live_arrays() summed them just before each
    assert written == {1: oracle["live"][0], 13: oracle["live"][12]}
    assert oracle["live"][12] == oracle["live"][11] + 4096 * 4
    (end,) = [r for r in rows if r[4] == "end"]
    assert end[2:4] == (30, 30)


def test_calls_past_the_budget_are_not_counted_and_said(tmp_path):
    _, rows = _record(tmp_path, "over")
    (end,) = [r for r in rows if r[4] == "end"]
    assert end[2:4] == (20, 30)


def _answer(**kw) -> Answer:
    base = dict(live_peak_bytes=68 << 20, live_peak_t=1.0, live_peak_snapshot=4, true_peak_bytes=72 << 20,
                true_peak_total_bytes=72 << 20, true_peak_where="during a call of step",
                true_peak_jitted_at="kept.py:9", devices=1, composition=(), composition_rest=0, inside=(),
                fix=None, fix_number=None, true_peak_call=(6, 25, False), calls_counted=(25, 25, ()))
    return Answer(**{**base, **kw})


def test_the_header_says_which_call_and_how_the_figure_is_known():
    assert true_peak_line(_answer()) == ("true peak 72.00 MiB during a call of step (kept.py:9; call 6 of 25), "
                                         "XLA's temporaries included")
    assert true_peak_line(_answer(true_peak_bound="at least", calls_counted=(20, 25, ()))) == (
        "true peak 72.00 MiB during a call of step (kept.py:9; call 6 of 25), at least (5 of 25 calls not counted)")
    assert true_peak_line(_answer(true_peak_bound="at most")).endswith(
        ", at most (the call's signature not known: its function's largest)")
    at_live = dict(true_peak_where="at the live peak", true_peak_bytes=68 << 20, true_peak_call=None)
    assert true_peak_line(_answer(**at_live)) == "true peak 68.00 MiB at the live peak (no jitted call needed more)"
    assert true_peak_line(_answer(**at_live, true_peak_bound="at least", calls_counted=(20, 25, ("g",)))) == (
        "true peak 68.00 MiB at the live peak (no counted call needed more; 5 of 25 calls not counted; "
        "calls of g not seen: at least)")
    assert true_peak_line(_answer(**at_live, true_peak_bound="at least", calls_counted=None)) == (
        "true peak 68.00 MiB at the live peak (no sampled call needed more)")


def test_an_interrupt_as_the_count_takes_the_samplers_lock_leaves_the_lock_free():
    import threading
    from types import SimpleNamespace

    import jax
    import jax.numpy as jnp

    from jaxmemprof.capture.jit.calllive import CallLive

    lock = threading.RLock()  # the sampler's (Sampler.holding)
    live = CallLive(SimpleNamespace(observer=SimpleNamespace(holding=lambda: lock, _aliases={})))
    state = SimpleNamespace(seen=0, uncounted=0)
    x = jnp.ones((256,), jnp.float32)
    sys.setprofile(interrupted_as_a_lock_is_taken)
    try:
        with pytest.raises(KeyboardInterrupt):
            live.before(state)
    finally:
        sys.setprofile(None)
    took: list = []

    def take():
        got = lock.acquire(timeout=2)
        took.append(got)
        if got:
            lock.release()

    other = threading.Thread(target=take)
    other.start()
    other.join()
    assert took == [True]  # not kept by this thread: the sampler (another thread) takes it
    counted = live.before(state)  # and the next call is counted
    assert sum(counted.values()) == sum(a.nbytes for a in jax.live_arrays()) >= x.nbytes

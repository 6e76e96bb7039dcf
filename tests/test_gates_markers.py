"""A gate never passes on damage it did not see (issue 62, item 8): the
markers the growth per step is measured from are held to the snapshots'
own times, every numeric cell of the journal is checked, and a table
dropped from a journal whose writer made it is said. Each damage is made on
a real recorded run's journal; the sound run's own figure is the reference
(16 KiB a step, FAIL, exit 1)."""

from __future__ import annotations

import shutil
import sqlite3

import pytest

from conftest import REPO, cli_batch, run_cli, write_script

LEAK = """
import jax
import jax.numpy as jnp
import jaxmemprof

kept = []
step = jax.jit(lambda x: x * 2)
x = jnp.ones((4096,), jnp.float32)  # 16 KiB
for i in range(40):
    kept.append(step(x))  # leaks 16 KiB a step
    jaxmemprof.mark("step")
"""
# Snapshots taken by a thread of the program and by its loop while the loop marks its steps: the markers'
# after_snapshot as the writer counts them under contention, never damage.
BUSY = """
import threading
import time

import jax
import jax.numpy as jnp
import jaxmemprof

stop = False


def other():
    while not stop:
        jaxmemprof.snapshot("thread")
        time.sleep(0.003)


t = threading.Thread(target=other)
t.start()
x = jnp.ones((256,))
f = jax.jit(lambda a: a * 2)
kept = []
for i in range(1000):
    x = f(x) / 2
    if i % 7 == 0:
        kept.append(x + 1)
    if i % 10 == 0:
        jaxmemprof.snapshot("step")
    jaxmemprof.mark("step")
stop = True
t.join()
"""
GROWTH = ["--max-growth", "1KiB/step"]
TARGET = REPO / "sample_runs" / "runs" / "mlp-target"  # recorded with run --target v5e:2x2 --target v6e:2x2


def _sql(run, *statements):
    con = sqlite3.connect(run / "journal.sqlite")
    for s in statements:
        con.execute(s)
    con.commit()
    con.close()


# (name, SQL, what the one error line names)
MARKERS = [
    ("null", "UPDATE markers SET after_snapshot = NULL", "markers name a snapshot their time does not fit"),
    ("negative", "UPDATE markers SET after_snapshot = -1",
     "40 row(s) of the journal's markers are damaged and left out (journal.sqlite, markers rowid 1: after_snapshot "
     "is negative (-1))"),
    ("past-the-last", "UPDATE markers SET after_snapshot = 99999",
     "markers name a snapshot their time does not fit (marker 1: after_snapshot 99999"),
    ("text", "UPDATE markers SET after_snapshot = 'x'", "markers rowid 1: after_snapshot is text ('x'), not a number"),
    ("fraction", "UPDATE markers SET after_snapshot = 2.5", "markers rowid 1: after_snapshot is not a whole number (2.5)"),
    ("one-everywhere", "UPDATE markers SET after_snapshot = 1",
     "markers name a snapshot their time does not fit (marker"),
]
TABLES = ["jit_targets", "jit_whatif", "py_holders"]


@pytest.fixture(scope="module")
def leak(tmp_path_factory):
    d = tmp_path_factory.mktemp("markers")
    script = write_script(d, "leak.py", LEAK)
    run_cli("run", "--interval", "0.02", "-o", d / "sound", script, check=0)
    for name, sql, _ in MARKERS:
        shutil.copytree(d / "sound", d / name)
        _sql(d / name, sql)
    for table in TABLES:
        shutil.copytree(d / "sound", d / f"no-{table}")
        _sql(d / f"no-{table}", f"DROP TABLE {table}")
    return d


def _error(proc) -> str:
    errors = [line for line in proc.stderr.splitlines() if line.startswith("jaxmemprof: error:")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def test_damaged_markers_make_the_growth_gate_exit_2(leak):
    """The sound run grows 16.00 KiB a step (FAIL, exit 1); each damage of
    its markers' after_snapshot (NULL, -1, past the last snapshot, text, a
    fraction, 1 on every row) said in one error line, exit 2; before: 'ok
    ... grows 0 B/step', exit 0."""
    jobs = [["check", "sound", *GROWTH]] + [["check", name, *GROWTH] for name, _, _ in MARKERS]
    sound, *damaged = cli_batch(jobs, leak)
    assert sound.returncode == 1, sound.stderr
    assert sound.stdout.startswith("FAIL --max-growth 1.00 KiB/step: grows 16.00 KiB/step"), sound.stdout
    for (name, _, said), proc in zip(MARKERS, damaged):
        assert proc.returncode == 2, (name, proc.stdout, proc.stderr)
        assert proc.stdout == "" and "Traceback" not in proc.stderr
        line = _error(proc)
        assert said in line and line.endswith("--max-growth cannot be checked"), (name, line)


def test_a_dropped_table_is_said_and_the_gates_that_read_it_exit_2(leak):
    """jit_targets, jit_whatif or py_holders dropped from a journal whose
    writer made them: one line names it; --fail-on (every table) exits 2;
    --max-peak (the snapshots alone) is still checked; --target-fits on the
    bundled --target run without its jit_targets exits 2."""
    jobs = []
    for table in TABLES:
        jobs += [["check", f"no-{table}", "--fail-on", "leak"], ["check", f"no-{table}", "--max-peak", "1GiB"]]
    procs = cli_batch(jobs, leak)
    for i, table in enumerate(TABLES):
        gate, peak = procs[2 * i], procs[2 * i + 1]
        said = f"journal table {table} is missing, though the journal has"
        assert gate.returncode == 2 and said in _error(gate), gate.stderr
        assert _error(gate).endswith("--fail-on cannot be checked")
        assert peak.returncode == 0 and peak.stdout.startswith("ok   --max-peak"), peak.stderr
        assert sum(said in line for line in peak.stderr.splitlines()) == 1, peak.stderr
    target = leak / "target"
    shutil.copytree(TARGET, target)
    assert run_cli("check", target, "--target-fits", "v5e:2x2").returncode == 0
    _sql(target, "DROP TABLE jit_targets")
    proc = run_cli("check", target, "--target-fits", "v5e:2x2")
    assert proc.returncode == 2 and "journal table jit_targets is missing" in _error(proc), proc.stderr


def test_markers_under_contention_are_never_damage(tmp_path):
    """Snapshots from a thread and from the loop while it marks each step:
    the writer counts after_snapshot under contention (a marker may wait
    while later snapshots are written), and the reader reads every marker."""
    from jaxmemprof.store.reader import load_run

    script = write_script(tmp_path, "busy.py", BUSY)
    run_cli("run", "--interval", "0.005", "-o", tmp_path / "run", script, check=0)
    run_ = load_run(tmp_path / "run")
    assert run_.damaged == {} and len(run_.markers) == 1000
    with sqlite3.connect(tmp_path / "run" / "journal.sqlite") as con:
        assert con.execute("SELECT count(*) FROM markers").fetchone()[0] == 1000


def test_a_damaged_cell_of_a_table_the_true_peak_reads_is_said(leak):
    """The jit tables the true peak comes from are checked cell by cell
    (as the end's tables were): a negative peak of a compile, a flag that
    is 2, each named by its rowid; --max-true-peak exits 2, where the sound
    run is checked."""
    cases = [("compile-negative", "UPDATE jit_compiles SET temp_bytes = -5",
              "jit_compiles rowid 1: temp_bytes is negative (-5)"),
             ("buffer-flag", "UPDATE jit_buffers SET at_peak = 2", "at_peak is 2, not 0 or 1")]
    for name, sql, _ in cases:
        shutil.copytree(leak / "sound", leak / name)
        _sql(leak / name, sql)
    sound, *damaged = cli_batch([["check", "sound", "--max-true-peak", "1GiB"]]
                                + [["check", name, "--max-true-peak", "1GiB"] for name, _, _ in cases], leak)
    assert sound.returncode == 0 and sound.stdout.startswith("ok   --max-true-peak"), sound.stderr
    for (name, _, said), proc in zip(cases, damaged):
        assert proc.returncode == 2 and said in _error(proc), (name, proc.stderr)

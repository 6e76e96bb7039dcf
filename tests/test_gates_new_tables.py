"""The tables added for the end of a run and the holder search are read as
the older ones are: each cell against what the writer writes. A row whose
cell is text, NULL (where the schema or the row's own error does not allow
it), 1e308, 2**63-1 or negative is damage, named in one line (the journal
file, the table, the row's rowid, the column, what is wrong), and a gate
whose figure comes from the table exits 2, never 0 or 1 on what is left.

The runs are the bundled real recordings: sample_runs/runs/mlp-target
(``run --plan --target v5e:2x2 --target v6e:2x2`` of the MLP: jit_targets,
jit_plans, jit_target_buffers) and mlp-leak (jit_whatif, snapshot_calls,
py_chains, py_holders, py_holder_searches), damaged with sqlite3 as a disk,
a crash or a hand would damage them."""

from __future__ import annotations

import json
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from conftest import REPO, cli_batch, cpu_env, sigint_at, write_script

from jaxmemprof.facts import tpus

RUNS = REPO / "sample_runs" / "runs"
GiB = 1024**3
# The damage kinds: what each cell is set to.
KINDS = {"text": "x", "null": None, "1e308": 1e308, "2**63-1": 2**63 - 1, "negative": -17 * GiB}
# What the reader says of each, after "COLUMN ".
SAID = {"text": "is text ('x'), not a number", "null": "is missing (NULL)", "1e308": "is past 2**53 (1e+308)",
        "2**63-1": "is past 2**53", "negative": f"is negative ({-17 * GiB})"}


def _damage(run, sql, *params, table=None):
    """``sql`` on the run's journal; where the schema refuses it (NULL in
    a NOT NULL column), on ``table`` made again without its constraints
    (as a hand's CREATE TABLE ... AS SELECT leaves it; its rows in order)."""
    con = sqlite3.connect(run / "journal.sqlite")
    try:
        con.execute(sql, params)
    except sqlite3.IntegrityError:
        assert table is not None
        columns = ", ".join(r[1] for r in con.execute(f"PRAGMA table_info({table})"))
        for s in (f"CREATE TABLE loose AS SELECT * FROM {table} WHERE 0",
                  f"INSERT INTO loose (rowid, {columns}) SELECT rowid, {columns} FROM {table} ORDER BY rowid",
                  f"DROP TABLE {table}", f"ALTER TABLE loose RENAME TO {table}"):
            con.execute(s)  # the rows keep their rowids: the damage lands on the row named
        con.execute(sql, params)
    con.commit()
    con.close()


def _rowids(run, table) -> list:
    """The rowids of ``table`` in the run's journal, in order (the bundled
    runs are re-recorded now and then: a test names the rows they have)."""
    return [r for (r,) in _read(run, f"SELECT rowid FROM {table} ORDER BY rowid")]


def _read(run, sql) -> list:
    """``sql``'s rows from the run's journal, opened read-only."""
    con = sqlite3.connect(f"file:{run / 'journal.sqlite'}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _one_error(proc, *named):
    """The command's one error line, which names each of ``named``."""
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("jaxmemprof: error:")]
    assert len(errors) == 1, proc.stderr
    for n in named:
        assert n in errors[0], (n, errors[0])
    return errors[0]


@pytest.fixture(scope="module")
def failing_target(tmp_path_factory):
    """mlp-target with its recorded v5e step's temporaries at 17 GiB, a
    sound figure past the chip (the gate fails it: exit 1), and copies of
    it with that cell damaged each way, and with the live bytes outside the
    call negative."""
    d = tmp_path_factory.mktemp("targets")
    shutil.copytree(RUNS / "mlp-target", d / "intact")
    _damage(d / "intact", "UPDATE jit_targets SET temp_bytes = ? WHERE rowid = 1", 17 * GiB)
    for kind, value in KINDS.items():
        shutil.copytree(d / "intact", d / kind)
        _damage(d / kind, "UPDATE jit_targets SET temp_bytes = ? WHERE rowid = 1", value)
    shutil.copytree(d / "intact", d / "outside")
    _damage(d / "outside", "UPDATE jit_targets SET live_outside = ? WHERE rowid = 1", '{"cpu:0": -19000000000}')
    return d


def test_the_target_gate_fails_closed_on_each_damage(failing_target):
    """Intact: exit 1, 'needs 17.03 GiB'. Each damage of that figure: exit
    2 naming the file, table, row and problem (was exit 0: text, NULL,
    1e308 and 2**63-1 read as 0 bytes, a negative count as 'needs -0.97
    GiB ... within'); nothing on stdout."""
    d = failing_target
    names = ["intact", *KINDS, "outside"]
    procs = cli_batch([["check", n, "--target-fits", "v5e:2x2"] for n in names], d)
    intact = procs[0]
    assert intact.returncode == 1 and intact.stdout.startswith(
        "FAIL --target-fits v5e:2x2: train_step needs 17.03 GiB per device, more than"), intact.stdout + intact.stderr
    assert "warning" not in intact.stderr, intact.stderr
    for name, proc in zip(names[1:], procs[1:]):
        assert proc.returncode == 2 and proc.stdout == "", (name, proc.stdout, proc.stderr)
        column, problem = (("live_outside", "holds 'cpu:0': -19000000000, which is negative") if name == "outside"
                           else ("temp_bytes", SAID[name]))
        error = _one_error(proc, f"jaxmemprof: error: {name}: is damaged (", "journal.sqlite, jit_targets rowid 1: ",
                           f"{column} {problem}", "--target-fits cannot be checked")
        assert "needs" not in error


def test_a_failed_compile_may_have_no_figures_but_a_compiled_one_must(tmp_path):
    """NULL figures beside the compile's error are XLA:TPU's refusal, an
    answer (the bundled run has such a row: read without a warning, the
    gate holds); NULL figures on a row without an error are damage."""
    run = tmp_path / "run"
    shutil.copytree(RUNS / "mlp-target", run)
    with sqlite3.connect(run / "journal.sqlite") as con:
        (refused,) = con.execute("SELECT count(*) FROM jit_targets WHERE temp_bytes IS NULL AND error IS NOT NULL"
                                 ).fetchone()
    assert refused >= 1
    sound, = cli_batch([["check", "run", "--target-fits", "v5e:2x2"]], tmp_path)
    assert sound.returncode == 0 and sound.stderr == "", sound.stderr
    _damage(run, "UPDATE jit_targets SET error = NULL WHERE temp_bytes IS NULL")
    torn, report = cli_batch([["check", "run", "--target-fits", "v5e:2x2"], ["report", "run"]], tmp_path)
    assert torn.returncode == 2, torn.stderr
    _one_error(torn, "jit_targets rowid 8: argument_bytes is missing (NULL), and its row has no error saying why")
    assert report.returncode == 0 and "jit_targets rowid 8: argument_bytes" in report.stdout, report.stdout


# (run, table, column): the table's first row is damaged (py_holders' first rows were replaced by a
# larger search's, as the writer does: its first rowid is not 1)
CELLS = [
    ("mlp-target", "jit_plans", "temp_bytes"),
    ("mlp-target", "jit_target_buffers", "bytes"),
    ("mlp-leak", "jit_whatif", "temp_bytes"),
    ("mlp-leak", "snapshot_calls", "function_id"),
    ("mlp-leak", "py_chains", "line"),
    ("mlp-leak", "py_holders", "array_id"),
    ("mlp-leak", "py_holder_searches", "visited"),
]
# A sound snapshot_calls row where the recording has none (its loop's snapshots are taken at its
# step markers, between calls): train_step in progress at the peak's snapshot, as an interval
# snapshot during a call records it.
SOUND_CALL = ("INSERT INTO snapshot_calls SELECT (SELECT snapshot FROM snapshots ORDER BY live_bytes DESC LIMIT 1), "
              "(SELECT function_id FROM jit_functions WHERE name = 'train_step')")


def _first_rowid(d, table) -> int:
    """The first rowid of ``table`` in the fixture's copies (all alike)."""
    return _rowids(d / f"{table}-sound", table)[0]
GATE = ["--fail-on", "donate", "--fail-on", "leak"]  # the sound runs fail both (exit 1)


@pytest.fixture(scope="module")
def damaged_tables(tmp_path_factory):
    d = tmp_path_factory.mktemp("tables")
    for run, table, column in CELLS:
        sound = d / f"{table}-sound"
        shutil.copytree(RUNS / run, sound)
        if table == "snapshot_calls" and not _rowids(sound, table):
            _damage(sound, SOUND_CALL)
        (rowid, *_) = _rowids(sound, table)
        for kind, value in KINDS.items():
            copy = d / f"{table}-{kind}"
            shutil.copytree(sound, copy)
            _damage(copy, f"UPDATE {table} SET {column} = ? WHERE rowid = {rowid}", value, table=table)
            assert _rowids(copy, table)[0] == rowid  # the damage landed on that row
    return d


@pytest.mark.parametrize("table", [c[1] for c in CELLS])
def test_every_new_table_is_checked_and_its_damage_named(damaged_tables, table):
    """Each damage kind in each new table: check exits 2 naming the row
    (the sound runs exit 1: the findings are there), and report, export and
    show read the rest with the same one-line warning (was: no word, the
    cell read as 0)."""
    d = damaged_tables
    _, _, column = next(c for c in CELLS if c[1] == table)
    rowid = _first_rowid(d, table)
    jobs = [["check", f"{table}-{kind}", *GATE] for kind in KINDS]
    jobs += [["report", f"{table}-text"], ["export", f"{table}-null", "--csv", f"csv-{table}"],
             ["show", f"{table}-negative@peak"]]
    *checks, report, export, show = cli_batch(jobs, d)
    for kind, proc in zip(KINDS, checks):
        assert proc.returncode == 2 and proc.stdout == "", (kind, proc.stdout, proc.stderr)
        said = SAID[kind] if kind != "2**63-1" or column != "line" else "is past 2**53"
        _one_error(proc, f"journal.sqlite, {table} rowid {rowid}: {column} {said}", "--fail-on cannot be checked")
    # report says its warnings in its text, export on stderr
    for proc, kind, said, start in ((report, "text", report.stdout, "warning: "),
                                    (export, "null", export.stderr, f"jaxmemprof: warning: {table}-null: "),
                                    (show, "negative", show.stderr, f"jaxmemprof: warning: {table}-negative: ")):
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        warned = [line for line in said.splitlines() if f"{table} rowid {rowid}: {column} {SAID[kind]}" in line]
        assert len(warned) == 1 and warned[0].startswith(f"{start}1 row(s) of the journal's {table} are damaged and "
                                                         f"left out (journal.sqlite, "), said


def test_a_flag_that_is_neither_0_nor_1_is_damage(tmp_path):
    """py_holder_searches' complete and superseded are flags."""
    run = tmp_path / "run"
    shutil.copytree(RUNS / "mlp-leak", run)
    second = _rowids(run, "py_holder_searches")[1]
    _damage(run, f"UPDATE py_holder_searches SET complete = 7 WHERE rowid = {second}")
    (proc,) = cli_batch([["check", "run", *GATE]], tmp_path)
    assert proc.returncode == 2, proc.stderr
    _one_error(proc, f"py_holder_searches rowid {second}: complete is 7, not 0 or 1")


def test_the_sound_runs_read_as_before(tmp_path):
    """No warning on the bundled runs, and their gates' verdicts as they were."""
    jobs = [["check", RUNS / "mlp-leak", *GATE], ["check", RUNS / "mlp-target", *GATE],
            ["check", RUNS / "mlp-target", "--target-fits", "v5e:2x2", "--target-fits", "v6e:2x2"],
            ["report", RUNS / "mlp-target"], ["report", RUNS / "mlp-leak"]]
    leak, target, fits, r1, r2 = cli_batch(jobs, tmp_path)
    assert (leak.returncode, target.returncode, fits.returncode, r1.returncode, r2.returncode) == (1, 1, 0, 0, 0)
    for proc in (leak, target, fits, r1, r2):
        assert "warning" not in proc.stderr and "damaged" not in proc.stderr, proc.stderr


# -- a search cut short says so ----------------------------------------------------------

SMALL = """
import jax
import jax.numpy as jnp


def step(w, x):
    return w + 1e-3 * jnp.sum(jnp.tanh(x * w), axis=0)


if __name__ == "__main__":
    f = jax.jit(step)
    w = jnp.ones((1024,))
    for i in range(3):
        w = f(w, jnp.full((16, 1024), float(i)))
    print(float(w[0]))
"""


# jaxmemprof run whose search for the largest batch holds at its third
# compile (60 s, a signal cutting it short): the signal is sent while the
# search is under way, however loaded the machine.
HELD_SEARCH = """
import sys, time
import jaxmemprof.capture.jit.plan as plan

def search(known, target, compile_at, *args, _original=plan.search, **kwargs):
    made = []

    def held(batch):
        made.append(batch)
        if len(made) == 3:
            time.sleep(60)
        return compile_at(batch)

    return _original(known, target, held, *args, **kwargs)

plan.search = search
sys.argv[0] = "jaxmemprof"
from jaxmemprof.cli import main
main(prog_name="jaxmemprof")
"""


def _searched(journal) -> int:
    """The search compiles a journal being written holds so far."""
    try:
        con = sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=0.1)
        try:
            return con.execute("SELECT count(*) FROM jit_targets WHERE json_extract(detail, '$.source') = 'search'"
                               ).fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


@pytest.mark.skipif(tpus.libtpu_missing(), reason="libtpu is not installed (pip install 'jaxmemprof[tpu]')")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_a_target_search_stopped_part_way_says_it_was_cut(tmp_path, sig):
    """run --plan --target stopped once its search for the largest batch on
    the slice has made two compiles (its third held: HELD_SEARCH): killed (SIGKILL: the run unfinished),
    or Ctrl-C (SIGINT: the rest of the end skipped, the run finished with
    the script's status 0). The report's line says the search was cut short
    and gives the largest batch compiled before as a lower bound (was:
    'largest batch that fits: N (compiled, the largest compiled)', as a
    finished search reads), the plan's section and the JSON's events say
    it, and the slice's gate cannot pass, --allow-unfinished or not (was:
    exit 0)."""
    script = write_script(tmp_path, "small.py", SMALL)
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", HELD_SEARCH, "run", "-q", "--plan", "--target", "v5e:2x2",
                             "-o", str(out), str(script)], env=cpu_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, preexec_fn=sigint_at())  # SIGINT as from a terminal
    deadline = time.monotonic() + 300
    try:
        while proc.poll() is None and time.monotonic() < deadline and _searched(out / "journal.sqlite") < 2:
            time.sleep(0.005)
        assert proc.poll() is None, "the run ended before its search had made two compiles"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)
    why = ("SIGINT skipped the rest of the run's end" if sig == signal.SIGINT else
           "the run was killed after the script ended")
    assert proc.returncode == (0 if sig == signal.SIGINT else -signal.SIGKILL), err  # SIGINT: the script's status
    report, as_json, gate, gate_unfinished = cli_batch(
        [["report", "run"], ["report", "run", "--json"], ["check", "run", "--target-fits", "v5e:2x2"],
         ["check", "run", "--target-fits", "v5e:2x2", "--allow-unfinished"]], tmp_path, env=cpu_env(COLUMNS="300"))
    assert report.returncode == 0, report.stderr
    lines = [x for x in report.stdout.splitlines() if x.startswith("v5e:2x2 step: search for")]
    assert lines, report.stdout
    line = lines[0]
    assert re.fullmatch(rf"v5e:2x2 step: search for the largest batch that fits cut short \({re.escape(why)}\): "
                        r"[\d,]+ fits, the largest batch compiled before, a lower bound", line), line
    assert "largest batch that fits: " not in report.stdout, report.stdout
    assert f"plan: the run's end was cut short ({why})" in report.stdout, report.stdout
    doc = json.loads(as_json.stdout)
    assert any("the run's end was cut short" in e for e in doc["targets"]["events"]), doc["targets"]["events"]
    assert any("the run's end was cut short" in e for e in doc["plan"]["events"]), doc["plan"]["events"]
    for proc in ((gate, gate_unfinished) if sig == signal.SIGINT else (gate_unfinished,)):
        assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
        _one_error(proc, f"had its end cut short ({why}): its compiles for the TPU slice v5e:2x2 may not all have "
                   "been made: --target-fits cannot be checked")
    if sig == signal.SIGKILL:
        assert gate.returncode == 2 and "did not finish" in gate.stderr, gate.stderr


def test_an_end_a_signal_skipped_reads_as_cut(tmp_path):
    """A finished run whose end phase a signal skipped (the manifest's
    end_phase.skipped_by, as run writes it): the slices' figures and the
    plan say so, and the gate cannot pass (the same run whole: exit 0)."""
    run = tmp_path / "run"
    shutil.copytree(RUNS / "mlp-target", run)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["end_phase"] = {"seconds": 1.5, "finished_time": manifest["end_time"], "skipped_by": "SIGINT"}
    (run / "manifest.json").write_text(json.dumps(manifest))
    # the largest batch compiled for v5e:2x2 that fits
    ((fits,),) = _read(run, "SELECT max(batch) FROM jit_targets WHERE target = 'v5e:2x2' AND variant = 'recorded' "
                            "AND error IS NULL")
    report, gate = cli_batch([["report", "run"], ["check", "run", "--target-fits", "v5e:2x2"]], tmp_path,
                             env=cpu_env(COLUMNS="300"))
    assert report.returncode == 0 and "largest batch that fits: " not in report.stdout, report.stdout
    assert "v5e:2x2 train_step: search for the largest batch that fits cut short (SIGINT skipped the rest of the " \
           f"run's end): {fits:,} fits, the largest batch compiled before" in report.stdout, report.stdout
    assert "plan: the run's end was cut short (SIGINT skipped the rest of the run's end)" in report.stdout
    assert gate.returncode == 2, gate.stdout + gate.stderr
    _one_error(gate, "had its end cut short (SIGINT skipped the rest of the run's end)")


def test_a_holder_search_that_stopped_at_its_budget_says_so(tmp_path):
    """py_holder_searches.complete 0 (the search stopped at its budget):
    the peak table's holders, the leak finding and holders.csv say the
    search was cut short (was: read as a finished search's)."""
    run = tmp_path / "run"
    shutil.copytree(RUNS / "mlp-leak", run)
    _damage(run, "UPDATE py_holder_searches SET complete = 0")  # a sound value: the search was cut
    report, export, whole = cli_batch([["report", "run"], ["export", "run", "--csv", "csv"],
                                       ["report", RUNS / "mlp-leak"]], tmp_path, env=cpu_env(COLUMNS="300"))
    assert report.returncode == export.returncode == whole.returncode == 0, report.stderr + export.stderr
    assert "warning" not in report.stdout + export.stderr
    peak = [x for x in report.stdout.splitlines() if "(local of main)" in x and "train_mlp.py:8" in x]
    assert peak and all(x.endswith("(search cut short at its budget)") for x in peak), report.stdout
    (kept,) = [x[x.index("kept alive by "):] for x in whole.stdout.splitlines() if "kept alive by `loss_history" in x]
    assert kept.startswith("kept alive by `loss_history[…]` (a local of main; list, sample_runs/train_mlp.py:80): ")
    assert kept.endswith("."), kept
    # the intact run's figures, with the search's cut said
    assert kept[:-1] + " (search cut short at its budget: others may hold them too)." in report.stdout, report.stdout
    assert "cut short" not in whole.stdout  # the whole search's words unchanged
    import csv

    with open(tmp_path / "csv" / "holders.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert rows and {r["complete"] for r in rows} == {"False"}, rows[:2]


# (run, damage, what the one line names): JSON cells and references between the tables
TORN = [
    ("mlp-leak", "UPDATE py_chains SET steps = '[[\"key\"' WHERE rowid = 1", "py_chains rowid 1: steps is not JSON"),
    ("mlp-leak", "UPDATE py_chains SET steps = '{\"a\": 1}' WHERE rowid = 1",
     "py_chains rowid 1: steps is not a JSON list of [kind, label] steps"),
    ("mlp-leak", "DELETE FROM py_chains WHERE chain_id = 2",
     "py_holders name a chain the journal's py_chains lacks and are left out (journal.sqlite, py_holders HELD: "
     "chain_id 2 is in no py_chains row)"),
    ("mlp-leak", "UPDATE jit_whatif SET change = '[1]' WHERE rowid = 1", "jit_whatif rowid 1: change is not a JSON object"),
    ("mlp-target", "UPDATE jit_targets SET devices = '[\"TPU_0\"' WHERE rowid = 3",
     "jit_targets rowid 3: devices is not JSON"),
    ("mlp-target", "UPDATE jit_plans SET live_outside = '{\"cpu:0\": \"x\"}' WHERE rowid = 2",
     "jit_plans rowid 2: live_outside holds 'cpu:0': 'x', which is text"),
]


def test_torn_json_and_lost_references_are_damage(tmp_path):
    """A JSON cell of the new tables that is not what the writer writes,
    and a holder naming a chain the journal lacks: exit 2 naming the row
    (was: read as an empty holder, a change without arguments, 0 bytes)."""
    jobs = []
    for i, (run, sql, _) in enumerate(TORN):
        shutil.copytree(RUNS / run, tmp_path / f"torn-{i}")
        _damage(tmp_path / f"torn-{i}", sql)
        jobs.append(["check", f"torn-{i}", *GATE] + (["--target-fits", "v5e:2x2"] if run == "mlp-target" else []))
    # the first holder of chain 2, named
    (snapshot, array_id), *_ = _read(RUNS / "mlp-leak", "SELECT snapshot, array_id FROM py_holders WHERE chain_id = 2 "
                                                        "ORDER BY rowid")
    for (_, _, said), proc in zip(TORN, cli_batch(jobs, tmp_path)):
        said = said.replace("HELD", f"snapshot {snapshot}, array_id {array_id}")
        assert proc.returncode == 2 and proc.stdout == "", (said, proc.stdout, proc.stderr)
        _one_error(proc, said, "cannot be checked")

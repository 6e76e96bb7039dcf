"""A gate never passes on a table it could not read whole: `check` exits 2
(never 0) when a journal table that a figure it was asked for comes from
lost rows or cells, and checks a run that did not finish only when asked
(--allow-unfinished). The leaking run is the bundled sample run mlp-leak
(its leak: 4.00 KiB a step at train_mlp.py:82), damaged as a disk, a crash
or a hand would damage it."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import sqlite3

import pytest

from conftest import REPO, cli_batch

LEAK = REPO / "sample_runs" / "runs" / "mlp-leak"
GROWTH = ["--max-growth", "1B/step", "--fail-on", "leak"]  # the sound run fails both (exit 1)


def _sql(*statements):
    def damage(run):
        con = sqlite3.connect(run / "journal.sqlite")
        for s in statements:
            con.execute(s)
        con.commit()
        con.close()
    return damage


def _duplicate_snapshot_rows(run):
    _sql("CREATE TABLE s2 AS SELECT * FROM snapshots", "INSERT INTO s2 SELECT * FROM snapshots",
         "DROP TABLE snapshots", "ALTER TABLE s2 RENAME TO snapshots")(run)


# (name, damage, what the error names, whether the snapshot peak is still whole)
DAMAGES = [
    ("arrays-dropped", _sql("DROP TABLE arrays"), "journal table arrays unreadable", True),
    ("array-kinds-dropped", _sql("DROP TABLE array_kinds"), "journal table array_kinds is missing", True),
    ("half-the-kinds", _sql("UPDATE arrays SET kind_id = 'x' WHERE array_id % 2 = 0"),
     "row(s) of the journal's arrays are damaged", True),
    ("addresses-torn", _sql("UPDATE arrays SET addresses = '[1, 2' WHERE array_id % 3 = 0"),
     "list cell(s) of the journal's arrays are damaged", True),
    ("shapes-torn", _sql("UPDATE array_kinds SET shape = '{' WHERE kind_id % 2 = 0"),
     "list cell(s) of the journal's array_kinds are damaged", True),
    ("ends-dropped", _sql("DROP TABLE array_ends"), "journal table array_ends unreadable", True),
    ("stacks-torn", _sql("UPDATE stacks SET frames = 'x'"), "stack(s) of the journal unreadable (stacks 1, 2", True),
    ("markers-torn", _sql("UPDATE markers SET t_wall = 'x' WHERE marker % 2 = 0"),
     "row(s) of the journal's markers are damaged", True),
]


@pytest.fixture(scope="module")
def damaged_runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("damaged")
    for name, damage, _, _ in DAMAGES:
        shutil.copytree(LEAK, d / name)
        damage(d / name)
    shutil.copytree(LEAK, d / "repeated")
    _duplicate_snapshot_rows(d / "repeated")
    return d


def test_a_damaged_table_fails_closed(damaged_runs):
    """Each damage of a table the growth or the findings come from: exit 2
    naming the damage (the sound run reads 4 KiB/step and exits 1); the
    peak, from the snapshots alone, is still checked (exit 0)."""
    d = damaged_runs
    jobs, expect = [["check", LEAK, *GROWTH]], [(1, None)]
    for name, _, problem, peak_whole in DAMAGES:
        jobs += [["check", name, *GROWTH], ["check", name, "--max-peak", "1TiB"]]
        expect += [(2, problem), (0 if peak_whole else 2, None)]
    for argv, (status, problem), proc in zip(jobs, expect, cli_batch(jobs, d)):
        assert proc.returncode == status, (argv, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr, proc.stderr
        if problem is not None:
            errors = [line for line in proc.stderr.splitlines() if "error:" in line]
            assert len(errors) == 1 and problem in errors[0], proc.stderr
            assert errors[0].endswith("--max-growth and --fail-on cannot be checked"), errors[0]
            assert errors[0].startswith(f"jaxmemprof: error: {argv[1]}: is damaged ("), errors[0]
            assert proc.stdout == ""


def test_snapshot_rows_repeated_are_read_once(damaged_runs):
    """A journal whose snapshot rows appear twice reads as the sound one
    (was: 'internal error' and a pandas traceback, exit 1); rows of one
    snapshot that disagree leave it out, and a peak gate cannot pass then."""
    d = damaged_runs
    jobs = [["check", LEAK, "--max-peak", "1TiB", "--json"], ["check", "repeated", "--max-peak", "1TiB", "--json"],
            ["report", "repeated"], ["export", "repeated", "--csv", "csv"]]
    sound, repeated, report, export = cli_batch(jobs, d)
    assert repeated.returncode == 0 and report.returncode == 0 and export.returncode == 0, (repeated.stderr,
                                                                                             report.stderr)
    assert json.loads(repeated.stdout)["checks"][0]["value"] == json.loads(sound.stdout)["checks"][0]["value"]
    snapshots = _snapshots()
    assert f"{len(snapshots)} row(s) of the journal's snapshots repeat another whole; read once" in repeated.stderr
    # Rows that disagree: each snapshot so torn is left out, said; a peak cannot be checked.
    peak = max(snapshots, key=lambda r: r[2])[0]
    shutil.copytree(LEAK, d / "torn")
    _sql("CREATE TABLE s2 AS SELECT * FROM snapshots",
         "INSERT INTO s2 SELECT snapshot, t_wall, t_mono, trigger, label, file, live_bytes + 1, buffers, arrays, "
         f"cost_s, wall_s FROM snapshots WHERE snapshot = {peak}",
         "DROP TABLE snapshots", "ALTER TABLE s2 RENAME TO snapshots")(d / "torn")
    (proc,) = cli_batch([["check", "torn", "--max-peak", "1TiB"]], d)
    assert proc.returncode == 2, proc.stderr
    assert f"snapshots {peak} have rows that disagree" in proc.stderr, proc.stderr


def _snapshots() -> list:
    """(snapshot, t_mono, live_bytes) of the bundled run's journal, in order."""
    with sqlite3.connect(f"file:{LEAK / 'journal.sqlite'}?mode=ro", uri=True) as con:
        return con.execute("SELECT snapshot, t_mono, live_bytes FROM snapshots ORDER BY snapshot").fetchall()


def _unfinish(run):
    manifest = run / "manifest.json"
    m = json.loads(manifest.read_text())
    for key in ("end_time", "exit_status", "ended_by", "duration_s"):
        m.pop(key, None)
    manifest.write_text(json.dumps(m))


def test_a_run_that_did_not_finish_is_checked_only_when_asked(tmp_path):
    """Killed (no process holds its lock) or still running (one does):
    exit 2 saying which; --allow-unfinished checks what it has."""
    killed, running = tmp_path / "killed", tmp_path / "running"
    for run in (killed, running):
        shutil.copytree(LEAK, run)
        _unfinish(run)
    (killed / ".jaxmemprof.lock").write_text("")  # left by a process the kernel took the lock from
    fd = os.open(running / ".jaxmemprof.lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as a recording process holds it
    try:
        jobs = [["check", "killed", "--max-peak", "1TiB"], ["check", "running", "--max-peak", "1TiB"],
                ["check", "killed", "--max-peak", "1TiB", "--allow-unfinished"],
                ["check", "killed", "--max-peak", "1MiB", "--allow-unfinished"],
                ["check", "running", "--baseline", "killed", "--max-increase", "5", "--allow-unfinished"]]
        k, r, k_ok, k_fail, both = cli_batch(jobs, tmp_path)
    finally:
        os.close(fd)
    last = json.loads((LEAK / "manifest.json").read_text())["duration_s"]  # the exit snapshot ends the run
    said = re.search(r"killed: did not finish \(killed after its last snapshot at ([\d.]+) s\)", k.stderr)
    assert k.returncode == 2 and said and abs(float(said.group(1)) - last) <= 0.5, k.stderr
    assert "--allow-unfinished" in k.stderr and k.stdout == ""
    assert r.returncode == 2 and f"running: is still running (its last snapshot at {said.group(1)} s)" in r.stderr, \
        r.stderr
    assert k_ok.returncode == 0 and k_ok.stdout.startswith("ok   --max-peak"), k_ok.stderr
    assert k_fail.returncode == 1 and k_fail.stdout.startswith("FAIL --max-peak"), k_fail.stderr
    assert both.returncode == 0, both.stderr


def test_a_damaged_peak_snapshot_is_left_out_and_named(tmp_path):
    """The snapshot file at the peak damaged: report, show and export read
    the rest, the peak being the highest whole snapshot, and say which was
    left out (was: all exit 2, 'not a pprof profile'); check cannot pass a
    peak limit on it (exit 2), and fails one the rest already break (exit 1)."""
    run = tmp_path / "torn"
    shutil.copytree(LEAK, run)
    con = sqlite3.connect(run / "journal.sqlite")
    rows = con.execute("SELECT snapshot, file, live_bytes FROM snapshots ORDER BY live_bytes DESC, snapshot").fetchall()
    con.close()
    (peak, file, _), (second, _, second_bytes) = rows[0], rows[1]
    (run / file).write_bytes(b"not a profile")
    jobs = [["report", "torn"], ["show", "torn@peak"], ["export", "torn", "--csv", "csv"],
            ["check", "torn", "--max-peak", "1TiB"], ["check", "torn", "--max-peak", "1MiB", "--json"]]
    report, show, export, passing, failing = cli_batch(jobs, tmp_path)
    said = f"1 damaged snapshot file(s) left out (snapshot {peak}: not a pprof profile"
    for proc in (report, show, export):
        assert proc.returncode == 0 and said in proc.stderr + proc.stdout, (proc.args, proc.stderr)
    assert f"(snapshot {second})" in report.stdout and f"torn@{second}" in show.stdout, (report.stdout, show.stdout)
    assert passing.returncode == 2 and said in passing.stderr and passing.stdout == "", passing.stderr
    assert failing.returncode == 1 and json.loads(failing.stdout)["checks"][0]["value"] == second_bytes


def test_a_run_without_snapshot_says_whether_it_runs_or_was_killed(tmp_path):
    """A script that never brings JAX up: while it runs, report says 'still
    running' (not 'did not finish'); killed, 'killed before its first'
    snapshot, never 'the program never put an array on a JAX device'."""
    import signal
    import subprocess
    import sys
    import time

    from conftest import cpu_env, write_script

    script = write_script(tmp_path, "sleeps.py", "import time\nprint('up', flush=True)\ntime.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", "r", str(script)], cwd=tmp_path,
                            env=cpu_env(), stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "up\n"
        deadline = time.monotonic() + 60
        while not (tmp_path / "r" / "manifest.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        (running,) = cli_batch([["report", "r"]], tmp_path)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    (killed,) = cli_batch([["report", "r"]], tmp_path)
    assert running.returncode == 0 and "no snapshot yet: the run is still running" in running.stdout, running.stdout
    assert "the run is still running" in running.stdout + running.stderr and "killed" not in running.stdout
    assert killed.returncode == 0 and "no snapshot: the run was killed before its first" in killed.stdout, killed.stdout
    assert "never put an array" not in running.stdout + killed.stdout


def test_a_job_says_which_process_is_still_running_and_which_was_killed(tmp_path):
    """A job's report names each unfinished process's state as `report` of
    the run does: still running (its lock held), or killed."""
    job = tmp_path / "job"
    for n in range(3):
        shutil.copytree(LEAK, job / f"process-{n}")
    for n in (1, 2):
        _unfinish(job / f"process-{n}")
    fd = os.open(job / "process-1" / ".jaxmemprof.lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as its recording process holds it
    try:
        text, as_json = cli_batch([["report", "job"], ["report", "job", "--json"]], tmp_path)
    finally:
        os.close(fd)
    assert text.returncode == as_json.returncode == 0, text.stderr + as_json.stderr
    procs = {p["process"]: p for p in json.loads(as_json.stdout)["processes"]}
    assert [(procs[n]["finished"], procs[n]["running"]) for n in range(3)] == [(True, False), (False, True),
                                                                               (False, False)]
    assert "Processes 1, 2 did not finish (killed, or still running)" in text.stdout, text.stdout
    ended = {line.split()[0]: line for line in text.stdout.splitlines() if line.strip()[:1].isdigit()}
    assert ended["0"].rstrip().endswith("exit 0"), text.stdout  # its status as the script gave it (was 0.0)
    assert ended["1"].rstrip().endswith("still running") and ended["2"].rstrip().endswith("killed"), text.stdout

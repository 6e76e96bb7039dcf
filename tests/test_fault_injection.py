"""Fault injection: ``jaxmemprof run`` killed at random moments, and run
directories damaged or edited by hand.

The run directory must survive its writer being SIGKILLed at any instant
(docs/recording.md, the run directory): after a kill, every committed snapshot loads, its
profile's buffer bytes equal the journal's ``live_bytes``, array rows are
never committed without their snapshot, and ``report`` works.

What is right when a kill leaves no snapshot at all:

- killed before the run directory (or its journal's tables) existed: there
  is no run to read; ``load_run`` raises InputError and ``report`` exits 2
  with one line naming the directory;
- killed after the journal was set up but before the first snapshot (JAX
  still importing): a run with no snapshot, read like a finished run whose
  program never used JAX: ``report`` exits 0 (an empty report, warning that
  the run did not finish), ``show RUN@last`` exits 2 with one line.

Damaged directories (a snapshot file deleted, a truncated journal or WAL, a
corrupt manifest, a journal that is not SQLite, an orphan snapshot file, a
dropped table, cells of the wrong type): ``report``, ``show RUN@last``,
``diff RUN`` and ``export RUN --csv`` exit 0 or 2, never 1, and never print a
traceback; an exit 2 prints exactly one ``jaxmemprof: error:`` line.
"""

from __future__ import annotations

import json
import os
import random
import select
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import cli_batch, cpu_env, run_cli, write_script

from jaxmemprof import load_run
from jaxmemprof.errors import InputError

# The target: allocates and frees arrays of several sizes, through a jitted
# function and a donating one, with markers; forever (steps 0) or for a
# number of steps.
CHURN = """
import random
import sys
import time

import jaxmemprof

rng = random.Random(int(sys.argv[1]))
steps = int(sys.argv[2])

import jax
import jax.numpy as jnp

scale = jax.jit(lambda a, b: a * b + 1.0)
bump = jax.jit(lambda a: a + 1.0, donate_argnums=0)
state = jnp.zeros((512,), jnp.float32)
keep = []
i = 0
while steps == 0 or i < steps:
    n = rng.choice((16, 128, 1024, 4096))
    x = jnp.full((n,), float(i), jnp.float32)
    keep.append(scale(x, x))
    state = bump(state)
    while len(keep) > 40 or (keep and rng.random() < 0.3):
        keep.pop(rng.randrange(len(keep)))
    if i % 10 == 0:
        jaxmemprof.mark(f"step {i}")
    i += 1
    time.sleep(0.002)
print("done", flush=True)
"""

# Prepended to CHURN for faults at exact points of the snapshot writer
# (argv[3]: the fault, argv[4]: at which snapshot file / commit). The
# process kills itself with SIGKILL there, after writing the snapshot
# file's name to fault.txt.
FAULT_PRELUDE = """
import os
import signal
import sys

from jaxmemprof.capture import session as _session
from jaxmemprof.store import layout as _layout

_FAULT, _AT = sys.argv[3], int(sys.argv[4])
_state = {"writes": 0, "commits": 0}


def _die(note):
    with open("fault.txt", "w") as f:
        f.write(note)
    os.kill(os.getpid(), signal.SIGKILL)


_real_write = _layout.write_atomic


def _write_atomic(path, data, **kw):
    if path.parent.name != "snapshots":
        return _real_write(path, data, **kw)
    _state["writes"] += 1
    if _state["writes"] == _AT and _FAULT == "tmp-half-written":
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        with open(tmp, "wb") as f:
            f.write(data[: len(data) // 2])
        _die(path.name)
    _real_write(path, data, **kw)
    if _state["writes"] == _AT and _FAULT == "renamed-not-committed":
        _die(path.name)


_layout.write_atomic = _write_atomic


class _Journal:
    # The journal's connection, killed just before the AT-th snapshot's COMMIT.
    def __init__(self, db):
        self._db = db

    def execute(self, sql, *args):
        # Only a snapshot's transaction counts (the holder search commits its own).
        if sql.startswith("INSERT INTO snapshots "):
            _state["snapshot_tx"] = True
        if sql == "COMMIT" and _state.pop("snapshot_tx", False):
            _state["commits"] += 1
            if _state["commits"] == _AT and _FAULT == "in-transaction":
                _die(str(_AT))
        return self._db.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._db, name)


if _FAULT == "in-transaction":
    _writer = _session.active().writer
    _writer._db = _Journal(_writer._db)
"""

SEED = 20260601
N_KILLS = 14


def _spawn(cwd: Path, run_dir: Path, script: Path, *args) -> subprocess.Popen:
    # stderr to a file beside the run, where a stalled run's threads are dumped (_wait_for).
    stderr = open(Path(cwd) / f"{run_dir.name}.stderr", "w")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "jaxmemprof", "run", "-o", str(run_dir), "--interval", "0.02",
             "--max-overhead", "0", str(script), *map(str, args)],
            cwd=cwd, env=cpu_env(PYTHONFAULTHANDLER="1"), stdout=subprocess.PIPE, stderr=stderr, text=True,
        )
    finally:
        stderr.close()


def _wait_for(run_dir: Path, proc: subprocess.Popen, *, files: int = 0, path: str | None = None,
              timeout: float = 120) -> None:
    """Until ``path`` (relative to the run) exists, or ``files`` snapshot
    files do. (A snapshot whose profile is the one before's shares that
    file: snapshot N need not have a file N, only N snapshots N files.)"""
    snapshots = run_dir / "snapshots"

    def ready():
        if path is not None:
            return (run_dir / path).exists()
        return snapshots.is_dir() and sum(n.endswith(".prof.gz") for n in os.listdir(snapshots)) >= files

    what = f"{run_dir / path}" if path is not None else f"{files} snapshot files in {snapshots}"
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            assert ready(), f"the run ended before {what}"
            return
        if time.monotonic() >= deadline:
            _stalled(run_dir, proc, f"no {what} in {timeout} s")
        time.sleep(0.005)


def _wait_for_done(run_dir: Path, proc: subprocess.Popen, timeout: float = 120) -> str:
    """Until the script prints its last line (CHURN's "done"); returns what it printed."""
    if not select.select([proc.stdout], [], [], timeout)[0]:
        _stalled(run_dir, proc, f"{run_dir}: the script printed nothing in {timeout} s")
    return proc.stdout.readline()


def _stalled(run_dir: Path, proc: subprocess.Popen, what: str):
    # A run that stalls: every thread's stack (faulthandler, on SIGABRT), in the message.
    proc.send_signal(signal.SIGABRT)
    proc.communicate(timeout=60)
    log = run_dir.with_suffix(".stderr")
    stacks = log.read_text(errors="replace")[-6000:] if log.exists() else ""
    raise AssertionError(f"{what}; the run's threads:\n{stacks}")


def _committed(run_dir: Path):
    """The committed snapshots (number -> file) as SQLite itself sees them,
    or None when there is no journal with a snapshots table. Read from a copy
    of the journal files opened read-write, so that SQLite recovers the WAL
    of a killed writer the way it always may."""
    db = run_dir / "journal.sqlite"
    if not db.is_file():
        return None
    with tempfile.TemporaryDirectory() as tmp:
        for suffix in ("", "-wal", "-shm"):
            if (run_dir / f"journal.sqlite{suffix}").is_file():
                shutil.copy(run_dir / f"journal.sqlite{suffix}", Path(tmp) / f"journal.sqlite{suffix}")
        try:
            con = sqlite3.connect(Path(tmp) / "journal.sqlite")
            try:
                return dict(con.execute("SELECT snapshot, file FROM snapshots").fetchall())
            finally:
                con.close()
        except sqlite3.Error:
            return None


def _assert_clean_exit(proc: subprocess.CompletedProcess, what: str, allowed=(0, 2)) -> None:
    assert proc.returncode in allowed, (
        f"{what}: exit {proc.returncode}, expected one of {allowed}\nstderr:\n{proc.stderr}"
    )
    assert "Traceback" not in proc.stderr, f"{what}: a traceback\n{proc.stderr}"
    assert "internal error" not in proc.stderr, f"{what}: an internal error\n{proc.stderr}"
    if proc.returncode == 2:
        lines = proc.stderr.splitlines()
        errors = [ln for ln in lines if ln.startswith("jaxmemprof: error: ")]
        assert len(errors) == 1, f"{what}: expected one error line\n{proc.stderr}"
        others = [ln for ln in lines if not ln.startswith(("jaxmemprof: error: ", "jaxmemprof: warning: "))]
        assert not others, f"{what}: stray stderr lines {others}\n{proc.stderr}"
        assert not proc.stdout.strip(), f"{what}: output before the error\n{proc.stdout}"


def _live_bytes_mismatches(run) -> list[tuple[int, int, int]]:
    """(snapshot, bytes of the buffers in its profile, the journal's
    live_bytes) for each snapshot where the two differ; every profile must load."""
    out = []
    for n, live in zip(run.snapshots["snapshot"], run.snapshots["live_bytes"]):
        prof = run.profile(int(n))
        buffers = int(prof.samples.loc[prof.samples["kind"] == "buffer", "bytes"].sum())
        if buffers != int(live):
            out.append((int(n), buffers, int(live)))
    return out


def _assert_no_mismatch(results: list[dict]) -> None:
    bad = {f["dir"]: f["live_bytes_mismatches"] for f in results if f.get("live_bytes_mismatches")}
    assert not bad, (
        "snapshots whose profile's buffer bytes differ from the journal's live_bytes "
        f"(run: [(snapshot, profile bytes, live_bytes)]): {bad}"
    )


def check_killed_run(run_dir: Path, script_done: bool) -> tuple[dict, list]:
    """Check a run directory left by a SIGKILL. Returns facts about it, and
    the CLI checks to make: (argv, check(CompletedProcess)) pairs."""
    facts = {"dir": run_dir.name}
    snap_dir = run_dir / "snapshots"
    if snap_dir.is_dir():
        facts["tmp_files"] = sum(".tmp" in n for n in os.listdir(snap_dir))
    committed = _committed(run_dir)
    if committed is None:
        # No journal with its tables: there is no run to read.
        facts["state"] = "no run yet" if not run_dir.exists() else "no journal tables"
        try:
            run = load_run(run_dir)
        except InputError as exc:
            assert str(run_dir) in str(exc)
        else:
            raise AssertionError(
                f"{run_dir}: SQLite sees no snapshots table, but load_run read {len(run.snapshots)} "
                f"snapshots (warnings: {run.warnings}); files: {sorted(os.listdir(run_dir))}"
            )

        def report_refused(proc):
            _assert_clean_exit(proc, f"report {run_dir}", allowed=(2,))
            assert str(run_dir) in proc.stderr

        return facts, [(["report", run_dir], report_refused)]

    try:
        run = load_run(run_dir)
    except InputError as exc:
        raise AssertionError(f"{run_dir}: {len(committed)} committed snapshots, but load_run refused it: {exc}") from exc
    facts["snapshots"] = len(run.snapshots)
    facts["state"] = "finished" if run.finished else "killed"
    if not script_done:
        assert not run.finished
    assert ("did not finish" in " ".join(run.warnings)) == (not run.finished), run.warnings
    # Nothing committed is lost: the file is renamed into place before its
    # journal row is committed.
    assert sorted(run.snapshots["snapshot"].tolist()) == sorted(committed), run.warnings
    assert not any("missing" in w for w in run.warnings), run.warnings
    facts["orphans"] = sum("without a journal entry" in w for w in run.warnings)
    # Every committed snapshot's profile loads; its buffers' bytes should be
    # the journal's live_bytes (checked by the caller, after the rest).
    facts["live_bytes_mismatches"] = _live_bytes_mismatches(run)
    # A snapshot's array rows are committed with it, in one transaction.
    numbers = set(committed)
    arrays = run.arrays
    assert set(arrays["first_snapshot"].astype(int)) <= numbers
    assert set(arrays["end_snapshot"].dropna().astype(int)) <= numbers
    assert (arrays["first_snapshot"] <= arrays["last_snapshot"]).all()

    def report_ok(proc):
        _assert_clean_exit(proc, f"report {run_dir}", allowed=(0,))
        assert "snapshots," in proc.stdout and "Findings" in proc.stdout  # the summary and the last section
        if not run.finished:
            assert "did not finish" in proc.stdout
            # the summary line says the run was killed (it holds no lock: nothing records it)
            [summary] = [line for line in proc.stdout.split("\n") if line.endswith("killed") or ", killed;" in line]
            assert "None" not in summary and "?" not in summary, summary

    def show_last(proc):
        # A run with no snapshot yet has no last one: one clean line.
        _assert_clean_exit(proc, f"show {run_dir}@last", allowed=(0,) if len(run.snapshots) else (2,))

    return facts, [(["report", run_dir], report_ok), (["show", f"{run_dir}@last"], show_last)]


def run_checks(checks: list, cwd: Path) -> None:
    procs = cli_batch([argv for argv, _ in checks], cwd)
    failures = []
    for (argv, check), proc in zip(checks, procs):
        try:
            check(proc)
        except AssertionError as exc:
            failures.append(f"jaxmemprof {' '.join(map(str, argv))}: {str(exc)[:3000]}")
    assert not failures, "\n\n".join(failures)


def _kill_plan(rng: random.Random) -> list[tuple[str, int, float]]:
    """(when, steps, delay), each delay drawn in a part of its phase of its
    own, so that a few kills still spread over every phase: 'spawn' delays
    count from the start of the process (the first before the run directory
    exists, the others while the CLI starts); 'journal' delays from the
    journal's file (the journal being set up, JAX being imported: before the
    first snapshot); 'snapshot' delays from the first snapshot file
    (snapshots being written back to back); 'ending' runs stop on their own
    after a few steps, their delays from the script's last line: the kill
    lands in the exit snapshot, while the run is finalised (a few
    milliseconds), or while its summary is printed."""
    def spread(when, steps, lo, hi, n):
        width = (hi - lo) / n
        return [(when, steps, rng.uniform(lo + k * width, lo + (k + 1) * width)) for k in range(n)]

    plan = spread("spawn", 0, 0.0, 0.05, 1) + spread("spawn", 0, 0.05, 1.2, 2)
    plan += spread("journal", 0, 0.0, 0.5, 2)
    plan += spread("snapshot", 0, 0.0, 1.2, 6)
    plan += spread("ending", 60, 0.0, 0.01, 2) + spread("ending", 60, 0.01, 1.0, 1)
    assert len(plan) == N_KILLS
    return plan


def _kill_at(run_dir: Path, script: Path, when: str, steps: int, delay: float, seed: int) -> tuple[bool, int]:
    """One run of the plan, SIGKILLed at its moment: (the script finished first, the exit status)."""
    proc = _spawn(run_dir.parent, run_dir, script, seed, steps)
    printed = ""
    try:
        if when == "journal":
            _wait_for(run_dir, proc, path="journal.sqlite")
        elif when == "snapshot":
            _wait_for(run_dir, proc, path="snapshots/000001.prof.gz")
        elif when == "ending":
            printed = _wait_for_done(run_dir, proc)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
    finally:
        out, _ = proc.communicate(timeout=60)
    done = "done" in printed + out
    if not done:
        assert proc.returncode == -signal.SIGKILL
    return done, proc.returncode


def test_sigkill_at_random_moments(tmp_path):
    """14 runs, each SIGKILLed at a seeded random moment: before the run
    directory exists, while the CLI starts, while the journal is set up and
    JAX imported, while snapshots are written back to back (--interval 0.02
    --max-overhead 0), and around the end. Two runs at a time (each waits
    on its own process most of its time)."""
    rng = random.Random(SEED)
    plan = _kill_plan(rng)
    seeds = [rng.randrange(1 << 30) for _ in plan]
    script = write_script(tmp_path, "churn.py", CHURN)
    dirs = [tmp_path / f"run{i:02d}" for i in range(len(plan))]
    with ThreadPoolExecutor(max_workers=2) as pool:
        ends = list(pool.map(lambda i: _kill_at(dirs[i], script, *plan[i], seeds[i]), range(len(plan))))
    results, checks = [], []
    for run_dir, (when, _, delay), (done, returncode) in zip(dirs, plan, ends):
        facts, cli = check_killed_run(run_dir, done)
        facts.update(when=when, delay=round(delay, 3), returncode=returncode)
        results.append(facts)
        checks += cli
    run_checks(checks, tmp_path)
    for facts in results:
        print(facts)
    states = [f["state"] for f in results]
    # The plan reaches the moments it is meant to: before any run directory,
    # after the journal's file but before any snapshot, and well into the
    # snapshots.
    assert "no run yet" in states
    assert any(f.get("snapshots", 0) == 0 for f in results if f["when"] == "journal"), results
    assert max(f.get("snapshots", 0) for f in results) >= 5
    _assert_no_mismatch(results)


@pytest.mark.parametrize("fault", ["tmp-half-written", "renamed-not-committed", "in-transaction"])
def test_sigkill_inside_the_snapshot_writer(tmp_path, fault):
    """Killed at exact points of writing snapshot 3: half-way through its
    temporary file, after the rename but before the journal commit, and
    inside the journal transaction just before COMMIT."""
    script = write_script(tmp_path, "churn_fault.py", FAULT_PRELUDE + CHURN)
    run_dir = tmp_path / "run"
    at = 3
    proc = _spawn(tmp_path, run_dir, script, 7, 0, fault, at)
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL
    note = (tmp_path / "fault.txt").read_text()
    facts, checks = check_killed_run(run_dir, False)
    run_checks(checks, tmp_path)
    # (Profiles and live_bytes are compared by test_sigkill_at_random_moments
    # and test_live_bytes_match_the_profile_in_a_finished_run: they differ
    # where the sampler races the program, killed or not.)
    run = load_run(run_dir)
    names = os.listdir(run_dir / "snapshots")
    if fault == "tmp-half-written":
        # The half-written temporary file is no snapshot: never read, never warned about.
        assert any(n.startswith(f".{note}.tmp") for n in names), names
        assert not any("without a journal entry" in w for w in run.warnings), run.warnings
        assert f"snapshots/{note}" not in set(run.snapshots["file"])
    elif fault == "renamed-not-committed":
        # The file is complete, but its snapshot was never committed: an orphan, named.
        assert note in names
        assert f"snapshots/{note}" not in set(run.snapshots["file"])
        assert any("without a journal entry" in w and note in w for w in run.warnings), run.warnings
    else:
        # The transaction of snapshot 3 never committed: snapshots 1 and 2 only.
        assert run.snapshots["snapshot"].tolist() == [1, 2]
        assert run.arrays["first_snapshot"].max() <= 2


def test_live_bytes_match_the_profile_in_a_finished_run(tmp_path):
    """The invariant the kill tests rely on, without a kill: each snapshot's
    journal row says how many bytes of buffers its profile holds
    (store/layout.py: "live_bytes: bytes of live buffers in the profile")."""
    # 400 arrays alive (a profile that takes a while to make), one replaced
    # at a time, as fast as the sampler lets the loop run.
    script = write_script(tmp_path, "replace.py", """
        import random
        import time
        import jax.numpy as jnp

        rng = random.Random(0)
        keep = [jnp.zeros((256,), jnp.float32) for _ in range(400)]
        for i in range(10000):  # about 150 snapshots here, back to back (30,000 made about 470)
            keep[rng.randrange(len(keep))] = jnp.full((rng.choice((64, 256, 1024)),), float(i), jnp.float32)
            if i % 50 == 0:
                time.sleep(0.001)
    """)
    run_cli("run", "-q", "-o", tmp_path / "run", "--interval", "0.02", "--max-overhead", "0", script,
            cwd=tmp_path, check=0)
    run = load_run(tmp_path / "run")
    assert run.finished and len(run.snapshots) >= 20
    mismatches = _live_bytes_mismatches(run)
    assert not mismatches, (
        f"{len(mismatches)} of {len(run.snapshots)} snapshots: (snapshot, profile bytes, live_bytes) {mismatches}"
    )


# --------------------------------------------------------------------------
# Run directories damaged or edited by hand


SMALL = """
import jax
import jax.numpy as jnp
import jaxmemprof

keep = []
f = jax.jit(lambda a: a * 2.0)
for i in range(6):
    keep.append(f(jnp.ones((32 * (i + 1),), jnp.float32)))
    jaxmemprof.mark(f"step {i}")
    jaxmemprof.snapshot(f"s{i}")
    if i % 2:
        keep.pop(0)
"""


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A small finished run: snapshots first, s0..s5, exit."""
    d = tmp_path_factory.mktemp("finished")
    script = write_script(d, "small.py", SMALL)
    run_cli("run", "-q", "-o", d / "run", "--interval", "5", script, cwd=d, check=0)
    run = load_run(d / "run")
    assert run.finished and not run.warnings and len(run.snapshots) >= 7
    return d / "run"


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory):
    """A run SIGKILLed mid-way: its journal is still in WAL form
    (journal.sqlite, -wal and -shm)."""
    d = tmp_path_factory.mktemp("killed")
    script = write_script(d, "churn.py", CHURN)
    run_dir = d / "run"
    proc = _spawn(d, run_dir, script, 3, 0)
    try:
        _wait_for(run_dir, proc, files=8)
        time.sleep(0.2)
    finally:
        proc.kill()
        proc.communicate(timeout=60)
    wal = run_dir / "journal.sqlite-wal"
    assert wal.is_file() and wal.stat().st_size > 0
    assert len(load_run(run_dir).snapshots) >= 5
    return run_dir


def _unique_snapshot(run_dir: Path) -> tuple[int, str]:
    """A snapshot in the middle whose file no other snapshot shares."""
    snaps = load_run(run_dir).snapshots
    counts = snaps["file"].value_counts()
    middle = snaps.iloc[1:-1]
    row = middle[middle["file"].map(counts) == 1].iloc[0]
    return int(row["snapshot"]), str(row["file"])


def _sql(*statements):
    def edit(d: Path):
        con = sqlite3.connect(d / "journal.sqlite")
        try:
            for s in statements:
                con.execute(s)
            con.commit()
        finally:
            con.close()
    return edit


def _manifest_update(**fields):
    def edit(d: Path):
        doc = json.loads((d / "manifest.json").read_text())
        doc.update(fields)
        (d / "manifest.json").write_text(json.dumps(doc))
    return edit


def _write(name: str, data):
    def edit(d: Path):
        p = d / name
        p.write_bytes(data if isinstance(data, bytes) else data.encode())
    return edit


def _truncate(name: str, size):
    """Truncate ``name`` to ``size`` bytes (negative: that many fewer)."""
    def edit(d: Path):
        p = d / name
        n = p.stat().st_size
        keep = size(n) if callable(size) else size
        with open(p, "r+b") as f:
            f.truncate(max(0, keep))
    return edit


def _delete(*names):
    def edit(d: Path):
        for name in names:
            p = d / name
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink()
    return edit


def _delete_unique_snapshot(d: Path):
    _, name = _unique_snapshot(d)
    (d / name).unlink()


def _delete_all_snapshot_files(d: Path):
    for p in (d / "snapshots").iterdir():
        p.unlink()


def _orphan(d: Path):
    shutil.copy(d / "snapshots" / "000002.prof.gz", d / "snapshots" / "000777.prof.gz")


def _stack_garbage(d: Path):
    _sql("UPDATE stacks SET frames = '[[1]]' WHERE stack_id = (SELECT min(stack_id) FROM stacks)",
         "UPDATE stacks SET frames = 'not json' WHERE stack_id = (SELECT max(stack_id) FROM stacks)")(d)


# (id, which run, the edit). Each is checked with report, show RUN@last,
# diff RUN and export RUN --csv.
EDITS = [
    ("snapshot-file-deleted", "finished", _delete_unique_snapshot),
    ("all-snapshot-files-deleted", "finished", _delete_all_snapshot_files),
    ("snapshot-directory-deleted", "finished", _delete("snapshots")),
    ("journal-truncated-to-0", "finished", _truncate("journal.sqlite", 0)),
    ("journal-truncated-to-100", "finished", _truncate("journal.sqlite", 100)),
    ("journal-truncated-to-1-page", "finished", _truncate("journal.sqlite", 4096)),
    ("journal-truncated-to-half", "finished", _truncate("journal.sqlite", lambda n: n // 2)),
    ("journal-truncated-by-a-page", "finished", _truncate("journal.sqlite", lambda n: n - 4096)),
    ("journal-truncated-by-1-byte", "finished", _truncate("journal.sqlite", lambda n: n - 1)),
    ("journal-deleted", "finished", _delete("journal.sqlite")),
    ("journal-not-sqlite", "finished", _write("journal.sqlite", "this is not a database\n" * 100)),
    ("journal-random-bytes", "finished", _write("journal.sqlite", random.Random(5).randbytes(8192))),
    ("journal-sqlite-header-then-garbage", "finished",
     _write("journal.sqlite", b"SQLite format 3\0" + random.Random(6).randbytes(8192))),
    ("manifest-invalid-json", "finished", _write("manifest.json", '{"argv": ["x.py"], "end_time": ')),
    ("manifest-json-list", "finished", _write("manifest.json", '[1, 2, "three"]')),
    ("manifest-json-string", "finished", _write("manifest.json", '"a run"')),
    ("manifest-empty", "finished", _write("manifest.json", "")),
    ("manifest-not-utf8", "finished", _write("manifest.json", b'{"argv": ["\xff\xfe"]}')),
    ("manifest-deleted", "finished", _delete("manifest.json")),
    ("manifest-and-journal-deleted", "finished", _delete("manifest.json", "journal.sqlite")),
    ("orphan-snapshot-file", "finished", _orphan),
    ("snapshots-table-dropped", "finished", _sql("DROP TABLE snapshots")),
    ("arrays-table-dropped", "finished", _sql("DROP TABLE arrays")),
    ("array-kinds-table-dropped", "finished", _sql("DROP TABLE array_kinds")),
    ("array-ends-and-stacks-dropped", "finished", _sql("DROP TABLE array_ends", "DROP TABLE stacks")),
    ("stacks-unreadable", "finished", _stack_garbage),
    ("snapshots-emptied", "finished", _sql("DELETE FROM snapshots")),
    ("wal-truncated-to-header", "killed", _truncate("journal.sqlite-wal", 32)),
    ("wal-truncated-to-half", "killed", _truncate("journal.sqlite-wal", lambda n: n // 2)),
    ("wal-truncated-by-1-byte", "killed", _truncate("journal.sqlite-wal", lambda n: n - 1)),
    ("wal-deleted", "killed", _delete("journal.sqlite-wal")),
    ("shm-deleted", "killed", _delete("journal.sqlite-shm")),
    ("shm-garbage", "killed", _write("journal.sqlite-shm", random.Random(7).randbytes(32768))),
    ("killed-snapshot-file-deleted", "killed", _delete_unique_snapshot),
    # A journal edited by hand can hold any value in any column (SQLite's
    # columns are not typed), and a manifest any JSON value in any field.
    ("snapshot-file-outside-the-run", "finished",
     _sql("UPDATE snapshots SET file = '../manifest.json' WHERE snapshot = 2")),
    # (a copy of the table has no NOT NULL: what damaged bytes can also give)
    ("jit-function-file-null", "finished",
     _sql("CREATE TABLE jf AS SELECT * FROM jit_functions", "UPDATE jf SET file = NULL",
          "DROP TABLE jit_functions", "ALTER TABLE jf RENAME TO jit_functions")),
    ("array-devices-nested", "finished",
     _sql("UPDATE array_kinds SET devices = '[[1]]' WHERE kind_id = (SELECT kind_id FROM arrays WHERE array_id = 1)")),
    ("array-shape-nested", "finished",
     _sql("UPDATE array_kinds SET shape = '[[1], 2]' WHERE kind_id = (SELECT kind_id FROM arrays WHERE array_id = 2)")),
    ("array-kind-unknown", "finished", _sql("UPDATE arrays SET kind_id = 999999 WHERE array_id = 1")),
    ("array-kind-text", "finished", _sql("UPDATE arrays SET kind_id = 'x' WHERE array_id = 2")),
    ("snapshot-file-name-with-nul", "finished",
     _sql("UPDATE snapshots SET file = 'snapshots/' || char(0) || 'x.prof.gz' WHERE snapshot = 2")),
    ("live-bytes-text", "finished", _sql("UPDATE snapshots SET live_bytes = 'lots' WHERE snapshot = 3")),
    ("snapshot-time-text", "finished", _sql("UPDATE snapshots SET t_wall = 'noon' WHERE snapshot = 2")),
    ("cost-text", "finished", _sql("UPDATE snapshots SET cost_s = 'x'")),
    ("end-snapshot-text", "finished", _sql("UPDATE array_ends SET end_snapshot = 'z'")),
    ("marker-time-text", "finished", _sql("UPDATE markers SET t_wall = 'q'")),
    ("executable-count-text", "finished", _sql("UPDATE executables SET count = 'q'")),
    ("jit-call-index-text", "finished", _sql("UPDATE jit_calls SET call_index = ''")),
    ("jit-buffers-frames-text", "finished", _sql("UPDATE jit_buffers SET frames = 'q'")),
    ("thinned-unknown-snapshot", "finished", _sql("INSERT INTO thinned VALUES (999999)")),
    ("manifest-argv-number", "finished", _manifest_update(argv=5)),
    ("manifest-start-epoch-text", "finished", _manifest_update(start_epoch="yesterday")),
    ("manifest-process-index-text", "finished", _manifest_update(process_index="first")),
    ("manifest-environment-list", "finished", _manifest_update(environment=["XLA_FLAGS"])),
    ("manifest-cwd-number", "finished", _manifest_update(cwd=5)),
    ("manifest-duration-text", "finished", _manifest_update(duration_s="long")),
]


def _damaged(tmp_path: Path, source: Path, edit) -> Path:
    d = tmp_path / "run"
    shutil.copytree(source, d)
    edit(d)
    return d


def _four_commands(d: Path, csv_dir: Path) -> list[list]:
    return [["report", d], ["show", f"{d}@last"], ["diff", d], ["export", d, "--csv", csv_dir]]


@pytest.fixture(scope="module")
def damaged_results(tmp_path_factory, finished_run, killed_run):
    """Every EDITS case made, and the four commands run on each (in one batch)."""
    root = tmp_path_factory.mktemp("damaged")
    jobs, owners = [], []
    for case_id, which, edit in EDITS:
        d = _damaged(root / case_id, finished_run if which == "finished" else killed_run, edit)
        for argv in _four_commands(d, root / case_id / "csv-out"):
            jobs.append(argv)
            owners.append(case_id)
    results: dict = {}
    for case_id, proc in zip(owners, cli_batch(jobs, root)):
        results.setdefault(case_id, []).append(proc)
    return results


@pytest.mark.parametrize("case_id,which,edit", EDITS, ids=[e[0] for e in EDITS])
def test_damaged_run_directory_exits_cleanly(damaged_results, case_id, which, edit):
    failures = []
    for proc in damaged_results[case_id]:
        what = f"jaxmemprof {' '.join(proc.args[:2])} ({case_id})"
        try:
            _assert_clean_exit(proc, what)
        except AssertionError as exc:
            failures.append(str(exc)[:3000])
    assert not failures, "\n\n".join(failures)


def test_deleted_snapshot_file_is_named_and_skipped(tmp_path, finished_run):
    n, name = _unique_snapshot(finished_run)
    d = _damaged(tmp_path, finished_run, _delete(name))
    run = load_run(d)
    assert n not in set(run.snapshots["snapshot"])
    assert any("missing" in w and f"snapshots {n}" in w for w in run.warnings), run.warnings
    report, show, diff, export, proc = cli_batch(_four_commands(d, tmp_path / "csv") + [["show", f"{d}@{n}"]],
                                                 tmp_path)
    for done in (report, show, diff, export):
        assert done.returncode == 0, f"{done.args}: {done.stderr}"
    assert f"snapshots {n})" in report.stdout
    assert f"snapshots {n})" in show.stderr
    # The snapshot itself is refused in one clean line that names it.
    _assert_clean_exit(proc, f"show @{n}", allowed=(2,))
    assert f"snapshot {n}" in proc.stderr


def test_orphan_snapshot_file_is_warned_about(tmp_path, finished_run):
    d = _damaged(tmp_path, finished_run, _orphan)
    run = load_run(d)
    assert any("000777.prof.gz" in w and "without a journal entry" in w for w in run.warnings), run.warnings
    assert len(run.snapshots) == len(load_run(finished_run).snapshots)
    proc = run_cli("report", d, cwd=tmp_path, check=0)
    assert "000777.prof.gz" in proc.stdout


@pytest.mark.parametrize("text", ['{"argv": ', "[1, 2]", "", '"text"'])
def test_corrupt_manifest_is_warned_about_and_the_journal_still_read(tmp_path, finished_run, text):
    d = _damaged(tmp_path, finished_run, _write("manifest.json", text))
    run = load_run(d)
    assert any("manifest.json unreadable" in w for w in run.warnings), run.warnings
    assert len(run.snapshots) == len(load_run(finished_run).snapshots)


@pytest.mark.parametrize("edit", [
    _truncate("journal.sqlite", 0), _write("journal.sqlite", "not sqlite\n"), _sql("DROP TABLE snapshots"),
    _delete("journal.sqlite"),
], ids=["truncated-to-0", "not-sqlite", "snapshots-dropped", "deleted"])
def test_journal_without_snapshots_table_is_one_clean_error(tmp_path, finished_run, edit):
    d = _damaged(tmp_path, finished_run, edit)
    with pytest.raises(InputError) as err:
        load_run(d)
    assert "journal" in str(err.value) and "\n" not in str(err.value)
    proc = run_cli("report", d, cwd=tmp_path)
    _assert_clean_exit(proc, "report", allowed=(2,))
    assert "journal" in proc.stderr


def test_truncated_wal_keeps_a_committed_prefix(tmp_path, killed_run):
    """A WAL cut short loses the transactions after the cut, never part of
    one: every snapshot still read has its file and its array rows."""
    full = load_run(killed_run)
    d = _damaged(tmp_path, killed_run, _truncate("journal.sqlite-wal", lambda n: n // 2))
    run = load_run(d)
    n = len(run.snapshots)
    assert run.snapshots["snapshot"].tolist() == full.snapshots["snapshot"].tolist()[:n]
    assert run.snapshots["live_bytes"].tolist() == full.snapshots["live_bytes"].tolist()[:n]
    for s in run.snapshots["snapshot"]:
        run.profile(int(s))
    if n:
        assert set(run.arrays["first_snapshot"].astype(int)) <= set(run.snapshots["snapshot"])


def test_snapshot_file_outside_the_run_is_not_read(tmp_path, finished_run):
    """The journal names each snapshot's file relative to the run: a name
    that leaves the run directory (edited by hand) is refused, never read."""
    d = _damaged(tmp_path, finished_run, _sql("UPDATE snapshots SET file = '../secret.prof' WHERE snapshot = 2"))
    secret = tmp_path / "secret.prof"
    shutil.copy(finished_run / "snapshots" / "000002.prof.gz", secret)
    run = load_run(d)
    proc = run_cli("show", f"{d}@2", cwd=tmp_path)
    assert proc.returncode == 2, (
        f"show read {secret}, outside the run directory, through the journal's file column:\n{proc.stdout}"
    )
    assert 2 not in set(run.snapshots["snapshot"])

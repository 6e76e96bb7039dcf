"""A run directory is ours or untouched (issue 23): every name jaxmemprof
writes in a run (the lock, the manifest and its temporary name, the journal
and SQLite's -wal/-shm, snapshots/ and a snapshot's temporary name,
process-N, summary.json and its temporary name) is refused when a link holds
it, live or dangling, before anything is written; a temporary name taken
mid-run is passed over, never written through; readers never follow a link
out of a run; merge copies no links. Each case plants a live link to a
victim with known bytes and a dangling link into a directory of its own,
and checks that the victim's bytes are unchanged and that nothing appeared
at the dangling link's target.

Claims are checked in this process where the refusal comes before JAX
starts (session.prepare_directory is what ``run``, ``profile()`` and the
pytest plugin call); a few go through the command line for the exit status
and the one-line error; the writes made mid-run go through two real runs
whose scripts plant links named with their own PID."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from jaxmemprof.capture import rundir
from jaxmemprof.errors import InputError
from jaxmemprof.store import layout
from jaxmemprof.store.job import load_job, merge_job, read_process
from jaxmemprof.store.reader import load_run
from tests.conftest import cpu_env, run_cli, write_script

VICTIM_BYTES = b"precious bytes, not jaxmemprof's\n"
PID = 4242  # temporary names planted before a claim: any PID is refused there

# Every name the writer uses (relative to the run directory).
NAMES = [layout.LOCK, layout.MANIFEST, f".{layout.MANIFEST}.tmp{PID}", layout.JOURNAL, layout.JOURNAL + "-wal",
         layout.JOURNAL + "-shm", layout.SNAPSHOT_DIR, f"snapshots/.000001.prof.gz.tmp{PID}",
         "snapshots/000001.prof.gz", layout.PROCESS_RESULT, f".{layout.PROCESS_RESULT}.tmp{PID}"]


class Victims:
    """Files and directories outside every run, and dangling targets."""

    def __init__(self, root: Path):
        self.root = root / "outside"
        self.root.mkdir()
        self.file = self.root / "victim"
        self.file.write_bytes(VICTIM_BYTES)
        self.dir = self.root / "victim-dir"
        self.dir.mkdir()
        (self.dir / "000001.prof.gz").write_bytes(VICTIM_BYTES)
        (self.dir / layout.MANIFEST).write_bytes(VICTIM_BYTES)
        self.ghosts = self.root / "ghosts"
        self.ghosts.mkdir()
        self._n = 0

    def plant(self, path: Path, how: str, directory: bool = False) -> Path:
        """A link at ``path``: to a victim (``live``) or to a name in ghosts/
        that does not exist (``dangling``). Replaces what was there."""
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if how == "live":
            path.symlink_to(self.dir if directory else self.file, target_is_directory=directory)
        else:
            self._n += 1
            path.symlink_to(self.ghosts / f"ghost-{self._n}")
        return path

    def check(self) -> None:
        assert self.file.read_bytes() == VICTIM_BYTES
        assert sorted(p.name for p in self.dir.iterdir()) == ["000001.prof.gz", layout.MANIFEST]
        assert all(p.read_bytes() == VICTIM_BYTES for p in self.dir.iterdir())
        assert list(self.ghosts.iterdir()) == [], "a file was created at a dangling link's target"


@pytest.fixture
def victims(tmp_path):
    v = Victims(tmp_path)
    yield v
    v.check()


def _one_line(err: str, *words) -> None:
    assert err.count("\n") <= 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err


def _assert_refused(exc: InputError, path: Path) -> None:
    _one_line(str(exc), str(path))


# -- two real runs, whose scripts plant links mid-run with their own PID --------------------

PROFILE_SCRIPT = r'''
import json, os, sys
from pathlib import Path
import jax.numpy as jnp
import jaxmemprof
from jaxmemprof.errors import InputError

root, victim, ghosts = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
pid = os.getpid()
out = {"refused": []}

def plant(path, how, n=[0]):
    n[0] += 1
    path.symlink_to(victim if how == "live" else ghosts / f"profile-ghost-{n[0]}")

# profile(DIR) refuses a link planted before it starts, with our own PID in the name.
for name in (".jaxmemprof.lock", f".manifest.json.tmp{pid}"):
    for how in ("live", "dangling"):
        d = root / f"pre-{how}-{name.strip('.')}"
        d.mkdir()
        plant(d / name, how)
        try:
            with jaxmemprof.profile(d):
                print("recorded through a link")
        except InputError as exc:
            out["refused"].append(str(exc))

# Links planted mid-run at the temporary names the writer is about to use.
run = root / "run"
with jaxmemprof.profile(run, interval=3600):
    for i in range(2, 8):
        plant(run / "snapshots" / f".{i:06d}.prof.gz.tmp{pid}", "live" if i % 2 else "dangling")
    plant(run / f".manifest.json.tmp{pid}", "live")
    kept = []
    for i in range(3):
        kept.append(jnp.ones((1000 * (i + 1),)))
        jaxmemprof.snapshot(f"s{i}")
from jaxmemprof.store.reader import load_run
r = load_run(run)
out.update(finished=r.finished, snapshots=len(r.snapshots), warnings=r.warnings, pid=pid)
print(json.dumps(out))
'''

JOB_SCRIPT = r'''
import os, sys
from pathlib import Path
import jax.numpy as jnp

proc, victim = Path(sys.argv[1]) / "process-0", Path(sys.argv[2])
pid = os.getpid()  # the recording process: `run` runs the script in it
for name in (f".manifest.json.tmp{pid}", f".summary.json.tmp{pid}", f"snapshots/.000002.prof.gz.tmp{pid}"):
    (proc / name).symlink_to(victim)
x = jnp.ones((4096,))
import jaxmemprof
jaxmemprof.snapshot("after")  # so a snapshot is written past its planted name before the exit's, at any load
print("done", pid)
'''


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory):
    """(the profile() script's result, the job's directory, the victims):
    both runs recorded with links planted mid-run."""
    root = tmp_path_factory.mktemp("real")
    victims = Victims(root)
    script = write_script(root, "planting.py", PROFILE_SCRIPT)
    import subprocess

    proc = subprocess.run([sys.executable, str(script), str(root), str(victims.file), str(victims.ghosts)],
                          capture_output=True, text=True, env=cpu_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["stderr"] = proc.stderr
    job_script = write_script(root, "job.py", JOB_SCRIPT)
    job = root / "job"
    done = run_cli("run", "-q", "-o", job, job_script, job, victims.file, cwd=root,
                   env=cpu_env(JAX_PROCESS_ID="0", JAX_NUM_PROCESSES="2"))
    assert done.returncode == 0, done.stderr
    result["job_stdout"] = done.stdout
    return result, root, job, victims


def test_profile_refuses_links_planted_before_it_starts(real_runs):
    result, root, _, victims = real_runs
    assert len(result["refused"]) == 4
    for msg in result["refused"]:
        _one_line(msg, "is a symlink where jaxmemprof writes its own file")
    assert f".manifest.json.tmp{result['pid']}" in result["refused"][2]
    for d in root.glob("pre-*"):  # nothing written there: the planted link alone
        assert [p.name for p in d.iterdir() if not p.is_symlink()] == []
    victims.check()


def test_temporary_names_taken_mid_run_are_passed_over(real_runs):
    """profile(): links at the snapshot files' and the manifest's temporary
    names, planted after the run started, are never written through; the
    run records every snapshot and finishes; the links stay as they were."""
    result, root, _, victims = real_runs
    assert "sampling stopped" not in result["stderr"], result["stderr"]
    assert result["finished"] and result["snapshots"] >= 4, result
    run = root / "run"
    for i in range(2, 8):
        assert (run / "snapshots" / f".{i:06d}.prof.gz.tmp{result['pid']}").is_symlink()
    own = [p for p in (run / "snapshots").iterdir() if not p.is_symlink()]
    assert own and all(p.is_file() and p.read_bytes()[:2] == b"\x1f\x8b" for p in own)
    assert json.loads((run / layout.MANIFEST).read_text())["end_time"] is not None
    victims.check()


def test_a_job_process_passes_over_links_at_its_temporary_names(real_runs):
    """`run` in a job (JAX_PROCESS_ID/JAX_NUM_PROCESSES): the manifest's, the
    summary's and a snapshot's temporary names linked to a victim mid-run;
    the process finishes, writes its summary, and the victim is unchanged."""
    _, _, job, victims = real_runs
    proc = job / "process-0"
    run = load_run(proc)
    assert run.finished and len(run.snapshots) >= 2
    assert layout.entry_kind(proc / layout.PROCESS_RESULT) == "file"
    assert json.loads((proc / layout.PROCESS_RESULT).read_text())["schema"]
    assert sum(p.is_symlink() for p in proc.rglob("*")) == 3
    victims.check()


def _base_run(real_runs, dest: Path) -> Path:
    """A copy of a real run of ours, without the links planted in it."""
    _, root, job, _ = real_runs
    shutil.copytree(job / "process-0", dest, symlinks=True)
    for p in list(dest.rglob("*")):
        if p.is_symlink():
            p.unlink()
    (dest / (layout.JOURNAL + "-wal")).write_bytes(b"")  # a killed run's SQLite files, ours too
    (dest / (layout.JOURNAL + "-shm")).write_bytes(b"")
    assert rundir._is_our_run(dest)  # a run --force may reuse
    return dest


# -- claiming: run -o DIR, run --force, profile(DIR), the plugin --------------------------------


@pytest.mark.parametrize("force", [False, True], ids=["new", "force"])
@pytest.mark.parametrize("how", ["live", "dangling"])
@pytest.mark.parametrize("name", NAMES)
def test_a_claim_refuses_a_link_at_each_name(tmp_path, victims, real_runs, name, how, force):
    """Before anything is written: a one-line error naming the link; the
    link, the victim and (with --force) the old run's files as they were."""
    d = _base_run(real_runs, tmp_path / "run") if force else tmp_path / "run"
    d.mkdir(exist_ok=True)
    link = victims.plant(d / name, how, directory=name == layout.SNAPSHOT_DIR and how == "live")
    before = sorted((str(p.relative_to(d)), p.is_symlink()) for p in d.rglob("*"))
    with pytest.raises(InputError) as exc:
        rundir.prepare_directory(d, force=force)
    _assert_refused(exc.value, link)
    assert sorted((str(p.relative_to(d)), p.is_symlink()) for p in d.rglob("*")) == before
    assert link.is_symlink()
    assert os.path.abspath(d) not in rundir._locks  # nothing claimed (other tests' claims may be held)


def test_a_lock_with_another_name_is_refused(tmp_path, victims):
    """A hard link is no symlink, but the lock file would then be someone's file."""
    d = tmp_path / "run"
    d.mkdir()
    os.link(victims.file, d / layout.LOCK)
    with pytest.raises(InputError) as exc:
        rundir.prepare_directory(d, force=True)
    _assert_refused(exc.value, d / layout.LOCK)


@pytest.mark.parametrize("how", ["live", "dangling"])
def test_a_dangling_or_live_link_as_the_run_directory_itself(tmp_path, victims, how):
    """-o LINK: the user's own name; a link to a directory is that directory,
    a link to nothing is refused (no directory made at its target)."""
    link = victims.plant(tmp_path / "out", how, directory=True)
    if how == "dangling":
        with pytest.raises(InputError) as exc:
            rundir.prepare_directory(link, force=False)
        _assert_refused(exc.value, link)
        return
    with pytest.raises(InputError) as exc:  # the victim directory is not empty, and not a run of ours
        rundir.prepare_directory(link, force=True)
    _one_line(str(exc.value), "holds no jaxmemprof run")


def test_the_command_line_refuses_before_the_script_runs(tmp_path, victims, real_runs):
    """`run -o DIR` and `run --force`: exit 2, one line naming the link, the
    script never ran (it would print), nothing written."""
    script = write_script(tmp_path, "s.py", "print('the script ran')\n")
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    lock = victims.plant(fresh / layout.LOCK, "dangling")
    old = _base_run(real_runs, tmp_path / "old")
    tmp = victims.plant(old / "snapshots" / ".000003.prof.gz.tmp77", "live")
    for args, link in ((["-o", fresh], lock), (["-o", old, "--force"], tmp)):
        proc = run_cli("run", *args, script, cwd=tmp_path, check=2)
        _one_line(proc.stderr, f"jaxmemprof: error: {link}: is a symlink")
        assert proc.stdout == ""
        assert link.is_symlink()
    assert (old / layout.MANIFEST).is_file() and (old / layout.JOURNAL).is_file()


# -- a job's processes: JAX_PROCESS_ID / JAX_NUM_PROCESSES ------------------------------------------


@pytest.mark.parametrize("force", [False, True], ids=["new", "force"])
@pytest.mark.parametrize("how", ["live", "dangling"])
def test_a_symlinked_process_directory_is_refused(tmp_path, victims, real_runs, monkeypatch, how, force):
    """JOB/process-1 a link: to an empty directory (which a new run would
    record into), to a directory holding a run of ours (which --force would
    clear), or to nothing: refused, nothing there touched."""
    monkeypatch.setenv("JAX_PROCESS_ID", "1")
    monkeypatch.setenv("JAX_NUM_PROCESSES", "2")
    if force:
        target = _base_run(real_runs, victims.root / "their-run")
    else:
        target = victims.root / "empty"
        target.mkdir()
    before = {str(p): p.read_bytes() if p.is_file() else None for p in target.rglob("*")}
    assert before or not force
    job = tmp_path / "job"
    job.mkdir()
    link = job / "process-1"
    if how == "live":
        link.symlink_to(target, target_is_directory=True)
    else:
        victims.plant(link, "dangling")
    with pytest.raises(InputError) as exc:
        rundir.prepare_directory(job, force=force)
    _assert_refused(exc.value, link)
    assert {str(p): p.read_bytes() if p.is_file() else None for p in target.rglob("*")} == before
    shutil.rmtree(target)


@pytest.mark.parametrize("name", [layout.LOCK, f"snapshots/.000001.prof.gz.tmp{PID}", layout.PROCESS_RESULT])
def test_a_job_process_refuses_links_inside_its_directory(tmp_path, victims, real_runs, monkeypatch, name):
    monkeypatch.setenv("JAX_PROCESS_ID", "0")
    monkeypatch.setenv("JAX_NUM_PROCESSES", "2")
    job = tmp_path / "job"
    _base_run(real_runs, job / "process-0")
    link = victims.plant(job / "process-0" / name, "live")
    with pytest.raises(InputError) as exc:
        rundir.prepare_directory(job, force=True)
    _assert_refused(exc.value, link)


def test_the_command_line_refuses_a_symlinked_process_directory(tmp_path, victims):
    script = write_script(tmp_path, "s.py", "print('the script ran')\n")
    job = tmp_path / "job"
    job.mkdir()
    (job / "process-0").symlink_to(victims.dir, target_is_directory=True)
    proc = run_cli("run", "-o", job, "--force", script, cwd=tmp_path, check=2,
                   env=cpu_env(JAX_PROCESS_ID="0", JAX_NUM_PROCESSES="2"))
    _one_line(proc.stderr, f"{job / 'process-0'}: is a symlink")
    assert proc.stdout == ""


# -- the writer's own writes, where a name is taken after the claim -----------------------------


@pytest.mark.parametrize("how", ["live", "dangling"])
def test_write_atomic_never_writes_through_a_temporary_name(tmp_path, victims, how):
    d = tmp_path / "run"
    d.mkdir()
    link = victims.plant(d / f".{layout.MANIFEST}.tmp{os.getpid()}", how)
    layout.write_atomic(d / layout.MANIFEST, b"{}\n")
    assert (d / layout.MANIFEST).read_bytes() == b"{}\n" and link.is_symlink()
    assert sorted(p.name for p in d.iterdir()) == sorted([link.name, layout.MANIFEST])


@pytest.mark.parametrize("how", ["live", "dangling"])
@pytest.mark.parametrize("name", [layout.MANIFEST, layout.PROCESS_RESULT, "snapshots/000002.prof.gz"])
def test_write_atomic_never_replaces_a_link(tmp_path, victims, name, how):
    """A link at the final name (put there mid-run): refused, the link kept,
    no temporary file left."""
    d = tmp_path / "run"
    (d / layout.SNAPSHOT_DIR).mkdir(parents=True)
    link = victims.plant(d / name, how)
    with pytest.raises(InputError) as exc:
        layout.write_atomic(d / name, b"data")
    _assert_refused(exc.value, link)
    assert link.is_symlink()
    assert [p for p in d.rglob("*") if p.name.startswith(".")] == []


def test_the_writer_refuses_a_snapshots_link_made_after_the_claim(tmp_path, victims):
    from jaxmemprof.store.writer import RunWriter

    for how in ("live", "dangling"):
        d = tmp_path / how
        d.mkdir()
        link = victims.plant(d / layout.SNAPSHOT_DIR, how, directory=how == "live")
        with pytest.raises(InputError) as exc:
            RunWriter(d, {})
        _assert_refused(exc.value, link)
        assert sorted(p.name for p in d.iterdir()) == [layout.SNAPSHOT_DIR]


@pytest.mark.parametrize("name", layout.JOURNAL_FILES)
def test_the_writer_checks_sqlite_files_before_connecting(tmp_path, victims, name):
    from jaxmemprof.store.writer import RunWriter

    d = tmp_path / "run"
    d.mkdir()
    link = victims.plant(d / name, "live")
    with pytest.raises(InputError) as exc:
        RunWriter(d, {})
    _assert_refused(exc.value, link)
    assert sorted(p.name for p in d.iterdir()) == [name]  # nothing written


# -- readers: never a link out of a run -------------------------------------------------------------


@pytest.mark.parametrize("how", ["live", "dangling"])
@pytest.mark.parametrize("name", [layout.MANIFEST, layout.JOURNAL, layout.JOURNAL + "-wal",
                                  layout.JOURNAL + "-shm", layout.SNAPSHOT_DIR])
def test_readers_refuse_a_link_out_of_a_run(tmp_path, victims, real_runs, name, how):
    """load_run and a job's process reader: refused, not read (the live link
    leads to a good copy of the very file, which would read)."""
    run = _base_run(real_runs, tmp_path / "run")
    real = victims.root / f"copy-of-{name}"
    shutil.move(run / name, real)
    link = run / name
    if how == "live":
        link.symlink_to(real, target_is_directory=real.is_dir())
    else:
        victims.plant(link, "dangling")
    before = sorted(p.name for p in victims.root.iterdir())
    with pytest.raises(InputError) as exc:
        load_run(run)
    _assert_refused(exc.value, link)
    summary = read_process(0, run)
    assert summary.error and f"{name} is a symlink" in summary.error and summary.snapshots.empty
    assert sorted(p.name for p in victims.root.iterdir()) == before
    shutil.rmtree(real) if real.is_dir() else real.unlink()


def test_a_link_at_a_snapshot_file_is_not_read(tmp_path, victims, real_runs):
    run = _base_run(real_runs, tmp_path / "run")
    first = sorted((run / "snapshots").iterdir())[0]
    first.unlink()
    first.symlink_to(victims.file)
    r = load_run(run)
    assert any("snapshot file(s) missing" in w for w in r.warnings)
    assert f"snapshots/{first.name}" not in set(r.snapshots["file"])


def test_a_symlinked_process_is_refused_by_the_job_reader_and_report(tmp_path, real_runs):
    _, _, job, _ = real_runs
    copy = tmp_path / "job"
    _base_run(real_runs, copy / "process-0")
    (copy / "process-1").symlink_to(job / "process-0", target_is_directory=True)
    with pytest.raises(InputError) as exc:
        load_job(copy)
    _assert_refused(exc.value, copy / "process-1")
    proc = run_cli("report", copy, cwd=tmp_path, check=2)
    _one_line(proc.stderr, f"{copy / 'process-1'}: is a symlink")


# -- merge ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["live", "dangling"])
@pytest.mark.parametrize("name", [layout.MANIFEST, layout.JOURNAL, layout.SNAPSHOT_DIR,
                                  "snapshots/000001.prof.gz", "process-1"])
def test_merge_copies_no_links(tmp_path, victims, real_runs, name, how):
    """An input holding a link (or a job whose process-N is one): refused
    before anything is copied; OUT not made."""
    job = tmp_path / "in"
    _base_run(real_runs, job / "process-0")
    if name == "process-1":
        link = job / name
        if how == "live":
            link.symlink_to(job / "process-0", target_is_directory=True)
        else:
            victims.plant(link, how)
    else:
        link = victims.plant(job / "process-0" / name, how, directory=name == layout.SNAPSHOT_DIR and how == "live")
    out = tmp_path / "out"
    with pytest.raises(InputError) as exc:
        merge_job(out, [job])
    _assert_refused(exc.value, link)
    assert not out.exists()


def test_merge_refuses_a_link_as_out_and_on_the_command_line(tmp_path, victims, real_runs):
    job = tmp_path / "in"
    _base_run(real_runs, job / "process-0")
    out = tmp_path / "out"
    out.symlink_to(victims.dir, target_is_directory=True)
    proc = run_cli("merge", out, job, cwd=tmp_path, check=2)
    _one_line(proc.stderr, f"{out}: exists and is not a directory")
    victims.plant(job / "process-0" / layout.MANIFEST, "dangling")
    proc = run_cli("merge", tmp_path / "out2", job, cwd=tmp_path, check=2)
    _one_line(proc.stderr, f"{job / 'process-0' / layout.MANIFEST}: is a symlink")
    assert not (tmp_path / "out2").exists()

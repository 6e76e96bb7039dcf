"""Run directories: unique names, one run per directory, `--force` replaces
only a run of ours and only the files jaxmemprof writes, and a directory
that cannot be written is one error line."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time

import pytest

from conftest import cpu_env, run_cli, write_script

from jaxmemprof.store.reader import load_run


def _popen_run(tmp_path, script, *options, args=()):
    return subprocess.Popen([sys.executable, "-m", "jaxmemprof", "run", "-q", *map(str, options), str(script),
                             *map(str, args)],
                            cwd=tmp_path, env=cpu_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _one_error_line(proc_or_err, *words):
    err = proc_or_err if isinstance(proc_or_err, str) else proc_or_err.stderr
    assert err.count("\n") == 1 and err.startswith("jaxmemprof: error: ") and "Traceback" not in err, err
    for w in words:
        assert w in err, err


def test_default_names_started_in_the_same_second_never_collide(tmp_path):
    script = write_script(tmp_path, "same.py", "import time\ntime.sleep(0.3)\nprint('ran')\n")
    procs = [_popen_run(tmp_path, script) for _ in range(3)]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], results
    assert [out for out, _ in results] == ["ran\n"] * 3
    runs = sorted((tmp_path / "jaxmemprof-runs").iterdir())
    assert len(runs) == 3
    pids = {json.loads((r / "manifest.json").read_text())["pid"] for r in runs}
    assert pids == {p.pid for p in procs}
    assert all(load_run(r).finished for r in runs)
    assert not any((r / ".jaxmemprof.lock").exists() for r in runs)


# A script that holds its run open until the test releases it, JAX's backend
# up first (no array alive): its claim then says "recording" (a single run for
# good: jax.distributed.initialize can no longer be called), and a second run
# into its directory is refused at once. (One whose holder has not brought
# JAX up yet waits for it a while: it may be a job's process on its way to
# initialize.)
HOLDS = """
import os, sys, time
import jax
jax.devices()
print("ran", flush=True)
t0 = time.time()
while not os.path.exists(sys.argv[1]) and time.time() - t0 < 60:
    time.sleep(0.02)
"""


def test_two_runs_into_one_directory_at_once(tmp_path):
    script = write_script(tmp_path, "both.py", HOLDS)
    for force in ((), ("--force",)):
        out = tmp_path / f"shared{len(force)}"
        release = tmp_path / f"release{len(force)}"
        procs = [_popen_run(tmp_path, script, "-o", out, *force, args=[release]) for _ in range(2)]
        try:
            # The winner runs until released: the loser has ended first, refused.
            deadline = time.monotonic() + 120
            while all(p.poll() is None for p in procs) and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            release.write_text("")
        results = [p.communicate(timeout=120) for p in procs]
        statuses = sorted(p.returncode for p in procs)
        assert statuses == [0, 2], results
        winner, loser = sorted(zip(procs, results), key=lambda pr: pr[0].returncode)
        assert winner[1][0] == "ran\n"
        assert loser[1][0] == ""  # refused before the script ran
        _one_error_line(loser[1][1])
        run = load_run(out)
        assert run.finished and run.manifest["pid"] == winner[0].pid


def test_a_directory_being_recorded_is_refused_even_with_force(tmp_path):
    script = write_script(tmp_path, "long.py", HOLDS)
    release = tmp_path / "release"
    first = _popen_run(tmp_path, script, "-o", tmp_path / "busy", args=[release])
    try:
        assert first.stdout.readline() == "ran\n"
        # The holder's backend is up, no array alive: its lock says so (within the sampler's first polls).
        lock = tmp_path / "busy" / ".jaxmemprof.lock"
        deadline = time.monotonic() + 60
        while lock.read_text().split()[1] != "recording" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert lock.read_text().split()[1] == "recording"
        proc = run_cli("run", "-o", tmp_path / "busy", "--force", script, release, cwd=tmp_path, check=2)
        _one_error_line(proc, "another jaxmemprof run is recording into it")
        assert proc.stdout == ""
    finally:
        release.write_text("")
        first.communicate(timeout=120)
    assert first.returncode == 0 and load_run(tmp_path / "busy").finished


def test_force_removes_only_what_jaxmemprof_wrote(tmp_path):
    many = write_script(tmp_path, "many.py", """
        import jax.numpy as jnp
        import jaxmemprof
        keep = []
        for i in range(5):
            keep.append(jnp.ones((100 * (i + 1),)))
            jaxmemprof.snapshot(f"s{i}")
    """)
    few = write_script(tmp_path, "few.py", "import jax.numpy as jnp\nx = jnp.ones(10)\n")
    run_dir = tmp_path / "run"
    run_cli("run", "-q", "-o", run_dir, many, cwd=tmp_path, check=0)
    before = sorted(p.name for p in (run_dir / "snapshots").iterdir())
    assert len(before) >= 5  # five labelled snapshots of five different profiles (first and exit may share one)
    # What the user put there: all of it must survive.
    (run_dir / "snapshots" / "model_epoch10.ckpt").write_bytes(b"weights")
    (run_dir / "notes.txt").write_text("mine")
    (run_dir / "journal.sqlite.bak").write_text("mine too")
    (run_dir / "plots").mkdir()
    (run_dir / "plots" / "000001.prof.gz").write_bytes(b"not a snapshot of ours")
    run_cli("run", "-q", "-o", run_dir, "--force", few, cwd=tmp_path, check=0)
    assert (run_dir / "snapshots" / "model_epoch10.ckpt").read_bytes() == b"weights"
    assert (run_dir / "notes.txt").read_text() == "mine"
    assert (run_dir / "journal.sqlite.bak").read_text() == "mine too"
    assert (run_dir / "plots" / "000001.prof.gz").exists()
    run = load_run(run_dir)
    assert run.finished and not run.warnings, run.warnings  # no orphan of the old run
    assert run.manifest["argv"] == [str(few)]
    left = sorted(p.name for p in (run_dir / "snapshots").iterdir() if p.name.endswith(".prof.gz"))
    assert left == sorted(run.snapshots["file"].str.replace("snapshots/", "").unique())


@pytest.mark.parametrize("manifest", [None, '{"name": "someone else\'s"}', "not json", "[1, 2]"])
def test_force_refuses_a_directory_that_is_not_our_run(tmp_path, manifest):
    target = tmp_path / "theirs"
    (target / "snapshots").mkdir(parents=True)
    (target / "snapshots" / "000001.prof.gz").write_bytes(b"theirs")
    (target / "snapshots" / "model_epoch10.ckpt").write_bytes(b"weights")
    if manifest is not None:
        (target / "manifest.json").write_text(manifest)
    script = write_script(tmp_path, "s.py", "print('ran')\n")
    proc = run_cli("run", "-o", target, "--force", script, cwd=tmp_path, check=2)
    _one_error_line(proc, "no jaxmemprof run")
    assert proc.stdout == ""
    assert (target / "snapshots" / "000001.prof.gz").read_bytes() == b"theirs"
    assert (target / "snapshots" / "model_epoch10.ckpt").read_bytes() == b"weights"
    if manifest is not None:
        assert (target / "manifest.json").read_text() == manifest


def test_output_that_is_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    script = write_script(tmp_path, "s.py", "print('ran')\n")
    proc = run_cli("run", "-o", tmp_path / "f", "--force", script, cwd=tmp_path, check=2)
    _one_error_line(proc, "not a directory")


# -- file systems that cannot be written (a tmpfs of our own: needs root) ------------


@pytest.fixture
def small_fs(tmp_path):
    """A 64 KiB tmpfs mounted at tmp_path/fs; skipped where mount is not allowed."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {proc.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_read_only_file_system(tmp_path, small_fs):
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    script = write_script(tmp_path, "s.py", "print('ran')\n")
    for out in (small_fs, small_fs / "sub"):
        proc = run_cli("run", "-o", out, script, cwd=tmp_path, check=2)
        _one_error_line(proc, str(out), "Read-only file system")
        assert proc.stdout == ""


def test_full_file_system(tmp_path, small_fs):
    fd = os.open(small_fs / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    script = write_script(tmp_path, "s.py", "print('ran')\n")
    proc = run_cli("run", "-o", small_fs / "run", script, cwd=tmp_path, check=2)
    _one_error_line(proc, "No space left on device")
    assert proc.stdout == ""


@pytest.mark.parametrize("name", ["journal.sqlite", "manifest.json", "snapshots"])
def test_force_never_writes_through_a_symlink(tmp_path, name):
    script = write_script(tmp_path, "s.py", "print('ran')\n")
    run_dir = tmp_path / "run"
    run_cli("run", "-q", "-o", run_dir, script, cwd=tmp_path, check=0)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / name
    if name == "snapshots":
        shutil.rmtree(run_dir / name, ignore_errors=True)
        target.mkdir()
        (target / "000001.prof.gz").write_bytes(b"theirs")
    elif name == "journal.sqlite":  # someone else's database
        (run_dir / name).unlink()
        con = sqlite3.connect(target)
        con.execute("CREATE TABLE theirs (x)")
        con.commit()
        con.close()
    else:
        (run_dir / name).unlink()
        target.write_bytes(b"theirs")
    before = {p.name: p.read_bytes() for p in elsewhere.rglob("*") if p.is_file()}
    (run_dir / name).symlink_to(target)
    proc = run_cli("run", "-q", "-o", run_dir, "--force", script, cwd=tmp_path, check=2)
    _one_error_line(proc)
    assert proc.stdout == ""
    assert {p.name: p.read_bytes() for p in elsewhere.rglob("*") if p.is_file()} == before

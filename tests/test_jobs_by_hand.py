"""Jobs started by hand: processes that learn their index only from their own
jax.distributed.initialize(coordinator, num_processes=N, process_id=i), with no
launcher variable, each run as `jaxmemprof run -o JOB`: recorded as a job
(JOB/process-i), as a launcher's job is; lone runs keep the single layout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import cpu_env, run_cli, write_script
from test_fault_injection import cli_batch
from test_multiprocess import _wait_all, free_port

from jaxmemprof.store import layout
from jaxmemprof.store.reader import load_run

MiB = 1 << 20
LAUNCHER_PREFIXES = ("JAX_PROCESS_ID", "JAX_NUM_PROCESSES", "SLURM_", "OMPI_", "PMI_", "PMIX_", "MV2_",
                     "PBS_", "LSB_", "FLUX_")

JOB = """
import sys, time
import jax
pid, port = int(sys.argv[1]), sys.argv[2]
jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=pid, initialization_timeout=30)
import jax.numpy as jnp
x = jnp.ones(((pid + 1) * 256, 1024), jnp.float32)  # 1 MiB in process 0, 2 MiB in process 1
print("process", pid, "of", jax.process_count(), "index", jax.process_index(), float(x.sum()), flush=True)
time.sleep(0.3)
"""


def by_hand_env() -> dict:
    """The CPU environment with no launcher variable: only initialize names a process."""
    env = cpu_env()
    for name in list(env):
        if name.startswith(LAUNCHER_PREFIXES):
            del env[name]
    return env


def _popen(cmd, cwd, env):
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _record(cwd, out, script, *args, env):
    options = [a for a in args if str(a).startswith("--")]
    args = [a for a in args if not str(a).startswith("--")]
    return _popen([sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", str(out), "--interval", "0.05", *options,
                   str(script), *map(str, args)], cwd, env)


def _claim_state(run_dir: Path) -> str | None:
    """The state a recording run wrote into its lock file (capture/session.py _claim_text)."""
    try:
        lines = (run_dir / layout.LOCK).read_text().split("\n")
    except OSError:
        return None
    return lines[1].split()[0] if len(lines) > 2 and lines[1].split() else None


def _wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_a_job_started_by_hand_is_recorded_as_a_job(tmp_path):
    script = write_script(tmp_path, "job.py", JOB)
    env = by_hand_env()
    job = tmp_path / "JOB"
    # The reference: the same two processes under plain python, at the same time.
    port_py = free_port()
    plain = [_popen([sys.executable, str(script), str(i), str(port_py)], tmp_path, env) for i in (0, 1)]
    # Process 1 starts first and locks JOB (it records there until initialize
    # says it is process 1); process 0 then finds JOB locked by a run waiting in
    # initialize, and records beside it until it learns its index too.
    port = free_port()
    first = _record(tmp_path, job, script, 1, port, env=env)
    _wait_for(lambda: _claim_state(job) is not None or first.poll() is not None, 30, "process 1 never locked JOB")
    second = _record(tmp_path, job, script, 0, port, env=env)
    recorded = _wait_all([second, first], timeout=60)
    expected = _wait_all(plain, timeout=60)
    for i, ((rc, out, err), (rc_py, out_py, _)) in enumerate(zip(recorded, expected)):
        assert rc_py == 0 and out_py == f"process {i} of 2 index {i} {float((i + 1) * 256 * 1024)}\n"
        assert (rc, out) == (rc_py, out_py), f"process {i}:\n{err}"
        assert "warning" not in err, err

    # JOB holds exactly the two processes, as a launcher-started job does
    # (a claim that had given up waiting for its peer would leave a single run).
    assert sorted(p.name for p in job.iterdir()) == ["process-0", "process-1"]
    pids = {}
    for i in (0, 1):
        m = json.loads((job / f"process-{i}" / layout.MANIFEST).read_text())
        assert m["process_index"] == i and m["process_count"] == 2 and m["exit_status"] == 0, m
        assert m["process_variable"] == "process_id" and "pending" not in m
        assert not (job / f"process-{i}" / layout.LOCK).exists()
        pids[i] = m["pid"]
    assert pids == {0: second.pid, 1: first.pid}

    # The same job again with --force, process 0 first this time: each process
    # replaces its own process-N (the holder records beside them until then).
    port = free_port()
    again = [_record(tmp_path, job, script, i, port, "--force", env=env) for i in (0, 1)]
    for i, (rc, out, err) in enumerate(_wait_all(again, timeout=60)):
        assert (rc, out) == expected[i][:2], f"process {i}:\n{err}"
    assert sorted(p.name for p in job.iterdir()) == ["process-0", "process-1"]
    for i in (0, 1):
        assert json.loads((job / f"process-{i}" / layout.MANIFEST).read_text())["pid"] == again[i].pid

    # report, check and export read it as a job (one batch through the CLI's entry point).
    out = tmp_path / "csv"
    report, check, export = cli_batch([["report", job, "--json"], ["check", job, "--max-peak", "1.5MiB"],
                                       ["export", job, "--csv", out]], tmp_path, workers=1)
    assert (report.returncode, check.returncode, export.returncode) == (0, 1, 0), (
        report.stderr + check.stderr + export.stderr)
    doc = json.loads(report.stdout)
    assert doc["job"]["processes"] == 2 and doc["job"]["unfinished"] == []
    assert doc["job"]["alignment"] == "jax.distributed.initialize"
    procs = {p["process"]: p for p in doc["processes"]}
    assert sorted(procs) == [0, 1]
    for i, p in procs.items():
        assert p["finished"] and p["exit_status"] == 0
        # Each process's own recording in its own directory: 1 MiB in 0, 2 MiB in 1.
        assert (i + 1) * MiB <= p["peak_bytes"] < (i + 1) * MiB + 64 * 1024, (i, p["peak_bytes"])
    # check and export read it as a job too.
    shown = check.stdout
    assert "ok   process 0:" in shown and "FAIL process 1:" in shown, shown
    assert len((out / "processes.csv").read_text().splitlines()) == 3


LONE = """
import sys, time
import jax.numpy as jnp
import jaxmemprof
x = jnp.ones((256, 1024), jnp.float32)
jaxmemprof.snapshot("made")
print("ready", flush=True)
t0 = time.time()
while not __import__("os").path.exists(sys.argv[1]) and time.time() - t0 < 60:
    time.sleep(0.02)
"""

PEER = """
import sys, time
import jaxmemprof
jaxmemprof.mark("before initialize")
print("pending", flush=True)
time.sleep(60)
"""


def test_lone_runs_keep_the_single_layout_and_a_killed_pending_run_keeps_its_recording(tmp_path):
    env = by_hand_env()
    # A lone run that made device arrays is a single run for good: a second
    # lone run into its directory is refused at once, before its script runs.
    lone = write_script(tmp_path, "lone.py", LONE)
    release = tmp_path / "release"
    busy = tmp_path / "busy"
    first = _record(tmp_path, busy, lone, release, env=env)
    try:
        assert first.stdout.readline() == "ready\n"
        assert _claim_state(busy) == "recording", (busy / layout.LOCK).read_text()
        t0 = time.monotonic()
        proc = run_cli("run", "-o", busy, lone, release, cwd=tmp_path, env=env, check=2)
        # Not waiting for an initialize that will not come (it would wait 30 s).
        assert time.monotonic() - t0 < 20, proc.stderr
        assert proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
        assert "another jaxmemprof run is recording into it" in proc.stderr, proc.stderr
    finally:
        release.write_text("")
        first.communicate(timeout=60)
    assert first.returncode == 0
    assert load_run(busy).finished and not any(p.name.startswith("process-") for p in busy.iterdir())

    # A run waiting in JOB for initialize, killed there: its recording is kept,
    # complete, in its own directory; the holder's run stays as it was.
    job_script = write_script(tmp_path, "job.py", JOB.replace("initialization_timeout=30", "initialization_timeout=20"))
    peer_script = write_script(tmp_path, "peer.py", PEER)
    job = tmp_path / "JOB"
    holder = _record(tmp_path, job, job_script, 0, free_port(), env=env)
    peer = None
    try:
        _wait_for(lambda: _claim_state(job) == "distributed" or holder.poll() is not None, 40,
                  "the holder never reached jax.distributed.initialize")
        peer = _record(tmp_path, job, peer_script, env=env)
        line = peer.stdout.readline()
        assert line == "pending\n", (line, peer.poll() is not None and peer.communicate())
        pending = job / f"pending-{peer.pid}"
        assert (pending / layout.MANIFEST).is_file(), sorted(p.name for p in job.iterdir())
        peer.send_signal(signal.SIGKILL)
        peer.wait(timeout=30)
    finally:
        for p in (holder, peer):
            if p is not None and p.poll() is None:
                p.kill()
                p.communicate(timeout=30)
    run = load_run(pending)
    assert not run.finished and run.manifest["pending"] == {"job": os.path.abspath(job)}
    assert run.markers["label"].tolist() == ["before initialize"]
    assert (job / layout.MANIFEST).is_file()  # the holder: a single run in JOB, killed in initialize
    assert load_run(job).manifest["pid"] == holder.pid

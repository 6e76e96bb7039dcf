"""Multi-process jobs: real processes on 127.0.0.1 under jax.distributed
(gloo CPU collectives), each recorded by `jaxmemprof run` into RUN/process-N,
then read as one job: each process's peak, the job's, what held them, the
merged findings, the imbalance; a process killed mid-run; per-host copies
merged; every launcher variable that names a process."""

from __future__ import annotations

import json
import re
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import cpu_env, line_of, run_cli, write_script
from test_fault_injection import cli_batch

from jaxmemprof.store.job import job_timeline, load_job

MiB = 1 << 20
TIMEOUT = 90  # a process that hangs (a partner that never came) fails the test, fast

JOB = """
import sys, time
import jax
jax.config.update("jax_cpu_collectives_implementation", "gloo")
pid, n, port, heavy = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
time.sleep(0.2 * pid)  # processes start apart: the initialise barrier lines them up
jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=n, process_id=pid, initialization_timeout=30)
import jax.numpy as jnp
from jax.experimental import multihost_utils

def step(x):
    return x * 2

step = jax.jit(step)
base = jnp.ones((256, 1024), jnp.float32)  # BASE: 1 MiB on every process
time.sleep(0.3)  # the run's first snapshot (an interval after the first arrays): diff's baseline, before EXTRA
if pid == heavy:
    extra = jnp.ones((2048, 1024), jnp.float32)  # EXTRA: 8 MiB on one process only
for _ in range(4):
    base = step(base)  # STEP
    base.block_until_ready()
    time.sleep(0.1)
seen = multihost_utils.process_allgather(jnp.array([pid]))  # a gloo collective
print(pid, seen.ravel().tolist(), flush=True)
time.sleep(0.3)
"""


# Sockets that hold the ports free_port gave out, for as long as this process lives.
_HELD_PORTS: list[socket.socket] = []


def free_port() -> int:
    """A port on 127.0.0.1 that no other process can take: a socket of this
    one stays bound to it with SO_REUSEPORT, which the coordinator's gRPC
    server sets too, so the job's coordinator can still listen there (a
    bound socket that does not listen takes no connection). A port bound and
    let go again could be taken by anything else on the machine before the
    coordinator binds it, such as the job of another test beside this one."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("127.0.0.1", 0))
    _HELD_PORTS.append(s)
    return s.getsockname()[1]


def _record(cwd, out, script, args, env, options=()):
    return subprocess.Popen([sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", str(out), "--interval", "0.05",
                             "--max-overhead", "0", *options, str(script), *map(str, args)],
                            cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_all(procs, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=max(1, deadline - time.monotonic()))
            results.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return results


def launch_job(tmp_path, n, heavy, *, out="job", variables=True, outs=None):
    """n processes of one jax.distributed job, each under `jaxmemprof run`;
    ``variables``: JAX_PROCESS_ID/JAX_NUM_PROCESSES name each process (else
    only jax.distributed.initialize does); ``outs``: a -o per process."""
    script = write_script(tmp_path, "job.py", JOB)
    port = free_port()
    procs = []
    for i in range(n):
        env = cpu_env(**({"JAX_PROCESS_ID": str(i), "JAX_NUM_PROCESSES": str(n)} if variables else {}))
        for v in ("SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK"):
            env.pop(v, None)
        target = outs[i] if outs else tmp_path / out
        procs.append(_record(tmp_path, target, script, [i, n, port, heavy], env))
    results = _wait_all(procs)
    for i, (rc, stdout, stderr) in enumerate(results):
        assert rc == 0, f"process {i}: exit {rc}\n{stderr}"
        assert f"{i} {list(range(n))}\n" in stdout, stdout  # gloo prints a line of its own
    return script


def _report_json(path, *extra, cwd=None):
    proc = run_cli("report", path, "--json", *extra, cwd=cwd, check=0)
    return json.loads(proc.stdout)


def _check_job(doc, script, n, heavy):
    """What ``report JOB --json`` (``doc``) says of a job of ``n`` processes launched by launch_job."""
    extra_site = f"job.py:{line_of(script, '# EXTRA')} (<module>)"
    base_sites = [f"job.py:{line_of(script, m)} (<module>)" for m in ("# BASE", "# STEP")]
    assert doc["job"]["processes"] == n and doc["job"]["unfinished"] == []
    assert doc["job"]["alignment"] == "jax.distributed.initialize"
    procs = {p["process"]: p for p in doc["processes"]}
    assert sorted(procs) == list(range(n))
    for i, p in procs.items():
        assert p["finished"] and p["exit_status"] == 0
        assert abs(p["clock_offset_s"]) < 0.5  # one machine: the barrier agrees with the wall clock
        want = 9 * MiB if i == heavy else 1 * MiB
        # Its base array (1 MiB; 2 MiB while a step's output and input both live), the extra 8 MiB.
        assert want <= p["peak_bytes"] < want + 1.1 * MiB, (i, p["peak_bytes"])
    # What held each process's peak: exactly the arrays its lines made.
    held = {(s["process"], s["site"]): s["bytes"] for s in doc["peak_sites"]}
    assert held[(heavy, extra_site)] == 8 * MiB
    assert all((i, extra_site) not in held for i in procs if i != heavy)
    # Its base array: 1 MiB, from the line that made it or the step's (2 MiB while both live).
    assert all(sum(held.get((i, s), 0) for s in base_sites) in (MiB, 2 * MiB) for i in procs), held
    # The job's peak: the sum over processes at one aligned moment.
    assert doc["job"]["peak_bytes"] == sum(p["at_job_peak_bytes"] for p in procs.values())
    assert doc["job"]["peak_bytes"] >= 9 * MiB + (n - 1) * MiB
    assert doc["job"]["peak_bytes"] <= sum(p["peak_bytes"] for p in procs.values())
    # The imbalance: process `heavy`, and the site that makes the difference.
    rules = {f["rule"]: f for f in doc["findings"]}
    imb = rules["imbalance"]
    assert imb["processes"] == str(heavy) and imb["site"] == extra_site
    assert imb["facts"]["process"] == heavy
    assert imb["facts"]["sites"][0] == {"site": extra_site, "bytes": 8 * MiB, "median_process_bytes": 0,
                                        "delta_bytes": 8 * MiB}
    # Findings of every process, merged: one donation finding for all of them.
    donate = [f for f in doc["findings"] if f["rule"] == "donate"]
    assert len(donate) == 1, [f["rule"] for f in doc["findings"]]
    assert donate[0]["process_count"] == n and donate[0]["processes"] == (f"0\u2013{n - 1}" if n > 2 else "0, 1")
    return extra_site


@pytest.fixture(scope="module")
def two_process_job(tmp_path_factory):
    """One 2-process job (process 1 holds 8 MiB more), shared by the tests
    that only read it (launching one takes seconds)."""
    tmp = tmp_path_factory.mktemp("two")
    script = launch_job(tmp, 2, heavy=1)
    return tmp, script


def test_two_processes_one_report(two_process_job, tmp_path):
    job_root, script = two_process_job
    job_dir = job_root / "job"
    assert sorted(p.name for p in job_dir.iterdir()) == ["process-0", "process-1"]
    for i in range(2):
        m = json.loads((job_dir / f"process-{i}" / "manifest.json").read_text())
        assert m["process_index"] == i and m["process_count"] == 2 and m["process_variable"] == "JAX_PROCESS_ID"
        assert m["distributed"]["process_index"] == i and m["distributed"]["process_count"] == 2
        con = sqlite3.connect(job_dir / f"process-{i}" / "journal.sqlite")
        assert [k for (k,) in con.execute("SELECT kind FROM events WHERE kind = 'distributed-init'")] == [
            "distributed-init"]
        con.close()
    # The commands that read the job, in one batch through the CLI's entry point (the import paid twice, not
    # a dozen times): report, show, diff and export of the job, of one of its processes, and a merge.
    out, single, bare = tmp_path / "csv", tmp_path / "csv1", tmp_path / "bare"
    commands = {
        "report --json": ["report", job_dir, "--json"],
        "report": ["report", job_dir],
        "report --process 1": ["report", job_dir, "--json", "--process", "1"],
        "report process-1": ["report", job_dir / "process-1", "--json"],
        "show @peak": ["show", f"{job_dir}@peak", "--json"],
        "show --process 1": ["show", job_dir, "--process", "1", "--json"],
        "show process-1@peak": ["show", f"{job_dir}/process-1@peak", "--json"],
        "show --process 7": ["show", job_dir, "--process", "7"],
        "diff": ["diff", job_dir, "--json"],
        "export": ["export", job_dir, "--csv", out],
        "export process-0": ["export", job_dir / "process-0", "--csv", single],
        "merge": ["merge", bare, job_dir],
    }
    done = dict(zip(commands, cli_batch(list(commands.values()), None)))
    for name, proc in done.items():
        assert proc.returncode == (2 if name == "show --process 7" else 0), (name, proc.stderr)
    doc = json.loads(done["report --json"].stdout)
    extra_site = _check_job(doc, script, 2, heavy=1)

    # The terminal: each process's memory, the job's peak, who holds more and why.
    text = done["report"].stdout
    assert "job peak:" in text and "2 processes" in text
    assert re.search(r"^\d\. high imbalance .*\(process 1\)$", text, re.M), text
    # 8 MiB more at EXTRA; a snapshot taken during a step may also see BASE's old and new values.
    assert re.search(r"Process 1 holds (9|10)\.00 MiB", text) and f"{extra_site} (+8.00 MiB)" in text, text
    assert re.search(r"^\d\. medium donate .*\(processes 0, 1\)$", text, re.M), text  # the donation finding, once
    # What the memory is, per process: BASE, carried from step to step (its name says nothing more), 1 MiB each.
    roles = {(r["process"], r["role"]): r["bytes"] for r in doc["roles"]}
    assert roles[(0, "other state")] == roles[(1, "other state")] == MiB
    # and in the terminal, the heavy one's EXTRA beside it, as other arrays live outside the call
    assert re.search(r"^  process 1: 8\.00 MiB other arrays, 1\.00 MiB other state", text, re.M), text
    assert re.search(r"^  process 0: 1\.00 MiB other state", text, re.M), text

    # Each process summarised itself as it ended; report reads those, and a
    # job without them (or with damaged ones) reports exactly the same.
    assert all((job_dir / f"process-{i}" / "summary.json").is_file() for i in range(2))
    (bare / "process-0" / "summary.json").unlink()
    (bare / "process-1" / "summary.json").write_text('{"schema": 1, "findings": [[[[')
    # (from the directory above the one it was recorded in: sites are named as the processes named them)
    again = _report_json(bare, cwd=job_root.parent)
    for key in ("processes", "peak_sites", "findings", "timeline"):
        assert again[key] == doc[key], key

    # One process, two ways; each is a run of today's format.
    one = json.loads(done["report --process 1"].stdout)
    assert one["summary"]["peak_bytes"] == doc["processes"][1]["peak_bytes"]
    assert json.loads(done["report process-1"].stdout)["summary"] == one["summary"]

    # show on the job: the processes' snapshots at the job's peak, merged.
    shown = json.loads(done["show @peak"].stdout)
    assert shown["totals"]["bytes"] == doc["job"]["peak_bytes"]
    sites = {r["site"]: r["bytes"] for r in shown["rows"]}
    assert sites[extra_site] == 8 * MiB
    p1 = json.loads(done["show --process 1"].stdout)
    assert p1["totals"]["bytes"] == doc["processes"][1]["peak_bytes"]
    assert done["show process-1@peak"].stdout == done["show --process 1"].stdout
    bad = done["show --process 7"]
    assert bad.stderr.count("\n") == 1 and "has no process 7 (it has 0, 1)" in bad.stderr

    # diff on the job: first -> final of every process.
    d = json.loads(done["diff"].stdout)
    # (the first snapshot may catch the scalar jnp.ones broadcasts, a few bytes on that line)
    assert 8 * MiB - 64 <= {r["site"]: r["delta_bytes"] for r in d["rows"]}[extra_site] <= 8 * MiB

    # export: every table with a process column, and the job's own.
    import pandas as pd

    timeline = pd.read_csv(out / "timeline.csv")
    assert list(timeline.columns)[0] == "process" and set(timeline["process"]) == {0, 1}
    procs = pd.read_csv(out / "processes.csv")
    assert list(procs["process"]) == [0, 1] and procs.loc[1, "peak_bytes"] == doc["processes"][1]["peak_bytes"]
    findings = pd.read_csv(out / "job_findings.csv")
    assert "imbalance" in set(findings["rule"])
    assert set(pd.read_csv(single / "timeline.csv")["process"]) == {0}


def test_four_processes(tmp_path):
    script = launch_job(tmp_path, 4, heavy=2)
    as_json, as_text = cli_batch([["report", tmp_path / "job", "--json"], ["report", tmp_path / "job"]], None,
                                 workers=1)
    assert as_json.returncode == as_text.returncode == 0, as_json.stderr + as_text.stderr
    _check_job(json.loads(as_json.stdout), script, 4, heavy=2)
    text = as_text.stdout
    assert re.search(r"^\d\. medium donate .*\(processes 0\u20133\)$", text, re.M), text  # the donation, once for the four


KILLED = """
import os, sys, time
import jax.numpy as jnp
a = jnp.ones((256, 1024), jnp.float32)  # 1 MiB
if sys.argv[1] == "1":
    b = jnp.ones((1024, 1024), jnp.float32)  # 4 MiB, then killed
    open(sys.argv[2], "w").close()
    time.sleep(60)
time.sleep(0.4)
"""


def test_a_killed_process_leaves_the_others_intact(tmp_path):
    script = write_script(tmp_path, "killed.py", KILLED)
    flag = tmp_path / "ready"
    procs = [_record(tmp_path, tmp_path / "job", script, [i, flag],
                     cpu_env(SLURM_PROCID=str(i), SLURM_NTASKS="2", SLURM_JOB_ID="77")) for i in range(2)]
    victim = procs[1]
    try:
        deadline = time.monotonic() + TIMEOUT
        db = tmp_path / "job" / "process-1" / "journal.sqlite"
        while time.monotonic() < deadline:  # until process 1's 5 MiB is committed
            if flag.exists() and db.exists():
                try:
                    con = sqlite3.connect(db)
                    got = con.execute("SELECT max(live_bytes) FROM snapshots").fetchone()[0]
                    con.close()
                except sqlite3.Error:
                    got = None
                if got is not None and got >= 5 * MiB:
                    break
            time.sleep(0.05)
        else:
            pytest.fail("process 1 never committed its snapshot")
        victim.send_signal(signal.SIGKILL)
        (rc0, _, err0), (rc1, _, _) = _wait_all(procs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert rc0 == 0, err0
    assert rc1 == -signal.SIGKILL
    as_json, as_text, alone = cli_batch([["report", tmp_path / "job", "--json"], ["report", tmp_path / "job"],
                                         ["report", tmp_path / "job" / "process-0", "--json"]], None, workers=1)
    assert as_json.returncode == as_text.returncode == alone.returncode == 0, as_json.stderr + as_text.stderr
    doc = json.loads(as_json.stdout)
    assert doc["job"]["unfinished"] == [1]
    procs_ = {p["process"]: p for p in doc["processes"]}
    assert procs_[0]["finished"] and procs_[0]["exit_status"] == 0
    assert not procs_[1]["finished"] and not procs_[1]["running"] and procs_[1]["peak_bytes"] == 5 * MiB
    assert doc["job"]["alignment"] == "wall clocks"
    unfinished = [f for f in doc["findings"] if f["rule"] == "unfinished"]
    assert len(unfinished) == 1 and unfinished[0]["processes"] == "1" and unfinished[0]["severity"] == "high"
    assert "did not finish: process 1" in as_text.stdout and "Process 1 did not finish (killed)" in as_text.stdout
    # Process 0's run is complete on its own.
    alone = json.loads(alone.stdout)
    assert alone["summary"]["finished"] and not any("did not finish" in w for w in alone["warnings"])


def _tree(path: Path) -> dict:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_per_host_directories_merged(tmp_path):
    """Two hosts, each its own local directory; only jax.distributed.initialize
    says which process each is (no launcher variable): each is a single run
    whose manifest holds its index, and merge makes them one job."""
    hosts = [tmp_path / "host-a", tmp_path / "host-b"]
    for h in hosts:
        h.mkdir()
    script = launch_job(tmp_path, 2, heavy=0, variables=False, outs=[h / "run" for h in hosts])
    for i, h in enumerate(hosts):
        m = json.loads((h / "run" / "manifest.json").read_text())
        assert m["process_index"] == i and m["process_count"] == 2 and "process_variable" not in m
    before = [_tree(h) for h in hosts]
    merged, again = tmp_path / "merged", tmp_path / "again"
    # One after the other, in one process (through the CLI's entry point): the merge, the report of what it
    # made; a job's copy merges with the single runs' copies too, but a process given twice is refused before
    # any copy; a non-empty output is refused.
    proc, report, clash, not_empty = cli_batch(
        [["merge", merged, hosts[1] / "run", hosts[0] / "run"], ["report", merged, "--json"],
         ["merge", again, merged, hosts[0] / "run"], ["merge", merged, hosts[0] / "run"]], None, workers=1)
    assert (proc.returncode, report.returncode, clash.returncode, not_empty.returncode) == (0, 0, 2, 2), (
        proc.stderr + report.stderr + clash.stderr + not_empty.stderr)
    assert "merged 2 processes (0, 1)" in proc.stderr
    assert [_tree(h) for h in hosts] == before  # the inputs: untouched
    assert sorted(p.name for p in merged.iterdir()) == ["process-0", "process-1"]
    assert _tree(merged / "process-1") == _tree(hosts[1] / "run")
    _check_job(json.loads(report.stdout), script, 2, heavy=0)
    assert clash.stderr.count("\n") == 1 and "holds process 0, which" in clash.stderr
    assert not again.exists() or not any(again.iterdir())
    assert "is not empty" in not_empty.stderr
    # A job merged from a job is the same job.
    run_cli("merge", again, merged, check=0)
    assert _tree(again) == _tree(merged)

    # Names from the processes' manifests are data: escaped on the terminal.
    mpath = again / "process-0" / "manifest.json"
    m = json.loads(mpath.read_text())
    m["hostname"] = "evil\x1b[2J\nhost"
    mpath.write_text(json.dumps(m))
    shown = run_cli("report", again, check=0).stdout
    assert "\x1b" not in shown and "evil\\x1b[2J\\nhost" in shown

    # A damaged process is named; the other is still reported. None readable: one line, exit 2.
    (again / "process-1" / "journal.sqlite").write_bytes(b"not a journal\x1b[31m")
    damaged = _report_json(again)
    assert any(w.startswith("process 1: journal unreadable") for w in damaged["warnings"])
    assert [p["process"] for p in damaged["processes"] if p["snapshots"]] == [0]
    (again / "process-0" / "journal.sqlite").write_bytes(b"")
    none = run_cli("report", again, check=2)
    assert none.stderr.count("\n") == 1 and "no process of the job" in none.stderr and "\x1b" not in none.stderr


@pytest.mark.parametrize("rank,size", [("JAX_PROCESS_ID", "JAX_NUM_PROCESSES"), ("SLURM_PROCID", "SLURM_NTASKS"),
                                       ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"),
                                       ("PMIX_RANK", None), ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE")])
def test_launcher_variables_name_the_process(tmp_path, rank, size):
    script = write_script(tmp_path, "plain.py", "print('ran')\n")
    env = cpu_env(**{rank: "3"}, **({size: "8"} if size else {}))
    proc = subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", "job", str(script)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0 and proc.stdout == "ran\n", proc.stderr
    m = json.loads((tmp_path / "job" / "process-3" / "manifest.json").read_text())
    assert m["process_index"] == 3 and m["process_count"] == (8 if size else None) and m["process_variable"] == rank
    assert sorted(os.listdir(tmp_path / "job")) == ["process-3"]
    # A second process claiming index 3 is refused; the first one's data stays.
    again = subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", "job", str(script)], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert again.returncode == 2 and "job/process-3: is not empty" in again.stderr
    assert json.loads((tmp_path / "job" / "process-3" / "manifest.json").read_text()) == m


def test_a_job_of_one_keeps_the_single_layout(tmp_path):
    script = write_script(tmp_path, "plain.py", "print('ran')\n")
    env = cpu_env(SLURM_PROCID="0", SLURM_NTASKS="1", SLURM_JOB_ID="5")
    env.pop("JAX_PROCESS_ID", None)
    proc = subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", "r", str(script)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "r" / "manifest.json").is_file()
    # A process of a bigger job refuses a directory that holds a single run.
    env.update(SLURM_PROCID="1", SLURM_NTASKS="2")
    proc = subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", "r", str(script)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 2 and "holds a single-process run" in proc.stderr and proc.stderr.count("\n") == 1
    # The default name is the job's (SLURM_JOB_ID), the same in every process.
    proc = subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "-q", str(script)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "jaxmemprof-runs" / "plain-job-5" / "process-1" / "manifest.json").is_file()


def test_clock_skew_is_aligned_on_the_initialise_barrier(two_process_job, tmp_path):
    """A host whose wall clock runs 1000 s ahead: its times are shifted back
    by the difference of the moments jax.distributed.initialize returned."""
    job_dir = two_process_job[0] / "job"
    honest = load_job(job_dir)
    tl = job_timeline(honest)
    skewed = tmp_path / "skewed"
    run_cli("merge", skewed, job_dir, check=0)
    con = sqlite3.connect(skewed / "process-1" / "journal.sqlite")
    con.execute("UPDATE snapshots SET t_wall = t_wall + 1000")
    (msg,) = con.execute("SELECT message FROM events WHERE kind = 'distributed-init'").fetchone()
    doc = json.loads(msg)
    doc["t_wall"] += 1000
    con.execute("UPDATE events SET message = ? WHERE kind = 'distributed-init'", (json.dumps(doc),))
    con.commit()
    con.close()
    mpath = skewed / "process-1" / "manifest.json"
    m = json.loads(mpath.read_text())
    m["start_epoch"] += 1000
    m["distributed"]["t_wall"] += 1000
    mpath.write_text(json.dumps(m))
    job = load_job(skewed)
    assert job.alignment == "jax.distributed.initialize"
    assert abs(job.process(1).offset_s - honest.process(1).offset_s - 1000) < 1e-6
    shifted = job_timeline(job)
    assert shifted.peak_bytes == tl.peak_bytes and shifted.at_peak == tl.at_peak
    assert abs(shifted.peak_t - tl.peak_t) < 1e-6


def test_a_job_of_one_process_under_jax_distributed(tmp_path):
    """initialize() with one process: its moment is recorded; the launcher's
    index stays the directory's and the manifest's (JAX's 0 of 1 is no job)."""
    script = write_script(tmp_path, "one.py", f"""
        import jax
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize("127.0.0.1:{free_port()}", num_processes=1, process_id=0,
                                   initialization_timeout=20)
        import jax.numpy as jnp
        a = jnp.ones((256, 1024))
        print(jax.process_index(), jax.process_count())
    """)
    proc = subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", "job", str(script)], cwd=tmp_path,
                          env=cpu_env(JAX_PROCESS_ID="3", JAX_NUM_PROCESSES="4"), capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert proc.returncode == 0 and proc.stdout == "0 1\n", proc.stderr
    m = json.loads((tmp_path / "job" / "process-3" / "manifest.json").read_text())
    assert (m["process_index"], m["process_count"]) == (3, 4)
    assert (m["distributed"]["process_index"], m["distributed"]["process_count"]) == (0, 1)
    assert "launcher_process_index" not in m
    job = load_job(tmp_path / "job")
    assert job.alignment == "jax.distributed.initialize" and not job.warnings


def _summary(n, times, sizes, init=None):
    import pandas as pd

    from jaxmemprof.store.job import ProcessTotals

    snaps = pd.DataFrame({"snapshot": range(1, len(times) + 1), "t_wall": [float(t) for t in times],
                          "live_bytes": sizes, "trigger": "interval", "label": None,
                          "file": [f"snapshots/{i:06d}.prof.gz" for i in range(1, len(times) + 1)]})
    return ProcessTotals(n, Path(f"process-{n}"), {"start_epoch": float(times[0])}, snaps, True, init)


def test_the_job_timeline_sums_processes_at_aligned_times():
    """Known ground truth, by hand: each process holds a snapshot's bytes
    until its next one, nothing before its first or after its last."""
    from jaxmemprof.store.job import Job, align

    # Process 1's clock runs 100 s ahead; the barrier returned at 10 (p0) and 110 (p1).
    procs, t0, how = align([_summary(0, [1000, 1002, 1004, 1006], [1, 5, 2, 0], init=1000.5),
                            _summary(1, [1101.5, 1103, 1105], [10, 20, 30], init=1100.5)])
    assert how == "jax.distributed.initialize" and t0 == 1000 and procs[1].offset_s == 100
    job = Job(Path("job"), procs, t0, how)
    tl = job_timeline(job)
    # Aligned: p0 at 0, 2, 4, 6; p1 at 1.5, 3, 5 (its last at 5: nothing after).
    assert tl.totals["t"].tolist() == [0, 1.5, 2, 3, 4, 5, 6]
    assert tl.totals["live_bytes"].tolist() == [1, 11, 15, 25, 22, 32, 0]
    assert (tl.peak_t, tl.peak_bytes, tl.at_peak) == (5, 32, {0: 3, 1: 3})


def test_merge_and_variables_refuse_what_they_must(tmp_path):
    from jaxmemprof.capture.rundir import launcher_process

    assert launcher_process({"SLURM_PROCID": "abc", "PMI_RANK": "2", "PMI_SIZE": "4"}).variable == "PMI_RANK"
    assert launcher_process({"JAX_PROCESS_ID": "0", "JAX_NUM_PROCESSES": "1"}) is None
    assert launcher_process({}) is None
    assert launcher_process({"SLURM_PROCID": "5", "SLURM_JOB_ID": "42"}).job_id == "42"
    job = tmp_path / "job"
    (job / "process-0" / "snapshots").mkdir(parents=True)
    (job / "process-0" / "manifest.json").write_text('{"process_index": 0}')
    (tmp_path / "plain").mkdir()
    (tmp_path / "single").mkdir()
    (tmp_path / "single" / "manifest.json").write_text("{}")
    inside, plain, single = cli_batch([["merge", job / "process-0" / "out", job],
                                       ["merge", tmp_path / "o", tmp_path / "plain"],
                                       ["merge", tmp_path / "o", tmp_path / "single"]], tmp_path, workers=1)
    assert (inside.returncode, plain.returncode, single.returncode) == (2, 2, 2), (
        inside.stderr + plain.stderr + single.stderr)
    assert "is inside" in inside.stderr and not (job / "process-0" / "out").exists()
    assert "is neither a job directory" in plain.stderr
    assert "names no process index" in single.stderr
    assert not (tmp_path / "o").exists()


PLAN_JOB = """
import sys
import jax
jax.config.update("jax_cpu_collectives_implementation", "gloo")
pid, n, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=n, process_id=pid, initialization_timeout=30)
import jax.numpy as jnp

def step(w, x):
    return w - 0.01 * (x.T @ (x @ w)) / x.shape[0]

step = jax.jit(step)
w = jnp.zeros((512, 512))
if pid == 1:
    extra = jnp.ones((4096, 1024))  # 16 MiB more on process 1: less room for the batch there
for i in range(5):
    x = jnp.ones((64, 512)) * i  # the batch, new at every step
    w = step(w, x)
print(pid, float(w[0, 0]), flush=True)
"""


def test_a_job_planned_with_run_plan_names_the_batch_that_fits_every_process(tmp_path):
    script = write_script(tmp_path, "plan_job.py", PLAN_JOB)
    port = free_port()
    procs = [_record(tmp_path, tmp_path / "job", script, [i, 2, port],
                     cpu_env(JAX_PROCESS_ID=str(i), JAX_NUM_PROCESSES="2"), options=("--plan",)) for i in range(2)]
    for i, (rc, _, err) in enumerate(_wait_all(procs)):
        assert rc == 0, f"process {i}: exit {rc}\n{err}"
    job = tmp_path / "job"
    size = "100MiB"  # process 0 fits at every compiled batch, process 1 (16 MiB more) at none
    doc = _report_json(job, "--device-memory", size, cwd=tmp_path)
    own = {}
    for i in range(2):
        mine = _report_json(job / f"process-{i}", "--device-memory", size, cwd=tmp_path)
        models = [m for m in mine["plan"]["models"] if m["function"] == "step" and m["variant"] == "recorded"]
        own[i] = min(m["largest_batch"] for m in models)
    # The job's answer is the smaller process's own: process 1, whose 16 MiB more leaves less room.
    assert own[1] < own[0]
    [row] = [r for r in doc["plan"] if r["function"] == "step" and r["variant"] == "recorded"]
    assert (row["largest_batch"], row["process"]) == (own[1], 1)
    text = run_cli("report", job, "--device-memory", size, cwd=tmp_path).stdout
    assert f"step recorded: {own[1]:,} (process 1 limits it)" in text, text

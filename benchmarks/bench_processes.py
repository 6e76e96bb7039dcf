"""`report` on a job of many processes: time and memory against the number
of processes (target: 256 processes in <= 30 s and <= 2 GiB, linear).

    python benchmarks/bench_processes.py [--processes 16,64,256] [--kinds 8] [--workers N]

The job: KINDS real recordings (`jaxmemprof run` of a small training loop
with a jitted step and no donation, each recorded as process N of a job,
each kind keeping a different number of extra arrays, one kind 8 MiB more),
copied round-robin into process-0 ... process-(P-1) with each copy's
manifest naming its index. Recording 256 processes on one machine would
take minutes of CPU for nothing the reader can tell apart: each process
directory is read and analysed on its own.

Measured: the wall time of `jaxmemprof report JOB --json` and the largest
total resident memory of it and its worker processes (sampled every 20 ms
from /proc), for each job size, twice: with the summary.json each process
wrote as it ended (the usual case), and with those removed, so that report
analyses every process itself (processes killed, or other report options);
and the time per process, which stays flat when the cost is linear. Rows go
to benchmarks/data/processes.csv.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, Results, git_state

WORKLOAD = '''
import sys, time
import jax, jax.numpy as jnp

kind = int(sys.argv[1])

def step(w, x):
    return w * 0.99 + x.mean()

step = jax.jit(step)
w = jnp.ones((256, 1024), jnp.float32)
kept = [jnp.full((64, 1024), i, jnp.float32) for i in range(kind)]  # kind x 256 KiB
if kind == 0:
    extra = jnp.ones((2048, 1024), jnp.float32)  # 8 MiB: the imbalance
for i in range(20):
    x = jnp.ones((64, 1024), jnp.float32) * i
    w = step(w, x)
    w.block_until_ready()
    time.sleep(0.02)
'''


def _tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return total


def measure(cmd, env) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _tree_rss(proc.pid))
            done.wait(0.02)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    done.set()
    th.join()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err}")
    return wall, peak[0], out


def record_kinds(root: Path, kinds: int) -> list[Path]:
    script = root / "workload.py"
    script.write_text(WORKLOAD)
    env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_NUM_PROCESSES="2")
    runs = []
    for k in range(kinds):
        env["JAX_PROCESS_ID"] = str(k)
        subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "-q", "--interval", "0.05", "-o",
                        str(root / "kinds"), str(script), str(k)], env=env, check=True, cwd=root)
        runs.append(root / "kinds" / f"process-{k}")
    return runs


def make_job(root: Path, kinds: list[Path], processes: int) -> Path:
    job = root / f"job-{processes}"
    job.mkdir()
    for n in range(processes):
        dst = job / f"process-{n}"
        shutil.copytree(kinds[n % len(kinds)], dst)
        m = json.loads((dst / "manifest.json").read_text())
        m["process_index"], m["process_count"] = n, processes
        (dst / "manifest.json").write_text(json.dumps(m))
    return job


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", default="16,64,256")
    ap.add_argument("--kinds", type=int, default=8)
    ap.add_argument("--workers", default=None, help="JAXMEMPROF_WORKERS for the report (default: its own choice)")
    args = ap.parse_args()
    sizes = [int(x) for x in args.processes.split(",")]
    res = Results()
    res.say(f"bench_processes: {git_state()}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="jaxmemprof-bench-processes-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        kinds = record_kinds(root, args.kinds)
        res.say(f"recorded {len(kinds)} kinds of process in {time.perf_counter() - t0:.1f} s")
        env = dict(os.environ)
        if args.workers:
            env["JAXMEMPROF_WORKERS"] = args.workers
        for n in sizes:
            job = make_job(root, kinds, n)
            for how in ("summaries", "analysed"):
                if how == "analysed":  # as for processes killed, or reported with other options
                    for p in job.glob("process-*/summary.json"):
                        p.unlink()
                wall, rss, out = measure([sys.executable, "-m", "jaxmemprof", "report", str(job), "--json"], env)
                doc = json.loads(out)
                rules = sorted({f["rule"] for f in doc["findings"]})
                merged = {f["rule"]: f["processes"] for f in doc["findings"]}
                res.say(f"{n:5d} processes, {how:9s}: {wall:6.2f} s ({wall / n * 1000:6.1f} ms per process), "
                        f"{rss / 2**20:6.0f} MiB at most (with its workers); findings: "
                        + ", ".join(f"{r} ({merged[r]})" for r in rules))
                big = n == 256
                res.add("processes", f"report {n} processes ({how})", wall, "s",
                        target="<= 30 s at 256" if big else None, met=(wall <= 30) if big else None)
                res.add("processes", f"report {n} processes ({how}) per process", wall / n, "s")
                res.add("processes", f"report {n} processes ({how}) memory", rss, "bytes",
                        target="<= 2 GiB at 256" if big else None, met=(rss <= 2 * 2**30) if big else None)
            shutil.rmtree(job)
    out = REPO / "benchmarks" / "data" / "processes.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    import csv

    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(res.rows[0]))
        w.writeheader()
        w.writerows(res.rows)
    res.say(f"wrote {out}")


if __name__ == "__main__":
    main()

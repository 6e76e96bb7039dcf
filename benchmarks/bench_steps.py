"""Snapshots keyed to steps (capture/steps.py): issue 54's CPU case (a slow
start, then a fast loop that marks its steps and keeps 4 KiB a step) under
plain python and under `jaxmemprof run`, alternating: the loop's wall and CPU
time, the snapshots in it, what the step snapshots and their holder searches
cost, and whether the leak is found.

    python benchmarks/bench_steps.py [--rounds 3] [--start 6] [--steps 3000]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, git_state

WORKLOAD = REPO / "benchmarks" / "workloads" / "fast_leak.py"


def _loop(stderr: str) -> tuple[float, float]:
    line = [x for x in stderr.splitlines() if x.startswith("loop ")][-1]
    _, wall, cpu = line.split()
    return float(wall), float(cpu)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--start", type=float, default=6.0)
    ap.add_argument("--steps", type=int, default=3000)
    args = ap.parse_args()
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    plain, under = [], []
    print(f"jaxmemprof at {git_state()}; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            p = subprocess.run([sys.executable, str(WORKLOAD), str(args.start), str(args.steps)], env=env,
                               capture_output=True, text=True, check=True)
            plain.append(_loop(p.stderr))
            out = Path(tmp) / f"run{r}"
            p = subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", str(out), str(WORKLOAD),
                                str(args.start), str(args.steps)], env=env, capture_output=True, text=True, check=True)
            wall, cpu = _loop(p.stderr)
            db = sqlite3.connect(out / "journal.sqlite")
            n, cost, swall = db.execute("SELECT count(*), sum(cost_s), sum(wall_s) FROM snapshots "
                                        "WHERE trigger = 'step'").fetchone()
            total = db.execute("SELECT count(*) FROM snapshots").fetchone()[0]
            search = db.execute("SELECT count(*), coalesce(sum(cost_s), 0) FROM py_holder_searches "
                                "WHERE trigger = 'step'").fetchone()
            db.close()
            under.append((wall, cpu, n, total, cost, swall, *search))
            found = subprocess.run([sys.executable, "-m", "jaxmemprof", "report", str(out)], env=env,
                                   capture_output=True, text=True).stdout
            leak = "leak" in found and "4.00 KiB per step" in found
            print(f"round {r + 1}: python loop {plain[-1][0]:.3f} s wall {plain[-1][1]:.3f} s CPU; run loop "
                  f"{wall:.3f} s wall {cpu:.3f} s CPU; {total} snapshots ({n} at steps: {cost:.3f} s CPU, "
                  f"{swall:.3f} s wall; {search[0]} holder searches {search[1]:.3f} s); leak found: {leak}")
    pw = statistics.median(w for w, _ in plain)
    pc = statistics.median(c for _, c in plain)
    uw = statistics.median(u[0] for u in under)
    uc = statistics.median(u[1] for u in under)
    print(f"medians: loop python {pw:.3f} s, run {uw:.3f} s wall ({uw / pw:.2f}x); CPU {pc:.3f} vs {uc:.3f} s "
          f"({uc / pc:.2f}x)")


if __name__ == "__main__":
    main()

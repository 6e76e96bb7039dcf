"""``jaxmemprof run`` against ``python`` on the bundled MLP
(sample_runs/train_mlp.py) at 300 steps, side by side, with its donation
verified (issue 54: the end's compiles off the critical path).

    python benchmarks/bench_mlp_steps.py [--steps 300] [--repeat K] [--batch B] [--against DIR] [--out CSV]

Each repeat runs, in turn (which goes first alternating), ``python
sample_runs/train_mlp.py --steps N`` and ``python -m jaxmemprof run -q -o
TMP sample_runs/train_mlp.py --steps N``, whole-process wall time each.
With ``--against DIR`` (another checkout of jaxmemprof, say the main branch
before the change), its ``run`` too, the same way. Reported per command:
the median wall time and its ratio to python's; from each run directory,
the end phase's seconds (the manifest's ``end_phase``: after the script
ended), whether the donation's figure was verified (a ``jit_whatif`` row
with no error) and what the early compiles did (the run's
``early-compiles`` event: compiled beside the program, used by the end).
The child's CPU time (user + system) beside each wall time: on a loaded
machine the steadier figure. Target: ``run`` within 1.05x of python (wall),
the donation verified.

Results: ``benchmarks/data/mlp_steps.csv`` and a summary on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import Results, git_state

REPO = Path(__file__).resolve().parent.parent
MLP = REPO / "sample_runs" / "train_mlp.py"
TARGET = 1.05


def _env(path: Path | None) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    if path is not None:
        env["PYTHONPATH"] = str(path)
    return env


def _timed(argv, env, cwd=None) -> tuple[float, float]:
    """(wall, CPU: the child's user + system) seconds. ``cwd``: the checkout
    whose jaxmemprof ``python -m`` imports (the current directory comes
    before $PYTHONPATH on its sys.path)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _facts(run: Path) -> dict:
    m = json.loads((run / "manifest.json").read_text())
    con = sqlite3.connect(run / "journal.sqlite")
    try:
        rows = con.execute("SELECT error FROM jit_whatif").fetchall()
        early = con.execute("SELECT message FROM events WHERE kind = 'early-compiles'").fetchall()
    finally:
        con.close()
    return {"end_s": float((m.get("end_phase") or {}).get("seconds") or 0.0),
            "script_s": float(m.get("duration_s") or 0.0),
            "verified": bool(rows) and all(e is None for (e,) in rows),
            "early": json.loads(early[0][0]) if early else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=None, help="the MLP's --batch (its default: 1024)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--against", type=Path, default=None, help="another checkout's run beside this one's")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "data" / "mlp_steps.csv")
    args = ap.parse_args()
    script = [str(MLP), "--steps", str(args.steps)] + (["--batch", str(args.batch)] if args.batch else [])
    results = Results()
    results.say(f"bench_mlp_steps: {' '.join(script)}; commit {git_state()}; {os.cpu_count()} cores, "
                f"load {os.getloadavg()[0]:.2f}")
    commands = {"python": (None, None), "run": (REPO, "run")}
    if args.against is not None:
        commands["run (against)"] = (args.against.resolve(), "run")
    times: dict = {name: [] for name in commands}
    cpu: dict = {name: [] for name in commands}
    facts: dict = {name: [] for name in commands if name != "python"}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.repeat):
            order = list(commands) if k % 2 == 0 else list(reversed(commands))
            for name in order:
                path, _ = commands[name]
                env = _env(path)
                if path is None:
                    wall, used = _timed([sys.executable, *script], env, cwd=tmp)
                else:
                    out = Path(tmp) / f"{name.replace(' ', '_').strip('()')}-{k}"
                    wall, used = _timed([sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", str(out), *script],
                                        env, cwd=path)
                    facts[name].append(_facts(out))
                times[name].append(wall)
                cpu[name].append(used)
                results.say(f"  repeat {k + 1}: {name}: {wall:.2f} s wall, {used:.2f} s CPU"
                            + (f", end phase {facts[name][-1]['end_s']:.2f} s" if name in facts else ""))
    base = statistics.median(times["python"])
    base_cpu = statistics.median(cpu["python"])
    results.add("mlp_steps", "python", base, "s")
    results.add("mlp_steps", "python: CPU", base_cpu, "s")
    results.say(f"python: median {base:.2f} s wall, {base_cpu:.2f} s CPU, of {len(times['python'])}")
    for name in facts:
        med = statistics.median(times[name])
        ratio = med / base
        verified = all(f["verified"] for f in facts[name])
        end_s = statistics.median(f["end_s"] for f in facts[name])
        early = [f["early"] for f in facts[name]]
        met = ratio <= TARGET and verified
        results.add("mlp_steps", name, med, "s", reference=base, ratio=ratio, target=f"<= {TARGET}x, verified",
                    met=met)
        results.add("mlp_steps", f"{name}: end phase", end_s, "s")
        med_cpu = statistics.median(cpu[name])
        results.add("mlp_steps", f"{name}: CPU", med_cpu, "s", reference=base_cpu, ratio=med_cpu / base_cpu)
        results.say(f"{name}: median {med:.2f} s, {ratio:.3f}x python ({'met' if met else 'NOT met'}); CPU "
                    f"{med_cpu:.2f} s, {med_cpu / base_cpu:.3f}x; end phase "
                    f"median {end_s:.2f} s; donation verified: {verified}; early compiles: {early}")
    results.write(args.out)


if __name__ == "__main__":
    main()

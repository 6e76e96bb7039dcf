"""What run --plan costs, and that a run without it costs nothing more than before it existed.

    python benchmarks/bench_plan.py [--repeat K] [--seconds S] [--base COMMIT] [--only overhead|plan] [--out CSV]

overhead
    Whole-process wall time of ``python -m jaxmemprof run -q --interval 1000
    --max-overhead 0 -o TMP SCRIPT`` (no --plan) with this checkout's code
    against the same command with the code of ``--base`` (default: the commit
    before the plan's first, ``fda084b^``; its tree unpacked with ``git
    archive`` into a temporary directory and put first on PYTHONPATH, so
    nothing in the checkout changes). The workload is
    ``benchmarks/workloads/jit_probe_train.py`` at its ``tiny`` size (2
    layers of 8, batch 4: tens of microseconds a step, bound by Python
    dispatch, where a per-call cost would show), calibrated to train for
    about ``--seconds``. One untimed warm-up of each side, then K runs of
    each, alternating which goes first. Target: wall ratio <= 1.01; "unsure"
    when the base runs differ by more than 3 % (a 1 % effect cannot be seen).

plan
    The bundled MLP (``sample_runs/train_mlp.py --batch 32 --steps 3``)
    recorded with ``--plan`` and with ``--plan-device-memory 1GiB``: the
    compiles, their seconds (each, from plan.csv's ``compile_s``), and the
    run's wall time against the same run without --plan. Then the script run
    at every batch the plans compiled (one process, recorded without
    --plan): the plan's XLA call peak against the program's own, per batch
    (target: within 2 %).

Results: ``benchmarks/data/plan_results.csv`` (columns of ``_common.Results``)
and a summary on stdout. About 5 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, Results, git_state

WORKLOAD = REPO / "benchmarks" / "workloads" / "jit_probe_train.py"
MLP = REPO / "sample_runs" / "train_mlp.py"
TINY = ["--width", "8", "--depth", "2", "--batch", "4"]
TARGET = 1.01
NOISE_LIMIT = 0.03
ERROR_TARGET = 0.02


def env_with(pythonpath: str | None = None) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    for name in ("COLUMNS", "LINES", "NO_COLOR"):
        env.pop(name, None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    return env


def spawn(cmd, env, cwd, cpu: list | None = None) -> tuple[float, str, str]:
    """Wall seconds, stdout, stderr of ``cmd``; its CPU seconds (user and
    system, all threads) appended to ``cpu`` if given."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, text=True)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if code != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited with {code}:\n{stderr[-3000:]}")
    if cpu is not None:
        cpu.append(ru.ru_utime + ru.ru_stime)
    return wall, stdout, stderr


def unpack(commit: str, where: str) -> str:
    """The tree of ``commit`` in ``where`` (git archive: the checkout is not touched)."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", where], input=archive, check=True)
    return where


def bench_overhead(res: Results, args, work: str) -> None:
    base = unpack(args.base, tempfile.mkdtemp(prefix="base-", dir=work))
    sides = {"now": env_with(str(REPO)), "base": env_with(base)}
    res.say(f"\n== overhead without --plan: this checkout against {args.base} (median of {args.repeat}) ==")
    _, out, _ = spawn([sys.executable, str(WORKLOAD), *TINY, "--calibrate", str(args.seconds)], sides["now"], work)
    steps = json.loads(out.strip().splitlines()[-1])["steps"]
    walls = {s: [] for s in sides}
    cpus = {s: [] for s in sides}
    for i in range(args.repeat + 1):  # the first round is a warm-up
        for side in (list(sides) if i % 2 == 0 else list(sides)[::-1]):
            d = os.path.join(work, f"ovh-{side}")
            cpu: list = []
            wall, _, _ = spawn([sys.executable, "-m", "jaxmemprof", "run", "-q", "--force", "--interval", "1000",
                                "--max-overhead", "0", "-o", d, str(WORKLOAD), *TINY, "--steps", str(steps)],
                               sides[side], work, cpu)
            shutil.rmtree(d, ignore_errors=True)
            if i:
                walls[side].append(wall)
                cpus[side].append(cpu[0])
    now, base_w = statistics.median(walls["now"]), statistics.median(walls["base"])
    spread = max(walls["base"]) / min(walls["base"]) - 1
    ratio = now / base_w
    met = "unsure" if spread > NOISE_LIMIT and ratio > TARGET else ratio <= TARGET
    res.say(f"  {steps} steps: now {now:.3f} s, base {base_w:.3f} s: ratio {ratio:.4f} (base spread "
            f"{spread * 100:.1f}%)  target <= {TARGET}: {met if isinstance(met, str) else 'yes' if met else 'no'}")
    res.add("overhead", "run without --plan: wall, this checkout", now, "s", base_w, ratio, f"<= {TARGET}", met)
    res.add("overhead", "base runs' spread", spread * 100, "%")
    # CPU time (all threads) is less disturbed than wall time by other work on the machine.
    cpu_now, cpu_base = statistics.median(cpus["now"]), statistics.median(cpus["base"])
    cpu_spread = max(cpus["base"]) / min(cpus["base"]) - 1
    cpu_ratio = cpu_now / cpu_base
    cpu_met = "unsure" if cpu_spread > NOISE_LIMIT and cpu_ratio > TARGET else cpu_ratio <= TARGET
    res.say(f"  CPU: now {cpu_now:.3f} s, base {cpu_base:.3f} s: ratio {cpu_ratio:.4f} (base spread "
            f"{cpu_spread * 100:.1f}%)  target <= {TARGET}: "
            f"{cpu_met if isinstance(cpu_met, str) else 'yes' if cpu_met else 'no'}")
    res.add("overhead", "run without --plan: CPU, this checkout", cpu_now, "s", cpu_base, cpu_ratio, f"<= {TARGET}",
            cpu_met)


def _points(run_dir: str, env, work) -> list[dict]:
    _, out, _ = spawn([sys.executable, "-m", "jaxmemprof", "report", run_dir, "--json"], env, work)
    return json.loads(out)["plan"]["points"]


def bench_plan(res: Results, args, work: str) -> None:
    env = env_with(str(REPO))
    res.say("\n== run --plan on the bundled MLP (batch 32, 3 steps) ==")
    cases = {"without --plan": [], "--plan": ["--plan"], "--plan-device-memory 1GiB": ["--plan-device-memory", "1GiB"]}
    walls, points = {}, {}
    for case, options in cases.items():
        d = os.path.join(work, re.sub(r"\W+", "-", case).strip("-"))
        walls[case], _, _ = spawn([sys.executable, "-m", "jaxmemprof", "run", "-q", "--force", "-o", d, *options,
                                   str(MLP), "--batch", "32", "--steps", "3"], env, work)
        if options:
            points[case] = _points(d, env, work)
    for case, rows in points.items():
        compiled = [r for r in rows if r["compile_s"] > 0]
        seconds = [r["compile_s"] for r in compiled]
        res.say(f"  {case}: {len(compiled)} compiles, {sum(seconds):.2f} s ({min(seconds):.2f} to {max(seconds):.2f} "
                f"s each); the run {walls[case]:.1f} s against {walls['without --plan']:.1f} s without --plan")
        res.add("plan", f"{case}: compiles", len(compiled), "")
        res.add("plan", f"{case}: compile seconds", sum(seconds), "s")
        res.add("plan", f"{case}: run wall", walls[case], "s", walls["without --plan"],
                walls[case] / walls["without --plan"])
        for r in compiled:
            res.add("plan", f"{case}: compile of {r['variant']} at batch {r['batch']}", r["compile_s"], "s")
    batches = sorted({r["batch"] for rows in points.values() for r in rows if r["variant"] == "recorded"})
    code = textwrap.dedent(f"""
        import runpy, sys
        for b in {batches!r}:
            sys.argv = [{str(MLP)!r}, "--batch", str(b), "--steps", "1"]
            runpy.run_path({str(MLP)!r}, run_name="__main__")
    """)
    d = os.path.join(work, "actual")
    spawn([sys.executable, "-m", "jaxmemprof", "run", "-q", "--force", "-o", d, "-c", code], env, work)
    _, out, _ = spawn([sys.executable, "-m", "jaxmemprof", "report", d, "--json"], env, work)
    doc = json.loads(out)
    # Each run of the script jitted its own step: its batch is its signature's x.
    run_dir = Path(d)
    import sqlite3

    con = sqlite3.connect(run_dir / "journal.sqlite")
    batch_of = {}
    for fid, sig in con.execute("SELECT function_id, signature FROM jit_compiles"):
        m = re.search(r"float32\[(\d+),512\], float32\[\d+,10\]$", sig)
        if m:
            batch_of[fid] = int(m.group(1))
    con.close()
    real = {batch_of[r["function_id"]]: r["call_peak_bytes"] for r in doc["jit_memory"] if r["function_id"] in batch_of}
    worst = 0.0
    for case, rows in points.items():
        for r in rows:
            if r["variant"] != "recorded" or r["call_peak_bytes"] is None:
                continue
            err = (r["call_peak_bytes"] - real[r["batch"]]) / real[r["batch"]]
            worst = max(worst, abs(err))
            res.add("accuracy", f"{case}: batch {r['batch']}", r["call_peak_bytes"], "B", real[r["batch"]], 1 + err,
                    f"within {ERROR_TARGET:.0%}", abs(err) <= ERROR_TARGET)
    res.say(f"  plan against the script run at {len(real)} batches ({batches[0]} to {batches[-1]}): the largest "
            f"error {worst * 100:.3f}%  target <= {ERROR_TARGET:.0%}: {'yes' if worst <= ERROR_TARGET else 'no'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--base", default="fda084b^")
    ap.add_argument("--only", choices=["overhead", "plan"])
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "data" / "plan_results.csv"))
    args = ap.parse_args()
    res = Results()
    res.say(f"bench_plan: {git_state()}, {time.strftime('%Y-%m-%d %H:%M')}")
    work = tempfile.mkdtemp(prefix="bench-plan-")
    try:
        if args.only in (None, "overhead"):
            bench_overhead(res, args, work)
        if args.only in (None, "plan"):
            bench_plan(res, args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    import csv

    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(res.rows[0]) if res.rows else ["benchmark"])
        w.writeheader()
        w.writerows(res.rows)
    res.say(f"wrote {args.out}")


if __name__ == "__main__":
    main()

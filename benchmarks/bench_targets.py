"""What ``run --target`` costs a run, measured side by side.

    python benchmarks/bench_targets.py [--repeat K] [--steps N] [--out CSV]

The bundled MLP (sample_runs/train_mlp.py, batch 1024, N steps, default 100),
K times each (default 3), alternating which goes first: ``jaxmemprof run -q``
against ``jaxmemprof run -q --target v5e:2x2``, and against it ``--plan
--target v5e:2x2`` once (the largest batch on the slice, searched by
compiling). Reported: median wall and CPU time of each, the target's
compiles and their seconds (from the run's journal, as run's summary says
them); and that a run without --target pays nothing for the feature: what the
program has imported by its end (``libtpu``, which jax itself imports when it
is installed, and ``jax.experimental.topologies``, which only --target does)
is what it has under plain python. Results: ``benchmarks/data/targets.csv``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import Results, git_state
from bench_run_overhead import timed_run

HERE = Path(__file__).resolve().parent
MLP = HERE.parent / "sample_runs" / "train_mlp.py"
DEFAULT_OUT = HERE / "data" / "targets.csv"

# Run by `jaxmemprof run -c` after the MLP: what the process imported.
IMPORTED = ("import runpy, sys; sys.argv = [{mlp!r}, '--steps', '3']; runpy.run_path({mlp!r}, run_name='__main__'); "
            "print('IMPORTED', 'libtpu' in sys.modules, 'jax.experimental.topologies' in sys.modules)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args()
    from jaxmemprof import load_run
    from jaxmemprof.analysis.advice.targets import build_targets
    from jaxmemprof.analysis.attributed import attribute
    from jaxmemprof.analysis.options import Options

    env = dict(os.environ, JAX_PLATFORMS="cpu")
    res = Results()
    res.say(f"bench_targets: {git_state()}; the MLP, {args.steps} steps, {args.repeat} repeat(s)")
    modes = {"plain": [], "target": ["--target", "v5e:2x2"]}
    walls, cpus, compiled = {m: [] for m in modes}, {m: [] for m in modes}, []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.repeat):
            for mode in (list(modes) if k % 2 == 0 else list(modes)[::-1]):
                out = Path(tmp) / f"{mode}-{k}"
                wall, cpu = timed_run([sys.executable, "-m", "jaxmemprof", "run", "-q", *modes[mode], "-o", str(out),
                                       str(MLP), "--steps", str(args.steps)], env)
                walls[mode].append(wall)
                cpus[mode].append(cpu)
                if mode == "target":
                    t = build_targets(attribute(load_run(out), Options()))
                    compiled.append((t.compiles, t.compile_s))
        out = Path(tmp) / "plan"
        plan_wall, plan_cpu = timed_run([sys.executable, "-m", "jaxmemprof", "run", "-q", "--plan", "--target",
                                         "v5e:2x2", "-o", str(out), str(MLP), "--steps", str(args.steps)], env)
        t = build_targets(attribute(load_run(out), Options()))
        plan_row = t.rows.iloc[0]
        imported = {}
        for how, prefix in (("run", ["-m", "jaxmemprof", "run", "-q", "-o", str(Path(tmp) / "imp")]), ("python", [])):
            out = subprocess.run([sys.executable, *prefix, "-c", IMPORTED.format(mlp=str(MLP))], env=env,
                                 capture_output=True, text=True, check=True).stdout
            imported[how] = next(line for line in out.splitlines() if line.startswith("IMPORTED")).split()[1:]
    w_t, w_p = statistics.median(walls["target"]), statistics.median(walls["plain"])
    c_t, c_p = statistics.median(cpus["target"]), statistics.median(cpus["plain"])
    n, secs = sorted(compiled)[len(compiled) // 2]
    res.add("targets", "mlp wall with --target v5e:2x2", w_t, "s", w_p, w_t / w_p)
    res.add("targets", "mlp cpu with --target v5e:2x2", c_t, "s", c_p, c_t / c_p)
    res.add("targets", "mlp target compiles", n, "count")
    res.add("targets", "mlp target compile seconds", secs, "s", w_t, secs / w_t)
    res.add("targets", "mlp wall with --plan --target v5e:2x2", plan_wall, "s", w_p, plan_wall / w_p)
    res.add("targets", "mlp --plan --target compiles", t.compiles, "count")
    res.add("targets", "mlp --plan --target compile seconds", t.compile_s, "s")
    res.add("targets", "mlp largest batch on v5e:2x2", int(plan_row["largest_batch"]), "batch")
    res.add("targets", "without --target: libtpu, topologies imported under run", " ".join(imported["run"]), "bool",
            " ".join(imported["python"]), None, "as python", imported["run"] == imported["python"])
    res.say(f"the MLP: {w_t:.1f} s with --target v5e:2x2, {w_p:.1f} s without ({w_t / w_p:.3f}x; CPU {c_t:.1f} / "
            f"{c_p:.1f} s); {n} compiles, {secs:.2f} s; --plan --target {plan_wall:.1f} s, {t.compiles} compiles "
            f"{t.compile_s:.1f} s, largest batch {int(plan_row['largest_batch']):,}; without --target, libtpu and "
            f"the topologies module imported under run {imported['run']}, under python {imported['python']}")
    res.write(args.out)


if __name__ == "__main__":
    main()

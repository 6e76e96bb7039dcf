"""What ``run --xprof`` (a jax.profiler trace beside the run) costs, measured side by side.

    python benchmarks/bench_run_xprof.py [--steps N] [--repeat K] [--out CSV]

The bundled MLP (``sample_runs/train_mlp.py --steps N``, default 120) run
``jaxmemprof run -q`` and ``jaxmemprof run -q --xprof``, alternating which goes
first, K times (default 3). Reported: the median wall and CPU time (the child's
user + system) of each and their ratio; from the --xprof runs' manifests, how
long stopping JAX's trace took (``xprof.stop_s``: JAX collects and writes the
XPlane and the trace JSON then), and the size of what it wrote. On a machine
shared with other work the wall times say little; the CPU times still do.
Results: ``benchmarks/data/run_xprof.csv``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from _common import Results, git_state
from bench_run_overhead import timed_run

HERE = Path(__file__).resolve().parent
SCRIPT = HERE.parent / "sample_runs" / "train_mlp.py"
DEFAULT_OUT = HERE / "data" / "run_xprof.csv"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args()
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    res = Results()
    res.say(f"bench_run_xprof: {git_state()}; train_mlp.py --steps {args.steps}, {args.repeat} repeat(s)")
    walls: dict = {"plain": [], "xprof": []}
    cpus: dict = {"plain": [], "xprof": []}
    stops, sizes = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.repeat):
            for mode in (("plain", "xprof") if k % 2 == 0 else ("xprof", "plain")):
                out = Path(tmp) / f"{mode}-{k}"
                opts = ["--xprof"] if mode == "xprof" else []
                wall, cpu = timed_run([sys.executable, "-m", "jaxmemprof", "run", "-q", *opts, "-o", str(out),
                                       str(SCRIPT), "--steps", str(args.steps)], env)
                walls[mode].append(wall)
                cpus[mode].append(cpu)
                if mode == "xprof":
                    facts = json.loads((out / "manifest.json").read_text())["xprof"]
                    stops.append(float(facts["stop_s"]))
                    sizes.append(sum(f.stat().st_size for f in (out / "xprof").rglob("*") if f.is_file()))
    w_on, w_off = statistics.median(walls["xprof"]), statistics.median(walls["plain"])
    c_on, c_off = statistics.median(cpus["xprof"]), statistics.median(cpus["plain"])
    stop, size = statistics.median(stops), statistics.median(sizes)
    res.add("xprof", "wall", w_on, "s", w_off, w_on / w_off)
    res.add("xprof", "cpu", c_on, "s", c_off, c_on / c_off)
    res.add("xprof", "stop_trace", stop, "s")
    res.add("xprof", "written", size, "bytes")
    res.say(f"wall {w_on:.1f} s with --xprof, {w_off:.1f} s without ({w_on / w_off:.2f}x); CPU {c_on:.1f} / "
            f"{c_off:.1f} s ({c_on / c_off:.2f}x); stopping the trace {stop:.1f} s; {size / 2**20:.1f} MiB written")
    res.write(args.out)


if __name__ == "__main__":
    main()

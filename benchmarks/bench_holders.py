"""What the search for Python holders costs a run, measured side by side.

    python benchmarks/bench_holders.py [--seconds S] [--repeat K] [--out CSV]

For each workload, the same run twice, alternating which goes first, K times
(default 1): ``jaxmemprof run -q`` (holders searched: at each snapshot at a new
high within 1 % of the run's time, and at the end) against ``jaxmemprof run -q
--no-holders``. The workloads do a fixed number of steps, calibrated once under
plain python to take about S seconds (default 60):

- ``many_arrays.py --arrays 10000``: 10,000 small arrays alive from the start
  (a list), a step loop beside them;
- ``growing_arrays.py --arrays 10000``: a loss kept as an array every few
  steps until 10,000 are alive (a leak: every snapshot is a new high, the
  worst case for the search's schedule), beside 1,000 parameters in a dict.

Reported: median wall and CPU time (the child's user + system) of each, their
ratio (target: wall <= 1.05), and from the run directory the searches made,
their CPU seconds (``py_holder_searches.cost_s``), the arrays the largest one
searched for and the share of them it found. Results: ``benchmarks/data/holders.csv``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from _common import Results, git_state
from bench_run_overhead import calibrate, timed_run

HERE = Path(__file__).resolve().parent
WORKLOADS = HERE / "workloads"
DEFAULT_OUT = HERE / "data" / "holders.csv"
TARGET = 1.05
CASES = (("many_arrays", ["--arrays", "10000"]), ("growing_arrays", ["--arrays", "10000"]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args()
    from jaxmemprof import load_run

    env = dict(os.environ, JAX_PLATFORMS="cpu")
    res = Results()
    res.say(f"bench_holders: {git_state()}; {args.seconds:g} s workloads, {args.repeat} repeat(s)")
    for name, extra in CASES:
        script = WORKLOADS / f"{name}.py"
        steps = calibrate(script, args.seconds, extra, env)
        walls = {"holders": [], "no_holders": []}
        cpus = {"holders": [], "no_holders": []}
        searched = []
        with tempfile.TemporaryDirectory() as tmp:
            for k in range(args.repeat):
                order = ("holders", "no_holders") if k % 2 == 0 else ("no_holders", "holders")
                for mode in order:
                    out = Path(tmp) / f"{mode}-{k}"
                    opts = ["--no-holders"] if mode == "no_holders" else []
                    wall, cpu = timed_run([sys.executable, "-m", "jaxmemprof", "run", "-q", *opts, "-o", str(out),
                                           str(script), *extra, "--steps", str(steps)], env)
                    walls[mode].append(wall)
                    cpus[mode].append(cpu)
                    if mode == "holders":
                        s = load_run(out).py_holders["searches"]
                        most = s.loc[s["arrays"].idxmax()]  # the largest search: its share of arrays found
                        searched.append((len(s), float(s["cost_s"].sum()), int(most["arrays"]),
                                         float(most["found"] / max(1, most["arrays"]))))
        w_on, w_off = statistics.median(walls["holders"]), statistics.median(walls["no_holders"])
        c_on, c_off = statistics.median(cpus["holders"]), statistics.median(cpus["no_holders"])
        n, cost, most, share = searched[len(searched) // 2]
        ratio = w_on / w_off
        res.add("holders", f"{name} wall", w_on, "s", w_off, ratio, f"<= {TARGET}", ratio <= TARGET)
        res.add("holders", f"{name} cpu", c_on, "s", c_off, c_on / c_off)
        res.add("holders", f"{name} searches", n, "count")
        res.add("holders", f"{name} search cpu", cost, "s", w_on, cost / w_on)
        res.add("holders", f"{name} arrays searched (most)", most, "count")
        res.add("holders", f"{name} found in the largest search", share, "share")
        res.say(f"{name}: wall {w_on:.1f} s with holders, {w_off:.1f} s without ({ratio:.3f}x, target <= {TARGET}); "
                f"CPU {c_on:.1f} / {c_off:.1f} s; {n} searches, {cost:.2f} s CPU, up to {most} arrays, "
                f"{share:.0%} of them found")
    res.write(args.out)


if __name__ == "__main__":
    main()

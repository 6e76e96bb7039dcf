"""Donation advice on each library wrapper, applied, and what the probe costs there.

    python benchmarks/bench_wrappers.py [--widths 512,4096] [--repeat K] [--steps N] [--out CSV]

For each program of ``sample_runs/libraries/`` (flax.nnx.jit over an
nnx.Optimizer, a linen TrainState under jax.jit, equinox.filter_jit with
optax, jax.pmap over two CPU devices) and each ``--width``:

donation
    Record the program with ``jaxmemprof run``; take its "donate" finding's
    ``saving_bytes`` and the edited line its fix prints; put that line in a
    copy of the program and record again. Reported: the prediction against
    XLA's ``alias_bytes`` for the fixed program (times the devices: XLA's
    figures are per device), the drop of the call's peak (``argument + output -
    alias + temp + code``), and whether any donation finding is left (target:
    alias bytes equal the prediction, no finding left).

overhead
    Whole-process wall time of ``jaxmemprof run -q`` against plain ``python``
    on the same program with ``--steps`` steps, median of K runs of each,
    alternating which goes first, after one untimed warm-up of each: start-up,
    the sampler and the probe together (the probe's own per-call cost is
    measured by ``bench_jit_probe.py``).
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import Results, git_state

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PROGRAMS = REPO / "sample_runs" / "libraries"
DEFAULT_OUT = HERE / "data" / "wrappers_results.csv"
DEVICES = {"pmap_state.py": 2}
# equinox_optax.py passes the same x and y to every step: its advice is to pass them first, as one
# tuple, with donate="all-except-first" (tests/test_wrappers.py checks the advice's words).
RESTRUCTURED = {"equinox_optax.py": [
    ("@eqx.filter_jit\n", '@eqx.filter_jit(donate="all-except-first")\n'),
    ("def make_step(model, opt_state, x, y):", "def make_step(batch, model, opt_state):\n    x, y = batch"),
    ("make_step(model, opt_state, x, y)", "make_step((x, y), model, opt_state)"),
]}
COLUMNS = ("benchmark", "case", "value", "unit", "reference", "ratio", "target", "met")

sys.path.insert(0, str(REPO))
from jaxmemprof.analysis.advice.donation import jit_memory
from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.rules.donation import donation_findings
from jaxmemprof.store.reader import load_run


def env() -> dict:
    e = dict(os.environ, JAX_PLATFORMS="cpu")
    e.pop("NO_COLOR", None)
    return e


def timed(cmd: list[str], cwd: str) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env(), check=True, capture_output=True)
    return time.perf_counter() - t0


def record(script: Path, run_dir: Path, args: list[str]):
    subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", str(run_dir), str(script), *args],
                   cwd=script.parent, env=env(), check=True, capture_output=True)
    return attribute(load_run(run_dir))


def bench_donation(res: Results, program: str, width: int, work: Path) -> None:
    case = f"{program} --width {width}"
    script = work / program
    shutil.copy(PROGRAMS / program, script)
    args = ["--width", str(width)]
    before = record(script, work / "before", args)
    found = [f for f in donation_findings(before) if f.rule == "donate"]
    if len(found) != 1 or (":  " not in found[0].fix and program not in RESTRUCTURED):
        res.say(f"{case}: expected one donate finding with an edited line, got {[f.fix for f in found]}")
        res.add("donation", case, None, "", met=False)
        return
    f = found[0]
    if program in RESTRUCTURED:  # the advice moves arguments: done here as it says
        edited = RESTRUCTURED[program][0][1].strip()
        text = script.read_text()
        for old, new in RESTRUCTURED[program]:
            text = text.replace(old, new)
        script.write_text(text)
    else:
        edited = f.fix.split(":  ", 1)[1].split(" (that ", 1)[0].split("; ", 1)[0]
        line = int(f.site.rsplit(":", 1)[1])
        lines = script.read_text().splitlines()
        lines[line - 1] = edited
        script.write_text("\n".join(lines) + "\n")
    after = record(script, work / "after", args)
    left = [g.rule for g in donation_findings(after) if g.rule.startswith("donat")]
    mb, ma = (jit_memory(r).iloc[0] for r in (before, after))
    devices = DEVICES.get(program, 1)
    alias = int(ma["alias_bytes"]) * devices
    drop = (int(mb["call_peak_bytes"]) - int(ma["call_peak_bytes"])) * devices
    res.say(f"{case}: predicted {f.saving_bytes} B; XLA aliased {alias} B after `{edited.strip()}` "
            f"({alias / f.saving_bytes:.4f}x); call peak -{drop} B ({drop / f.saving_bytes:.2f}x); "
            f"findings left: {left or 'none'}")
    res.add("donation", f"{case}: aliased bytes", alias, "B", f.saving_bytes, alias / f.saving_bytes,
            "= prediction", alias == f.saving_bytes)
    res.add("donation", f"{case}: call peak drop", drop, "B", f.saving_bytes, drop / f.saving_bytes)
    res.add("donation", f"{case}: findings left", len(left), "", target="0", met=not left)
    shutil.rmtree(work / "before")
    shutil.rmtree(work / "after")


def bench_overhead(res: Results, program: str, repeat: int, steps: int, work: Path) -> None:
    script = PROGRAMS / program
    args = ["--steps", str(steps)]
    sides = {
        "python": lambda: [sys.executable, str(script), *args],
        "run": lambda: [sys.executable, "-m", "jaxmemprof", "run", "-q", "--force", "-o", str(work / "ovh"),
                        str(script), *args],
    }
    times = {s: [] for s in sides}
    for i in range(repeat + 1):
        for side in (list(sides) if i % 2 == 0 else list(sides)[::-1]):
            t = timed(sides[side](), str(work))
            if i:
                times[side].append(t)
    py, run = statistics.median(times["python"]), statistics.median(times["run"])
    spread = max(times["python"]) / min(times["python"]) - 1
    res.say(f"{program} --steps {steps}: python {py:.2f} s, run {run:.2f} s: {run / py:.3f}x "
            f"(plain runs spread {spread:.0%}; median of {repeat})")
    res.add("overhead", f"{program} --steps {steps}", run, "s", py, run / py)
    shutil.rmtree(work / "ovh", ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--widths", default="512,4096", help="hidden widths for donation (default 512,4096)")
    ap.add_argument("--repeat", type=int, default=5, metavar="K", help="runs of each side for overhead (default 5)")
    ap.add_argument("--steps", type=int, default=300, help="steps of each overhead run (default 300)")
    ap.add_argument("--only", choices=("donation", "overhead"), default=None)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="CSV file (default benchmarks/data/...)")
    args = ap.parse_args(argv)
    res = Results()
    res.say(f"jaxmemprof at {git_state()}")
    programs = sorted(p.name for p in PROGRAMS.glob("*.py"))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.only in (None, "donation"):
            res.say("\n== donation: the advice, applied as printed ==")
            for program in programs:
                for width in (int(w) for w in args.widths.split(",")):
                    bench_donation(res, program, width, work)
        if args.only in (None, "overhead"):
            res.say(f"\n== overhead: jaxmemprof run -q against python (whole process, median of {args.repeat}) ==")
            for program in programs:
                bench_overhead(res, program, args.repeat, args.steps, work)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(res.rows)
    res.say(f"\nresults: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

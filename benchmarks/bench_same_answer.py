"""Same program, same answer: how many of N recordings of one program agree.

    python benchmarks/bench_same_answer.py [--runs 20] [--interval 0.01] [--max-overhead 0.2]
                                           [--load K] [--out CSV]

Each program named below (the bundled MLP, sample_runs/train_mlp.py; of
``sample_runs/libraries/``, an nnx.jit step over an nnx.Optimizer and an
equinox.filter_jit step with optax) is recorded ``--runs`` times with
``jaxmemprof run`` at a fast interval (the sampler busy around every call:
where its list of live arrays once made a sampled call's inputs look held),
with ``--load K`` busy processes beside it (one per core: a loaded machine,
where one array was once exported as two). For each recording: its findings
(rule, site, saving), XLA's figures per jitted function (``jit_memory``), the
estimated true peak per device, the roles (role, bytes per device), the
report's line count at 100 columns, and the exports' row counts (arrays.csv,
roles.csv, owners.csv, findings.csv). Reported: the number of distinct answers
(target: 1) and how many recordings gave the most common one (target: all).
"""

from __future__ import annotations

import argparse
import collections
import csv
import sys
import tempfile
from pathlib import Path

from _common import REPO, Results, git_state

PROGRAMS = (("train_mlp.py", "sample_runs/train_mlp.py"), ("nnx_optimizer.py", "sample_runs/libraries/nnx_optimizer.py"),
            ("equinox_optax.py", "sample_runs/libraries/equinox_optax.py"))


def answer(run_dir: Path):
    sys.path.insert(0, str(REPO))
    from jaxmemprof.analysis.advice.donation import jit_memory
    from jaxmemprof.analysis.attributed import attribute
    from jaxmemprof.analysis.report import build_report
    from jaxmemprof.store.reader import load_run

    from jaxmemprof.render.tables import export_tables

    ar = attribute(load_run(run_dir))
    rep = build_report(ar)
    findings = tuple(sorted((f.rule, f.site, f.saving_bytes) for f in rep.findings if f.rule != "fit"))
    jm = jit_memory(ar)
    figures = tuple(map(tuple, jm[sorted(c for c in jm.columns if c.endswith("_bytes"))].values.tolist()))
    roles = tuple(sorted(zip(rep.roles.by_role["device"], rep.roles.by_role["role"], rep.roles.by_role["bytes"])))
    tables = export_tables(rep)
    rows = tuple((name, len(tables[name])) for name in ("arrays.csv", "roles.csv", "owners.csv", "findings.csv"))
    return findings, figures, rep.headline.true_peak_bytes, roles, rows, _lines(run_dir)


def _lines(run_dir: Path) -> int:
    """The default report's line count at 100 columns."""
    import subprocess

    out = subprocess.run([sys.executable, "-m", "jaxmemprof", "report", str(run_dir)], capture_output=True, text=True,
                         cwd=REPO, env={**__import__("os").environ, "COLUMNS": "100"}).stdout
    return len(out.rstrip("\n").split("\n"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--interval", default="0.01")
    ap.add_argument("--max-overhead", default="0.2")
    ap.add_argument("--load", type=int, default=0, metavar="K", help="busy processes beside the runs (default 0)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    import subprocess

    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    try:
        return _measure(args)
    finally:
        for p in busy:
            p.kill()


def _measure(args) -> int:
    import subprocess

    res = Results()
    res.say(f"# bench_same_answer at {git_state()}: {args.runs} runs each, --interval {args.interval} "
            f"--max-overhead {args.max_overhead}, {args.load} busy processes beside")
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in PROGRAMS:
            script = REPO / path
            counts: collections.Counter = collections.Counter()
            for i in range(args.runs):
                out = Path(tmp) / f"{name}-{i}"
                proc = subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "-q", "--interval", args.interval,
                                       "--max-overhead", args.max_overhead, "-o", str(out), str(script)],
                                      cwd=REPO, capture_output=True, text=True, env={**__import__("os").environ,
                                                                                     "JAX_PLATFORMS": "cpu"})
                if proc.returncode != 0:
                    res.say(f"{name}: run {i} failed: {proc.stderr[-500:]}")
                    return 1
                counts[answer(out)] += 1
            most = counts.most_common(1)[0][1]
            res.say(f"{name}: {len(counts)} distinct answer(s); {most} of {args.runs} agree")
            for a, n in counts.most_common():
                res.say(f"  {n} x findings {a[0]}, true peak per device {a[2]}, report {a[5]} lines, rows {a[4]}")
            res.add("same_answer", f"{name} distinct answers", len(counts), "answers", target="1",
                    met=len(counts) == 1)
            res.add("same_answer", f"{name} runs agreeing", most, "runs", reference=args.runs,
                    ratio=most / args.runs, target="all", met=most == args.runs)
    if args.out:
        with open(args.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(res.rows[0]))
            w.writeheader()
            w.writerows(res.rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where one ``show`` (and one ``diff``) spends its time, inside one process.

    python benchmarks/breakdown.py [--repeat K] [--cprofile]

Times each stage with manual timers (wall and process CPU time), in the order
the CLI runs them: the imports (in this fresh process, so they are what a
command pays; pandas and numpy are not among them, and the script checks that
``show`` and ``diff`` never import them), reading and gunzipping the file,
the scan of the samples' raw bytes, protobuf parsing of the rest,
``_convert`` (each distinct stack and (values, labels) part decoded once),
site attribution, grouping
(``summarize`` / ``diff``), ``top``, and rendering the terminal table (as the
command does off a terminal, without rich; and, for ``show``, with rich) and
the CSV (to /dev/null). The "first" column is the first run in the process (what
one CLI call pays); the "median" column is the median of the next K runs
(warm caches; the per-profile sums are cached, so later runs redo them on a
fresh Profile). Uses benchmarks/data/ (run make_profiles.py or
bench_show_diff.py first).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"

_t = time.perf_counter
_c = time.process_time


def timed_imports() -> list[tuple[str, float, float]]:
    out = []
    for label, stmt in [
        ("import jaxmemprof.cli (click)", "import jaxmemprof.cli"),
        ("import protobuf + profile_pb2", "import jaxmemprof.pprof.profile_pb2"),
        ("import reader, sites, groups", "import jaxmemprof.pprof.reader, jaxmemprof.analysis.groups"),
        ("import render.plain", "import jaxmemprof.render.plain"),
        ("import rich + render.text (tty)", "import jaxmemprof.render.text"),
        ("import render.csv, results", "import jaxmemprof.render.csv, jaxmemprof.render.results"),
    ]:
        t0, c0 = _t(), _c()
        exec(stmt, {})
        out.append((label, _t() - t0, _c() - c0))
    return out


class Steps:
    def __init__(self):
        self.st: list[tuple[str, float, float]] = []

    def __call__(self, label, fn):
        t0, c0 = _t(), _c()
        v = fn()
        self.st.append((label, _t() - t0, _c() - c0))
        return v


def load_stages(step: Steps, path: Path, tag: str = ""):
    from jaxmemprof.pprof import profile_pb2, reader

    name, raw = step(f"read + gunzip{tag}", lambda: reader.read_profile_bytes(path))
    raw = bytes(raw)
    first, end, keys = step(f"scan samples' bytes{tag}", lambda: reader._scan_raw(raw))
    msg = step(f"protobuf parse (the rest){tag}", lambda: profile_pb2.Profile.FromString(raw[:first] + raw[end:]))
    return step(f"_convert{tag}", lambda: reader._convert(msg, name, None, keys))


def show_stages(path: Path, devnull) -> list[tuple[str, float, float]]:
    from jaxmemprof.analysis import groups, sites
    from jaxmemprof.render import plain, text
    from jaxmemprof.render.csv import write_csv
    from jaxmemprof.render.results import plain_table

    step = Steps()
    prof = load_stages(step, path)
    attr = sites.Attribution()
    step("  stack_classes (attribution)", lambda: sites.stack_classes(prof, attr, "site"))
    summary = step("summarize (all of it)", lambda: groups.summarize(prof, "site", attr))
    shown = step("top 20", lambda: groups.top(summary, 20))
    step("render text (20 rows, no rich)", lambda: devnull.write(
        "\n".join(plain.breakdown_lines(shown, title="t", value_type=prof.value_type)) + "\n"))
    step("  render text (20 rows, rich)", lambda: text.render_breakdown(shown, text.console(devnull), title="t",
                                                                     value_type=prof.value_type))
    step("render CSV (all rows)", lambda: write_csv(plain_table(summary), devnull))
    return step.st


def diff_stages(base: Path, new: Path, devnull) -> list[tuple[str, float, float]]:
    from jaxmemprof.analysis import groups, sites
    from jaxmemprof.render import plain

    step = Steps()
    a = load_stages(step, base, " (base)")
    b = load_stages(step, new, " (new)")
    attr = sites.Attribution()
    d = step("diff", lambda: groups.diff(a, b, "site", attr))
    shown = step("top 20", lambda: groups.top(d, 20))
    step("render text (20 rows, no rich)", lambda: devnull.write(
        "\n".join(plain.diff_lines(shown, title="t", value_type=b.value_type)) + "\n"))
    return step.st


def report(title: str, runs: list[list[tuple[str, float, float]]]) -> None:
    print(f"\n{title}")
    first = runs[0]
    rest = runs[1:]
    print(f"  {'stage':36} {'first':>9} {'cpu':>9} {'median':>9} {'cpu':>9}")
    for i, (label, t, c) in enumerate(first):
        med = statistics.median(r[i][1] for r in rest) if rest else float("nan")
        medc = statistics.median(r[i][2] for r in rest) if rest else float("nan")
        print(f"  {label:36} {t * 1000:7.1f}ms {c * 1000:7.1f}ms {med * 1000:7.1f}ms {medc * 1000:7.1f}ms")
    top_level = [i for i, (label, _, _) in enumerate(first) if not label.startswith("  ")]

    def total(r, k):
        return sum(r[i][k] for i in top_level)

    med = statistics.median(total(r, 1) for r in rest) * 1000 if rest else float("nan")
    medc = statistics.median(total(r, 2) for r in rest) * 1000 if rest else float("nan")
    print(f"  {'total (top-level stages)':36} {total(first, 1) * 1000:7.1f}ms {total(first, 2) * 1000:7.1f}ms "
          f"{med:7.1f}ms {medc:7.1f}ms")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, metavar="K")
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--cprofile", action="store_true", help="also print cProfile's top functions for one show")
    args = ap.parse_args(argv)
    base, new = args.data / "big_base.prof", args.data / "big_new.prof"
    if not new.exists():
        sys.exit(f"{new} is missing: run python benchmarks/make_profiles.py {args.data}")
    os.chdir(args.data)

    t0, c0 = _t(), _c()
    imports = timed_imports()
    total_t, total_c = _t() - t0, _c() - c0
    print("imports (fresh process, in this order; wall, cpu):")
    for label, t, c in imports:
        print(f"  {label:36} {t * 1000:7.1f}ms {c * 1000:7.1f}ms")
    print(f"  {'all imports':36} {total_t * 1000:7.1f}ms {total_c * 1000:7.1f}ms")

    with open(os.devnull, "w") as devnull:
        report(f"show {new.name} (by site)", [show_stages(new, devnull) for _ in range(1 + args.repeat)])
        report(f"diff {base.name} {new.name} (by site)",
               [diff_stages(base, new, devnull) for _ in range(1 + args.repeat)])
        print(f"\npandas imported: {'pandas' in sys.modules}, numpy: {'numpy' in sys.modules}, "
              f"jax: {'jax' in sys.modules}")

        if args.cprofile:
            import cProfile
            import pstats

            from jaxmemprof.cli import main as cli_main

            pr = cProfile.Profile()
            real_stdout = sys.stdout
            sys.stdout = devnull
            try:
                pr.runcall(lambda: _quiet_main(cli_main, ["show", str(new)]))
            finally:
                sys.stdout = real_stdout
            print("\ncProfile of `show` (in-process; imports already done), top 30 by cumulative time:")
            pstats.Stats(pr).sort_stats("cumulative").print_stats(30)
            print("top 20 by own time:")
            pstats.Stats(pr).sort_stats("tottime").print_stats(20)
    return 0


def _quiet_main(cli_main, argv):
    try:
        cli_main(argv)
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise


if __name__ == "__main__":
    sys.exit(main())

"""Where one ``show`` (and one ``diff``) spends its time, inside one process.

    python benchmarks/breakdown.py [--repeat K] [--cprofile]

Times each stage with manual timers, in the order the CLI runs them: the
imports (in a fresh process, so they are what a command pays), reading the
file, gunzip, protobuf parsing, conversion to frames (``_convert``),
grouping (``summarize`` / ``diff``, with site attribution inside),
``top``, and rendering the terminal table and the CSV (to /dev/null). The
"first" column is the first run in the process (what one CLI call pays); the
"median" column is the median of the next K runs (warm caches). Uses
benchmarks/data/ (run make_profiles.py or bench_show_diff.py first).
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


def timed_imports() -> list[tuple[str, float]]:
    out = []
    for label, stmt in [
        ("import jaxmemprof.cli (click)", "import jaxmemprof.cli"),
        ("import numpy", "import numpy"),
        ("import pandas", "import pandas"),
        ("import protobuf + profile_pb2", "import jaxmemprof.pprof.profile_pb2"),
        ("import reader, sites, groups", "import jaxmemprof.pprof.reader, jaxmemprof.analysis.groups"),
        ("import rich + render.text", "import jaxmemprof.render.text"),
        ("import render.csv, results", "import jaxmemprof.render.csv, jaxmemprof.render.results"),
    ]:
        t0 = _t()
        exec(stmt, {})
        out.append((label, _t() - t0))
    return out


def show_stages(path: Path, devnull) -> list[tuple[str, float]]:
    from jaxmemprof.analysis import groups, sites
    from jaxmemprof.pprof import profile_pb2, reader
    from jaxmemprof.render import text
    from jaxmemprof.render.csv import write_csv
    from jaxmemprof.render.results import table

    st = []

    def step(label, fn):
        t0 = _t()
        v = fn()
        st.append((label, _t() - t0))
        return v

    raw = step("read file", path.read_bytes)
    pb = step("gunzip", lambda: reader._gunzip(raw, str(path), reader.DEFAULT_MAX_DECOMPRESSED))
    msg = step("protobuf parse", lambda: profile_pb2.Profile.FromString(pb))
    prof = step("_convert", lambda: reader._convert(msg, str(path), None))
    attr = sites.Attribution(cwd=os.getcwd())
    # The parts of summarize, then summarize itself (which redoes them).
    step("  frame_labels", lambda: sites.frame_labels(prof, attr))
    step("  stack_sites", lambda: sites.stack_sites(prof, attr))
    step("  keyed_samples", lambda: groups.keyed_samples(prof, "site", attr))
    summary = step("summarize (all of it)", lambda: groups.summarize(prof, "site", attr))
    shown = step("top 20", lambda: groups.top(summary, 20))
    step("render text (20 rows)", lambda: text.render_summary(shown, text.console(devnull), title="t",
                                                             value_type=prof.value_type))
    step("render CSV (all rows)", lambda: write_csv(table(summary), devnull))
    return st


def diff_stages(base: Path, new: Path, devnull) -> list[tuple[str, float]]:
    from jaxmemprof.analysis import groups, sites
    from jaxmemprof.pprof import reader
    from jaxmemprof.render import text

    st = []

    def step(label, fn):
        t0 = _t()
        v = fn()
        st.append((label, _t() - t0))
        return v

    a = step("load_profile base", lambda: reader.load_profile(base))
    b = step("load_profile new", lambda: reader.load_profile(new))
    attr = sites.Attribution(cwd=os.getcwd())
    d = step("diff", lambda: groups.diff(a, b, "site", attr))
    shown = step("top 20", lambda: groups.top(d, 20))
    step("render text (20 rows)", lambda: text.render_diff(shown, text.console(devnull), title="t",
                                                          value_type=b.value_type))
    return st


def report(title: str, runs: list[list[tuple[str, float]]]) -> None:
    print(f"\n{title}")
    first = runs[0]
    rest = runs[1:]
    print(f"  {'stage':32} {'first':>9} {'median':>9}")
    for i, (label, t) in enumerate(first):
        med = statistics.median(r[i][1] for r in rest) if rest else float("nan")
        print(f"  {label:32} {t * 1000:7.1f}ms {med * 1000:7.1f}ms")
    top_level = [i for i, (label, _) in enumerate(first) if not label.startswith("  ")]
    print(f"  {'total (top-level stages)':32} {sum(first[i][1] for i in top_level) * 1000:7.1f}ms "
          f"{statistics.median(sum(r[i][1] for i in top_level) for r in rest) * 1000 if rest else float('nan'):7.1f}ms")


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

    t0 = _t()
    imports = timed_imports()
    total_imports = _t() - t0
    print("imports (fresh process, in this order):")
    for label, t in imports:
        print(f"  {label:32} {t * 1000:7.1f}ms")
    print(f"  {'all imports':32} {total_imports * 1000:7.1f}ms")
    print(f"  jax imported: {'jax' in sys.modules}")

    with open(os.devnull, "w") as devnull:
        report(f"show {new.name} (by site)", [show_stages(new, devnull) for _ in range(1 + args.repeat)])
        report(f"diff {base.name} {new.name} (by site)",
               [diff_stages(base, new, devnull) for _ in range(1 + args.repeat)])

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

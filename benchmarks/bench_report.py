"""``jaxmemprof report`` and ``export --csv`` at scale, on real recorded runs.

    python benchmarks/bench_report.py [--rev REV] [--full] [--repeat K] [--rerecord] [--out CSV]

1. Records runs of ``benchmarks/workloads/report_churn.py`` (N live small
   arrays made at 240 lines, 10% replaced every step, a slow leak, a jitted
   step, exactly S snapshots taken with ``jaxmemprof.snapshot()``) with
   ``jaxmemprof run -q --interval 100000 --max-overhead 0``, for S x N =
   100 x 1,000, 1,000 x 1,000, 100 x 10,000, 500 x 10,000 and
   1,000 x 10,000 (``--full`` adds 2,000 x 10,000). Runs are cached in
   ``benchmarks/data/report_runs/`` (git-ignored) with a ``meta.json``
   (recording wall time, peak RSS, the run directory's size); a run is
   recorded again only when missing, when the workload changed, or with
   ``--rerecord``. ``--rev REV`` benchmarks jaxmemprof as committed at REV
   (``git archive``), not the working tree; its runs are reused while the
   capture code (capture/, store/, api.py) is the same.
2. Times ``python -m jaxmemprof report RUN`` (stdout to /dev/null) and
   ``python -m jaxmemprof export RUN --csv TMP --force`` as whole processes,
   K times each (default 3), alternating: median and minimum wall time, CPU
   time, and peak RSS, read with ``resource.getrusage(RUSAGE_CHILDREN)`` in a
   small launcher process (so this process's memory does not count). Before
   each run it waits up to ``--settle`` seconds for the machine to go quiet,
   and it records how many cores other processes kept busy meanwhile (from
   /proc/stat): on a shared machine, read the CPU times beside the wall times.
   ``--json`` also times ``report --json``.
3. For the largest run, an in-process breakdown in a fresh process: imports,
   ``load_run``, ``timeline``, the peak profile (load + ``summarize``),
   ``array_lifetimes``, ``site_lifetimes``, ``reuse``, ``leaks``,
   ``recompiles``, findings, the terminal rendering, the CSV tables, and
   ``build_report`` whole for comparison; wall and CPU time, and the peak
   RSS so far, after each; then details (the read of the arrays and their
   ends inside ``load_run``, the buffers and their holders that
   ``array_lifetimes`` and ``reuse`` share, the per-site series,
   ``arrays.csv``, and the summary ``jaxmemprof run`` prints when not
   ``-q``).
4. Growth ratios: time at 1,000 over 500 snapshots (10,000 arrays), at
   10,000 over 1,000 arrays and at 1,000 over 100 snapshots, with the
   equivalent per-doubling factor 2**(log(ratio)/log(factor)).

Targets: ``report`` on 1,000 x 10,000 at most 6 s and 1.5 GiB peak RSS;
doubling the data at most doubles the time, +5% (per-doubling factor
<= 2.10). Results: ``benchmarks/data/report_results.csv`` (columns
``benchmark, case, snapshots, arrays, value, unit, target, met``) and a
summary on stdout. On 2 idle cores about 8 minutes the first time (4 of them
recording), about 5 with the runs cached; ``--sizes 100x1000,200x1000``
for a quick try.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import hashlib
import json
import math
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import git_state

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATA = HERE / "data"
RUNS = DATA / "report_runs"
WORKLOAD = HERE / "workloads" / "report_churn.py"
SITES_MODULE = DATA / "_report_sites.py"
DEFAULT_OUT = DATA / "report_results.csv"

SIZES = [(100, 1_000), (1_000, 1_000), (100, 10_000), (500, 10_000), (1_000, 10_000)]
FULL_SIZES = [(2_000, 10_000)]
TARGET_SIZE = (1_000, 10_000)
TARGET_S = 6.0
TARGET_RSS_MIB = 1536.0
DOUBLING_TARGET = 2.0 * 1.05

# Runs one command, stdout to /dev/null, and prints its wall time, peak RSS
# (KiB) and CPU time (user + system) and exit status. getrusage(RUSAGE_CHILDREN)
# covers the children this small process waited for: the command alone.
_LAUNCHER = r"""
import os, resource, subprocess, sys, time
t0 = time.perf_counter()
p = subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(wall, ru.ru_maxrss, ru.ru_utime + ru.ru_stime, p.returncode)
"""

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def busy_cpu_s() -> float | None:
    """CPU seconds the whole machine has been busy (all cores), from
    /proc/stat; None where there is none."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()[1:]
    except OSError:
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / _TICK


def settle(max_wait: float, threshold: float = 0.25, probe: float = 0.5) -> float:
    """Wait (at most ``max_wait`` seconds) until other processes use less than
    ``threshold`` of a core over ``probe`` seconds; returns the last reading
    (cores busy), NaN where it cannot be read. The machine may be shared with
    other work: a timing next to a busy process is slower."""
    deadline = time.monotonic() + max_wait
    while True:
        b0 = busy_cpu_s()
        time.sleep(probe)
        b1 = busy_cpu_s()
        if b0 is None or b1 is None:
            return float("nan")
        load = (b1 - b0) / probe
        if load < threshold or time.monotonic() >= deadline:
            return load
        time.sleep(1.0)


def launch(cmd: list[str], env: dict, cwd: Path) -> dict:
    """One run of ``cmd``: ``wall`` s, ``rss`` (peak RSS, KiB), ``cpu`` s
    (user + system) and ``others`` (cores the rest of the machine kept busy
    meanwhile, on average; NaN when unknown). Raises if it fails."""
    b0 = busy_cpu_s()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.run([sys.executable, "-S", "-I", "-c", _LAUNCHER, *cmd], cwd=cwd, env=env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, text=True)
        out = proc.stdout.split()
        if proc.returncode != 0 or len(out) != 4 or int(out[3]) != 0:
            err.seek(0)
            tail = err.read()[-3000:].decode("utf-8", "replace")
            raise RuntimeError(f"{' '.join(cmd)} failed ({out[3] if len(out) == 4 else proc.returncode}):\n{tail}")
    b1 = busy_cpu_s()
    wall, rss, cpu = float(out[0]), int(out[1]), float(out[2])
    others = max(0.0, (b1 - b0 - cpu) / wall) if b0 is not None and b1 is not None and wall > 0 else float("nan")
    return {"wall": wall, "rss": rss, "cpu": cpu, "others": others}


def jaxmemprof_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "jaxmemprof", *args]


# -- recording ---------------------------------------------------------------------


def workload_digest() -> str:
    return hashlib.sha256(WORKLOAD.read_bytes()).hexdigest()[:16]


def run_dir(s: int, n: int) -> Path:
    return RUNS / f"s{s}_n{n}"


def dir_bytes(path: Path) -> tuple[int, int]:
    total = files = 0
    for p in path.rglob("*"):
        if p.is_file():
            total += p.stat().st_size
            files += 1
    return total, files


def journal_counts(run: Path) -> dict:
    con = sqlite3.connect(f"{(run / 'journal.sqlite').resolve().as_uri()}?mode=ro", uri=True)
    try:

        def q(sql):
            return con.execute(sql).fetchone()[0]

        return {
            "snapshots": q("SELECT count(*) FROM snapshots"),
            "array_rows": q("SELECT count(*) FROM arrays"),
            "stacks": q("SELECT count(*) FROM stacks"),
            "markers": q("SELECT count(*) FROM markers"),
            "sampling_cpu_s": q("SELECT coalesce(sum(cost_s), 0) FROM snapshots"),
            "sampling_wall_s": q("SELECT coalesce(sum(wall_s), 0) FROM snapshots"),
            "snapshot_files": q("SELECT count(DISTINCT file) FROM snapshots"),
        }
    finally:
        con.close()


def ensure_run(s: int, n: int, code: Code, rerecord: bool) -> dict:
    """The cached run of S x N, recorded first when needed; its meta.json."""
    d = run_dir(s, n)
    meta_path = d / "meta.json"
    digest = workload_digest()
    if not rerecord and meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text())
            if (meta.get("workload_sha") == digest and meta.get("recorded_with") == code.record_label
                    and (d / "run" / "manifest.json").is_file()):
                meta["cached"] = True
                return meta
        except (ValueError, OSError):
            pass
        print(f"  {d.name}: the workload or the jaxmemprof code changed (or the cache is damaged); "
              "recording again", file=sys.stderr)
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    cmd = jaxmemprof_cmd("run", "-q", "-o", str(d / "run"), "--interval", "100000", "--max-overhead", "0",
                         str(WORKLOAD), "--arrays", str(n), "--snapshots", str(s),
                         "--sites-module", str(SITES_MODULE))
    print(f"  recording {s} snapshots x {n} arrays ...", file=sys.stderr, flush=True)
    r = launch(cmd, code.env, code.cwd)
    wall, rss, cpu = r["wall"], r["rss"], r["cpu"]
    size, files = dir_bytes(d / "run")
    meta = {
        "snapshots_asked": s, "arrays_asked": n, "workload_sha": digest, "recorded_with": code.record_label,
        "jaxmemprof": code.label,
        "record_wall_s": wall, "record_cpu_s": cpu, "record_max_rss_kib": rss,
        "record_others_cores": r["others"],
        "run_bytes": size, "run_files": files,
        "journal_bytes": (d / "run" / "journal.sqlite").stat().st_size,
        "recorded": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": " ".join(cmd), **journal_counts(d / "run"),
    }
    if meta["snapshots"] != s:
        print(f"  warning: {d.name} has {meta['snapshots']} snapshots, not {s}", file=sys.stderr)
    meta_path.write_text(json.dumps(meta, indent=1) + "\n")
    print(f"  recorded in {wall:.1f} s: {meta['snapshots']} snapshots, {meta['array_rows']:,} array records, "
          f"{size / 2**20:.1f} MiB (sampling {meta['sampling_cpu_s']:.1f} s CPU)", file=sys.stderr)
    meta["cached"] = False
    return meta


# -- timing whole processes ----------------------------------------------------------


def time_commands(s: int, n: int, code: Code, repeat: int, with_json: bool, max_wait: float) -> dict:
    run = str(run_dir(s, n) / "run")
    with tempfile.TemporaryDirectory(prefix="bench_report_") as tmp:
        cmds = {
            "report": jaxmemprof_cmd("report", run),
            "export": jaxmemprof_cmd("export", run, "--csv", os.path.join(tmp, "csv"), "--force"),
        }
        if with_json:
            cmds["report_json"] = jaxmemprof_cmd("report", run, "--json")
        res = {k: {"wall": [], "cpu": [], "others": [], "rss": 0} for k in cmds}
        for r in range(repeat):
            names = list(cmds) if r % 2 == 0 else list(reversed(cmds))
            for name in names:
                settle(max_wait)
                m = launch(cmds[name], code.env, code.cwd)
                for k in ("wall", "cpu", "others"):
                    res[name][k].append(m[k])
                res[name]["rss"] = max(res[name]["rss"], m["rss"])
        for name, v in res.items():
            print(f"  {name:11} median {statistics.median(v['wall']):7.2f} s  (runs: "
                  f"{', '.join(f'{w:.2f}' for w in v['wall'])}; CPU {statistics.median(v['cpu']):.2f} s)  "
                  f"peak RSS {v['rss'] / 1024:.0f} MiB  other load {max(v['others']):.2f} cores",
                  file=sys.stderr, flush=True)
    return res


# -- in-process breakdown (run in a fresh process: --breakdown-child RUN) ------------------


def breakdown_child(run_path: str, top: int = 10) -> None:
    import resource

    stages = []
    t_start = time.perf_counter()

    def rss_mib():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    def stage(name, fn, part_of=""):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        stages.append({"stage": name, "s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
                       "peak_rss_mib": rss_mib(), "part_of": part_of})
        return out

    def imports():
        # imported for their cost, the thing timed (hence noqa F401)
        import pandas  # noqa: F401

        import jaxmemprof.analysis.report
        import jaxmemprof.render.report
        import jaxmemprof.render.tables
        import jaxmemprof.store.reader  # noqa: F401

    stage("imports", imports)
    from jaxmemprof.analysis.attributed import attribute
    from jaxmemprof.analysis.findings import ranked
    from jaxmemprof.analysis.groups import summarize, top as top_rows
    from jaxmemprof.analysis.leaks import leaks, recompiles
    from jaxmemprof.analysis.rules.leaks import leak_findings
    from jaxmemprof.analysis.lifetimes import site_lifetimes
    from jaxmemprof.analysis.options import Options
    from jaxmemprof.analysis.report import build_report
    from jaxmemprof.analysis.reuse import reuse
    from jaxmemprof.analysis.timeline import timeline
    from jaxmemprof.render import text
    from jaxmemprof.render.csv import write_csv
    from jaxmemprof.render.report import render_report
    from jaxmemprof.render.tables import export_tables
    from jaxmemprof.store.reader import load_run

    run = stage("load_run", lambda: load_run(run_path))
    # As `jaxmemprof report` does it: the run attributed once (analysis/attributed.py).
    options = Options(top_sites=top)
    ar = attribute(run, options)
    att = ar.attribution
    tl = stage("timeline", lambda: timeline(ar))
    prof = stage("peak_profile_load", lambda: run.profile(tl.peak_snapshot))
    stage("peak_profile_summarize", lambda: top_rows(summarize(prof, "site", att), top))
    stage("shards_and_holders", lambda: (ar.shards, ar.holders))
    stage("array_lifetimes", lambda: ar.arrays)
    stage("site_lifetimes", lambda: site_lifetimes(ar))
    stage("reuse", lambda: reuse(ar))
    leak_rows = stage("leaks", lambda: leaks(ar))
    rec_rows = stage("recompiles", lambda: recompiles(ar))
    stage("findings", lambda: ranked(leak_findings(leak_rows, rec_rows)))

    def advice():
        # The advice rules, as build_report calls them (jaxmemprof versions
        # that have them).
        import pandas as pd

        from jaxmemprof.analysis.rules.allocator import allocator_findings
        from jaxmemprof.analysis.advice.donation import estimated_true_peak, jit_memory
        from jaxmemprof.analysis.rules.donation import donation_findings

        jit_memory(ar)
        inside, _ = estimated_true_peak(run)
        true_peak = max(int(tl.peak_bytes), inside) if inside is not None else None
        donation_findings(ar)
        device_peak = None
        if true_peak is not None:
            per_device = (tl.devices.groupby("device")["live_bytes"].max() if not tl.devices.empty
                          else pd.Series(dtype=float))
            busiest = int(per_device.max()) if len(per_device) else int(tl.peak_bytes)
            device_peak = busiest + (true_peak - int(tl.peak_bytes)) // max(len(per_device), 1)
        allocator_findings(ar, device_peak, timeline=tl)

    try:
        stage("advice_rules", advice)
    except (ImportError, AttributeError, TypeError) as exc:
        print(f"stage advice_rules skipped: {exc!r}", file=sys.stderr)
    rep = stage("build_report_whole", lambda: build_report(attribute(run, options)))
    with open(os.devnull, "w", encoding="utf-8") as devnull:
        from jaxmemprof.analysis.page import run_document

        doc = run_document(rep, ar, top=top)  # the shaping the text prints (its own stage would be small)
        stage("render_text", lambda: render_report(doc, text.console(devnull)))

    def csv_tables():
        with tempfile.TemporaryDirectory() as tmp:
            for name, rows in export_tables(rep).items():
                with open(os.path.join(tmp, name), "w", encoding="utf-8", newline="") as f:
                    write_csv(rows, f)

    stage("render_csv_tables", csv_tables)

    # Details: where inside the stages above the time goes. These call
    # private functions of this jaxmemprof version; skipped if they moved.
    def detail(name, fn, part_of):
        try:
            return stage(name, fn, part_of)
        except (ImportError, AttributeError, TypeError, KeyError) as exc:
            print(f"detail {name} skipped: {exc!r}", file=sys.stderr)
            return None

    def read_arrays():
        from jaxmemprof.store import journal, reader

        con = journal.connect_read_only(Path(run_path) / "journal.sqlite")
        try:
            return reader._read_intervals(con)
        finally:
            con.close()

    detail("read_arrays_and_ends", read_arrays, "load_run: the fast path, a text of numbers per column")

    def shard_match():
        from jaxmemprof.analysis.shards import match_holders, shard_table

        return match_holders(shard_table(run))

    detail("shard_table_match_holders", shard_match, "analysis/attributed.py, once per report")

    def site_series():
        from jaxmemprof.analysis.timeline import SiteSeries

        return SiteSeries(attribute(run, options))

    detail("site_series", site_series, "analysis/attributed.py, once per report (timeline and leaks)")

    def arrays_csv():
        with open(os.devnull, "w", encoding="utf-8", newline="") as f:
            write_csv(export_tables(rep)["arrays.csv"], f)

    detail("arrays_csv", arrays_csv, "render_csv_tables")

    def run_summary():
        # What `jaxmemprof run` (without -q) does after the target exits.
        import contextlib
        import io

        from jaxmemprof.capture.runner import Target
        from jaxmemprof.cli.record import closing_lines

        with contextlib.redirect_stderr(io.StringIO()):
            closing_lines(Target(path="x.py", module=None, args=()), Path(run_path))

    detail("run_summary", run_summary, "jaxmemprof run without -q, after the target exits")
    print(json.dumps({"stages": stages, "total_s": time.perf_counter() - t_start,
                      "array_rows": len(run.arrays), "snapshots": len(run.snapshots),
                      "leaks_found": len(leak_rows), "findings": len(rep.findings)}))


def breakdown(s: int, n: int, code: Code) -> dict:
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--breakdown-child",
                          str(run_dir(s, n) / "run")], cwd=code.cwd, env=code.env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"breakdown failed:\n{out.stderr[-3000:]}")
    if out.stderr.strip():
        print(out.stderr.strip(), file=sys.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- which jaxmemprof --------------------------------------------------------------------


class Code:
    """Where the children import jaxmemprof from: the installed one (this
    checkout, editable), or ``--rev REV`` exported with ``git archive`` to
    ``benchmarks/data/report_src/SHA`` and put first on PYTHONPATH (the
    children then run in that directory: ``python -m`` puts the current
    directory first on sys.path)."""

    def __init__(self, rev: str | None):
        self.env = dict(os.environ)
        self.env["JAX_PLATFORMS"] = "cpu"
        self.env.pop("NO_COLOR", None)
        if rev is None:
            self.cwd, self.label = REPO, "working tree"
            self.record_label = self.label
            return
        sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", f"{rev}^{{commit}}"],
                             capture_output=True, text=True, check=True).stdout.strip()
        src = DATA / "report_src" / sha[:12]
        if not (src / "jaxmemprof" / "__init__.py").is_file():
            shutil.rmtree(src, ignore_errors=True)
            src.mkdir(parents=True)
            archive = subprocess.run(["git", "-C", str(REPO), "archive", sha, "jaxmemprof"],
                                     capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
        self.cwd, self.label = src, f"commit {sha[:12]}"
        # Runs recorded by another commit with the same capture code are reused.
        trees = subprocess.run(["git", "-C", str(REPO), "rev-parse", *(f"{sha}:jaxmemprof/{p}" for p in
                                                                       ("capture", "store", "api.py"))],
                               capture_output=True, text=True, check=True).stdout.split()
        self.record_label = "capture+store+api " + hashlib.sha256(" ".join(trees).encode()).hexdigest()[:12]
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in (str(src), os.environ.get("PYTHONPATH")) if p)

    def check(self) -> str:
        out = subprocess.run([sys.executable, "-c", "import jaxmemprof; print(jaxmemprof.__file__)"],
                             cwd=self.cwd, env=self.env, capture_output=True, text=True, check=True)
        return out.stdout.strip()


# -- summary ------------------------------------------------------------------------


def per_doubling(ratio: float, factor: float) -> float:
    """The time factor per doubling of the data, for ``ratio`` over ``factor``x the data."""
    return 2.0 ** (math.log(ratio) / math.log(factor)) if ratio > 0 else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--full", action="store_true", help="add 2,000 snapshots x 10,000 arrays")
    ap.add_argument("--repeat", type=int, default=3, metavar="K", help="timed runs of each command (default 3)")
    ap.add_argument("--rerecord", action="store_true", help="record the runs again even when cached")
    ap.add_argument("--json", action="store_true", help="also time report --json")
    ap.add_argument("--no-breakdown", action="store_true", help="skip the in-process breakdown")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results CSV")
    ap.add_argument("--sizes", default=None, metavar="SxN,...",
                    help="other sizes, e.g. 100x1000,200x1000 (the targets need 1000x10000)")
    ap.add_argument("--settle", type=float, default=5.0, metavar="S",
                    help="before each timed run, wait up to S seconds for other processes to go quiet "
                         "(default 5)")
    ap.add_argument("--rev", default=None, metavar="REV",
                    help="benchmark jaxmemprof as committed at REV (git archive), not the working tree")
    ap.add_argument("--breakdown-child", metavar="RUN", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.breakdown_child:
        breakdown_child(args.breakdown_child)
        return 0
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")

    code = Code(args.rev)
    sizes = SIZES + (FULL_SIZES if args.full else [])
    if args.sizes:
        try:
            sizes = [tuple(int(x) for x in part.lower().split("x")) for part in args.sizes.split(",")]
        except ValueError:
            ap.error("--sizes: SxN,... (e.g. 100x1000,500x10000)")
    header = [
        f"date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        f"python: {sys.version.split()[0]}; jaxmemprof: "
        + (f"{code.label} ({code.check()})" if args.rev else git_state()),
        f"runs: {args.repeat} timed per command, alternating; runs cached in {RUNS.relative_to(REPO)}",
    ]
    print("\n".join(header), file=sys.stderr)

    t_begin = time.perf_counter()
    metas, timings = {}, {}
    for s, n in sizes:
        print(f"{s} snapshots x {n} arrays", file=sys.stderr, flush=True)
        metas[(s, n)] = ensure_run(s, n, code, args.rerecord)
    for s, n in sizes:
        print(f"timing {s} snapshots x {n} arrays", file=sys.stderr, flush=True)
        timings[(s, n)] = time_commands(s, n, code, args.repeat, args.json, args.settle)
    largest = max(sizes, key=lambda sn: sn[0] * sn[1])
    bd = None
    if not args.no_breakdown:
        print(f"breakdown of {largest[0]} x {largest[1]}", file=sys.stderr, flush=True)
        settle(args.settle)
        bd = breakdown(*largest, code)

    rows = []

    def row(benchmark, case, sn, value, unit, target="", met=""):
        rows.append({"benchmark": benchmark, "case": case, "snapshots": sn[0] if sn else "",
                     "arrays": sn[1] if sn else "", "value": value, "unit": unit, "target": target, "met": met})

    lines = ["", "recorded runs (jaxmemprof run --interval 100000 --max-overhead 0, workloads/report_churn.py):",
             f"{'S x N':>14} {'snaps':>6} {'array rows':>11} {'run dir':>10} {'journal':>10} {'record':>8} "
             f"{'sampling':>9} {'rec RSS':>8}"]
    for sn in sizes:
        m = metas[sn]
        cached = " (cached)" if m.get("cached") else ""
        lines.append(f"{sn[0]:>5} x {sn[1]:>6} {m['snapshots']:>6} {m['array_rows']:>11,} "
                     f"{m['run_bytes'] / 2**20:>6.1f} MiB {m['journal_bytes'] / 2**20:>6.1f} MiB "
                     f"{m['record_wall_s']:>7.1f}s {m['sampling_cpu_s']:>8.1f}s "
                     f"{m['record_max_rss_kib'] / 1024:>5.0f} MiB{cached}")
        row("record", "wall", sn, f"{m['record_wall_s']:.2f}", "s")
        row("record", "cpu", sn, f"{m['record_cpu_s']:.2f}", "s")
        row("record", "sampling_cpu", sn, f"{m['sampling_cpu_s']:.2f}", "s")
        row("record", "other_load", sn, f"{m.get('record_others_cores', float('nan')):.2f}", "cores")
        row("record", "max_rss", sn, f"{m['record_max_rss_kib'] / 1024:.1f}", "MiB")
        row("record", "run_dir", sn, f"{m['run_bytes'] / 2**20:.2f}", "MiB")
        row("record", "journal", sn, f"{m['journal_bytes'] / 2**20:.2f}", "MiB")
        row("record", "snapshots", sn, m["snapshots"], "count", sn[0], m["snapshots"] == sn[0])
        row("record", "array_rows", sn, m["array_rows"], "count")

    cmds = list(next(iter(timings.values())))
    lines += ["", f"whole process: median wall of {args.repeat} (min), median CPU, peak RSS; "
                  "load: cores other processes kept busy (most, over the runs):"]
    for sn in sizes:
        parts = []
        for name in cmds:
            v = timings[sn][name]
            med, mn, rss = statistics.median(v["wall"]), min(v["wall"]), v["rss"] / 1024
            cpu, others = statistics.median(v["cpu"]), max(v["others"])
            parts.append(f"{name} {med:6.2f} s ({mn:.2f}) CPU {cpu:5.2f} s {rss:5.0f} MiB load {others:.1f}")
            is_target = sn == TARGET_SIZE and name == "report"
            row(name, "median_wall", sn, f"{med:.3f}", "s", f"<= {TARGET_S}" if is_target else "",
                (med <= TARGET_S) if is_target else "")
            row(name, "min_wall", sn, f"{mn:.3f}", "s")
            row(name, "median_cpu", sn, f"{cpu:.3f}", "s")
            row(name, "max_rss", sn, f"{rss:.1f}", "MiB", f"<= {TARGET_RSS_MIB:.0f}" if is_target else "",
                (rss <= TARGET_RSS_MIB) if is_target else "")
            row(name, "other_load_max", sn, f"{others:.2f}", "cores")
        lines.append(f"{sn[0]:>5} x {sn[1]:>6}  " + " | ".join(parts))

    def med(sn, name, key="wall"):
        return statistics.median(timings[sn][name][key])

    growth = [((500, 10_000), (1_000, 10_000), 2, "snapshots 500 -> 1,000 (10,000 arrays)"),
              ((1_000, 10_000), (2_000, 10_000), 2, "snapshots 1,000 -> 2,000 (10,000 arrays)"),
              ((1_000, 1_000), (1_000, 10_000), 10, "arrays 1,000 -> 10,000 (1,000 snapshots)"),
              ((100, 10_000), (1_000, 10_000), 10, "snapshots 100 -> 1,000 (10,000 arrays)")]
    lines += ["", f"growth: time ratio (wall medians; CPU medians in brackets), per doubling = "
                  f"2**(log ratio / log factor), target per doubling <= {DOUBLING_TARGET:.2f}:"]
    for a, b, factor, label in growth:
        if a not in timings or b not in timings:
            continue
        for name in cmds:
            ratio = med(b, name) / med(a, name)
            cratio = med(b, name, "cpu") / med(a, name, "cpu")
            pd_, cpd = per_doubling(ratio, factor), per_doubling(cratio, factor)
            rss_ratio = timings[b][name]["rss"] / timings[a][name]["rss"]
            ok = pd_ <= DOUBLING_TARGET
            row(f"growth_{name}", label, b, f"{ratio:.3f}", f"wall ratio for {factor}x data")
            row(f"growth_{name}", label, b, f"{pd_:.3f}", "wall per doubling", f"<= {DOUBLING_TARGET:.2f}", ok)
            row(f"growth_{name}", label, b, f"{cratio:.3f}", f"CPU ratio for {factor}x data")
            row(f"growth_{name}", label, b, f"{cpd:.3f}", "CPU per doubling", f"<= {DOUBLING_TARGET:.2f}",
                cpd <= DOUBLING_TARGET)
            row(f"growth_{name}", label, b, f"{rss_ratio:.3f}", "peak RSS ratio")
            lines.append(f"  {label:41} {name:11} x{ratio:5.2f} (x{cratio:5.2f})  per doubling {pd_:4.2f} "
                         f"({cpd:4.2f}) {'met' if ok else 'MISSED'}{'' if (cpd <= DOUBLING_TARGET) == ok else ' (CPU: ' + ('met' if cpd <= DOUBLING_TARGET else 'missed') + ')'}"
                         f"   RSS x{rss_ratio:.2f}")

    if bd is not None:
        main_stages = [st for st in bd["stages"] if not st.get("part_of")]
        details = [st for st in bd["stages"] if st.get("part_of")]
        total = sum(st["s"] for st in main_stages if st["stage"] != "build_report_whole")
        lines += ["", f"in-process breakdown, {largest[0]} x {largest[1]} ({bd['array_rows']:,} arrays, "
                      f"{bd['snapshots']} snapshots; a fresh process; wall, CPU, peak RSS so far):"]
        for st in main_stages + details:
            where = f"   (inside {st['part_of']})" if st.get("part_of") else ""
            lines.append(f"  {st['stage']:26} {st['s']:7.2f} s  CPU {st['cpu_s']:6.2f} s  "
                         f"{st['peak_rss_mib']:6.0f} MiB{where}")
            row("breakdown", st["stage"], largest, f"{st['s']:.3f}", "s")
            row("breakdown", st["stage"], largest, f"{st['cpu_s']:.3f}", "cpu s")
            row("breakdown", st["stage"], largest, f"{st['peak_rss_mib']:.1f}", "MiB peak RSS so far")
        analysis = [st for st in main_stages if st["stage"] not in ("imports", "build_report_whole",
                                                                      "render_text", "render_csv_tables")]
        slowest = max(analysis, key=lambda st: st["cpu_s"])
        lines.append(f"  (main stages summed, build_report_whole excluded: {total:.2f} s; slowest stage of "
                     f"report: {slowest['stage']}, CPU {slowest['cpu_s']:.2f} s)")

    if TARGET_SIZE in timings:
        t = med(TARGET_SIZE, "report")
        c = med(TARGET_SIZE, "report", "cpu")
        rss = timings[TARGET_SIZE]["report"]["rss"] / 1024
        lines += ["", f"targets, report on {TARGET_SIZE[0]:,} x {TARGET_SIZE[1]:,}: "
                      f"{t:.2f} s wall, {c:.2f} s CPU (<= {TARGET_S:.0f} s: {'met' if t <= TARGET_S else 'MISSED'}), "
                      f"{rss:.0f} MiB (<= {TARGET_RSS_MIB:.0f} MiB: {'met' if rss <= TARGET_RSS_MIB else 'MISSED'})"]
    lines.append(f"benchmark took {time.perf_counter() - t_begin:.0f} s")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    print("\n".join(lines))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

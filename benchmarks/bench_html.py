"""``jaxmemprof report RUN --html`` at scale: the file's size and how long it
takes a browser to open it.

    python benchmarks/bench_html.py [--sizes 1000x10000,100x1000] [--repeat K] [--rerecord] [--out CSV]

1. Records (or reuses) the runs of bench_report.py's workload
   (``benchmarks/workloads/report_churn.py``: N live arrays made at 240
   lines, 10% of them replaced every step, a slow leak, a jitted step, S
   snapshots), with bench_report.py's own recorder and cache
   (``benchmarks/data/report_runs/``). Default: 1,000 snapshots x 10,000
   arrays (about a million array records), the issue's target size.
2. Times ``python -m jaxmemprof report RUN --html FILE --force`` as a whole
   process beside ``report RUN`` to the terminal (alternating, median of K,
   default 3), and reports the file's size, and how much of it is data.
   Also a worst case written through the run writer (no JAX): 1,000
   snapshots x 1,000 lines whose every cell changes at every snapshot.
3. Opens the page K times in headless Chromium (tests/_browser.py, a fresh
   tab each time) and reports the median time from navigation to the load
   event (the page draws itself before it: its script runs at the end of the
   body), the page's own drawing time (``data-jmp-render-ms``), and then the
   time to redraw the flame graph for another snapshot and the diff for
   another pair (a click's cost). Any console error fails the benchmark.

Targets (issue #12): a run of 1,000 snapshots x 10,000 arrays makes a file
of at most 5 MB (5,000,000 bytes) that opens in at most 2 s. Results:
``benchmarks/data/html_results.csv`` (``benchmark, case, value, unit,
reference, ratio, target, met``) and a summary on stdout.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from _browser import Browser, chromium
from _common import Results, git_state
from bench_report import Code, ensure_run, jaxmemprof_cmd, run_dir

DEFAULT_OUT = HERE / "data" / "html_results.csv"
TARGET_BYTES = 5_000_000
TARGET_OPEN_S = 2.0


def worst_case_run(path: Path, snapshots: int = 1000, stacks: int = 1000) -> Path:
    """A run written through the run writer (no JAX) whose every cell
    changes at every snapshot: ``stacks`` lines, each holding one array that
    is replaced at every snapshot by one of another size. The page cannot
    keep every change: it draws fewer snapshots (keeping the peaks)."""
    import json

    from jaxmemprof.pprof.writer import write_profile
    from jaxmemprof.store.writer import RunWriter, SnapshotRecord

    if (path / "manifest.json").is_file():
        return path
    w = RunWriter(path, {"jaxmemprof_version": "bench", "argv": ["worst-case"], "start_epoch": 0.0})
    prof = write_profile([("allocations", "count"), ("space", "bytes")],
                         [((("f", "train.py", 10),), (1, 4), {"kind": "buffer", "device": "cpu:0"})])
    for i in range(1, snapshots + 1):
        new = []
        for k in range(stacks):
            n = 16 + (i * 7 + k * 13) % 1000
            new.append((i * stacks + k, i * stacks + k, f"[{n}]", "float32", 4 * n, f"[{4 * n}]", '["cpu:0"]',
                        "[null]", "SingleDeviceSharding", None, k + 1))
        ended = [((i - 1) * stacks + k, i - 1, "freed") for k in range(stacks)] if i > 1 else []
        w.add_snapshot(SnapshotRecord(
            t_wall=float(i), t_mono=float(i), trigger="interval", label=None, profile=prof,
            live_bytes=sum(a[4] for a in new), buffers=stacks, arrays=stacks,
            new_stacks=[(k + 1, json.dumps([[f"model/layer_{k % 50}.py", 10 + k, f"f{k}"]])) for k in range(stacks)]
            if i == 1 else [], new_arrays=new, ended_arrays=ended))
    w.finish(end_time="x", exit_status=0, ended_by="exit", duration_s=float(snapshots))
    return path


def parse_sizes(text: str) -> list[tuple[int, int]]:
    return [tuple(int(x) for x in part.split("x")) for part in text.split(",") if part]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000x10000", help="SNAPSHOTSxARRAYS,... (default 1000x10000)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rerecord", action="store_true")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--no-worst-case", action="store_true",
                    help="leave out the run whose every cell changes at every snapshot (1,000 x 1,000)")
    args = ap.parse_args(argv)
    if chromium() is None:
        print("bench_html: chromium is not installed", file=sys.stderr)
        return 2
    code = Code(None)
    res = Results()
    res.say(f"bench_html: jaxmemprof {git_state()}")
    tmp = Path(tempfile.mkdtemp(prefix="bench_html-"))
    cases = []
    for s, n in parse_sizes(args.sizes):
        meta = ensure_run(s, n, code, args.rerecord)
        cases.append((s, n, run_dir(s, n) / "run", f"{s} snapshots x {n} arrays ({meta['array_rows']:,} array records)"))
    if not args.no_worst_case:
        cases.append((0, 0, worst_case_run(HERE / "data" / "html_worst_case"),
                      "worst case: 1000 snapshots x 1000 lines, every cell changing at every snapshot (written, no JAX)"))
    for s, n, run, case in cases:
        page = tmp / f"s{s}_n{n}.html"
        walls, plain = [], []
        for _ in range(args.repeat):  # alternating: report --html, then report to the terminal
            for args_, out in ((("--html", str(page), "--force"), walls), ((), plain)):
                t0 = time.perf_counter()
                subprocess.run(jaxmemprof_cmd("report", str(run), *args_), env=code.env, cwd=code.cwd, check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                out.append(time.perf_counter() - t0)
        size = page.stat().st_size
        html = page.read_text(encoding="utf-8")
        start = html.index('id="jmp-data">') + len('id="jmp-data">')
        data = html.index("</script>", start) - start
        target = (s, n) == (1000, 10000)
        res.add("report --html (reference: report to the terminal)", case, statistics.median(walls), "s",
                reference=statistics.median(plain), ratio=statistics.median(walls) / statistics.median(plain))
        res.add("file size", case, size, "bytes", target=f"<= {TARGET_BYTES}" if target else "",
                met=(size <= TARGET_BYTES) if target else None)
        res.add("data in the file", case, data, "bytes")
        loads, renders, flame_ms, diff_ms = [], [], [], []
        with Browser() as b:
            for _ in range(args.repeat):
                p = b.open(page)
                if p.errors:
                    raise SystemExit(f"bench_html: the page has errors: {p.errors}")
                loads.append(p.load_s)
                renders.append(float(p.evaluate("document.documentElement.dataset.jmpRenderMs")))
                flame_ms.append(p.evaluate("""(() => { const s = document.getElementById('jmp-selected');
                    const t = performance.now(); s.value = String(Math.floor(s.options.length / 2));
                    s.dispatchEvent(new Event('change')); return performance.now() - t; })()"""))
                diff_ms.append(p.evaluate("""(() => { const s = document.getElementById('jmp-base');
                    const t = performance.now(); s.value = String(Math.floor(s.options.length / 3));
                    s.dispatchEvent(new Event('change')); return performance.now() - t; })()"""))
                b.send("Target.closeTarget", {"targetId": p.target})
        open_s = statistics.median(loads)
        res.add("open (navigation to load event)", case, open_s, "s",
                target=f"<= {TARGET_OPEN_S}" if target else "", met=(open_s <= TARGET_OPEN_S) if target else None)
        res.add("page drawing itself", case, statistics.median(renders) / 1000, "s")
        res.add("redraw for another snapshot (all views)", case, statistics.median(flame_ms) / 1000, "s")
        res.add("redraw for another diff base (all views)", case, statistics.median(diff_ms) / 1000, "s")
        res.say(f"{case}: report --html {statistics.median(walls):.2f} s (report alone "
                f"{statistics.median(plain):.2f} s); file {size / 1e6:.2f} MB "
                f"({data / 1e6:.2f} MB data); opens in {open_s:.2f} s (drawing {statistics.median(renders):.0f} ms); "
                f"another snapshot {statistics.median(flame_ms):.0f} ms, another diff {statistics.median(diff_ms):.0f} ms")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(res.rows[0]))
        w.writeheader()
        w.writerows(res.rows)
    res.say(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What a day-long `jaxmemprof run` stores, with the thinning schedule.

    python benchmarks/bench_long_run.py [--hours 24] [--no-thinning] [--report] [--out DIR]

1. Records a corpus once: ``sample_runs/train_mlp.py --steps 3000 --batch
   256`` under ``jaxmemprof run -q`` at default settings (``--interval 0.5``),
   in ``benchmarks/data/long_run_corpus`` (kept; ``--rerecord`` to redo).
2. Replays its steady snapshots (its interval snapshots after the first
   five) cyclically through the run writer on a simulated clock, one every
   0.5 s, for ``--hours``: the real profile bytes, array births and ends
   (new array ids each cycle), executables and memory_stats rows, as the
   sampler would commit them. The script's markers (``mark()`` once a step,
   the user's own rows) are left out; their size per marker is printed.
3. Every simulated hour: snapshots, files in the run directory, its size,
   the journal and its WAL, snapshots thinned, wall time so far.
4. With ``--report``: ``jaxmemprof report RUN`` on the result, as a whole
   process (wall time, CPU time and peak RSS of the child).

Targets (issue 12): 24 hours at default settings under 200 MB and 20,000 files.

Figures (2026-12-01, 2 shared cores; corpus: 2.3 KiB profiles, 13 new
arrays and 13 executable rows per snapshot). Journal schema 2 (commit
8107cc9: each array's description stored once, in array_kinds):

    without thinning, 2 h:  14,402 files, 49.1 MB (journal 15.6 MB): 24 h would be ~172,800 files, ~590 MB
    with thinning, 24 h:     3,341 files, 135.0 MB (journal 127.3 MB: arrays 63.0 MB, array_ends 48.7 MB,
                             snapshots 11.7 MB; WAL at most 2.2 MB); 53 s to simulate
    report on that run:      exit 0, 19.9 s CPU (46.8 s wall at load average 5), peak RSS 1,966 MiB
                             (172,800 snapshot rows, 2.25 M arrays); with the reader's fast path
                             (commit fcdaae8, an idle machine): 14.8 s wall, 14.9 s CPU, 1,916 MiB
    --hours 13.9 --report:   100,080 snapshots, 3,174 files, 81.0 MB; report 12.1 and 11.5 s CPU
                             (25.4 and 26.1 s wall at load average 4-5), peak RSS 1,184 MiB
    thinning's cost:         10-25 ms a pass (every 100 snapshots, with its WAL checkpoint) at hours 1,
                             6 and 12 alike (commit 543f1b8); a snapshot's commit 0.1 ms; finding
                             the descriptions of a snapshot's 13 new arrays 3 us

Schema 1 (commit 7fef816, each arrays row repeating its shape, dtype, shard
sizes, devices, sharding, memory kind and site as text, ~95 B a row):

    without thinning, 2 h:  14,402 files, 61.5 MB (journal 28.0 MB)
    with thinning, 24 h:     3,341 files, 285.9 MB (journal 278.1 MB: arrays 214 MB, array_ends 49 MB)
    report on that run:      48.6 s, peak RSS 3.1 GiB; with the schema-2 reader (which reads both):
                             30.2 s CPU (53.6 s wall), 2,903 MiB
    --hours 13.9 --report:   100,080 snapshots, 3,174 files, 168.2 MB; report 16.3 s (idle), 1,887 MiB;
                             that run rewritten in schema 1, read by the schema-2 reader, alternating
                             with the schema-2 run above: 17.6 and 16.8 s CPU, 1,724 MiB

Now every byte target is met: the journal's arrays rows are 28 B each (id,
Python id, first snapshot, kind, addresses) and array_ends 22 B; together
83% of the day. The per-array rows stay: every birth and end is kept.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from jaxmemprof.store import layout
from jaxmemprof.store.writer import RunWriter, SnapshotRecord, Thinning

DATA = HERE / "data"
INTERVAL = 0.5


def record_corpus(path: Path, rerecord: bool) -> Path:
    if path.is_dir() and not rerecord:
        return path
    shutil.rmtree(path, ignore_errors=True)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", str(path),
                    str(HERE.parent / "sample_runs" / "train_mlp.py"), "--steps", "3000", "--batch", "256"],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    return path


def load_corpus(path: Path):
    """Per steady snapshot: (profile bytes, live_bytes, buffers, arrays,
    new array rows, ended array ids, executables, memory_stats); and the stacks."""
    con = sqlite3.connect(path / layout.JOURNAL)
    snaps = con.execute("SELECT snapshot, file, live_bytes, buffers, arrays FROM snapshots "
                        "WHERE trigger = 'interval' ORDER BY snapshot").fetchall()[5:]
    # Schema 2 describes each array in array_kinds; schema 1 in its row.
    kinds = con.execute("SELECT 1 FROM sqlite_master WHERE name = 'array_kinds'").fetchone()
    arrays = "arrays JOIN array_kinds USING (kind_id)" if kinds else "arrays"
    out = []
    for snapshot, file, live, buffers, n_arrays in snaps:
        rows = con.execute("SELECT array_id, py_id, shape, dtype, nbytes, shard_bytes, devices, addresses, "
                           f"sharding, memory_kind, stack_id FROM {arrays} WHERE first_snapshot = ?",
                           (snapshot,)).fetchall()
        ends = [a for (a,) in con.execute("SELECT array_id FROM array_ends WHERE end_snapshot = ?", (snapshot,))]
        exe = con.execute("SELECT stack_id, name, count, code_bytes FROM executables WHERE snapshot = ?",
                          (snapshot,)).fetchall()
        stats = con.execute("SELECT device, key, value FROM memory_stats WHERE snapshot = ?", (snapshot,)).fetchall()
        out.append(((path / file).read_bytes(), live, buffers, n_arrays, rows, ends, exe, stats))
    stacks = con.execute("SELECT stack_id, frames FROM stacks").fetchall()
    markers = con.execute("SELECT count(*) FROM markers").fetchone()[0]
    con.close()
    return out, stacks, markers


def dir_facts(path: Path) -> tuple[int, int]:
    files = size = 0
    for root, _, names in os.walk(path):
        for n in names:
            files += 1
            size += os.path.getsize(os.path.join(root, n))
    return files, size


def simulate(out: Path, corpus, stacks, hours: float, thinning: Thinning | None) -> None:
    shutil.rmtree(out, ignore_errors=True)
    w = RunWriter(out, {"jaxmemprof_version": "bench", "argv": ["train_mlp.py"], "start_epoch": 0.0,
                        "command": ["bench_long_run"]}, thinning=thinning)
    n = int(hours * 3600 / INTERVAL)
    id_map: dict = {}  # corpus array id -> id in this run (per cycle)
    next_id = 1
    t0 = time.perf_counter()
    print(f"{'hour':>5} {'snapshots':>9} {'thinned':>8} {'files':>6} {'dir MB':>7} {'journal MB':>10} "
          f"{'wal MB':>6} {'wall s':>7}")
    for i in range(1, n + 1):
        prof, live, buffers, arrays, rows, ends, exe, stats = corpus[(i - 1) % len(corpus)]
        new = []
        for r in rows:
            id_map[r[0]] = next_id
            new.append((next_id, *r[1:]))
            next_id += 1
        ended = [(id_map.pop(a), i - 1, "freed") for a in ends if a in id_map]
        w.add_snapshot(SnapshotRecord(
            t_wall=i * INTERVAL, t_mono=i * INTERVAL, trigger="interval", label=None, profile=prof,
            live_bytes=live, buffers=buffers, arrays=arrays, new_stacks=stacks if i == 1 else [],
            new_arrays=new, ended_arrays=ended, executables=exe, memory_stats=stats,
        ))
        if i % int(3600 / INTERVAL) == 0 or i == n:
            files, size = dir_facts(out)
            journal = os.path.getsize(out / layout.JOURNAL)
            wal = out / (layout.JOURNAL + "-wal")
            wal_size = os.path.getsize(wal) if wal.exists() else 0
            print(f"{i * INTERVAL / 3600:5.1f} {i:9d} {w.thinned:8d} {files:6d} {size / 1e6:7.1f} "
                  f"{journal / 1e6:10.1f} {wal_size / 1e6:6.2f} {time.perf_counter() - t0:7.1f}", flush=True)
    w.finish(end_time="bench", exit_status=0, ended_by="exit", duration_s=n * INTERVAL)
    files, size = dir_facts(out)
    print(f"finished: {files} files, {size / 1e6:.1f} MB (journal {os.path.getsize(out / layout.JOURNAL) / 1e6:.1f} MB)")


def time_report(run: Path) -> None:
    launcher = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
                "p = subprocess.run([sys.executable, '-m', 'jaxmemprof', 'report', sys.argv[1]], "
                "stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True); "
                "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
                "print(p.returncode, round(time.perf_counter() - t, 1), round(u.ru_utime + u.ru_stime, 1), "
                "u.ru_maxrss // 1024, repr(p.stderr[-300:]))")
    proc = subprocess.run([sys.executable, "-c", launcher, str(run)], capture_output=True, text=True)
    status, wall, cpu, rss, err = proc.stdout.split(" ", 4)
    print(f"report: exit {status}, {wall} s ({cpu} s CPU), peak RSS {rss} MiB; stderr tail {err.strip()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--no-thinning", action="store_true")
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--rerecord", action="store_true")
    ap.add_argument("--out", type=Path, default=DATA / "long_run")
    args = ap.parse_args()
    corpus, stacks, markers = load_corpus(record_corpus(DATA / "long_run_corpus", args.rerecord))
    per = sum(len(p) for p, *_ in corpus) / len(corpus)
    print(f"corpus: {len(corpus)} steady snapshots, {per / 1024:.1f} KiB profile each, "
          f"{sum(len(c[4]) for c in corpus) / len(corpus):.1f} new arrays and "
          f"{sum(len(c[6]) for c in corpus) / len(corpus):.1f} executable rows per snapshot "
          f"({markers} markers left out)")
    simulate(args.out, corpus, stacks, args.hours, None if args.no_thinning else Thinning())
    if args.report:
        time_report(args.out)


if __name__ == "__main__":
    main()

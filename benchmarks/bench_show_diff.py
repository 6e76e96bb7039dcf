"""Side-by-side wall time of ``jaxmemprof show`` / ``diff`` and ``go tool pprof``.

    python benchmarks/bench_show_diff.py [--repeat K] [--out results.csv] [--distinct]

Makes the two large profiles first if they are missing (see make_profiles.py;
they go to benchmarks/data/, which git ignores). Two shapes: the default, the
project's (about a tenth as many distinct stacks as samples: 11,252 of
100,000), and with ``--distinct`` one where every sample has a stack of its
own (make_profiles.py --sizes 1, in benchmarks/data/distinct/, results in
results_distinct.csv): what ``show`` costs grows with distinct stacks. Each benchmark runs our
command and the reference command as whole processes, stdout to /dev/null,
alternating which goes first, K times each after one untimed warm-up, and
reports the median and minimum wall time, the ratio of medians (ours /
reference), the median CPU time (user + system, the process and its
children: Go's pprof uses several threads) and its ratio, the peak resident
memory of each process (with its children), and the load average before and
after (on a shared machine wall times vary with it; CPU times much less).

Targets (issue 13: "measured side by side, as a ratio"): ``show`` and
``diff`` at most 0.4x the time of ``go tool pprof``; ``jaxmemprof --help`` at
most 0.3 s (``python -c pass`` is shown beside it as the floor of any Python
command).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from _common import git_state

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_DATA = HERE / "data"
DEFAULT_OUT = DEFAULT_DATA / "results.csv"
BASE = "big_base.prof"
NEW = "big_new.prof"

RATIO_TARGET = 0.4
HELP_TARGET_S = 0.3


@dataclass
class Bench:
    name: str
    ours: list[str]
    reference: list[str] | None  # None: no reference reader on this machine
    reference_name: str
    note: str = ""


@dataclass
class Timing:
    wall: list[float]
    max_rss_kib: int
    failures: int = 0
    cpu: list[float] = None


# Runs one command and reports its wall time and peak RSS. A small separate
# process does the spawning: a child's peak RSS counts the memory of the
# process that spawned it (Linux records it at exec), so spawning from this
# process (which may be large) would inflate small figures. The launcher's own
# floor is about 8 MiB, below any command measured here.
_LAUNCHER = r"""
import os, sys, time
cmd = sys.argv[1:]
devnull = os.open(os.devnull, os.O_WRONLY)
t0 = time.perf_counter()
pid = os.posix_spawn(cmd[0], cmd, os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1)])
_, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t0
print(wall, ru.ru_maxrss, os.waitstatus_to_exitcode(status), ru.ru_utime + ru.ru_stime)
"""


def run_once(cmd: list[str], cwd: Path, env: dict) -> tuple[float, int, float]:
    """Wall time (spawn to exit), peak RSS in KiB and CPU seconds (user +
    system; the process and its waited-for children) of one run, stdout to
    /dev/null; raises if it fails."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.run([sys.executable, "-S", "-I", "-c", _LAUNCHER, *cmd], cwd=cwd, env=env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, text=True)
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"launcher failed for {' '.join(cmd)}:\n{err.read()[-2000:].decode('utf-8', 'replace')}")
        wall, rss, rc, cpu = proc.stdout.split()
        if int(rc) != 0:
            err.seek(0)
            tail = err.read()[-2000:].decode("utf-8", "replace")
            raise RuntimeError(f"{' '.join(cmd)} exited {rc}:\n{tail}")
    return float(wall), int(rss), float(cpu)


def python_cmd(*args: str) -> list[str]:
    return [sys.executable, *args]


def jaxmemprof_cmd(*args: str) -> list[str]:
    return python_cmd("-m", "jaxmemprof", *args)


def benches(pprof: list[str] | None) -> list[Bench]:
    def ref(*args):
        return [*pprof, *args] if pprof else None

    return [
        Bench("startup_help", jaxmemprof_cmd("--help"), python_cmd("-c", "pass"), "python -c pass",
              note=f"target: ours <= {HELP_TARGET_S} s"),
        Bench("show", jaxmemprof_cmd("show", NEW), ref("-top", NEW), "go tool pprof -top",
              note=f"target: ratio <= {RATIO_TARGET}"),
        Bench("show_csv", jaxmemprof_cmd("show", NEW, "--csv", "-"), ref("-top", NEW), "go tool pprof -top",
              note="all rows as CSV; reference as for show"),
        Bench("diff", jaxmemprof_cmd("diff", BASE, NEW), ref("-top", f"-diff_base={BASE}", NEW),
              "go tool pprof -top -diff_base", note=f"target: ratio <= {RATIO_TARGET}"),
        Bench("diff_csv", jaxmemprof_cmd("diff", BASE, NEW, "--csv", "-"), ref("-top", f"-diff_base={BASE}", NEW),
              "go tool pprof -top -diff_base", note="all rows as CSV; reference as for diff"),
    ]


def find_pprof() -> list[str] | None:
    go = shutil.which("go")
    return [go, "tool", "pprof"] if go else None


def ensure_profiles(data: Path, samples: int | None, distinct: bool = False) -> None:
    if (data / BASE).exists() and (data / NEW).exists() and samples is None:
        return
    cmd = python_cmd(str(HERE / "make_profiles.py"), str(data))
    if samples is not None:
        cmd += ["--samples", str(samples)]
    if distinct:
        cmd += ["--sizes", "1"]
    print(f"making the profiles: {' '.join(cmd)}", file=sys.stderr)
    subprocess.run(cmd, check=True)


def measure(bench_list: list[Bench], data: Path, env: dict, repeat: int, warmup: int) -> dict:
    """Alternate ours and the reference, each bench in turn, ``repeat`` rounds."""
    results: dict[tuple[str, str], Timing] = {}
    for b in bench_list:
        for tool in ("ours", "reference"):
            if getattr(b, tool) is not None:
                results[(b.name, tool)] = Timing(wall=[], max_rss_kib=0, cpu=[])
    for r in range(warmup + repeat):
        for b in bench_list:
            order = ("ours", "reference") if r % 2 == 0 else ("reference", "ours")
            for tool in order:
                cmd = getattr(b, tool)
                if cmd is None:
                    continue
                wall, rss, cpu = run_once(cmd, data, env)
                if r >= warmup:
                    t = results[(b.name, tool)]
                    t.wall.append(wall)
                    t.cpu.append(cpu)
                    t.max_rss_kib = max(t.max_rss_kib, rss)
        if r >= warmup:
            print(f"round {r - warmup + 1}/{repeat} done", file=sys.stderr)
    return results


def count_samples(data: Path, env: dict) -> tuple[int, int]:
    """Samples in each profile, read by jaxmemprof in a child process (this
    one stays small: see run_once)."""
    code = (
        "import sys; from jaxmemprof.pprof.reader import load_profile; "
        "print(*(load_profile(p).sample_count for p in sys.argv[1:]))"
    )
    out = subprocess.run(python_cmd("-c", code, str(data / BASE), str(data / NEW)), env=env,
                         capture_output=True, text=True, check=True).stdout.split()
    return int(out[0]), int(out[1])


def tool_version(pprof: list[str] | None) -> str:
    if not pprof:
        return "go tool pprof: not installed"
    try:
        out = subprocess.run([pprof[0], "version"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        out = "go: version unknown"
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, metavar="K", help="timed runs of each command (default 5)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs first (default 1)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"CSV file (default {DEFAULT_OUT.relative_to(REPO)})")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="where the profiles are (or are made)")
    ap.add_argument("--samples", type=int, default=None,
                    help="remake the profiles with about this many samples each")
    ap.add_argument("--distinct", action="store_true",
                    help="profiles whose every sample has a stack of its own (in DATA/distinct)")
    ap.add_argument("--only", action="append", default=None, metavar="NAME",
                    help="run only this benchmark (repeatable)")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")

    data = args.data.resolve()
    if args.distinct:
        data = data / "distinct"
        if args.out == DEFAULT_OUT:
            args.out = DEFAULT_DATA / "results_distinct.csv"
    ensure_profiles(data, args.samples, args.distinct)
    pprof = find_pprof()
    bench_list = benches(pprof)
    if args.only:
        unknown = set(args.only) - {b.name for b in bench_list}
        if unknown:
            ap.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
        bench_list = [b for b in bench_list if b.name in args.only]

    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"
    env.pop("NO_COLOR", None)

    n_base, n_new = count_samples(data, env)
    header = [
        f"date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        f"python: {sys.version.split()[0]} ({sys.executable}); {tool_version(pprof)}",
        f"jaxmemprof: {git_state()}",
        f"profiles: {BASE} {n_base} samples, {NEW} {n_new} samples (in {data})",
        f"runs: {args.warmup} warm-up + {args.repeat} timed per command, alternating",
    ]
    print("\n".join(header), file=sys.stderr)
    if pprof is None:
        print("go tool pprof is not installed: no reference times (apt-get install golang-go)", file=sys.stderr)

    load_before = os.getloadavg()
    results = measure(bench_list, data, env, args.repeat, args.warmup)
    load_after = os.getloadavg()

    rows = []
    lines = []
    for b in bench_list:
        ours = results[(b.name, "ours")]
        ref = results.get((b.name, "reference"))
        om = statistics.median(ours.wall)
        rm = statistics.median(ref.wall) if ref else None
        ratio = om / rm if rm else None
        oc = statistics.median(ours.cpu)
        rc = statistics.median(ref.cpu) if ref else None
        cpu_ratio = oc / rc if rc else None
        for tool, t, cmd, r, cr in (("jaxmemprof", ours, b.ours, ratio, cpu_ratio),
                                    (b.reference_name, ref, b.reference, 1.0, 1.0)):
            if t is None:
                continue
            rows.append({
                "benchmark": b.name,
                "tool": tool,
                "median_s": f"{statistics.median(t.wall):.4f}",
                "min_s": f"{min(t.wall):.4f}",
                "runs": len(t.wall),
                "ratio_vs_reference": f"{r:.3f}" if r is not None else "",
                "median_cpu_s": f"{statistics.median(t.cpu):.4f}",
                "cpu_ratio_vs_reference": f"{cr:.3f}" if cr is not None else "",
                "max_rss_mib": f"{t.max_rss_kib / 1024:.1f}",
                "command": " ".join(Path(c).name if i == 0 else c for i, c in enumerate(cmd)),
            })
        if b.name == "startup_help":
            verdict = "meets" if om <= HELP_TARGET_S else "misses"
            lines.append(
                f"{b.name:13} ours {om:7.3f} s   {b.reference_name} {rm:.3f} s   "
                f"({verdict} target <= {HELP_TARGET_S} s)"
            )
        elif ratio is None:
            lines.append(f"{b.name:13} ours {om:7.3f} s   no reference")
        else:
            target = f"; {'meets' if ratio <= RATIO_TARGET else 'misses'} target <= {RATIO_TARGET}" if "target" in b.note else ""
            lines.append(
                f"{b.name:13} ours {om:7.3f} s   pprof {rm:7.3f} s   ratio {ratio:5.2f}{target}   "
                f"CPU ours {oc:.3f} s, pprof {rc:.3f} s: {cpu_ratio:.2f}   "
                f"(peak RSS ours {ours.max_rss_kib / 1024:.0f} MiB, pprof {ref.max_rss_kib / 1024:.0f} MiB)"
            )

    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)

    print(f"\nload average (1 min) {load_before[0]:.2f} before, {load_after[0]:.2f} after")
    print("median wall time, whole process (ratio = ours / reference):")
    print("\n".join(lines))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

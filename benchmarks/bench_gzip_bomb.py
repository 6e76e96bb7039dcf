"""What a gzip bomb costs ``jaxmemprof show``, beside ``go tool pprof -top``.

    python benchmarks/bench_gzip_bomb.py [--repeat K] [--reference-repeat K] [--reference-cap SIZE]

Makes the bombs first (in benchmarks/data/, git-ignored; a second each):

- ``bomb_6mb.prof.gz``: the issue's bomb, 6 MB of gzip that inflates to
  5.6 GiB of zeros;
- ``bomb_strings_6mb.prof.gz``: 6 MB that inflates to 5.6 GiB of valid
  protobuf (empty strings of the string table, field 6, over and over), so
  that nothing but the decompression bound can stop it;
- ``bomb_256k.prof.gz``: 256 KiB that inflates to 252 MiB of zeros (over
  our 128 MiB bound, and small enough for pprof to read to its end);
- ``bomb_strings_127m.prof.gz``: 135 KB of gzip holding a tiny profile and
  127.5 MiB of empty strings (field 6), just under the bound: valid protobuf
  that protobuf would make 66 M objects of (2.2 GB before the ratio limit);
- ``bomb_samples_127m.prof.gz``: 200 KB holding a tiny profile's sample
  types, 127 MiB of 5-byte samples (one value each) in its run of samples,
  and the rest of it, just under the bound (14.7 s before the limits).

The last two are refused by their decompression ratio (``--max-ratio``,
default 100) after some 13 and 20 MB; ``--lift-ratio`` gives ``show``
``--max-ratio 1000000`` instead, so that the fields-per-byte limit refuses
them (after the whole stream is held: memory is then not bounded).

Each is given to ``python -m jaxmemprof show FILE`` (K times, default 5;
exit status 2 expected) and to ``go tool pprof -top FILE`` (exit status 1:
it refuses every one of them, after reading it all), alternating which goes
first, from a small launcher process that reports the child's wall time, CPU
time (user + system) and peak RSS (``wait4``). pprof holds the whole
decompressed stream (5.6 GiB here, and more while it grows its buffer): it
runs with its address space capped (``--reference-cap``, default 4 GiB), so
on the 6 MB bombs its figure is the time it took to run out of memory, and
only ``--reference-repeat`` times (default 1). ``--reference-cap 0`` lifts
the cap (pprof then needs some 12 GiB and 100 s for one 6 MB bomb).

Targets (issue 23): ``show`` on the 6 MB bombs and the 127 MiB ones refused
in at most 1 s wall and 100 MiB peak RSS. Results: ``benchmarks/data/bomb_results.csv``
(``benchmark, case, value, unit, reference, ratio, target, met``) and a
summary on stdout.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import os
import shutil
import statistics
import subprocess
import sys
import zlib
from pathlib import Path

from _common import Results, git_state

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from gzip_bombs import gzip_bomb

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATA = HERE / "data"
OUT = DATA / "bomb_results.csv"
MiB, GiB = 1024**2, 1024**3
TARGET_S = 1.0
TARGET_RSS_MIB = 100

# Spawns one command (stdout and stderr to /dev/null, its address space
# capped at argv[1] bytes unless 0) and prints its wall time, peak RSS (KiB),
# exit status and CPU time. A launcher of its own, so that the RSS counted is
# the child's (Linux counts the spawner's memory at exec).
_LAUNCHER = r"""
import os, resource, sys, time
cap = int(sys.argv[1])
cmd = sys.argv[2:]
if cap:
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
devnull = os.open(os.devnull, os.O_WRONLY)
t0 = time.perf_counter()
pid = os.posix_spawn(cmd[0], cmd, os.environ,
                     file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1), (os.POSIX_SPAWN_DUP2, devnull, 2)])
_, status, ru = os.wait4(pid, 0)
print(time.perf_counter() - t0, ru.ru_maxrss, os.waitstatus_to_exitcode(status), ru.ru_utime + ru.ru_stime)
"""


# A tiny profile (sample types; one sample; its location, function and
# strings), cut after its sample types: samples put between the two parts
# are its run of samples.
_HEAD = bytes.fromhex("0a0408011002")
_SAMPLE = bytes.fromhex("12070a010112028020")
_REST = bytes.fromhex("220808012204080110072a06080110032004320032057370616365320562797465733204737465703210") \
    + b"/home/u/train.py"
_PROFILE = _HEAD + _SAMPLE + _REST


def under_bound(unit: bytes, times: int, pre: bytes, post: bytes) -> tuple[bytes, int]:
    """``pre``, ``unit`` repeated ``times`` times and ``post``, as three gzip
    members (the middle one a bomb), and the total decompressed."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = len(c.compress(unit) + c.flush(zlib.Z_FULL_FLUSH))
    mid, total = gzip_bomb(block * times, unit)
    members = [gzip.compress(pre, mtime=0), mid] + ([gzip.compress(post, mtime=0)] if post else [])
    return b"".join(members), len(pre) + total + len(post)


BOMBS = [
    # (case, file, maker, pprof capped and repeated less)
    ("bomb_6mb", "bomb_6mb.prof.gz", lambda: gzip_bomb(6 * 1000 * 1000, bytes(MiB)), True),
    ("bomb_strings_6mb", "bomb_strings_6mb.prof.gz",
     lambda: gzip_bomb(6 * 1000 * 1000, b"\x32\x00" * (MiB // 2)), True),
    ("bomb_256k", "bomb_256k.prof.gz", lambda: gzip_bomb(256 * 1024, bytes(MiB)), False),
    ("bomb_strings_127m", "bomb_strings_127m.prof.gz",
     lambda: under_bound(b"\x32\x00" * (256 * 1024), 255, _PROFILE, b""), True),
    ("bomb_samples_127m", "bomb_samples_127m.prof.gz",
     lambda: under_bound(b"\x12\x03\x12\x01\x01" * (102 * 1024), 255, _HEAD, _REST), True),
]
TARGETED = ("bomb_6mb", "bomb_strings_6mb", "bomb_strings_127m", "bomb_samples_127m")


def make_bombs(data: Path) -> dict:
    data.mkdir(parents=True, exist_ok=True)
    sizes = {}
    for case, name, make, _ in BOMBS:
        blob, total = make()
        path = data / name
        if not path.exists() or path.read_bytes() != blob:
            path.write_bytes(blob)
        sizes[case] = (len(blob), total)
    return sizes


def run_once(cmd, cwd, cap=0):
    proc = subprocess.run([sys.executable, "-S", "-I", "-c", _LAUNCHER, str(cap), *cmd], cwd=cwd,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"launcher failed for {' '.join(cmd)}:\n{proc.stderr[-2000:]}")
    wall, rss, rc, cpu = proc.stdout.split()
    return float(wall), int(rss), int(rc), float(cpu)


def parse_size(text: str) -> int:
    units = {"": 1, "k": 1024, "m": MiB, "g": GiB}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = t[-1] if t and t[-1] in units else ""
    return int(float(t[:len(t) - len(unit)] or 0) * units[unit])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, metavar="K", help="timed runs of ours on each bomb (default 5)")
    ap.add_argument("--reference-repeat", type=int, default=1, metavar="K",
                    help="runs of pprof on the 6 MB bombs (default 1: each takes 10 s or more)")
    ap.add_argument("--reference-cap", default="4GiB", metavar="SIZE",
                    help="pprof's address-space cap (default 4GiB; 0: none, and some 12 GiB of memory used)")
    ap.add_argument("--lift-ratio", action="store_true",
                    help="run show with --max-ratio 1000000 (the fields-per-byte limit refuses the 127 MiB bombs)")
    ap.add_argument("--only", default=None, metavar="CASE[,CASE]", help="only these bombs")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    cap = parse_size(args.reference_cap)
    go = shutil.which("go")
    sizes = make_bombs(DATA)
    res = Results()
    res.say(f"gzip bombs, {git_state()}, load average before {os.getloadavg()[0]:.2f}; "
            f"reference: {'go tool pprof -top' if go else 'go not installed'}"
            + (f" (address space capped at {cap / GiB:g} GiB)" if go and cap else ""))
    ours_cmd = [sys.executable, "-m", "jaxmemprof", "show"] + (["--max-ratio", "1000000"] if args.lift_ratio else [])
    only = set(args.only.split(",")) if args.only else None
    for case, name, _, heavy in BOMBS:
        if only is not None and case not in only:
            continue
        compressed, total = sizes[case]
        ours, ref = [], []
        ref_runs = (args.reference_repeat if heavy else args.repeat) if go else 0
        run_once(ours_cmd + [name], DATA)  # warm: .pyc files, the page cache
        for r in range(max(args.repeat, ref_runs)):
            order = ("ours", "ref") if r % 2 == 0 else ("ref", "ours")
            for tool in order:
                if tool == "ours" and r < args.repeat:
                    ours.append(run_once(ours_cmd + [name], DATA))
                elif tool == "ref" and r < ref_runs:
                    ref.append(run_once([go, "tool", "pprof", "-top", name], DATA, cap if heavy else 0))
        rcs = sorted({o[2] for o in ours})
        wall = statistics.median(o[0] for o in ours)
        cpu = statistics.median(o[3] for o in ours)
        rss = max(o[1] for o in ours) / 1024
        line = (f"{case}: {compressed / 1e6:.2f} MB -> {total / GiB:.2f} GiB; show: exit {rcs}, "
                f"{wall:.3f} s wall (median of {len(ours)}), {cpu:.3f} s CPU, {rss:.0f} MiB")
        ratio = cpu_ratio = rwall = None
        if ref:
            rwall = statistics.median(o[0] for o in ref)
            rcpu = statistics.median(o[3] for o in ref)
            rrss = max(o[1] for o in ref) / 1024
            ratio, cpu_ratio = wall / rwall, cpu / rcpu
            line += (f"; pprof: exit {sorted({o[2] for o in ref})}, {rwall:.2f} s wall, {rcpu:.2f} s CPU, "
                     f"{rrss:.0f} MiB (median of {len(ref)}){' at its cap' if heavy and cap else ''}; "
                     f"ratio {ratio:.3f} wall, {cpu_ratio:.3f} CPU")
            res.add("gzip_bomb", f"{case} pprof wall", rwall, "s")
            res.add("gzip_bomb", f"{case} pprof rss", rrss, "MiB")
        res.say(line)
        res.add("gzip_bomb", f"{case} show wall", wall, "s", reference=rwall, ratio=ratio,
                target=f"<= {TARGET_S} s" if case in TARGETED else None,
                met=(wall <= TARGET_S) if case in TARGETED else None)
        res.add("gzip_bomb", f"{case} show cpu", cpu, "s", ratio=cpu_ratio)
        res.add("gzip_bomb", f"{case} show rss", rss, "MiB",
                target=f"<= {TARGET_RSS_MIB} MiB" if case in TARGETED else None,
                met=(rss <= TARGET_RSS_MIB) if case in TARGETED else None)
        res.add("gzip_bomb", f"{case} show exit", rcs[0] if len(rcs) == 1 else str(rcs), "", met=rcs == [2])
    res.say(f"load average after {os.getloadavg()[0]:.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(res.rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(res.rows)
    res.say(f"wrote {args.out}")
    return 0 if all(r["met"] != "no" for r in res.rows) else 1


if __name__ == "__main__":
    sys.exit(main())

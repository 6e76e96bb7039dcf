"""Reading an XProf profile: jaxmemprof against XProf's own converters, and a
16-host profile in one command with bounded memory.

    python benchmarks/bench_xprof.py [--xprof-python /tmp/xprof-venv/bin/python] [--steps 400] [--hosts 16]

1. A real profile: the bundled MLP's step under ``jax.profiler.trace`` on the
   CPU (tests/fixtures/xprof/profile_mlp.py), and from it one host's profile
   with a memory profile (tests/fixtures/xprof/memory_profile.py: four chips,
   ``--steps`` steps of allocations and frees, as a TPU's profile holds them).
2. The same host file read by jaxmemprof (``load_profile_run``: the memory
   profile's timeline, each chip's peak, the programs' buffers at their peaks
   by line, arguments, aliasing) and by XProf's converters in a Python where
   the ``xprof`` package is installed (``--xprof-python``): its memory
   profile (``memory_profile``) and memory viewer of the step
   (``memory_viewer``), each in a fresh process, timed inside it after the
   imports; medians of ``--repeat``; the ratio. The peaks are compared: each
   chip's peak in XProf's memory profile (``peakStats.peakBytesInUse``)
   against jaxmemprof's.
3. ``--hosts`` copies of that host as one capture (one file per host, each a
   chip of it 64 MiB heavier than the others), read by ``python -m jaxmemprof
   report DIR`` in one command: its wall time and its maximum resident memory
   against one host's (hosts are read one at a time: the maximum stays near
   one host's plus the events kept); with ``--profile``, the same for that
   real profile, alone and as ``--hosts`` copies.

Goal (issue 65): jaxmemprof in at most half XProf's time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "xprof"

OURS = """
import sys, time, json
from jaxmemprof.store.xprof import load_profile_run
import jaxmemprof.store.xprof_tables, jaxmemprof.xprof.xplane_pb2, jaxmemprof.xla.executable_pb2  # what it imports
t = time.perf_counter()  # after the imports (pandas among them, 0.3-0.4 s), as XProf's is after its converter's
run = load_profile_run(sys.argv[1])
peaks = {d: int(v) for d, v in run.memory_stats[run.memory_stats["key"] == "peak_bytes_in_use"]
         .groupby("device")["value"].max().items()}
print(json.dumps({"s": time.perf_counter() - t, "peaks": peaks, "programs": len(run.jit.programs)}))
"""

THEIRS = """
import sys, time, json, os
from xprof.convert import raw_to_tool_data as r
path, program = sys.argv[1], sys.argv[2]
t = time.perf_counter()
mp, _ = r.xspace_to_tool_data([path], "memory_profile", {"use_saved_result": False})
t1 = time.perf_counter()
r.xspace_to_tool_names([path])  # writes each program's HLO beside the file, as XProf's server does first
mv, _ = r.xspace_to_tool_data([path], "memory_viewer", {"module_name": program, "use_saved_result": False})
t2 = time.perf_counter()
doc = json.loads(mp)
peaks = {k: int(v["profileSummary"]["peakStats"].get("peakBytesInUse", 0))
         for k, v in doc.get("memoryProfilePerAllocator", {}).items()}
print(json.dumps({"s": t2 - t, "memory_profile_s": t1 - t, "memory_viewer_s": t2 - t1, "peaks": peaks,
                  "viewer_peak_mib": json.loads(mv)["peakHeapMib"] if mv else None}))
"""


def _run(cmd, env=None) -> dict:
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if out.returncode:
        raise SystemExit(f"{cmd[:3]} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _max_rss(cmd, env) -> tuple[float, int]:
    """(wall seconds, the child's maximum resident set in KiB)."""
    t = time.perf_counter()
    out = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], capture_output=True, text=True, env=env, timeout=1800)
    wall = time.perf_counter() - t
    if out.returncode not in (0, 1):
        raise SystemExit(f"{cmd[:4]} failed:\n{out.stderr[-2000:]}")
    return wall, int(out.stderr.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--xprof-python", default=os.environ.get("XPROF_PYTHON"),
                    help="a Python with the xprof package installed (pip install xprof, in a scratch venv)")
    ap.add_argument("--steps", type=int, default=400, help="steps of allocations per chip in the generated host")
    ap.add_argument("--hosts", type=int, default=16, help="hosts of the capture read in one command (0: skip)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", default=None, metavar="XPLANE",
                    help="also compare on this real .xplane.pb (a TPU capture with JAX's default options: "
                         "/work/notes/tpu-xprof/xp-gpt8's, 23 MB), the program --program names")
    ap.add_argument("--program", default="jit_train_step", help="the module XProf's memory viewer reads")
    args = ap.parse_args()
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=f"{REPO}:{FIXTURES}")
    tmp = Path(tempfile.mkdtemp(prefix="bench-xprof-"))
    try:
        subprocess.run([sys.executable, str(FIXTURES / "profile_mlp.py"), str(tmp / "real")], env=env, check=True,
                       capture_output=True, timeout=600)
        sys.path[:0] = [str(REPO), str(FIXTURES)]
        import memory_profile

        from jaxmemprof.store.xprof import profile_files

        real = profile_files(tmp / "real")[0][0]
        if args.profile:
            _compare(Path(args.profile), args, env, tmp)
            if args.hosts:  # `report` on it as one host, and on --hosts copies of it as a pod's hosts
                _report_hosts(Path(args.profile), args.hosts, env, tmp / "real-pod")
        one = tmp / "one" / "plugins" / "profile" / "run" / "host.xplane.pb"
        memory_profile.write(real, one, steps=args.steps)
        size = one.stat().st_size
        print(f"one host: {size / 2**20:.1f} MiB, 4 chips, {args.steps} steps of the MLP's allocations")
        ours = [_run([sys.executable, "-c", OURS, str(one)], env) for _ in range(args.repeat)]
        ours_s = statistics.median(o["s"] for o in ours)
        print(f"jaxmemprof: {ours_s:.3f} s (median of {args.repeat}; {ours[0]['programs']} programs)")
        if args.xprof_python:
            program = _program_name(real)
            theirs = []
            for _ in range(args.repeat):
                work = tmp / f"xp{len(theirs)}"
                shutil.copytree(one.parent, work)
                theirs.append(_run([args.xprof_python, "-c", THEIRS, str(work / one.name), program],
                                   dict(os.environ)))
            theirs_s = statistics.median(t["s"] for t in theirs)
            print(f"XProf (memory_profile + memory_viewer): {theirs_s:.3f} s "
                  f"({statistics.median(t['memory_profile_s'] for t in theirs):.3f} + "
                  f"{statistics.median(t['memory_viewer_s'] for t in theirs):.3f})")
            print(f"ratio jaxmemprof / XProf: {ours_s / theirs_s:.2f} (goal <= 0.5)")
            mine = {k.split(":")[-1]: v for k, v in ours[0]["peaks"].items()}
            same = mine == theirs[0]["peaks"]
            print(f"each chip's peak: jaxmemprof {sorted(mine.values())} vs XProf {sorted(theirs[0]['peaks'].values())}"
                  f" -> {'equal' if same else 'DIFFERENT'}; XProf's memory viewer of the step: "
                  f"{theirs[0]['viewer_peak_mib']:.3f} MiB")
        else:
            print("XProf: not measured (give --xprof-python: a Python with `pip install xprof`)")
        if not args.hosts:
            return
        pod = tmp / "pod" / "plugins" / "profile" / "run"
        pod.mkdir(parents=True)
        for h in range(args.hosts):
            if h == args.hosts - 1:
                memory_profile.write(real, pod / f"host{h:02d}.xplane.pb", steps=args.steps, extra={3: 64 * 2**20})
            else:
                shutil.copy(one, pod / f"host{h:02d}.xplane.pb")
        cmd = [sys.executable, "-m", "jaxmemprof", "report"]
        wall1, rss1 = _max_rss([*cmd, str(tmp / "one")], env)
        wall, rss = _max_rss([*cmd, str(tmp / "pod")], env)
        print(f"report, 1 host: {wall1:.2f} s, max RSS {rss1 / 1024:.0f} MiB; {args.hosts} hosts "
              f"({args.hosts * size / 2**20:.0f} MiB of profiles): {wall:.2f} s, max RSS {rss / 1024:.0f} MiB")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _program_name(real: Path, module: str = "jit_train_step") -> str:
    """The program as XProf names it: ``jit_train_step(N)``."""
    from jaxmemprof.xprof.xplane import read_host

    h = read_host(real)
    p = next(p for p in h.programs if p.module == module)
    return f"{p.module}({p.program_id})"


def _compare(profile: Path, args, env, tmp: Path) -> None:
    """A real profile read by both, each in a fresh process (medians of --repeat)."""
    program = _program_name(profile, args.program)
    ours = statistics.median(_run([sys.executable, "-c", OURS, str(profile)], env)["s"] for _ in range(args.repeat))
    print(f"{profile.name} ({profile.stat().st_size / 2**20:.1f} MiB): jaxmemprof {ours:.3f} s", end="")
    if not args.xprof_python:
        print("; XProf: not measured (no --xprof-python)")
        return
    times = []
    for n in range(args.repeat):
        work = tmp / f"real{n}"
        work.mkdir()
        shutil.copy(profile, work / profile.name)  # XProf writes its programs' HLO beside the file
        times.append(_run([args.xprof_python, "-c", THEIRS, str(work / profile.name), program], dict(os.environ))["s"])
    theirs = statistics.median(times)
    print(f"; XProf {theirs:.3f} s; ratio {ours / theirs:.2f} (goal <= 0.5)")


def _report_hosts(host: Path, hosts: int, env, where: Path) -> None:
    """``python -m jaxmemprof report`` on ``host`` alone, then on ``hosts``
    copies of it as one capture: wall time and maximum resident memory."""
    cmd = [sys.executable, "-m", "jaxmemprof", "report"]
    for n in (1, hosts):
        capture = where / str(n) / "plugins" / "profile" / "run"
        capture.mkdir(parents=True)
        for h in range(n):
            shutil.copy(host, capture / f"host{h:02d}.xplane.pb")
        wall, rss = _max_rss([*cmd, str(where / str(n))], env)
        print(f"report, {host.name} as {n} host(s): {wall:.2f} s, max RSS {rss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()

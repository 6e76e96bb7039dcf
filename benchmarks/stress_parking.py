"""Stress the parking of the program's threads (capture/parking.py) against
threads that start and end all the time while the script ends.

A program keeps threads starting and ending (short-lived workers, some of
them under an audit hook of the program's that writes every event it sees
to a file with ``os.write``, which gives the GIL away), and a long-lived
daemon thread that prints a line every 5 ms. Its script then ends. Each run
is made twice, side by side: under plain python (which freezes the daemon
threads as it finalises) and with the parking run where jaxmemprof runs it
(the script's end), then 0.4 s of the end phase (the main thread working on).
The parked form must exit 0 with python's output: the same ``done`` line, no
line of the ticker's after the script's end, nothing on stderr. The old
3.11 parking (a walk of the thread states through raw pointers, with the
program's audit hook run between its calls) crashed or printed here.

    python benchmarks/stress_parking.py --runs 200          # the long form (each Python)
    python benchmarks/stress_parking.py --runs 6 --tick 0.05  # tests/test_parking.py
    python benchmarks/stress_parking.py --runs 10 --form run  # under `jaxmemprof run` (needs JAX)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

PROGRAM = r'''
import os, sys, threading, time

log = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
TICK = float(os.environ.get("STRESS_TICK", "0.005"))
hooked = threading.local()

def hook(event, args):  # the program's audit hook: writes (the GIL changes hands) in the threads that ask
    if getattr(hooked, "on", False) or threading.current_thread() is threading.main_thread():
        os.write(log, (event + "\n").encode())
        if event.startswith("ctypes."):
            time.sleep(0.0005)  # a slow log: the other threads run meanwhile

sys.addaudithook(hook)

def short(i):
    hooked.on = i % 2 == 0
    total = 0
    for k in range(200):
        total += k * i
        if k % 50 == 0:
            os.getpid()  # no event; a call
            sys._getframe()  # an audited event (sys._getframe)
    return total

def spawner():
    i = 0
    while True:
        t = threading.Thread(target=short, args=(i,), daemon=True)
        try:
            t.start()
        except RuntimeError:  # python is finalising
            return
        i += 1

def ticker():
    while True:
        sys.stdout.write("tick\n")
        sys.stdout.flush()
        time.sleep(TICK)

for _ in range(3):
    threading.Thread(target=spawner, daemon=True).start()
threading.Thread(target=ticker, daemon=True).start()
time.sleep(0.3)
sys.stdout.write("end of script\n")
sys.stdout.flush()
'''

DRIVER = r'''
import sys, time
sys.path.insert(0, sys.argv[3])
program, log = sys.argv[2], sys.argv[1]
sys.argv = [program, log]
from jaxmemprof.capture.parking import park_program_threads  # imported before the script, as run does
ns = {"__name__": "__main__"}
exec(compile(open(program).read(), program, "exec"), ns)
# The script is over: what capture/runner.py does here.
park_program_threads(lambda f: f == program)
t0 = time.monotonic()
n = 0
while time.monotonic() - t0 < 0.4:  # the end phase: the main thread works on
    n += sum(range(1000))
'''


TICK = 0.005  # the ticker's period (--tick)


def after_end(out: str) -> int:
    """Lines printed after the script's last line."""
    lines = out.splitlines()
    return len(lines) - 1 - lines.index("end of script") if "end of script" in lines else -1


def one(tmp: Path, form: str, python: str) -> tuple:
    program = tmp / "prog.py"
    program.write_text(PROGRAM)
    log = tmp / "audit.log"
    env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu", STRESS_TICK=str(TICK))
    if form == "python":
        cmd = [python, str(program), str(log)]
    elif form == "driver":
        cmd = [python, "-c", DRIVER, str(log), str(program), str(REPO)]
    else:
        cmd = [python, "-m", "jaxmemprof", "run", "-q", "--no-holders", "-o", str(tmp / "run"), str(program),
               str(log)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=tmp)
    return proc.returncode, after_end(proc.stdout), proc.stderr.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--form", choices=("driver", "run"), default="driver")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--tick", type=float, default=0.005,
                    help="the ticker's period in seconds (the window a late parking would print in)")
    args = ap.parse_args()
    global TICK
    TICK = args.tick
    bad = 0
    py_after = ours_after = 0
    t0 = time.monotonic()
    for i in range(args.runs):
        with tempfile.TemporaryDirectory() as d:
            a, b = Path(d) / "py", Path(d) / "ours"
            a.mkdir()
            b.mkdir()
            py = one(a, "python", args.python)
            ours = one(b, args.form, args.python)
        py_after += max(py[1], 0)
        ours_after += max(ours[1], 0)
        # python: exit 0, nothing on stderr, at most a line of the ticker's as
        # it finalises; parked: the same.
        if ours[0] != 0 or ours[1] < 0 or ours[1] > 1 or (args.form == "driver" and ours[2]) or py[0] != 0:
            bad += 1
            print(f"run {i}: python {py[:2]}, {args.form} {ours[:2]}: {ours[2][-3000:]}", file=sys.stderr)
    print(f"{args.runs} runs ({sys.version.split()[0]}, {args.form}): {bad} bad; ticker lines after the script's end "
          f"python {py_after}, parked {ours_after}; {time.monotonic() - t0:.1f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""Issue 62 item 1, end to end: a program with an audit hook
(``sys.addaudithook``), three worker threads building batches and
``jaxmemprof.snapshot()`` each step, under python and under ``jaxmemprof run``,
RUNS times each: the same exit status and output every time (the old frame
reads segfaulted it: exit 139, no output). Prints one line per run and the
snapshots' cost said by run.

    python benchmarks/bench_audited.py --runs 10 --steps 1500 [--python /work/venv3.13/bin/python]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_frames_safe import AUDITED_PROGRAM


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    same = 0
    with tempfile.TemporaryDirectory() as tmp:
        script = pathlib.Path(tmp) / "audited.py"
        script.write_text(AUDITED_PROGRAM.replace("STEPS", str(args.steps)))
        for i in range(args.runs):
            t0 = time.perf_counter()
            py = subprocess.run([args.python, str(script)], cwd=tmp, env=env, capture_output=True, text=True,
                                timeout=900)
            t1 = time.perf_counter()
            out = pathlib.Path(tmp) / f"run{i}"
            run = subprocess.run([args.python, "-m", "jaxmemprof", "run", "-o", str(out), str(script)], cwd=tmp,
                                 env=env, capture_output=True, text=True, timeout=1800)
            t2 = time.perf_counter()
            ok = (run.returncode, run.stdout) == (py.returncode, py.stdout) and py.returncode == 0
            same += ok
            said = [line for line in run.stderr.splitlines() if "program's thread" in line or "holders:" in line]
            print(f"run {i + 1}: python rc {py.returncode} {py.stdout.strip()!r} {t1 - t0:.1f} s; "
                  f"run rc {run.returncode} {run.stdout.strip()!r} {t2 - t1:.1f} s; {'same' if ok else 'DIFFERENT'}"
                  + "".join(f"\n    {line}" for line in said), flush=True)
            if not ok:
                print(run.stderr[-3000:])
    print(f"{sys.version.split()[0] if args.python == sys.executable else args.python}: "
          f"{same} of {args.runs} runs as under python")
    return 0 if same == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())

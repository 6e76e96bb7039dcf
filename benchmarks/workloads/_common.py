"""Shared by the workloads: the step-count options and the calibration.

A workload does a fixed amount of work (``--steps N``) so that a slower run
shows up as a longer wall time. ``--calibrate SECONDS`` times the steps after
compilation and prints, as JSON on stdout, how many steps take SECONDS here.
"""

from __future__ import annotations

import argparse
import json
import math
import time


def parse_args(description: str, default_steps: int, extra=None):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--steps", type=int, default=default_steps, help="training steps to run")
    p.add_argument("--calibrate", type=float, default=None, metavar="SECONDS",
                   help="print how many steps take SECONDS (JSON) instead of training")
    if extra is not None:
        extra(p)
    return p.parse_args()


def calibrate(run_steps, seconds: float, probe_s: float = 1.5) -> None:
    """``run_steps(n)`` runs n steps and waits for the result."""
    run_steps(20)  # compile and warm up
    n, elapsed = 20, 0.0
    while True:
        t0 = time.perf_counter()
        run_steps(n)
        elapsed = time.perf_counter() - t0
        if elapsed >= probe_s:
            break
        n = max(n * 2, int(n * probe_s / max(elapsed, 1e-6) * 1.1))
    step_s = elapsed / n
    print(json.dumps({"steps": max(1, math.ceil(seconds / step_s)), "step_s": step_s}))


def run(run_steps, args) -> None:
    """``--steps N`` steps, or with ``--calibrate`` the step count printed."""
    if args.calibrate is not None:
        calibrate(run_steps, args.calibrate)
    else:
        run_steps(args.steps)

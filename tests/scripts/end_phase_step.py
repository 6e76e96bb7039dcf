"""A small training step whose compiles at the end of `run --plan` take a
while (a Python loop unrolled into the step), for tests/test_end_phase.py.

Usage: end_phase_step.py MARKER [--ops N] [--steps N] [--status N]
       [--term-handler CHECKPOINT] [--heartbeat FILE] [--interrupt]
       [--stubborn-retrace] [--no-excepthook] [--usr1-handler FILE]
       [--alarm SECONDS]

MARKER is written by the script's last atexit handler: the script is over
once it exists. --term-handler installs a SIGTERM handler that writes
CHECKPOINT and exits (a preemption handler); --heartbeat starts a daemon
thread appending a line to FILE every 0.1 s; --interrupt ends the script by
an uncaught KeyboardInterrupt; --stubborn-retrace: the step's Python, traced
again once the script is over (AT_END), writes a line to MARKER.retrace
(opened as the script starts, and written through ``os.write`` as it was
when the script started: a re-trace may open no file for writing, nor write
through os.write, but a function bound before under another name is not
seen), then sleeps 20 s swallowing every exception (a re-trace that does not
come back);
--no-excepthook sets sys.excepthook to None as the script ends (no thread
can be made afterwards); --usr1-handler: a SIGUSR1 handler that writes FILE;
--alarm: a SIGALRM handler that writes MARKER.alarm, its timer set to fire
SECONDS after the script's last line.
"""

import argparse
import atexit
import os
import signal
import sys
import threading
import time

import jax
import jax.numpy as jnp

parser = argparse.ArgumentParser()
parser.add_argument("marker")
parser.add_argument("--ops", type=int, default=60)
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--status", type=int, default=0)
parser.add_argument("--term-handler", default=None)
parser.add_argument("--heartbeat", default=None)
parser.add_argument("--interrupt", action="store_true")
parser.add_argument("--stubborn-retrace", action="store_true")
parser.add_argument("--no-excepthook", action="store_true")
parser.add_argument("--usr1-handler", default=None)
parser.add_argument("--alarm", type=float, default=None)
args = parser.parse_args()
AT_END = False


if args.stubborn_retrace:
    RETRACE = os.open(args.marker + ".retrace", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
WRITE = os.write  # bound now: the end phase's containment replaces os.write, not this name


def stubborn():
    WRITE(RETRACE, b"retracing\n")
    t0 = time.monotonic()
    while time.monotonic() - t0 < 20:
        try:
            time.sleep(0.05)
        except BaseException:
            pass


@jax.jit
def step(w, x):
    if AT_END and args.stubborn_retrace:
        stubborn()
    h = x
    for i in range(args.ops):  # unrolled: each trace and compile of the step takes a while
        h = jnp.tanh(h @ w + i)
    return w - 0.01 * (h.T @ x), h.sum()


if args.term_handler:
    def save_checkpoint_and_exit(signum, frame):
        with open(args.term_handler, "w") as f:
            f.write(f"checkpoint at signal {signum}\n")
        sys.exit(3)

    signal.signal(signal.SIGTERM, save_checkpoint_and_exit)

if args.usr1_handler:
    def on_usr1(signum, frame):
        with open(args.usr1_handler, "a") as f:
            f.write(f"SIGUSR1 handled at {time.time()}\n")

    signal.signal(signal.SIGUSR1, on_usr1)

if args.alarm is not None:
    def on_alarm(signum, frame):
        with open(args.marker + ".alarm", "a") as f:
            f.write(f"SIGALRM handled at {time.time()}\n")

    signal.signal(signal.SIGALRM, on_alarm)

if args.heartbeat:
    def beat():
        while True:
            with open(args.heartbeat, "a") as f:
                f.write(f"{time.time()}\n")
            time.sleep(0.1)

    threading.Thread(target=beat, daemon=True).start()

w = jnp.eye(64) * 0.5
x = jnp.ones((32, 64))
for _ in range(args.steps):
    w, loss = step(w, x)
print("loss", float(loss), flush=True)


def ended():
    global AT_END
    AT_END = True
    with open(args.marker, "w") as f:
        f.write(f"{time.time()}\n")


atexit.register(ended)
if args.heartbeat:
    time.sleep(0.35)
if args.alarm is not None:
    signal.setitimer(signal.ITIMER_REAL, args.alarm)
if args.no_excepthook:
    sys.excepthook = None
if args.interrupt:
    raise KeyboardInterrupt
sys.exit(args.status)

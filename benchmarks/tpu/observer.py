"""What in a snapshot changes how far a fast loop runs ahead of the chip.

    python3 benchmarks/tpu/observer.py OUT.json --after none|profile|live|sleep|thread-profile|stats
        [--sleep-s S] [--width N] [--steps N]

The lane's fast loop (sample_runs/libraries/linen_trainstate.py's step: a
flax linen TrainState under jax.jit, optax adam, width 65536, 40 steps of
about 2 ms on a v5e) under plain python, with one part of a snapshot done in
the program's thread after each step's dispatch:

- ``none``: nothing (python);
- ``profile``: ``jax.profiler.device_memory_profile()``;
- ``live``: ``jax.live_arrays()``;
- ``stats``: ``memory_stats()`` of device 0;
- ``sleep``: the host busy ``--sleep-s`` (what a whole snapshot costs, 1.4 ms);
- ``thread-profile``: ``device_memory_profile()`` on another thread, the
  program's thread only waking it;
- ``grid-busy``: the host busy ``--sleep-s`` at the steps jaxmemprof's grid
  snapshots (capture/steps.py): today's step snapshots;
- ``grid-deferred``: at those steps only ``jax.live_arrays()`` in the
  program's thread, kept until another thread has profiled them and spent
  0.8 ms of Python (a journal write): a step snapshot that only lists the
  arrays in the program's thread.

OUT.json gets the chip's counters after the last step (``memory_stats()``),
the host's seconds per step (dispatch and the part together), and the part's
own seconds. Whether a part drains the chip's queue shows as generations of
the step's outputs queued (``peak_bytes_in_use``) beside ``none``'s.
"""
import argparse
import json
import sys
import threading
import time
from pathlib import Path

import jax

from jaxmemprof.capture.steps import on_grid

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--after", default="none",
                    choices=["none", "profile", "live", "sleep", "thread-profile", "stats", "grid-busy",
                             "grid-deferred"])
parser.add_argument("--sleep-s", type=float, default=0.0014)
parser.add_argument("--width", type=int, default=65536)
parser.add_argument("--steps", type=int, default=40)
args = parser.parse_args()

# The lane's program itself, up to its loop: its model, TrainState and jitted step.
PROGRAM = Path(__file__).resolve().parents[2] / "sample_runs" / "libraries" / "linen_trainstate.py"
head = PROGRAM.read_text().split("\nx, y = ", 1)[0]
sys.argv = [str(PROGRAM), "--width", str(args.width)]
program: dict = {"__name__": "linen_trainstate"}
exec(compile(head, str(PROGRAM), "exec"), program)
train_step, state, jnp = program["train_step"], program["state"], program["jnp"]

wake, done = threading.Event(), threading.Event()
held: list = []  # grid-deferred: the arrays listed at a step, until the other thread has profiled them


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def profiler_thread():
    while True:
        wake.wait()
        wake.clear()
        jax.profiler.device_memory_profile()
        if args.after == "grid-deferred":  # and the snapshot's journal write, 0.8 ms of Python, GIL held
            busy(0.0008)
            held.clear()
        done.set()


if args.after in ("thread-profile", "grid-deferred"):
    threading.Thread(target=profiler_thread, daemon=True).start()

dev = jax.devices()[0]
x, y = jnp.ones((32, 256)), jnp.zeros((32,), jnp.int32)
state, loss = train_step(state, x, y)  # compiled, and its first outputs made
jax.block_until_ready(loss)
part_s = []
t0 = time.perf_counter()
for i in range(args.steps):
    state, loss = train_step(state, x, y)
    p0 = time.perf_counter()
    marker = i + 2  # the step's marker as the jit probe counts its calls (the first, above, is 1)
    if args.after == "profile":
        jax.profiler.device_memory_profile()
    elif args.after == "live":
        jax.live_arrays()
    elif args.after == "stats":
        dev.memory_stats()
    elif args.after == "sleep":
        busy(args.sleep_s)
    elif args.after == "thread-profile":
        wake.set()
    elif args.after == "grid-busy" and on_grid(marker):  # today's step snapshot, on jaxmemprof's grid
        busy(args.sleep_s)
    elif args.after == "grid-deferred" and on_grid(marker):  # only the list in the program's thread
        held.append(jax.live_arrays())
        wake.set()
    part_s.append(time.perf_counter() - p0)
host_s = time.perf_counter() - t0
stats = dev.memory_stats() or {}  # none on a CPU
jax.block_until_ready(loss)
with open(args.out, "w") as f:
    json.dump({"after": args.after, "steps": args.steps, "host_s_per_step": host_s / args.steps,
               "part_s_median": sorted(part_s)[len(part_s) // 2], "memory_stats": stats,
               "loss": float(loss)}, f)
print(args.after, f"{host_s / args.steps * 1e3:.2f} ms/step", stats.get("peak_bytes_in_use"))

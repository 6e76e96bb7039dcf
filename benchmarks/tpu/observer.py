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
  program's thread only waking it.

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

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--after", default="none",
                    choices=["none", "profile", "live", "sleep", "thread-profile", "stats"])
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


def profiler_thread():
    while True:
        wake.wait()
        wake.clear()
        jax.profiler.device_memory_profile()
        done.set()


if args.after == "thread-profile":
    threading.Thread(target=profiler_thread, daemon=True).start()

dev = jax.devices()[0]
x, y = jnp.ones((32, 256)), jnp.zeros((32,), jnp.int32)
state, loss = train_step(state, x, y)  # compiled, and its first outputs made
jax.block_until_ready(loss)
part_s = []
t0 = time.perf_counter()
for _ in range(args.steps):
    state, loss = train_step(state, x, y)
    p0 = time.perf_counter()
    if args.after == "profile":
        jax.profiler.device_memory_profile()
    elif args.after == "live":
        jax.live_arrays()
    elif args.after == "stats":
        dev.memory_stats()
    elif args.after == "sleep":
        end = p0 + args.sleep_s
        while time.perf_counter() < end:
            pass
    elif args.after == "thread-profile":
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

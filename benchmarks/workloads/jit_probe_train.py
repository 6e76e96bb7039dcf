"""Workload for bench_jit_probe.py: an MLP trained with SGD, ``params = step(params, x, y)``.

The parameters are the only state; the batches are made once and kept on the
device (they stay alive, so they are no donation candidates). The step is
jitted on one line, donating the arguments given by ``--donate`` (none by
default), so the benchmark can record the loop, read jaxmemprof's "donate"
finding, apply it with ``--donate 0`` and record again. The loss is read
every ``--log-every`` steps, as a training loop that logs would.

At the end one line of JSON goes to stdout: steps, loop seconds (the timed
loop only: after the first, compiling, step), the main thread's CPU seconds
in that loop (``time.thread_time``), microseconds per step, and the
parameter bytes.

    python benchmarks/workloads/jit_probe_train.py [--width W] [--depth L] [--batch B]
        [--steps N | --calibrate SECONDS] [--donate ARGNUMS]

Sizes used by the benchmark: ``--width 256 --depth 4 --batch 64`` (about 1 ms
a step on 2 cores), ``--width 8 --depth 2 --batch 4`` (tens of microseconds:
bound by Python dispatch, the worst case for a per-call cost), and
``--depth 4`` at widths 512, 2048 and 4096 (4, 64 and 256 MiB of parameters).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import time

import numpy as np

import jax
import jax.numpy as jnp

N_BATCHES = 4


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--donate", default="", metavar="ARGNUMS",
                   help="comma-separated argument positions to donate, e.g. 0 (default: none)")
    p.add_argument("--calibrate", type=float, default=None, metavar="SECONDS",
                   help="print (JSON) how many steps take SECONDS here, instead of training")
    return p.parse_args()


@functools.partial(jax.jit, static_argnums=(0, 1))
def init_layer(width, seed):
    # Deterministic, roughly uniform weights made by one fused loop: no
    # temporaries, so that making the parameters never needs more memory
    # than the training step (jax.random.normal would hold 3x a layer).
    i = jnp.arange(width, dtype=jnp.float32)
    w = jnp.sin(i[:, None] * (12.9898 + seed) + i[None, :] * 78.233) * 43758.5453
    return (w - jnp.floor(w) - 0.5) * (3.4 / np.sqrt(width))


def init(width, depth):
    return [{"w": init_layer(width, i), "b": jnp.zeros(width, jnp.float32)} for i in range(depth)]


def loss_fn(params, x, y):
    h = x
    for layer in params:
        h = jnp.tanh(h @ layer["w"] + layer["b"])
    return jnp.mean((h - y) ** 2)


def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), loss


def main():
    args = parse_args()
    donate = tuple(int(a) for a in args.donate.split(",") if a.strip())
    step = jax.jit(train_step, donate_argnums=donate)

    rng = np.random.default_rng(0)
    xs = [jax.device_put(rng.standard_normal((args.batch, args.width), dtype=np.float32)) for _ in range(N_BATCHES)]
    ys = [jax.device_put(rng.standard_normal((args.batch, args.width), dtype=np.float32)) for _ in range(N_BATCHES)]
    state = {"params": init(args.width, args.depth)}
    state_bytes = sum(int(a.nbytes) for a in jax.tree.leaves(state["params"]))

    def run_steps(n, start):
        # The dict gives up its reference, so that the statement making the
        # call holds the only one: params = step(params, ...) drops the old
        # parameters, and jaxmemprof can advise donating them.
        params, loss = state.pop("params"), None
        for i in range(start, start + n):
            params, loss = step(params, xs[i % N_BATCHES], ys[i % N_BATCHES])
            if (i + 1) % args.log_every == 0:
                float(loss)
        float(loss)
        state["params"] = params

    run_steps(1, 0)  # compiles
    if args.calibrate is not None:
        n, elapsed, done = 20, 0.0, 1
        while True:
            t0 = time.perf_counter()
            run_steps(n, done)
            elapsed = time.perf_counter() - t0
            done += n
            if elapsed >= 1.0:
                break
            n = max(n * 2, int(n * 1.0 / max(elapsed, 1e-6) * 1.1))
        step_s = elapsed / n
        print(json.dumps({"steps": max(1, math.ceil(args.calibrate / step_s)), "step_us": step_s * 1e6}))
        return
    t0, c0 = time.perf_counter(), time.thread_time()
    run_steps(args.steps - 1, 1)
    loop_s, loop_cpu_s = time.perf_counter() - t0, time.thread_time() - c0
    print(json.dumps({"steps": args.steps, "loop_s": loop_s, "loop_cpu_s": loop_cpu_s,
                      "step_us": loop_s / max(args.steps - 1, 1) * 1e6, "state_bytes": state_bytes}))

if __name__ == "__main__":
    main()

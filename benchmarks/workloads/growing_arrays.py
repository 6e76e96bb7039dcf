"""Workload: a training loop that keeps one small array a step, until
``--arrays`` are alive (a leak: every snapshot is a new high, so the
holder search runs as often as its budget lets it), beside 1,000 arrays
held in a dict from the start (parameters).

    python benchmarks/workloads/growing_arrays.py [--arrays N] [--steps N] [--calibrate SECONDS]
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import parse_args, run
from _steps import step


def main():
    args = parse_args(__doc__.splitlines()[0], default_steps=20000,
                      extra=lambda p: p.add_argument("--arrays", type=int, default=10000))
    params = {f"layer{i}": jnp.full((8,), i, jnp.float32) for i in range(1000)}  # noqa: F841 (kept alive)
    key = jax.random.key(0)
    state = {"s": (jax.random.normal(key, (64, 64)) * 0.1, jnp.zeros(64)),
             "x": jax.random.normal(key, (32, 64)), "kept": []}

    def run_steps(n):
        s, x, loss, kept = state["s"], state["x"], None, state["kept"]
        every = max(1, n // args.arrays)
        for i in range(n):
            s, loss = step(s, x)
            if i % every == 0 and len(kept) < args.arrays:
                kept.append(loss)  # the leak: a loss kept as an array
        float(loss)
        state["s"] = s

    run(run_steps, args)


if __name__ == "__main__":
    main()

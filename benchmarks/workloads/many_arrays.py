"""Workload (b): a training loop while 20,000 small arrays stay alive.

The arrays are made once, by JAX computations (slices of one array), and kept
in a list, as a model with many small parameters or a cache would; then a
small jitted step runs on its own state. The step is short, so the loop is
bound by Python dispatch: any time the sampler holds the GIL shows directly.

    python benchmarks/workloads/many_arrays.py [--arrays N] [--steps N] [--calibrate SECONDS]
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import parse_args, run
from _steps import step


def make_arrays(n: int) -> list:
    big = jnp.arange(n * 8, dtype=jnp.float32).reshape(n, 8)
    return [big[i] for i in range(n)]


def main():
    args = parse_args(__doc__.splitlines()[0], default_steps=20000,
                      extra=lambda p: p.add_argument("--arrays", type=int, default=20000))
    held = make_arrays(args.arrays)  # noqa: F841 (kept alive on purpose)
    key = jax.random.key(0)
    state = {"s": (jax.random.normal(key, (64, 64)) * 0.1, jnp.zeros(64)),
             "x": jax.random.normal(key, (32, 64))}

    def run_steps(n):
        s, x, loss = state["s"], state["x"], None
        for i in range(n):
            s, loss = step(s, x)
            if i % 50 == 0:
                float(loss)
        float(loss)
        state["s"] = s

    run(run_steps, args)


if __name__ == "__main__":
    main()

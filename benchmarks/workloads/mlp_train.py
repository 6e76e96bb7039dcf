"""Workload (a): a small MLP trained with SGD on synthetic batches.

Few live arrays (the parameters, a batch, the loss); each step copies a NumPy
batch to the device (``jax.device_put``), runs one jitted step that donates
the old parameters, and every 50 steps reads the loss, as a training loop
that logs would.

    python benchmarks/workloads/mlp_train.py [--steps N] [--calibrate SECONDS]
"""

from __future__ import annotations

import functools
import os
import sys

import numpy as np

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import parse_args, run

SIZES = (256, 512, 512, 10)
BATCH = 128
N_BATCHES = 32


def init(key):
    params = []
    for d_in, d_out in zip(SIZES[:-1], SIZES[1:]):
        key, k = jax.random.split(key)
        params.append({"w": jax.random.normal(k, (d_in, d_out)) / np.sqrt(d_in), "b": jnp.zeros(d_out)})
    return params


def loss_fn(params, x, y):
    h = x
    for layer in params[:-1]:
        h = jax.nn.relu(h @ layer["w"] + layer["b"])
    logits = h @ params[-1]["w"] + params[-1]["b"]
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(y, SIZES[-1]), axis=-1))


@functools.partial(jax.jit, donate_argnums=0)
def step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), loss


def main():
    args = parse_args(__doc__.splitlines()[0], default_steps=3000)
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((N_BATCHES, BATCH, SIZES[0]), dtype=np.float32)
    ys = rng.integers(0, SIZES[-1], (N_BATCHES, BATCH)).astype(np.int32)
    state = {"params": init(jax.random.key(0)), "i": 0}

    def run_steps(n):
        params, i, loss = state["params"], state["i"], None
        for _ in range(n):
            x, y = jax.device_put(xs[i % N_BATCHES]), jax.device_put(ys[i % N_BATCHES])
            params, loss = step(params, x, y)
            i += 1
            if i % 50 == 0:
                float(loss)
        float(loss)
        state["params"], state["i"] = params, i

    run(run_steps, args)


if __name__ == "__main__":
    main()

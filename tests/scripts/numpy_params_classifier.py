"""A classifier shaped like jax's examples' mnist_classifier: its first
parameters are numpy float64 arrays (numpy.random), which JAX casts to
float32 before the first call; every later call gets the step's own jax
arrays back. ``--donate`` jits the update with its parameters donated (the
fix). ``--leftover``: fed as the example's ``data_stream`` feeds it, two
epochs of 680 examples in batches of 128, each epoch's last the leftover 40.

Prints, as its last line, the oracle in JSON: the true peak (for each call,
the bytes of the program's device arrays live just before it (counted by
itself: its parameters, once they are JAX's), less its arguments that were
device arrays, plus XLA's call peak of the signature it
runs: memory_analysis()), what XLA aliases in the update as jitted, the
parameters' bytes on the device (float32), and the JAX warnings about
unusable donated buffers."""

import json
import sys
import warnings

import numpy as np
import numpy.random as npr

import jax
import jax.numpy as jnp

DONATE = "--donate" in sys.argv
LEFTOVER = "--leftover" in sys.argv
warnings.simplefilter("always")


def init_random_params(scale, layer_sizes, rng=npr.RandomState(0)):  # noqa: B008 (as in JAX's mnist_classifier example, which this script copies)
    return [(scale * rng.randn(m, n), scale * rng.randn(n)) for m, n in zip(layer_sizes[:-1], layer_sizes[1:])]


def predict(params, inputs):
    activations = inputs
    for w, b in params[:-1]:
        activations = jnp.tanh(jnp.dot(activations, w) + b)
    final_w, final_b = params[-1]
    logits = jnp.dot(activations, final_w) + final_b
    return logits - jax.scipy.special.logsumexp(logits, axis=1, keepdims=True)


def loss(params, batch):
    inputs, targets = batch
    return -jnp.mean(jnp.sum(predict(params, inputs) * targets, axis=1))


def update(params, batch):
    grads = jax.grad(loss)(params, batch)
    return [(w - 0.001 * dw, b - 0.001 * db) for (w, b), (dw, db) in zip(params, grads)]


update = jax.jit(update, donate_argnums=(0,)) if DONATE else jax.jit(update)


def analysis(*args):
    return update.lower(*args).compile().memory_analysis()


def call_peak(ma):
    return (ma.argument_size_in_bytes + ma.output_size_in_bytes - ma.alias_size_in_bytes
            + ma.temp_size_in_bytes + ma.generated_code_size_in_bytes)


rng = npr.RandomState(0)
params = init_random_params(0.1, [784, 1024, 1024, 10])
peaks, aliased = [], []
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for i in range(12):
        rows = 40 if LEFTOVER and i % 6 == 5 else 128
        x = rng.randn(rows, 784).astype(np.float32)
        y = np.eye(10, dtype=np.float32)[rng.randint(0, 10, rows)]
        ma = analysis(params, (x, y))
        live = sum(a.nbytes for a in jax.tree_util.tree_leaves(params) if isinstance(a, jax.Array))
        on_device = sum(a.nbytes for a in jax.tree_util.tree_leaves((params, x, y)) if isinstance(a, jax.Array))
        peaks.append(live - on_device + call_peak(ma))
        aliased.append(ma.alias_size_in_bytes)
        params = update(params, (x, y))
unusable = [str(w.message) for w in caught if "donated buffers were not usable" in str(w.message)]
print(json.dumps({"true_peak": max(peaks), "aliased": aliased,
                  "params": sum(int(a.nbytes) for a in jax.tree_util.tree_leaves(params)),
                  "unusable_warnings": unusable}))

"""A step fed numpy batches of 128 rows and, at each epoch's end, the
smaller leftover (40 rows), as jax's examples' data_stream does; its 8 MiB
state is carried from call to call. ``--donate`` jits it with the state
donated (the fix). The leftover's signature is first called after the jit
probe's first sampled calls.

Prints, as its last line, the oracle in JSON: the true peak (for each call,
the bytes of the program's device arrays live just before it (counted by
itself: the state, its only one), less its arguments that were device arrays, plus XLA's call peak of the signature it
runs: memory_analysis())."""

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

DONATE = "--donate" in sys.argv


def update(w, x):
    return w - 1e-3 * jnp.tanh(x.sum()) * w


update = jax.jit(update, donate_argnums=(0,)) if DONATE else jax.jit(update)


def call_peak(*args):
    ma = update.lower(*args).compile().memory_analysis()
    return (ma.argument_size_in_bytes + ma.output_size_in_bytes - ma.alias_size_in_bytes
            + ma.temp_size_in_bytes + ma.generated_code_size_in_bytes)


w = jnp.zeros((2048, 1024), jnp.float32)  # 8 MiB of state
rng = np.random.default_rng(0)
data = rng.standard_normal((128 * 5 + 40, 1024)).astype(np.float32)
peaks = []
for _epoch in range(2):
    for i in range(0, len(data), 128):
        x = data[i:i + 128]
        live = w.nbytes  # the program's only device array
        peaks.append(live - w.nbytes + call_peak(w, x))
        w = update(w, x)
print(json.dumps({"true_peak": max(peaks), "state": int(w.nbytes)}))

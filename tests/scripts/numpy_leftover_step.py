"""A step fed numpy batches of 128 rows and, at each epoch's end, the
smaller leftover (40 rows), as jax's examples' data_stream does; its 8 MiB
state is carried from call to call. ``--donate`` jits it with the state
donated (the fix). The leftover's signature is first called after the jit
probe's first sampled calls. ``--masked-leftover``: the leftover batch comes
with a mask of its rows (another leaf: its arguments differ from the full
batches' in more than shapes). ``--ragged``: 9 epochs, the leftover of epoch
k 4k rows shorter than 40 (9 signatures no sampled call runs; the probe's
sampled 50th call comes between the 8th and the 9th).

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
MASKED = "--masked-leftover" in sys.argv
RAGGED = "--ragged" in sys.argv


def update(w, x):
    return w - 1e-3 * jnp.tanh(sum(leaf.sum() for leaf in jax.tree_util.tree_leaves(x))) * w


update = jax.jit(update, donate_argnums=(0,)) if DONATE else jax.jit(update)


_peaks: dict = {}


def call_peak(*args):
    key = tuple((x.shape, str(x.dtype)) for x in jax.tree_util.tree_leaves(args))
    if key not in _peaks:  # one compile of each signature
        ma = update.lower(*args).compile().memory_analysis()
        _peaks[key] = (ma.argument_size_in_bytes + ma.output_size_in_bytes - ma.alias_size_in_bytes
                       + ma.temp_size_in_bytes + ma.generated_code_size_in_bytes)
    return _peaks[key]


w = jnp.zeros((2048, 1024), jnp.float32)  # 8 MiB of state
rng = np.random.default_rng(0)
data = rng.standard_normal((128 * 5 + 40, 1024)).astype(np.float32)
peaks = []
for epoch in range(9 if RAGGED else 2):
    for i in range(0, len(data), 128):
        x = data[i:i + 128]
        if RAGGED and len(x) < 128:
            x = x[:40 - 4 * epoch]
        if MASKED and len(x) < 128:
            x = (x, np.ones(len(x), np.float32))
        live = w.nbytes  # the program's only device array
        peaks.append(live - w.nbytes + call_peak(w, x))
        w = update(w, x)
print(json.dumps({"true_peak": max(peaks), "state": int(w.nbytes)}))

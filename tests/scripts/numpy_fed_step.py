"""A step fed numpy: 4 MiB of parameters carried on the device, another
4 MiB array kept alive beside them, and a fresh 2 MiB numpy batch at every
step (512 rows of 4 KiB; ``--batch N``: N rows), copied to the device by
JAX for each call and never on it before. 8 steps (``--steps N``: N; from
the second on, each step's bytes are the same, the last loss among them).

Prints, as its last line, the oracle in JSON: for each call, the bytes of
the program's device arrays live just before it (the ones it holds, counted
by itself: jax.live_arrays() would also count an old generation a profiler's
thread holds for a moment), the
bytes of its arguments that were device arrays (the numpy batch is not one),
and XLA's call peak of the step (memory_analysis()); the true peak is the
largest of live - device arguments + call peak over the calls."""

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def step(w, x):
    g = jnp.sort(x, axis=0).T @ x  # the sorted batch: a 2 MiB temporary
    return w - 1e-6 * g, (x @ w).sum()


def call_peak(fn, *args):
    ma = fn.lower(*args).compile().memory_analysis()
    return (ma.argument_size_in_bytes + ma.output_size_in_bytes - ma.alias_size_in_bytes
            + ma.temp_size_in_bytes + ma.generated_code_size_in_bytes)


w = jnp.zeros((1024, 1024), jnp.float32)  # 4 MiB of parameters
other = jnp.ones((1024, 1024), jnp.float32)  # 4 MiB kept alive
BATCH = int(sys.argv[sys.argv.index("--batch") + 1]) if "--batch" in sys.argv else 512  # rows of 4 KiB
STEPS = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 8
rng = np.random.default_rng(0)
peaks, loss = [], None  # loss: the last step's, from the second step on
for i in range(STEPS):
    x = rng.standard_normal((BATCH, 1024)).astype(np.float32)  # a fresh 2 MiB numpy batch (at 512 rows)
    live = sum(a.nbytes for a in (w, other) + ((loss,) if i else ()))  # the last loss: 4 bytes
    on_device = sum(a.nbytes for a in (w, x) if isinstance(a, jax.Array))
    peaks.append(live - on_device + call_peak(step, w, x))
    w, loss = step(w, x)
print(json.dumps({"true_peak": max(peaks), "call_peak": call_peak(step, w, x), "params": int(w.nbytes),
                  "kept": int(other.nbytes), "batch": int(x.nbytes), "loss": float(loss)}))

"""A step fed a fresh numpy float64 batch at every call (2 MiB on the host),
which JAX, with x64 off, passes to XLA as float32 (1 MiB on the device).

Prints, as its last line, the oracle in JSON: the true peak (for each call,
the bytes of the program's device arrays live just before it, counted by
itself: w and the last loss; less its arguments that were device arrays;
plus XLA's call peak of the step: memory_analysis()), and the batch's bytes
on the host and as JAX passes it."""

import json

import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def step(w, x):
    return w - 1e-6 * (x.T @ x)[:256, :256].sum(), (x @ jnp.ones((1024,))).sum()


w = jnp.zeros((256, 256), jnp.float32)
rng = np.random.default_rng(0)
peaks, loss = [], None  # loss: the last step's, from the second step on
for i in range(6):
    x = rng.standard_normal((256, 1024))  # float64
    ma = step.lower(w, x).compile().memory_analysis()
    live = w.nbytes + (loss.nbytes if i else 0)
    peaks.append(live - w.nbytes + ma.argument_size_in_bytes
                 + ma.output_size_in_bytes - ma.alias_size_in_bytes + ma.temp_size_in_bytes
                 + ma.generated_code_size_in_bytes)
    w, loss = step(w, x)
print(json.dumps({"true_peak": max(peaks), "host_batch": int(x.nbytes), "passed_batch": int(jnp.asarray(x).nbytes)}))

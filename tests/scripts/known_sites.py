"""Arrays of known sizes on known lines, profiled twice.

Base: SITE-W 1 MiB, SITE-B 4 KiB, SITE-STEP 3 x (1 MiB + 4 KiB) (first call on
the compile path, later ones on the fast path). New: one step result freed,
SITE-CACHE 5 x 2 KiB added.
"""
import sys

import jax
import jax.numpy as jnp

base_path, new_path = sys.argv[1:3]


def init_params():
    w = jnp.zeros((256, 1024), jnp.float32)  # SITE-W
    b = jnp.ones((1024,), jnp.float32)  # SITE-B
    return w, b


@jax.jit
def step(w, b):
    return w * 2.0, b + 1.0


w, b = init_params()
history = []
for _ in range(3):
    history.append(step(w, b))  # SITE-STEP
jax.profiler.save_device_memory_profile(base_path)
cache = []
for i in range(5):
    cache.append(jnp.full((512,), i, jnp.int32))  # SITE-CACHE
del history[0]
jax.profiler.save_device_memory_profile(new_path)

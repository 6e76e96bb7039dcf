"""A loop of jitted steps with a marker each (tests/test_chip_words.py): STEPS steps of a SIZE x SIZE chain of
matmuls, with KEPT small arrays alive that every snapshot lists (its cost). At SIZE 1024 a step's work (about
60 ms on this machine's CPU) outlasts its dispatch: async dispatch keeps steps in flight and Python waits on
the device (a device-bound loop, which absorbs a snapshot shorter than a step); at SIZE 32 the step is
dispatch alone (a host-bound loop, slowed by each snapshot)."""

import sys
import time

import jax
import jax.numpy as jnp

import jaxmemprof

steps, size, kept = (int(a) for a in sys.argv[1:4])


@jax.jit
def step(x):
    for _ in range(8):
        x = jnp.tanh(x @ x) * 0.5
    return x


many = [jnp.full((4,), i, jnp.float32) for i in range(kept)]
x = step(jnp.ones((size, size), jnp.float32) * 0.01).block_until_ready()
t0 = time.perf_counter()
for i in range(steps):
    x = step(x)
    jaxmemprof.mark(f"step {i}")
x.block_until_ready()
print(f"{steps / (time.perf_counter() - t0):.1f} steps/s")

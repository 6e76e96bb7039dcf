"""A fast loop of a jitted step (each call a marker under jaxmemprof run),
then a pause: it prints "looped" after the loop and waits for a line on
stdin (or 30 s) before it ends."""
import select
import sys

import jax
import jax.numpy as jnp

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300


@jax.jit
def step(x):
    return x + 1


x = jnp.zeros((8,))
for _ in range(steps):
    x = step(x)
print("looped", float(x[0]), flush=True)
select.select([sys.stdin], [], [], 30)

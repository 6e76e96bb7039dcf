"""A step whose carried state is not donated, run long enough for the
donation's verifying compile to be made beside it (jaxmemprof run's early
compiles), with the program's own jax.monitoring listener: what it hears,
and the program's output, must be python's."""

import sys
import time

import jax
import jax.numpy as jnp

heard = []


def listener(event, seconds, **kwargs):
    if event.startswith("/jax/core/compile/backend_compile"):
        heard.append(event)


jax.monitoring.register_event_duration_secs_listener(listener)


@jax.jit
def step(w, x):
    return w - 0.01 * jnp.tanh(x @ w)


steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
pause = float(sys.argv[2]) if len(sys.argv) > 2 else 0.05
w = jnp.ones((256, 256), jnp.float32)
x = jnp.full((256, 256), 0.5, jnp.float32)
for _ in range(steps):
    w = step(w, x)
    w.block_until_ready()
    time.sleep(pause)
print("steps", steps, "compile events heard", len(heard), sorted(set(heard)))
print("w", float(w.sum()))

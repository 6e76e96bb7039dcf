"""Start-up only: import JAX, make one array, exit."""

import jax.numpy as jnp

jnp.ones(4).block_until_ready()

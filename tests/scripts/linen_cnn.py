"""A flax linen CNN trained with optax through a TrainState, its
``variables`` (from ``model.init``) kept by the program for the whole run:
after the first call, its parameters are new arrays and the first ones stay
alive beside them; the first call's signature is its own (TrainState's
step a Python 0) (issue 64: the bytes outside every call after the first).

    python linen_cnn.py BATCH [STEPS] [--donate]
"""

import functools
import json
import sys

import flax.linen as nn
from flax.training.train_state import TrainState
import jax
import jax.numpy as jnp
import optax


class CNN(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(16, (3, 3))(x))
        x = nn.avg_pool(x, (2, 2), (2, 2))
        x = nn.relu(nn.Conv(32, (3, 3))(x))
        x = nn.avg_pool(x, (2, 2), (2, 2))
        x = x.reshape((x.shape[0], -1))
        x = nn.relu(nn.Dense(128)(x))
        return nn.Dense(10)(x)


batch = int(sys.argv[1])
steps = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 6
donate = (0,) if "--donate" in sys.argv else ()
model = CNN()
variables = model.init(jax.random.PRNGKey(0), jnp.ones((1, 28, 28, 1)))  # kept: the first parameters
tx = optax.adam(1e-3)
state = TrainState.create(apply_fn=model.apply, params=variables["params"], tx=tx)  # step: a Python 0


@functools.partial(jax.jit, donate_argnums=donate)
def step(state, x, y):
    def loss(p):
        logits = state.apply_fn({"params": p}, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    value, grads = jax.value_and_grad(loss)(state.params)
    return state.apply_gradients(grads=grads), value


key = jax.random.PRNGKey(1)
for _ in range(steps):
    key, k = jax.random.split(key)
    x = jax.random.normal(k, (batch, 28, 28, 1))
    y = jnp.zeros((batch,), jnp.int32)
    state, value = step(state, x, y)
kept = sum(leaf.nbytes for leaf in jax.tree_util.tree_leaves(variables))
print(json.dumps({"loss": float(value), "variables_bytes": kept}))

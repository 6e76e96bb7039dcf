"""A flax linen model trained through a TrainState under jax.jit.

    python sample_runs/libraries/linen_trainstate.py [--width N] [--steps N]

--width sets the hidden layer's width (the state grows with it); the
program's donation advice is tested in tests/test_wrappers.py and measured in
benchmarks/bench_wrappers.py.
"""
import argparse
import functools  # noqa: F401 (the donation advice edits the decorator into functools.partial)

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training import train_state

parser = argparse.ArgumentParser()
parser.add_argument("--width", type=int, default=512)
parser.add_argument("--steps", type=int, default=6)
args = parser.parse_args()


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(10)(nn.relu(nn.Dense(args.width)(x)))


model = MLP()
params = model.init(jax.random.key(0), jnp.ones((1, 256)))["params"]
state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.adam(1e-3))


@jax.jit
def train_step(state, x, y):
    def loss_fn(p):
        return optax.softmax_cross_entropy_with_integer_labels(state.apply_fn({"params": p}, x), y).mean()

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


x, y = jnp.ones((32, 256)), jnp.zeros((32,), jnp.int32)
for i in range(args.steps):
    state, loss = train_step(state, x, y)
print(round(float(loss), 4))

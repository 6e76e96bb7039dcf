"""A flax linen model trained through a TrainState under jax.jit."""
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training import train_state


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(10)(nn.relu(nn.Dense(512)(x)))


model = MLP()
params = model.init(jax.random.key(0), jnp.ones((1, 256)))["params"]
state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.adam(1e-3))


@jax.jit  # LINE-JIT
def train_step(state, x, y):  # LINE-DEF
    def loss_fn(p):
        return optax.softmax_cross_entropy_with_integer_labels(state.apply_fn({"params": p}, x), y).mean()

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


x, y = jnp.ones((32, 256)), jnp.zeros((32,), jnp.int32)
for i in range(6):
    state, loss = train_step(state, x, y)  # LINE-CALL
print(round(float(loss), 4), functools.__name__)

"""A haiku MLP, made with hk.transform, trained with optax under jax.jit, as
haiku's examples write it.

    python sample_runs/libraries/haiku_transform.py [--width N] [--steps N]

--width sets the hidden layer's width (the state grows with it); the
program's donation advice is tested in tests/test_wrappers.py (what
jaxmemprof knows of haiku is in jaxmemprof/facts/libraries/haiku.py alone).
"""
import argparse
import functools  # noqa: F401 (the donation advice edits the decorator into functools.partial)

import haiku as hk
import jax
import jax.numpy as jnp
import optax

parser = argparse.ArgumentParser()
parser.add_argument("--width", type=int, default=512)
parser.add_argument("--steps", type=int, default=6)
args = parser.parse_args()


def forward(x):
    return hk.nets.MLP([args.width, 10])(x)


net = hk.without_apply_rng(hk.transform(forward))
params = net.init(jax.random.key(0), jnp.ones((1, 256)))
opt = optax.adam(1e-3)
opt_state = opt.init(params)


@jax.jit
def train_step(params, opt_state, x, y):
    def loss_fn(p):
        return optax.softmax_cross_entropy_with_integer_labels(net.apply(p, x), y).mean()

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = opt.update(grads, opt_state)
    return optax.apply_updates(params, updates), opt_state, loss


x, y = jnp.ones((32, 256)), jnp.zeros((32,), jnp.int32)
for i in range(args.steps):
    params, opt_state, loss = train_step(params, opt_state, x, y)
print(round(float(loss), 4))

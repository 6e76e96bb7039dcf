"""An equinox MLP trained with optax through equinox.filter_jit, as
equinox's examples write a make_step.

    python sample_runs/libraries/equinox_optax.py [--width N] [--steps N]

--width sets the hidden layer's width (the state grows with it); the
program's donation advice is tested in tests/test_wrappers.py and measured in
benchmarks/bench_wrappers.py.
"""
import argparse
import equinox as eqx
import jax
import jax.numpy as jnp
import optax

parser = argparse.ArgumentParser()
parser.add_argument("--width", type=int, default=512)
parser.add_argument("--steps", type=int, default=6)
args = parser.parse_args()

model = eqx.nn.MLP(256, 10, args.width, 1, key=jax.random.key(0))
opt = optax.adam(1e-3)
opt_state = opt.init(eqx.filter(model, eqx.is_array))


def loss_fn(model, x, y):
    return optax.softmax_cross_entropy_with_integer_labels(jax.vmap(model)(x), y).mean()


@eqx.filter_jit
def make_step(model, opt_state, x, y):
    loss, grads = eqx.filter_value_and_grad(loss_fn)(model, x, y)
    updates, opt_state = opt.update(grads, opt_state, model)
    model = eqx.apply_updates(model, updates)
    return model, opt_state, loss


x, y = jnp.ones((32, 256)), jnp.zeros((32,), jnp.int32)
for i in range(args.steps):
    model, opt_state, loss = make_step(model, opt_state, x, y)
print(round(float(loss), 4))

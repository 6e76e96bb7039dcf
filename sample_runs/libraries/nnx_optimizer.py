"""A flax.nnx training step over an nnx.Optimizer (optax adam), written as
flax's docs write one: the model and the optimizer are updated in place.

    python sample_runs/libraries/nnx_optimizer.py [--width N] [--steps N]

--width sets the hidden layer's width (the state grows with it); the
program's donation advice is tested in tests/test_wrappers.py and measured in
benchmarks/bench_wrappers.py.
"""
import argparse
import jax
import jax.numpy as jnp
import optax
from flax import nnx

parser = argparse.ArgumentParser()
parser.add_argument("--width", type=int, default=512)
parser.add_argument("--steps", type=int, default=6)
args = parser.parse_args()


class MLP(nnx.Module):
    def __init__(self, rngs):
        self.l1 = nnx.Linear(256, args.width, rngs=rngs)
        self.l2 = nnx.Linear(args.width, 10, rngs=rngs)

    def __call__(self, x):
        return self.l2(jax.nn.relu(self.l1(x)))


def loss_fn(model, x, y):
    return optax.softmax_cross_entropy_with_integer_labels(model(x), y).mean()


@nnx.jit
def train_step(model, optimizer, x, y):
    loss, grads = nnx.value_and_grad(loss_fn)(model, x, y)
    optimizer.update(model, grads)
    return loss


model = MLP(nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
x, y = jnp.ones((32, 256)), jnp.zeros((32,), jnp.int32)
for i in range(args.steps):
    loss = train_step(model, optimizer, x, y)
print(round(float(loss), 4))

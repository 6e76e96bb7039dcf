"""The same programs recorded N times in one process, each under its own
jaxmemprof.profile() at a fast interval (tests/test_same_answer.py):

    python tests/scripts/same_answer.py N OUT

A plain jax.jit step, an nnx.jit step over an nnx.Optimizer and an
equinox.filter_jit step, each defined afresh inside its block.
"""
import sys
import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from flax import nnx
import jaxmemprof

N, OUT = int(sys.argv[1]), sys.argv[2]
print("imported", flush=True)  # tests/test_same_answer.py starts its busy processes now


def jit_program():
    def update(params, opt, batch):
        grads = jax.tree_util.tree_map(lambda p: p * jnp.mean(batch), params)
        opt = jax.tree_util.tree_map(lambda m, g: 0.9 * m + g, opt, grads)
        params = jax.tree_util.tree_map(lambda p, m: p - 0.01 * m, params, opt)
        return params, opt, jnp.mean(batch)

    step = jax.jit(update)  # JIT-STEP
    params = {"w": jnp.ones((256, 256), jnp.float32), "b": jnp.zeros((256,), jnp.float32)}
    opt = {"w": jnp.zeros((256, 256), jnp.float32), "b": jnp.zeros((256,), jnp.float32)}
    batch = jnp.ones((64, 256), jnp.float32)
    for _i in range(40):
        params, opt, loss = step(params, opt, batch)
    return float(loss)


def nnx_program():
    class MLP(nnx.Module):
        def __init__(self, rngs):
            self.l1 = nnx.Linear(64, 128, rngs=rngs)
            self.l2 = nnx.Linear(128, 10, rngs=rngs)

        def __call__(self, x):
            return self.l2(jax.nn.relu(self.l1(x)))

    def loss_fn(model, x, y):
        return optax.softmax_cross_entropy_with_integer_labels(model(x), y).mean()

    @nnx.jit  # NNX-STEP
    def train_step(model, optimizer, x, y):
        loss, grads = nnx.value_and_grad(loss_fn)(model, x, y)
        optimizer.update(model, grads)
        return loss

    model = MLP(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    x, y = jnp.ones((16, 64)), jnp.zeros((16,), jnp.int32)
    for _i in range(12):
        loss = train_step(model, optimizer, x, y)
    return float(loss)


def equinox_program():
    model = eqx.nn.MLP(64, 10, 128, 1, key=jax.random.key(0))
    opt = optax.adam(1e-3)
    opt_state = opt.init(eqx.filter(model, eqx.is_array))

    def loss_fn(model, x, y):
        return optax.softmax_cross_entropy_with_integer_labels(jax.vmap(model)(x), y).mean()

    @eqx.filter_jit  # EQX-STEP
    def make_step(model, opt_state, x, y):
        loss, grads = eqx.filter_value_and_grad(loss_fn)(model, x, y)
        updates, opt_state = opt.update(grads, opt_state, model)
        model = eqx.apply_updates(model, updates)
        return model, opt_state, loss

    x, y = jnp.ones((16, 64)), jnp.zeros((16,), jnp.int32)
    for _i in range(12):
        model, opt_state, loss = make_step(model, opt_state, x, y)
    return float(loss)


for name, program in (("jit", jit_program), ("nnx", nnx_program), ("eqx", equinox_program)):
    for i in range(N):
        with jaxmemprof.profile(f"{OUT}/{name}-{i}", interval=0.01, max_overhead=0.2):
            program()

"""A small MLP training loop, in three flavours that a memory profiler should tell apart.

    python sample_runs/train_mlp.py               # forgets buffer donation
    python sample_runs/train_mlp.py --donate      # donates params and momentum
    python sample_runs/train_mlp.py --leak        # also keeps every step's losses

Without donation, the jitted step's old and new parameters and momentum are
both alive during each call. With --leak, the loop keeps one (batch,) array
per step "for logging later": 4 KiB more device memory every step.

With --profiles DIR it also saves JAX device-memory profiles after the first
and the last step (DIR/first.prof, DIR/last.prof) for `jaxmemprof diff`.
"""

import argparse
import os

import jax
import jax.numpy as jnp

try:  # optional: step markers on jaxmemprof's timeline (no-ops outside a run)
    import jaxmemprof
except ImportError:  # pragma: no cover
    jaxmemprof = None


def init_params(key, sizes):
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        key, sub = jax.random.split(key)
        w = jax.random.normal(sub, (fan_in, fan_out), jnp.float32) / jnp.sqrt(fan_in)
        b = jnp.zeros((fan_out,), jnp.float32)
        params.append((w, b))
    return params


def init_momentum(params):
    return jax.tree_util.tree_map(jnp.zeros_like, params)


def predict(params, x):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def per_example_loss(params, x, y):
    return jnp.mean((predict(params, x) - y) ** 2, axis=-1)


def train_step(params, momentum, x, y):
    def loss_fn(p):
        losses = per_example_loss(p, x, y)
        return jnp.mean(losses), losses

    (_, losses), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    momentum = jax.tree_util.tree_map(lambda m, g: 0.9 * m + g, momentum, grads)
    params = jax.tree_util.tree_map(lambda p, m: p - 1e-3 * m, params, momentum)
    return params, momentum, losses


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--donate", action="store_true", help="donate params and momentum to the step")
    parser.add_argument("--leak", action="store_true", help="keep every step's per-example losses")
    parser.add_argument("--profiles", help="directory for first.prof and last.prof")
    args = parser.parse_args()

    step_fn = jax.jit(train_step, donate_argnums=(0, 1) if args.donate else ())

    key = jax.random.PRNGKey(0)
    params = init_params(key, [512, 1024, 1024, 10])
    momentum = init_momentum(params)
    x = jax.random.normal(key, (args.batch, 512), jnp.float32)
    y = jax.random.normal(key, (args.batch, 10), jnp.float32)

    loss_history = []
    for step in range(1, args.steps + 1):
        params, momentum, losses = step_fn(params, momentum, x, y)
        if args.leak:
            loss_history.append(losses)  # the leak: one (batch,) array per step
        if jaxmemprof is not None:
            jaxmemprof.mark(f"step {step}")
        if args.profiles and step in (1, args.steps):
            os.makedirs(args.profiles, exist_ok=True)
            name = "first.prof" if step == 1 else "last.prof"
            jax.profiler.save_device_memory_profile(os.path.join(args.profiles, name))
    print(f"final mean loss {float(jnp.mean(losses)):.4f} after {args.steps} steps")


if __name__ == "__main__":
    main()

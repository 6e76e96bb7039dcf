"""State on two CPU devices, replaced by a jax.pmap step each call.

    python sample_runs/libraries/pmap_state.py [--width N] [--steps N]

--width sets the width of the state; the
program's donation advice is tested in tests/test_wrappers.py and measured in
benchmarks/bench_wrappers.py.
"""
import argparse
import jax

jax.config.update("jax_num_cpu_devices", 2)
import jax.numpy as jnp  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--width", type=int, default=512)
parser.add_argument("--steps", type=int, default=6)
args = parser.parse_args()


def step(state, x):
    return jax.tree_util.tree_map(lambda s: s - 0.1 * x.mean(), state), x.sum()


pstep = jax.pmap(step)
state = {"w": jnp.ones((2, 256, args.width)), "b": jnp.zeros((2, args.width))}
x = jnp.ones((2, 64))
for i in range(args.steps):
    state, loss = pstep(state, x)
print(float(loss[0]))

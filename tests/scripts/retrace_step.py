"""A training step whose Python has side effects when traced, for
tests/test_retrace.py: it prints a marker, appends a line to a file (argv[2],
if given), and, once the program sets TRAINING = False at its end, raises
what argv[1] names (exit: SystemExit(7), interrupt: KeyboardInterrupt,
generator: GeneratorExit) or, under "flag", traces as a different program
(no hidden layer: a far smaller step); under "steady" TRAINING stays set;
under "context" it stays set too, and the steps run inside
``jax.default_matmul_precision("highest")`` (JAX's trace cache does not
answer for the step outside that context).
The program's own last output is its atexit handler's line."""

import atexit
import os
import sys

import jax
import jax.numpy as jnp

MODE = sys.argv[1] if len(sys.argv) > 1 else "print"
LOG = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] != "-" else None
TRAINING = True


def step(params, x):
    print("TRACED step", flush=True)
    print("TRACED step on stderr", file=sys.stderr)
    os.write(1, b"TRACED step on fd 1\n")
    if LOG:
        with open(LOG, "a") as f:
            f.write("traced\n")
    if not TRAINING:
        if MODE == "exit":
            sys.exit(7)
        if MODE == "interrupt":
            raise KeyboardInterrupt
        if MODE == "generator":
            raise GeneratorExit

    def loss(w):
        h = jnp.tanh(x @ w["a"])
        if TRAINING:  # the hidden layer: what the program trains with
            h = jnp.tanh(h @ w["b"])
        return (h ** 2).mean()

    value, grads = jax.value_and_grad(loss)(params)
    return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads), value


def main():
    global TRAINING
    f = jax.jit(step)
    params = {"a": jnp.ones((64, 512)) * 0.01, "b": jnp.ones((512, 512)) * 0.01}
    x = jnp.ones((32, 64))
    with jax.default_matmul_precision("highest" if MODE == "context" else None):
        for _i in range(4):
            params, value = f(params, x)
    print(f"loss {float(value):.6f}")
    if MODE not in ("steady", "context"):
        TRAINING = False  # the program's end: evaluation mode
    atexit.register(print, "program's last line")


main()

"""Keeps each step's output until the chip runs out (issue 64's repro on the
chip): a step whose output is ``--mib`` MiB, called ``--steps`` times, every
output kept in a list. On a 15.75 GiB v5e with 256 MiB a step, the chip runs
out near step 59 with XLA:TPU's runtime out-of-memory text.

    python benchmarks/tpu/leak_until_oom.py [--mib 256] [--steps 80] [--stats FILE]

--stats FILE: the chip's memory_stats() after the last step that ran (or at
the out-of-memory), as JSON, with the step it failed at.
"""

import argparse
import json

import jax
import jax.numpy as jnp

try:
    import jaxmemprof
except ImportError:  # pragma: no cover
    jaxmemprof = None

p = argparse.ArgumentParser()
p.add_argument("--mib", type=int, default=256)
p.add_argument("--steps", type=int, default=80)
p.add_argument("--stats")
args = p.parse_args()

n = args.mib * 2**20 // 4


@jax.jit
def step(x, i):
    return jnp.sin(x) + i


x = jnp.ones((n,), jnp.float32)
kept = []
failed = None
try:
    for i in range(args.steps):
        kept.append(step(x, i))
        kept[-1].block_until_ready()
        if jaxmemprof is not None:
            jaxmemprof.mark("step")
finally:
    if args.stats:
        with open(args.stats, "w") as f:
            json.dump({"steps_done": len(kept), **jax.devices()[0].memory_stats()}, f)
print("kept", len(kept))

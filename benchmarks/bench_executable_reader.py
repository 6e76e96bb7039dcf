"""What reading XLA's figures from an executable costs, against the program's
own compile of it.

    python benchmarks/bench_executable_reader.py [--layers 48,160] [--repeat 5]

The program: a ``jax.grad`` + optax adam step of an N-layer tanh MLP (256
wide, batch 128), on the CPU backend. For each N, in a fresh process:
the first call (the program's own compile), ``lower(...).compile()`` again
(the jit cache hit the probe makes), and ``read_executable`` on that
executable (the buffer assignment, the HLO module, live ranges, the peak and
the program-order curve), ``--repeat`` times; medians. The share is reading
against the first call: goal <= 5 %.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys, time
import jax, jax.numpy as jnp, optax
from jaxmemprof.xla.executable import read_executable

layers, repeat = int(sys.argv[1]), int(sys.argv[2])
params = [jnp.ones((256, 256)) * 0.01 for _ in range(layers)]
opt = optax.adam(1e-3)
state = opt.init(params)
x = jnp.ones((128, 256))

def loss(ps, x):
    h = x
    for p in ps:
        h = jnp.tanh(h @ p)
    return (h ** 2).mean()

@jax.jit
def f(ps, s, x):
    g = jax.grad(loss)(ps, x)
    u, s = opt.update(g, s, ps)
    return optax.apply_updates(ps, u), s

t0 = time.perf_counter()
jax.block_until_ready(f(params, state, x))
first = time.perf_counter() - t0
again, reading = [], []
for _ in range(repeat):
    t0 = time.perf_counter()
    compiled = f.lower(params, state, x).compile()
    again.append(time.perf_counter() - t0)
    ma = compiled.memory_analysis()
    t0 = time.perf_counter()
    p = read_executable(compiled, memory_analysis=ma)
    reading.append(time.perf_counter() - t0)
print(json.dumps({"first": first, "again": again, "reading": reading, "length": p.length,
                  "curve_points": len(p.curve["positions"])}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default="48,160")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    print("| layers | sequence | first call (compile) | lower().compile() again | reading | share |")
    print("|---|---|---|---|---|---|")
    for n in [int(v) for v in args.layers.split(",")]:
        out = subprocess.run([sys.executable, "-c", CHILD, str(n), str(args.repeat)], env=env, check=True,
                             capture_output=True, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        again, reading = statistics.median(r["again"]), statistics.median(r["reading"])
        print(f"| {n} | {r['length']:,} | {r['first']:.2f} s | {again * 1e3:.1f} ms | {reading:.3f} s | "
              f"**{100 * reading / r['first']:.1f} %** |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What reading XLA's figures from an executable costs, against the program's
own compile of it.

    python benchmarks/bench_executable_reader.py [--layers 48,160] [--repeat 5] [--runs 3]

The program: a ``jax.grad`` + optax adam step of an N-layer tanh MLP (256
wide, batch 128), on the CPU backend. For each N, in a fresh process:
the first call (the program's own compile), ``lower(...).compile()`` again
(the jit cache hit the probe makes), and ``read_executable`` on that
executable (the buffer assignment, the HLO module, live ranges, the peak and
the program-order curve), ``--repeat`` times; medians. The share is reading
against the first call: goal <= 5 %.

Then the whole of ``run`` on such a program: the 160-layer step called three
times at each of two batch sizes (two signatures, two compiles of seconds
each, a run shorter than ten compiles), as ``python SCRIPT`` against
``python -m jaxmemprof run -q -o TMP SCRIPT``, ``--runs`` times each,
alternating which goes first: wall and CPU time (the child's, all threads),
medians and ratios; and the recorded run is checked to hold XLA's buffers for
both signatures (the probe compiles nothing of its own).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The step both parts run: an N-layer tanh MLP under jax.grad and optax adam.
STEP = """
def loss(ps, x):
    h = x
    for p in ps:
        h = jnp.tanh(h @ p)
    return (h ** 2).mean()

@jax.jit
def step(ps, s, x):
    g = jax.grad(loss)(ps, x)
    u, s = opt.update(g, s, ps)
    return optax.apply_updates(ps, u), s
"""

CHILD = r"""
import json, sys, time
import jax, jax.numpy as jnp, optax
from jaxmemprof.xla.executable import read_executable

layers, repeat = int(sys.argv[1]), int(sys.argv[2])
params = [jnp.ones((256, 256)) * 0.01 for _ in range(layers)]
opt = optax.adam(1e-3)
state = opt.init(params)
x = jnp.ones((128, 256))

{STEP}
f = step

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
""".replace("{STEP}", STEP)


SCRIPT = r"""
import jax, jax.numpy as jnp, optax

params = [jnp.ones((256, 256)) * 0.01 for _ in range(160)]
opt = optax.adam(1e-3)
state = opt.init(params)

{STEP}
for batch in (128, 64):
    x = jnp.ones((batch, 256))
    for _ in range(3):
        params, state = step(params, state, x)
jax.block_until_ready(params)
""".replace("{STEP}", STEP)


def _timed(cmd, env) -> tuple[float, float]:
    """(wall, CPU of the child and its threads) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def whole_run(runs: int, env) -> None:
    from jaxmemprof.store.reader import load_run

    with tempfile.TemporaryDirectory() as d:
        script = Path(d) / "slow_compile.py"
        script.write_text(SCRIPT)
        plain, probed = [], []
        for i in range(runs):
            sides = [("python", [sys.executable, str(script)]),
                     ("run", [sys.executable, "-m", "jaxmemprof", "run", "-q", "--force", "-o", f"{d}/run",
                              str(script)])]
            for name, cmd in (sides if i % 2 == 0 else sides[::-1]):
                (plain if name == "python" else probed).append(_timed(cmd, env))
        run = load_run(Path(d) / "run")
        programs, buffers = run.jit.programs, run.jit.buffers
        signatures = sorted(set(programs["signature"]))
        with_buffers = sorted(set(buffers["signature"].dropna()))
    pw, pc = (statistics.median(v) for v in zip(*plain))
    rw, rc = (statistics.median(v) for v in zip(*probed))
    print()
    print(f"whole run, 160 layers, two signatures ({runs} runs each, medians):")
    print(f"  python          wall {pw:.2f} s  CPU {pc:.2f} s")
    print(f"  jaxmemprof run  wall {rw:.2f} s  CPU {rc:.2f} s")
    print(f"  ratio           wall {rw / pw:.3f}   CPU {rc / pc:.3f}")
    print(f"  signatures read: {len(signatures)}; with XLA's buffers: {len(with_buffers)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default="48,160")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--runs", type=int, default=3, help="runs of each side of the whole-run comparison (0: none)")
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
    if args.runs:
        whole_run(args.runs, env)
    return 0


if __name__ == "__main__":
    sys.exit(main())

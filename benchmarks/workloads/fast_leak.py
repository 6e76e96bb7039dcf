"""Issue 54's CPU case: a slow start with nothing on the device, then a fast
loop that marks its steps and keeps a 4 KiB array each step. Prints the
loop's wall and CPU seconds on stderr as `loop WALL CPU`.

    python benchmarks/workloads/fast_leak.py [START_S] [STEPS]
"""
import sys
import time

import jax.numpy as jnp

try:
    import jaxmemprof
except ImportError:  # as plain python would run it without jaxmemprof installed
    jaxmemprof = None


def main(start_s: float, steps: int) -> None:
    time.sleep(start_s)
    kept = []
    jnp.full((1024,), 0.0, dtype=jnp.float32).block_until_ready()  # the op compiled before the clock
    w0, c0 = time.perf_counter(), time.process_time()
    for step in range(steps):
        x = jnp.full((1024,), step, dtype=jnp.float32)
        kept.append(x)  # the leak: 4 KiB a step
        if jaxmemprof is not None:
            jaxmemprof.mark("step")
    x.block_until_ready()
    sys.stderr.write(f"loop {time.perf_counter() - w0:.4f} {time.process_time() - c0:.4f}\n")


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 6.0, int(sys.argv[2]) if len(sys.argv) > 2 else 3000)

"""Run a script as python would, then write the chip's own counters.

    python3 benchmarks/tpu/chip_stats.py STATS.json SCRIPT [ARGS...]

The script runs as ``__main__`` (runpy, its own argv); when it ends, however
it ends, ``memory_stats()`` of device 0 is written to STATS.json. The TPU
lane uses it for programs without a ``--stats`` option of their own, to read
how far they ran ahead of the chip under plain python (their queued steps)
beside what a run recorded of the same program.
"""
import json
import runpy
import sys

if len(sys.argv) < 3:
    sys.exit(__doc__)
out, script = sys.argv[1], sys.argv[2]
sys.argv = sys.argv[2:]
try:
    runpy.run_path(script, run_name="__main__")
finally:
    import jax

    with open(out, "w") as f:
        json.dump(jax.devices()[0].memory_stats(), f)

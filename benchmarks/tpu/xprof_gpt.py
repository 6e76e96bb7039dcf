"""The lane's GPT step captured with ``jax.profiler.trace``, the way a user
captures one: the XProf profile that ``jaxmemprof report DIR`` reads
(docs/xprof.md), with the chip's own counters read beside it.

    python benchmarks/tpu/xprof_gpt.py LOGDIR STATS.json [gpt.py's options]

Runs benchmarks/tpu/gpt.py's model (its options, e.g. --layers 2 --batch 8
--donate) inside ``jax.profiler.trace(LOGDIR)``, and writes device 0's ``memory_stats()``
after the last step to STATS.json (the chip's peak, for the reader's test).
"""

import json
import runpy
import sys

import jax

logdir, stats = sys.argv[1], sys.argv[2]
rest = sys.argv[3:]
gpt = __file__.rsplit("/", 1)[0] + "/gpt.py"
# gpt.py runs its loop at import; the trace spans the whole program (its
# steps included), as `with jax.profiler.trace(...)` around a script's main does.
# --host-level N: the profiler's host and Python tracer levels (default: JAX's own); 0 keeps a profile
# to the device's events and the programs (a small fixture).
opts = None
if "--host-level" in rest:
    i = rest.index("--host-level")
    level = int(rest[i + 1])
    del rest[i:i + 2]
    opts = jax.profiler.ProfileOptions()
    opts.host_tracer_level = level
    opts.python_tracer_level = level
sys.argv = [gpt, *rest]
with jax.profiler.trace(logdir, profiler_options=opts):
    runpy.run_path(gpt, run_name="__main__")
    jax.effects_barrier()
with open(stats, "w") as f:
    json.dump(jax.devices()[0].memory_stats(), f)
print("traced into", logdir)

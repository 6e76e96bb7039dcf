"""The programs the unit tests record (each its own oracle), their known
sizes, and the arithmetic the tests hold the analyses to (tests/unit/conftest.py
records them)."""

from __future__ import annotations

IN, OUT, BATCH, STEPS = 256, 512, 64, 4
TABLE = (512, 1024)  # float32, whole on each of the two devices
F32 = 4
W_BYTES, B_BYTES, X_BYTES = IN * OUT * F32, OUT * F32, BATCH * IN * F32
PARAMS_BYTES = W_BYTES + B_BYTES
TABLE_BYTES = TABLE[0] * TABLE[1] * F32  # on each device
KEPT_BYTES = 1024 * F32  # kept every step

TINY = '''
"""A tiny training loop on two CPU devices whose every array is known: it
writes its own figures (jax.live_arrays(), XLA's memory_analysis(), the
addresses it holds) to the file named by its first argument."""
import json
import math
import sys

import jax

jax.config.update("jax_num_cpu_devices", 2)
# After the line above, before anything that may start the backend (hence noqa E402).
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import jaxmemprof  # noqa: E402

IN, OUT, BATCH, STEPS = 256, 512, 64, 4
TABLE = (512, 1024)  # float32, whole on each of the two devices: 2 MiB a device


def live():
    """{device id: bytes} alive now, by JAX's own count (jax.live_arrays())."""
    out = {}
    for a in jax.live_arrays():
        shard = math.prod(a.sharding.shard_shape(a.shape)) * a.dtype.itemsize
        for d in a.sharding.addressable_devices:
            out[d.id] = out.get(d.id, 0) + shard
    return out


def init(key):
    w = jax.random.normal(key, (IN, OUT), jnp.float32)  # LINE w
    b = jnp.zeros((OUT,), jnp.float32)  # LINE b
    return {"w": w, "b": b}


def loss(params, x):
    h = jnp.tanh(x @ params["w"] + params["b"])  # LINE h
    return jnp.mean(h * h)


def step(params, x):
    value, grads = jax.value_and_grad(loss)(params, x)
    return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads), value  # LINE update


def column_sums(table):
    return table.sum(axis=0)  # LINE sums


def figures(fn, *args):
    ma = fn.lower(*args).compile().memory_analysis()
    return {"argument": ma.argument_size_in_bytes, "output": ma.output_size_in_bytes,
            "alias": ma.alias_size_in_bytes, "temp": ma.temp_size_in_bytes,
            "code": ma.generated_code_size_in_bytes}


def held(name, made, array):
    """[name, made, address, bytes] of a one-device array's buffer."""
    return [name, made, array.unsafe_buffer_pointer(), array.nbytes]


def main(oracle, profiles):
    train_step = jax.jit(step)  # LINE jit: no donation
    sums = jax.jit(column_sums)  # LINE jit sums
    mesh = jax.make_mesh((2,), ("data",))
    table = jax.device_put(np.ones(TABLE, np.float32), NamedSharding(mesh, P()))  # LINE table
    params = init(jax.random.PRNGKey(0))  # LINE init
    jaxmemprof.snapshot("start")
    oracle["live"]["start"] = live()
    oracle["held"]["start"] = [held("w", "start", params["w"]), held("b", "start", params["b"])]
    kept = []
    for i in range(STEPS):
        label = f"step {i}"
        x = jnp.full((BATCH, IN), i, jnp.float32)  # LINE x
        oracle["before_call"].append(live())
        params, value = train_step(params, x)  # LINE call
        total = sums(table)  # LINE call sums
        kept.append(jnp.full((1024,), i, jnp.float32))  # LINE kept
        jaxmemprof.mark(label)
        jaxmemprof.snapshot(label)
        oracle["live"][label] = live()
        # Every one-device array a snapshot sees, so each reuse's previous holder is known (the run reads
        # no address of an array on two devices, the table and total, nor does the program: reading one
        # makes JAX keep a view of each shard).
        oracle["held"][label] = [held("w", label, params["w"]), held("b", label, params["b"]),
                                 held("x", label, x), held("value", label, value)
                                 ] + [held("kept", f"step {j}", k) for j, k in enumerate(kept)]
        jax.profiler.save_device_memory_profile(f"{profiles}/{i}.prof")
    del x, total
    oracle["memory_analysis"] = figures(train_step, params, jnp.ones((BATCH, IN), jnp.float32))
    oracle["memory_analysis_2x"] = figures(train_step, params, jnp.ones((2 * BATCH, IN), jnp.float32))


ORACLE = {"live": {}, "held": {}, "before_call": [], "devices": {d.id: str(d) for d in jax.devices()}}
main(ORACLE, sys.argv[2])  # LINE main
ORACLE["live"]["end"] = live()  # what the exit snapshot sees
with open(sys.argv[1], "w") as f:
    json.dump(ORACLE, f)
'''

HISTORY = '''
"""An IPython shell (no kernel) whose output history keeps an array alive
while a cell is recorded; then what deleting the entry frees."""
import json
import sys

from IPython.core.interactiveshell import InteractiveShell

shell = InteractiveShell.instance()


def run(source):
    r = shell.run_cell(source, store_history=True)
    if r.error_before_exec is not None or r.error_in_exec is not None:
        raise SystemExit(f"cell failed: {source!r}: {r.error_before_exec or r.error_in_exec}")
    return r


run("%load_ext jaxmemprof")
run("import jax, jax.numpy as jnp")
run("x = jnp.ones((256, 512), jnp.float32)")
n = shell.execution_count
run("jnp.tanh(x)")  # its value stays in Out[n]: nothing else holds it
run("kept = jnp.zeros((128,), jnp.float32)\\nkept")  # in Out[n + 1], and in `kept` too
run(f"%%jaxmemprof -o {sys.argv[1]} --force --no-page\\ny = x * 2\\ny.sum();")

import jax  # noqa: E402  (the shell's own, where the program above defines it)


def live():
    """Device bytes alive, each buffer once: showing an array (its repr, as
    float() does) makes JAX list a second jax.Array over the same buffer."""
    return sum({a.unsafe_buffer_pointer(): a.nbytes for a in jax.live_arrays()}.values())


before = live()
run(f"%xdel _{n}")  # the fix the finding names
with open(sys.argv[2], "w") as f:
    json.dump({"entry": n, "freed": before - live()}, f)
'''


def total(per_device: dict) -> int:
    return int(sum(per_device.values()))


def peak_label(oracle) -> str:
    """The first of the program's snapshots holding the most bytes."""
    labels = [k for k in oracle["live"] if k != "end"]
    return max(labels, key=lambda k: (total(oracle["live"][k]), -labels.index(k)))


def call_peak(figures: dict) -> int:
    """A call's peak by XLA's memory_analysis(): argument + output - alias + temp + code."""
    return figures["argument"] + figures["output"] - figures["alias"] + figures["temp"] + figures["code"]


def reused_addresses(oracle, labelled) -> dict:
    """(address, snapshot) -> (bytes, the previous holder's bytes) of each
    array the program held (``oracle["held"]``) first seen at an address that
    another of its arrays held before and had let go of by then: a reuse of
    that address, as the program saw it; the previous holder is the last of
    them to let it go."""
    labels = list(oracle["held"])
    holders: dict = {}  # (name, made) -> [address, bytes, first label index, last label index]
    for k, label in enumerate(labels):
        for name, made, address, nbytes in oracle["held"][label]:
            holders.setdefault((name, made), [address, nbytes, k, k])[3] = k
    out = {}
    for key, (address, nbytes, first, _) in holders.items():
        before = [(last, b) for other, (a, b, _, last) in holders.items() if other != key and a == address and last < first]
        if before:
            out[(address, labelled[labels[first]])] = (nbytes, max(before)[1])
    return out

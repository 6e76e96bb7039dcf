"""Arrays a mesh could shard: ``replicated`` (made by analysis/advice/sharding.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jaxmemprof.rules.base import Rule, Words, fmt
from jaxmemprof.units import counted

if TYPE_CHECKING:
    from jaxmemprof.analysis.findings import Finding


def _put(a: dict) -> str:
    return f"jax.device_put({a['owner']}, NamedSharding(mesh, {a['spec']}))"


def _replicated(f: Finding, x: dict) -> Words:
    arrays = x["arrays"]
    first = arrays[0]
    more = x["array_count"] - len(arrays)

    def one(a):
        shape = ",".join(str(n) for n in a["shape"])
        return (f"{a['owner']} ({a['dtype']}[{shape}], {fmt(a['bytes'])}) whole on each of {a['devices']} devices: "
                f"over mesh axis {a['axis']!r} ({a['axis_size']}) it would take {fmt(a['bytes'] - a['saving_bytes'])} "
                f"each")
    return Words(
        brief=(f"{first['owner']} ({fmt(first['bytes'])}) is whole on each of {first['devices']} devices"
               + (f", and {counted(x['array_count'] - 1, 'more array')} of {x['function']}'s" if x["array_count"] > 1 else "")
               + f"; a mesh axis could shard {'it' if x['array_count'] == 1 else 'them'}."),
        brief_fix=_put(first),
        message=(f"Inputs of {x['function']} are replicated where the program's mesh could shard them: "
                 + "; ".join(one(a) for a in arrays) + (f"; and {more} more" if more > 0 else "") + "."),
        fix=("Shard each over the mesh axis: " + "; ".join(_put(a) for a in arrays)
             + " (or name the sharding in the jit's in_shardings and out_shardings; with flax.nnx, "
               "nnx.with_partitioning on the parameter's initializer). Trade-off: XLA gathers an array whole "
               "where a computation needs it whole (an all-gather, and a temporary of its full size inside that "
               "call); elementwise updates and matmuls over the sharded dimension stay sharded. Where the "
               "replication is data parallelism by design (each device holds the whole model and its own part of "
               "the batch), sharding the weights is FSDP: each step gathers each weight in the forward and the "
               "backward pass, so the saving is at most the figure here, and a program that re-shards inside "
               "its step (with_sharding_constraint, equinox's filter_shard) must change that too. Not compiled: "
               "an upper bound."),
        evidence=(f"The latest sampled call of {x['function']}: {fmt(x['replicated_bytes'])} per device in "
                  f"{x['array_count']} replicated arrays of 1 MiB or more; saving bytes × (1 − 1/axis size) per "
                  f"device; meshes seen: " + ", ".join(str(m) for m in x["meshes"])),
        saves=f"saves up to {fmt(f.saving_bytes)}")


REPLICATED = Rule(
    "replicated", made_by="analysis/advice/sharding.py",
    summary=("Inputs of a jitted function, 1 MiB or more a device, held whole on each of several devices while a "
             "mesh axis of the program's divides one of their dimensions (analysis/advice/sharding.py)."),
    facts={"": ("function", "arrays", "array_count", "replicated_bytes", "meshes")},
    meanings={"function": "The jitted function's name.",
              "arrays": ("The (up to 3) arrays that save most: objects of `owner` (its path in your tree), "
                         "`shape`, `dtype`, `bytes` (on each device), `devices`, `axis` and `axis_size` (the mesh "
                         "axis to shard over), `dim` (the dimension it divides), `spec` (the PartitionSpec to use) "
                         "and `saving_bytes` (per device)."),
              "array_count": "How many such arrays the call had.",
              "replicated_bytes": "Their bytes on each device.",
              "meshes": "The meshes the program's arrays were sharded on: `{axis: size}` each."},
    words={"": _replicated},
)

RULES = (REPLICATED,)

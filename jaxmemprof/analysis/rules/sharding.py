"""Arrays a mesh could shard: ``replicated``, found here from
analysis/advice/sharding.py's candidates and what XLA's compile of the
step with them sharded measured."""

from __future__ import annotations

import re

from jaxmemprof.analysis.advice.donation import jit_memory
from jaxmemprof.analysis.advice.sharding import by_rule, call_meshes, same_arrays, verified_sharding
from jaxmemprof.analysis.attributed import Attributed
from jaxmemprof.analysis.cells import leaves as leaves_of
from jaxmemprof.analysis.findings import Finding
from jaxmemprof.analysis.rules.base import Context, Rule, Words, fmt
from jaxmemprof.facts.libraries import phrases
from jaxmemprof.units import counted

# What re-shards inside a step: JAX's own, then each library's (libraries/).
_RESHARDS = ", ".join(("with_sharding_constraint",) + phrases("reshard"))


# JAX's refusals of a sharding, by the error it raises (its name in the compile's reason): a sharding JAX
# refuses is no fix, whatever it would save.
_REFUSED = re.compile(r"\b(ShardingTypeError\b.*)")


def refused(why) -> str | None:
    """The error by which JAX refused the sharding (``ShardingTypeError: ...``, its first 200 characters),
    where the reason the sharded compile is missing names one; else None."""
    m = _REFUSED.search(str(why or ""))
    return m[1][:200] if m else None


def detect(ctx: Context) -> list[Finding]:
    return replication_findings(ctx.ar)


def _put(a: dict) -> str:
    """Made sharded where its values are made (a device_put after it is made whole leaves that moment whole)."""
    return f"jax.device_put(<{a['owner']}'s values where they are made>, NamedSharding(mesh, {a['spec']}))"


def _made(m: dict) -> str:
    """The jitted function that made it, made to return it sharded."""
    outs = m["outputs"]
    if len(outs) == 1:
        tree = f"NamedSharding(mesh, {outs[0]['spec']})"
    else:
        tree = "shardings with " + ", ".join(f"output {o['output']}: NamedSharding(mesh, {o['spec']})" for o in outs)
    return f"jax.jit({m['function']}, out_shardings={tree}) (at {m['site']})"


def _fixes(x: dict) -> list[str]:
    made = x.get("made_by") or []
    return [_made(m) for m in made] or [_put(a) for a in x["arrays"]]


def _replicated(f: Finding, x: dict) -> Words:
    arrays = x["arrays"]
    first = arrays[0]
    more = x["array_count"] - len(arrays)
    devices = first["devices"]

    def one(a):
        shape = ",".join(str(n) for n in a["shape"])
        return (f"{a['owner']} ({a['dtype']}[{shape}], {fmt(a['bytes'])}) whole on each of {a['devices']} devices: "
                f"over mesh axis {a['axis']!r} ({a['axis_size']}) it would take {fmt(a['bytes'] - a['saving_bytes'])} "
                f"each")
    trade = ("Trade-off: XLA gathers an array whole where a computation needs it whole (an all-gather, and a "
             "temporary of its full size inside that call); elementwise updates and matmuls over the sharded "
             "dimension stay sharded. Where the replication is data parallelism by design (each device holds the "
             "whole model and its own part of the batch), sharding the weights is FSDP: each step gathers each "
             "weight in the forward and the backward pass, for less memory held between steps.")
    if x.get("refused"):
        refusal = f"JAX refused that sharding ({x['refused']})"
        return Words(
            brief=(f"{first['owner']} ({fmt(first['bytes'])}) is whole on each of {devices} devices, but {refusal}: "
                   "no fix as printed."),
            brief_fix="none as printed (JAX refused the sharding)",
            message=(f"Inputs of {x['function']} are replicated where the program's mesh could shard them: "
                     + "; ".join(one(a) for a in arrays) + (f"; and {more} more" if more > 0 else "")
                     + f". The compile of {x['function']} with them sharded failed: {refusal}, so sharding them "
                     "as printed is no fix; the program must change how its step uses them first."),
            fix=("None as printed: " + refusal + ". Where the step needs them whole, keep them replicated; else "
                 "change the step (its with_sharding_constraint or the shardings it names) so that JAX accepts "
                 "them sharded, and run again."),
            evidence=(f"The latest sampled call of {x['function']}: {fmt(x['replicated_bytes'])} per device in "
                      f"{counted(x['array_count'], 'replicated array')} of 1 MiB or more; the sharded compile: "
                      f"{x.get('not_verified')}; meshes seen: " + ", ".join(str(m) for m in x["meshes"])),
            saves="refused by JAX")
    if x.get("verified"):
        measured = (f"XLA's compile of {x['function']} with {'it' if x['array_count'] == 1 else 'them'} sharded as "
                    f"printed keeps its outputs sharded, its temporaries go {fmt(x['temp_before_bytes'])} -> "
                    f"{fmt(x['temp_after_bytes'])} (the gathers), and the run's true peak goes "
                    f"{fmt(x['true_peak_before_bytes'])} -> {fmt(x['true_peak_after_bytes'])} on the busiest device")
        saves, bound = f"saves {fmt(f.saving_bytes)} per device (compiled)", f"Measured: {measured}."
    else:
        saves = f"saves up to {fmt(f.saving_bytes)} (not verified)"
        bound = (f"Not verified ({x.get('not_verified') or 'no compile of the sharded step'}): an upper bound, and a "
                 f"program that re-shards inside its step ({_RESHARDS}) must change that too.")
    return Words(
        brief=(f"{first['owner']} ({fmt(first['bytes'])}) is whole on each of {devices} devices"
               + (f", and {counted(x['array_count'] - 1, 'more array')} of {x['function']}'s" if x["array_count"] > 1 else "")
               + f"; a mesh axis could shard {'it' if x['array_count'] == 1 else 'them'}."),
        brief_fix=("make it sharded where it is created: " if x.get("made_by") else "") + _fixes(x)[0],
        message=(f"Inputs of {x['function']} are replicated where the program's mesh could shard them: "
                 + "; ".join(one(a) for a in arrays) + (f"; and {more} more" if more > 0 else "") + ". " + bound),
        fix=("Make each sharded over the mesh axis where it is created (sharding it after it is made whole leaves "
             "that moment whole): " + "; ".join(_fixes(x))
             + " (or name the sharding in the jit's in_shardings and out_shardings"
             + "".join(f"; {p}" for p in phrases("shard_where_made")) + "). " + trade),
        evidence=(f"The latest sampled call of {x['function']}: {fmt(x['replicated_bytes'])} per device in "
                  f"{counted(x['array_count'], 'replicated array')} of 1 MiB or more; "
                  + ("compiled at the end of the run with them sharded (jit_whatif), its outputs sharded too; "
                     if x.get("verified") else "saving bytes × (1 − 1/axis size) per device; ")
                  + "meshes seen: " + ", ".join(str(m) for m in x["meshes"])),
        saves=saves)


REPLICATED = Rule(
    "replicated", made_by="analysis/rules/sharding.py",
    finds=("Inputs of a jitted function, 1 MiB or more a device, held whole on each of several devices while a "
             "mesh axis of the call's divides one of their dimensions, where XLA's compile of the function with "
             "them sharded lowers the run's true peak (analysis/rules/sharding.py)."),
    facts={"": ("function", "arrays", "array_count", "replicated_bytes", "meshes", "verified", "not_verified",
                "refused", "signatures_verified", "made_by", "true_peak_before_bytes", "true_peak_after_bytes", "saving_bytes_per_device",
                "temp_before_bytes", "temp_after_bytes")},
    optional=("not_verified", "refused", "signatures_verified", "made_by", "true_peak_before_bytes", "true_peak_after_bytes",
              "saving_bytes_per_device", "temp_before_bytes", "temp_after_bytes"),
    meanings={"function": "The jitted function's name.",
              "arrays": ("The (up to 3) arrays that save most: objects of `owner` (its path in your tree), "
                         "`shape`, `dtype`, `bytes` (on each device), `devices`, `axis` and `axis_size` (the mesh "
                         "axis to shard over), `dim` (the dimension it divides), `spec` (the PartitionSpec to use) "
                         "and `saving_bytes` (per device)."),
              "array_count": "How many such arrays the call had.",
              "replicated_bytes": "Their bytes on each device.",
              "meshes": "The meshes the call's arrays were sharded on: `{axis: size}` each.",
              "verified": ("True when the function was compiled at the end of the run with the arrays sharded as "
                           "printed (jit_whatif), its outputs stayed sharded and the run's true peak fell: the "
                           "saving is then that fall on the busiest device; else the saving is the bytes sharding "
                           "takes off each device, an upper bound."),
              "not_verified": "Why the sharded compile is missing (over the compile budget, an older recording).",
              "refused": ("The error by which JAX refused the sharding (`ShardingTypeError: ...`), where the "
                          "sharded compile failed so: the finding is then `info`, saves nothing (no "
                          "`saving_bytes`) and is never the top fix."),
              "signatures_verified": "The function's signatures compiled sharded.",
              "made_by": ("The jitted functions that made the arrays whole (a sampled call's output was the array "
                          "the step took), compiled with those outputs sharded: `function`, `site` (where it was "
                          "jitted), `outputs` (`output` index, `spec`). The fix makes them sharded there: "
                          "jax.jit(init, out_shardings=...)."),
              "true_peak_before_bytes": "The run's true peak on the busiest device as recorded (verified).",
              "true_peak_after_bytes": "The same with the sharded compile in place of the recorded one (verified).",
              "saving_bytes_per_device": "The fall of the true peak on the busiest device (verified).",
              "temp_before_bytes": "XLA's temporaries of the largest signature as recorded, per device (verified).",
              "temp_after_bytes": "The same, compiled with the arrays sharded: the all-gathers show here."},
    words={"": _replicated},
)


_SHOWN = 3  # arrays named in one finding


def replication_findings(ar: Attributed) -> list[Finding]:
    """One finding per function whose inputs a mesh could shard, and one
    per array: an array given to several functions (the same parameters to
    a train step and an evaluation step; a model's weights as the step's
    ``model.*`` and as its method's ``self.*``) is in the finding of the
    function with the largest call peak that takes it (one fix), named as
    the caller names it (``same_arrays``)."""
    run = ar.run
    calls, functions = run.jit.calls, run.jit.functions
    if calls.empty or functions.empty:
        return []
    files = ar.files
    jm = jit_memory(ar)
    largest = dict(zip(jm["function_id"], jm["call_peak_bytes"]))
    latest = {}  # function_id -> (its row, its latest sampled call's input leaves), largest call peak first
    for fn in sorted(functions.itertuples(), key=lambda fn: -int(largest.get(fn.function_id, 0))):
        mine = calls[calls["function_id"] == fn.function_id]
        if files.is_library(str(fn.file)) or mine.empty:
            continue
        leaves = [leaf for leaf in leaves_of(mine.sort_values("call_index").iloc[-1]["inputs"])
                  if isinstance(leaf, dict)]
        if by_rule(leaves, set()):
            latest[int(fn.function_id)] = fn, leaves
    named = same_arrays(run, list(latest))
    found = []
    claimed: set = set()
    for fid, (fn, leaves) in latest.items():
        arrays = by_rule(leaves, claimed, named.get(fid))
        if not arrays:
            continue
        measured = verified_sharding(ar, fid, leaves)
        if measured is None:
            continue
        if measured["verified"]:
            mine = {(a["owner"], tuple(a["shape"]), a["dtype"]) for a in arrays}
            verified = [dict(a, owner=named_as(a, named.get(fid))) for a in measured.pop("arrays")]
            arrays = [a for a in verified if (a["owner"], tuple(a["shape"]), a["dtype"]) in mine] or arrays
            for m in measured.get("made_by") or []:
                file, _, line = m["site"].rpartition(":")
                m["site"] = f"{files.display_path(file)}:{line}"
        claimed.update((a["owner"], tuple(a["shape"]), a["dtype"]) for a in arrays)
        arrays.sort(key=lambda a: -a["saving_bytes"])
        saving = measured.get("saving_bytes_per_device", sum(a["saving_bytes"] for a in arrays))
        refusal = None if measured.get("verified") else refused(measured.get("not_verified"))
        if refusal is not None:
            measured["refused"] = refusal
        found.append(Finding(
            rule="replicated",
            severity="info" if refusal is not None else "high" if saving >= 256 * 1024**2 else "medium",
            site=f"{files.display_path(str(fn.jit_file))}:{int(fn.jit_line)}" if fn.jit_file else "",
            saving_bytes=None if refusal is not None else int(saving),
            facts={"function": str(fn.name), "arrays": arrays[:_SHOWN], "array_count": len(arrays),
                   "replicated_bytes": sum(a["bytes"] for a in arrays), "meshes": call_meshes(leaves),
                   **measured}))
    return found


def named_as(a: dict, named: dict | None) -> str:
    """An array's owner (a finding's ``arrays`` entry) as ``same_arrays`` names it."""
    key = (a["owner"], tuple(a["shape"]), a["dtype"])
    return (named or {}).get(key, key)[0]


RULES = (REPLICATED,)

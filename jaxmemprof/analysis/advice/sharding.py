"""Arrays held whole on every device where a mesh the program uses could
shard them: the ``replicated`` finding.

An input of a user's jitted function (its latest sampled call) of at least
``MIN_BYTES`` on a device, held whole on each of N > 1 devices, while a mesh
the program uses (the array's own, else any of the run's NamedShardings) has
an axis whose size k > 1 divides one of its dimensions: sharding that
dimension over the axis leaves each device ``bytes / k``, saving
``bytes × (1 − 1/k)`` per device. The trade-off: XLA gathers it whole where a
computation needs it whole (an all-gather, and a temporary of its full size
inside that call)."""

from __future__ import annotations


from jaxmemprof.analysis.advice.donation import jit_memory
from jaxmemprof.analysis.attributed import Attributed
from jaxmemprof.analysis.cells import leaves as _leaves
from jaxmemprof.analysis.findings import Finding

MIN_BYTES = 1 << 20
_SHOWN = 3  # arrays named in one finding


def _meshes(calls) -> list[dict]:
    """Every mesh ({axis: size}) a sampled call's leaf was sharded on, in order of first use."""
    out: list[dict] = []
    for col in ("inputs", "outputs"):
        for text in calls[col]:
            for leaf in _leaves(text):
                mesh = leaf.get("mesh")
                if isinstance(mesh, dict) and mesh and mesh not in out:
                    out.append(mesh)
    return out


def _spec(shape: list, dim: int, axis: str) -> str:
    return "P(" + ", ".join(repr(axis) if i == dim else "None" for i in range(len(shape))) + ")"


def _shard_on(shape: list, meshes: list[dict]) -> tuple | None:
    """(axis, size, dim) of the first mesh axis (largest first) whose size
    divides a dimension (the largest such), or None."""
    for mesh in meshes:
        for axis, size in sorted(mesh.items(), key=lambda kv: -int(kv[1])):
            size = int(size)
            if size <= 1:
                continue
            dims = [i for i, n in enumerate(shape) if isinstance(n, int) and n >= size and n % size == 0]
            if dims:
                return axis, size, max(dims, key=lambda i: shape[i])
    return None


def replication_findings(ar: Attributed) -> list[Finding]:
    run = ar.run
    calls, functions = run.jit.get("calls"), run.jit.get("functions")
    if calls is None or calls.empty or functions is None or functions.empty:
        return []
    meshes = _meshes(calls)
    if not meshes:
        return []
    files = ar.files
    found = []
    # Each array in one finding: that of the function with the largest call peak that takes it (the
    # same parameters given to a train step and an evaluation step are one fix).
    claimed: set = set()
    jm = jit_memory(ar)
    largest = dict(zip(jm["function_id"], jm["call_peak_bytes"]))
    order = sorted(functions.itertuples(), key=lambda fn: -int(largest.get(fn.function_id, 0)))
    for fn in order:
        if files.is_library(str(fn.file)):
            continue
        mine = calls[calls["function_id"] == fn.function_id]
        if mine.empty:
            continue
        latest = mine.sort_values("call_index").iloc[-1]
        arrays, seen = [], set()
        for leaf in _leaves(latest["inputs"]):
            owner = str(leaf.get("owner") or f"{leaf.get('name') or ''}{leaf.get('path') or ''}")
            devices = int(leaf.get("devices") or 1)
            per_device = int(leaf.get("bytes") or 0) // max(devices, 1)
            identity = (owner, tuple(leaf.get("shape") or ()), str(leaf.get("dtype")))
            if owner in seen or identity in claimed or not leaf.get("replicated") or devices < 2 \
                    or per_device < MIN_BYTES:
                continue
            shape = [int(n) for n in leaf.get("shape") or []]
            own = leaf.get("mesh")
            where = _shard_on(shape, ([own] if isinstance(own, dict) and own else []) + meshes)
            if where is None:
                continue
            seen.add(owner)
            claimed.add(identity)
            axis, size, dim = where
            arrays.append({"owner": owner, "shape": shape, "dtype": str(leaf.get("dtype") or ""),
                           "bytes": per_device, "devices": devices, "axis": str(axis), "axis_size": size,
                           "dim": dim, "spec": _spec(shape, dim, str(axis)),
                           "saving_bytes": per_device - per_device // size})
        if not arrays:
            continue
        arrays.sort(key=lambda a: -a["saving_bytes"])
        saving = sum(a["saving_bytes"] for a in arrays)
        found.append(Finding(
            rule="replicated", severity="medium",
            site=f"{files.display_path(str(fn.jit_file))}:{int(fn.jit_line)}" if fn.jit_file else "",
            saving_bytes=saving,
            facts={"function": str(fn.name), "arrays": arrays[:_SHOWN], "array_count": len(arrays),
                   "replicated_bytes": sum(a["bytes"] for a in arrays), "meshes": meshes}))
    return found

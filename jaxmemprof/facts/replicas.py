"""Which replicated inputs of a jitted function a mesh could shard: one rule,
read by the report's advice (analysis/advice/sharding.py) and by the jit
probe at the end of a run, which compiles the function with those inputs
sharded to measure what that changes (capture/jit/whatif.py). Plain Python:
no pandas, no JAX.

An input is a candidate when it is held whole on each of N > 1 devices, is
at least ``MIN_BYTES`` on each, and a mesh the call uses (the array's own
first, then its other inputs') has an axis whose size k > 1 divides one of
its dimensions: the largest such axis, then the largest such dimension.
Sharded, each device holds ``bytes / k`` of it.
"""

from __future__ import annotations

MIN_BYTES = 1 << 20


def shard_options(shape, meshes: list[dict]) -> list[tuple]:
    """Where an array of ``shape`` could be sharded, best first: (index of
    the mesh in ``meshes``, axis, size, dim) for the first mesh ({axis:
    size}) that has an axis of size k > 1 dividing a dimension; its axes
    largest first, each axis's dimensions largest first."""
    for m, mesh in enumerate(meshes):
        out = []
        for axis, size in sorted(mesh.items(), key=lambda kv: -int(kv[1])):
            size = int(size)
            if size <= 1:
                continue
            dims = [i for i, n in enumerate(shape) if isinstance(n, int) and n >= size and n % size == 0]
            out += [(m, axis, size, i) for i in sorted(dims, key=lambda i: (-shape[i], i))]
        if out:
            return out
    return []


def shard_on(shape, meshes: list[dict]) -> tuple | None:
    """The best of ``shard_options``, or None."""
    options = shard_options(shape, meshes)
    return options[0] if options else None


def spec(rank: int, dim: int, axis: str) -> str:
    """The PartitionSpec, as the fix spells it: ``P(None, 'data')``."""
    return "P(" + ", ".join(repr(axis) if i == dim else "None" for i in range(rank)) + ")"


def saving(per_device_bytes: int, size: int) -> int:
    """The bytes sharding takes off each device: an array of ``per_device_bytes`` on each, over an axis of ``size``."""
    return int(per_device_bytes) - int(per_device_bytes) // max(int(size), 1)


def candidate(shape, per_device_bytes: int, devices: int, replicated: bool) -> bool:
    return bool(replicated) and devices >= 2 and per_device_bytes >= MIN_BYTES and len(shape) > 0


def meshes_of(own, others: list[dict]) -> list[dict]:
    """The meshes to try for an array: its own, then the call's others, once each."""
    out = [own] if isinstance(own, dict) and own else []
    return out + [m for m in others if m not in out]

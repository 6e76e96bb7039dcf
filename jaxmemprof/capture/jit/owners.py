"""What each array leaf of a sampled call is, as the program would name it,
recorded beside the leaf (the roles are decided later, in
``analysis/roles.py``, from these facts):

- ``owner``: its path in the user's own tree (``opt_state[0].mu['w1']``,
  ``model.layers[0].weight``; for flax.nnx, whose jax.jit sees a flat list of
  the modules' states, the variable's path in the module: ``model.l1.kernel``);
- ``tag``: what the library calls the container it sits in, where one says:
  ``optax.ScaleByAdamState`` (any optax state), ``nnx.Param``,
  ``nnx.OptState``...;
- ``from``: where the leaf came from, when the function's previous call was
  sampled too: ``["out", j]`` (that call's output leaf j: state carried
  from call to call), ``["in", i]`` (the same array as that call's input
  leaf i: an input held across calls), ``["new"]`` (neither: a per-step
  input such as the batch);
- ``on``: the devices it has a shard on; ``mesh``: the axis sizes of the
  mesh of a NamedSharding; ``replicated``: each of its devices holds the
  whole array;
- a leaf's own facts (``leaf``: shape, dtype, sharding, bytes on its
  devices; ``host_leaf``: a numpy argument's, on no device before the call).

Nothing here fails a call: a fact that cannot be read is left out."""

from __future__ import annotations

import math
import os
import sys
import weakref


def optax_tags(tu, value) -> dict:
    """id(leaf) -> ``optax.<StateType>`` for the array leaves under an optax
    state (NamedTuples of optax's own modules) in ``value``."""
    def is_state(node) -> bool:
        return type(node).__module__.startswith("optax") and isinstance(node, tuple)

    out: dict = {}
    for node in tu.tree_leaves(value, is_leaf=is_state):
        if is_state(node):
            tag = f"optax.{type(node).__name__}"
            for leaf in tu.tree_leaves(node):
                out.setdefault(id(leaf), tag)
    return out


def nnx_owners(frame) -> dict:
    """id(array) -> (path in the user's module, ``nnx.<VariableType>``) for
    the arguments of the flax.nnx.jit call that ``frame`` (the jax.jit call)
    is made from: flax.nnx passes jax.jit a flat list of each module's state,
    whose own path says nothing of the module."""
    nnx, graph = sys.modules.get("flax.nnx"), sys.modules.get("flax.nnx.graph")
    is_node = getattr(graph, "is_graph_node", None) or getattr(nnx, "is_graph_node", None)
    if nnx is None or is_node is None:
        return {}
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__call__" and f"nnx{os.sep}transforms" in code.co_filename:
            break
        frame = frame.f_back
    if frame is None:
        return {}
    args, kwargs = frame.f_locals.get("args"), frame.f_locals.get("kwargs")
    fn = getattr(frame.f_locals.get("self"), "fun", None)
    names = list(getattr(getattr(fn, "__code__", None), "co_varnames", ()))
    out: dict = {}
    values = [(names[i] if i < len(names) else f"arg{i}", v) for i, v in enumerate(args or ())]
    values += list((kwargs or {}).items())
    for name, value in values:
        if not is_node(value):
            continue
        for path, var in nnx.to_flat_state(nnx.state(value)):
            array = var.get_value() if hasattr(var, "get_value") else getattr(var, "value", None)
            where = name + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
            out.setdefault(id(array), (where, f"nnx.{type(var).__name__}"))
    return out


def mesh_facts(a) -> dict:
    """``on`` (its devices), ``mesh`` ({axis: size}) of a NamedSharding, and
    ``replicated``: the array is held whole on more than one device."""
    out: dict = {}
    sharding = a.sharding
    try:
        out["on"] = sorted(str(d) for d in sharding.addressable_devices)
    except Exception:
        pass
    mesh = getattr(sharding, "mesh", None)
    shape = getattr(mesh, "shape", None)
    if shape:
        try:
            out["mesh"] = {str(k): int(v) for k, v in dict(shape).items()}
        except Exception:
            pass
    try:
        n = len(sharding.addressable_devices)
        if n > 1 and tuple(sharding.shard_shape(a.shape)) == tuple(a.shape):
            out["replicated"] = True
    except Exception:
        pass
    return out


class Previous:
    """A sampled call's leaves, held weakly until the function's next call,
    to tell where that call's inputs came from."""

    __slots__ = ("call", "outputs", "inputs")

    def __init__(self, call: int, input_refs: list, outputs: list):
        self.call = call
        self.inputs = {}
        for i, r in enumerate(input_refs):
            obj = r() if r is not None else None
            if obj is not None:
                self.inputs.setdefault(id(obj), (r, i))
        self.outputs = {}
        for j, leaf in enumerate(outputs):
            try:
                self.outputs.setdefault(id(leaf), (weakref.ref(leaf), j))
            except TypeError:
                pass

    def origin(self, leaf) -> list:
        for kind, refs in (("out", self.outputs), ("in", self.inputs)):
            hit = refs.get(id(leaf))
            if hit is not None and hit[0]() is leaf:
                return [kind, hit[1]]
        return ["new"]


def leaf(a, path: str) -> dict:
    """A device array's leaf of a sampled call (jit_calls' inputs and outputs)."""
    shape = [int(d) for d in a.shape]
    dtype = str(a.dtype)
    sharding = a.sharding
    try:
        shard = sharding.shard_shape(a.shape)
        per_shard = math.prod(shard) * a.dtype.itemsize
        device_bytes = per_shard * len(sharding.addressable_devices)
    except Exception:
        device_bytes = int(a.nbytes)
    return {
        "path": path, "shape": shape, "dtype": dtype,
        "sharding": type(sharding).__name__ + (f"({sharding.spec})" if hasattr(sharding, "spec") else ""),
        "memory_kind": getattr(sharding, "memory_kind", None),
        "devices": len(getattr(sharding, "addressable_devices", ()) or ()) or 1,
        "bytes": int(device_bytes),
        "id": id(a),  # the sampler's py_id of the same array, while it lives
        **mesh_facts(a),
    }


def host_leaf(a, path: str) -> dict:
    """A numpy argument's leaf: on no device before the call (``host``); XLA
    copies it to the call's device(s) as an argument."""
    return {"path": path, "shape": [int(d) for d in a.shape], "dtype": str(a.dtype), "sharding": "numpy",
            "memory_kind": None, "devices": 1, "bytes": int(a.nbytes), "id": id(a), "host": True, "on": []}

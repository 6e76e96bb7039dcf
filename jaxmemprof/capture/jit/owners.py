"""What each array leaf of a sampled call is, as the program would name it,
recorded beside the leaf (the roles are decided later, in
``analysis/roles.py``, from these facts):

- ``owner``: its path in the user's own tree (``opt_state[0].mu['w1']``,
  ``model.layers[0].weight``; for a wrapper whose jax.jit sees a flat list of
  the modules' states, the path its library gives: ``model.l1.kernel``);
- ``tag``: what the library calls the container it sits in, where one says
  (``jaxmemprof.facts.libraries``: its ``tags`` and ``owners``);
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
import weakref


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


def path_text(tu, root, path) -> str:
    """``path`` (a key path of ``root``, from ``tu.tree_flatten_with_path``)
    as the program would write it: JAX's ``keystr``, but for a step JAX
    knows only by its flat index (a node registered without keys, as
    jax.example_libraries' ``OptimizerState``: ``[<flat index 0>]``), the
    node's attribute that is the child there (``.packed_state``), where
    one is. Reads only what flattening the nodes on the path reads."""
    flat = getattr(tu, "FlattenedIndexKey", None)
    if flat is None or not any(isinstance(k, flat) for k in path):
        return tu.keystr(path)
    parts, node = [], root
    for i, k in enumerate(path):
        if node is None:  # not found: the rest as JAX writes it
            parts.append(tu.keystr(tuple(path[i:])))
            break
        child = _child(tu, node, k)
        name = _attribute_holding(node, child) if isinstance(k, flat) and child is not None else None
        parts.append(f".{name}" if name else tu.keystr((k,)))
        node = child
    return "".join(parts)


def _child(tu, node, key):
    """The child of ``node`` at ``key`` (one level flattened), or None."""
    try:
        for p, child in tu.tree_flatten_with_path(node, is_leaf=lambda x: x is not node)[0]:
            if len(p) == 1 and p[0] == key:
                return child
    except Exception:
        pass
    return None


def _attribute_holding(node, child) -> str | None:
    """The name of ``node``'s field or attribute whose value is ``child``
    itself (a namedtuple's fields, a dataclass's, its ``__dict__``), or None."""
    names: list = []
    fields = getattr(type(node), "_fields", None)  # a namedtuple's
    if isinstance(fields, tuple):
        names += [f for f in fields if isinstance(f, str)]
    dataclass_fields = getattr(type(node), "__dataclass_fields__", None)
    if isinstance(dataclass_fields, dict):
        names += [f for f in dataclass_fields if isinstance(f, str)]
    try:
        own = object.__getattribute__(node, "__dict__")
    except Exception:
        own = None
    if isinstance(own, dict):
        for name, value in own.items():
            if value is child and isinstance(name, str) and not name.startswith("_"):
                return name
    for name in names:
        try:
            if getattr(node, name) is child:
                return name
        except Exception:
            continue
    return None


class Previous:
    """A sampled call's leaves, held weakly until the function's next call,
    to tell where that call's inputs came from."""

    __slots__ = ("call", "outputs", "inputs")

    def __init__(self, call: int, input_refs: list, outputs: list):
        self.call = call
        self.inputs: dict[int, tuple] = {}  # id -> (weak reference, input index)
        for i, r in enumerate(input_refs):
            obj = r() if r is not None else None
            if obj is not None:
                self.inputs.setdefault(id(obj), (r, i))
        self.outputs: dict[int, tuple] = {}  # id -> (weak reference, output index)
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

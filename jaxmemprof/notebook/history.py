"""Which live arrays IPython's output history holds, and whether anything
else does (in the kernel, as a run ends; analysis/history.py makes the
finding).

IPython keeps a cell's value (the last expression's) in ``Out[N]`` and, with
the same object, ``_N`` (in the user's namespace and in a hidden one),
``_``, ``__`` and ``___`` (namespace and displayhook) and the last
``ExecutionResult``. An array in an entry's value (any pytree: tuples,
lists, dicts, dataclasses, the libraries' registered types) is *only* held
by the history when every reference to it, and to each container on the way
to it, is one of those or comes from such a container: counted, reference by
reference, against ``sys.getrefcount`` (a reference the garbage collector
cannot see, from C code say, makes it not only the history's). Letting the
entry go frees exactly those arrays.
"""

from __future__ import annotations

import gc
import json
import sys

KIND = "output-history"
# Names IPython binds to the last three results.
UNDERSCORES = ("_", "__", "___")
# At most this many objects are followed into the history's values.
MAX_NODES = 200_000


def holders(shell, jax) -> list[tuple]:
    """``(py_id, frames JSON, shape JSON, dtype, kind, holder, names JSON,
    only)`` per live array that an entry of ``Out`` holds (an array in two
    entries: a row for each); the traceback, shape and dtype find its row in
    the run where the object is a view JAX made of it."""
    ns = getattr(shell, "user_ns", None)
    out = ns.get("_oh") if isinstance(ns, dict) else None
    if not isinstance(out, dict) or not out:
        return []
    prompts = sorted(n for n in out if isinstance(n, int))
    names = _names(ns, out, prompts)
    # No reference to a value is kept here but in `nodes` (every one is counted).
    nodes, leaves = _nodes(jax, [out[n] for n in prompts])
    if not any(leaves):
        return []
    only = _only_held_by_history(_history_references(shell, ns, out), _edges(nodes), nodes)
    rows = []
    for n, positions in zip(prompts, leaves):
        text = json.dumps(names[n])
        rows += [(id(nodes[i]), *_described(nodes[i]), KIND, f"Out[{n}]", text, int(i in only)) for i in positions]
    return rows


def _described(a) -> tuple[str, str, str]:
    """The array's traceback frames (as the sampler writes stacks), shape, dtype."""
    try:
        tb = getattr(a, "traceback", None)
        frames = [[f.file_name, int(f.line_num), f.function_name] for f in tb.frames] if tb is not None else []
    except Exception:
        frames = []
    return (json.dumps(frames, separators=(",", ":")), json.dumps([int(d) for d in a.shape]), str(a.dtype))


def _names(ns, out, prompts) -> dict:
    """Per prompt number, the names holding its value: ``Out[N]``, ``_N``,
    and ``_``, ``__``, ``___`` when they are that object."""
    return {n: [f"Out[{n}]"] + ([f"_{n}"] if ns.get(f"_{n}") is out[n] else [])
            + [u for u in UNDERSCORES if ns.get(u) is out[n]] for n in prompts}


def _nodes(jax, values) -> tuple[list, list]:
    """Every object of the values' pytrees (containers and leaves), each
    once, in ``nodes``; per value, the positions in ``nodes`` of its
    ``jax.Array`` leaves."""
    nodes: list = []
    at: dict = {}  # id -> position in nodes
    leaves_of = []
    tu = jax.tree_util
    array = jax.Array
    tracer = getattr(getattr(jax, "core", None), "Tracer", ())

    def seen(node) -> bool:
        if id(node) not in at and len(nodes) < MAX_NODES:
            at[id(node)] = len(nodes)
            nodes.append(node)
        return False  # every node is followed: this only records it

    while values:
        value = values.pop(0)
        try:
            leaves = tu.tree_leaves(value, is_leaf=seen)
        except Exception:  # a value whose flattening fails: not followed
            leaves = []
        seen(value)
        positions = []
        for leaf in leaves:
            seen(leaf)
            if isinstance(leaf, array) and not isinstance(leaf, tracer) and id(leaf) in at:
                positions.append(at[id(leaf)])
        leaves_of.append(list(dict.fromkeys(positions)))
        value = leaves = leaf = None
    return nodes, leaves_of


def _is_history_name(name) -> bool:
    return isinstance(name, str) and (name in UNDERSCORES or (name[:1] == "_" and name[1:].isdigit()))


def _history_references(shell, ns, out) -> dict:
    """id(object) -> the references to it that IPython's output history
    holds: Out, ``_N``/``_``/``__``/``___`` in the user's namespace and the
    hidden one, the displayhook's own, the last ExecutionResult's."""
    counts: dict = {}
    held = list(out.values())
    held += [v for k, v in ns.items() if _is_history_name(k)]
    hidden = getattr(shell, "user_ns_hidden", None)
    if isinstance(hidden, dict) and hidden is not ns:
        held += [v for k, v in hidden.items() if _is_history_name(k)]
    dh = getattr(shell, "displayhook", None)
    held += [getattr(dh, u, None) for u in UNDERSCORES]
    results = {id(r): r for r in (getattr(shell, "last_execution_result", None), getattr(dh, "exec_result", None))
               if r is not None}
    held += [getattr(r, "result", None) for r in results.values()]
    for v in held:
        if v is not None:
            counts[id(v)] = counts.get(id(v), 0) + 1
    return counts


def _edges(nodes: list) -> dict:
    """child position -> {parent position: references}, between the nodes
    (an object's attributes through its ``__dict__`` too)."""
    index = {id(o): i for i, o in enumerate(nodes)}
    edges: dict = {}
    for i in range(len(nodes)):
        for j in [index.get(id(c)) for c in _referents(nodes[i])]:
            if j is not None and j != i:
                per = edges.setdefault(j, {})
                per[i] = per.get(i, 0) + 1
    return edges


def _only_held_by_history(from_history: dict, edges: dict, nodes: list) -> set:
    """Positions in ``nodes`` of the objects that nothing but the output
    history, and containers themselves only held by it, refers to. Each
    object's references are counted with ``sys.getrefcount``, beside a fresh
    object that only ``nodes`` holds (the baseline: the list, the argument)."""
    nodes.append(object())
    refs = [sys.getrefcount(nodes[i]) for i in range(len(nodes))]
    baseline = refs.pop()
    nodes.pop()
    ids = [id(o) for o in nodes]
    only = set(range(len(nodes)))
    changed = True
    while changed:  # the largest set whose every reference is accounted for
        changed = False
        for j in sorted(only):
            accounted = from_history.get(ids[j], 0) + sum(k for p, k in edges.get(j, {}).items() if p in only)
            if refs[j] - baseline > accounted:
                only.discard(j)
                changed = True
    return only


def _referents(obj) -> list:
    """What ``obj`` refers to, its instance attributes' values included
    (``gc.get_referents`` gives the ``__dict__`` where one was made)."""
    try:
        # First: asking for __dict__ makes it where the attributes had none yet.
        d = getattr(obj, "__dict__", None) if not isinstance(obj, type) else None
        found = gc.get_referents(obj)
    except Exception:
        return []
    if isinstance(d, dict) and any(r is d for r in found):
        found = [r for r in found if r is not d] + list(d.values())
    return found

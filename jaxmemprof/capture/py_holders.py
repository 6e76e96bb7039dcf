"""Who keeps each live array alive: the chain of Python references from a
root (a module global, a local of a live frame) down to the array, found by
walking the program's objects forward from its roots, breadth first, so that
each array gets its shortest chains: up to ``MAX_CHAINS`` of them, the
shortest first (``losses[…]`` and the global ``loss`` both hold the last
step's loss), each reached by a path no longer than the one that found the
last array the walk looked for.

The roots are searched in two rounds: first the program's own (globals of
modules that are not library code, and locals of frames running the
program's code), then, for the arrays still unexplained, library modules and
frames (JAX's own caches, flax's, IPython's), named as such. A step of a
chain is an item of a list, tuple, deque, dict or set, an attribute, a
closure variable of a function, a local of a suspended generator, or an
entry of a ``functools.lru_cache``. An array reached by no chain is held only
by references this walk cannot see: C extensions, XLA, a bounded
``lru_cache`` (its entries hide their results from the garbage collector).

Nothing here calls the program's code: containers are copied by C (a dict's
items, a list's items) under the GIL, attributes are read from ``__dict__``
and slots without ``__getattr__``, dict keys are shown only when they are
plain values. The walk holds the objects it visits only while it runs, and
gives every reference back before it returns: a frame's locals, which
Python 3.11 and 3.12 copy into a dict kept on the frame, are cleared again.
"""

from __future__ import annotations

import collections
import json
import gc
import sys
import time
import types

from jaxmemprof.paths import is_builtin_library, is_own_file

# Kinds of a step from an object to one it refers to.
ITEM, KEY, ATTR, CLOSURE, LOCAL, CACHE, MEMBER, REF = ("item", "key", "attr", "closure", "local", "cache",
                                                     "member", "ref")
# The label of a step to one of many like it: a list's item, a set's member,
# a dict's entry under a number (a cache keyed by step).
ANY = "\u2026"
# Kinds of a root.
GLOBAL, FRAME_LOCAL = "global", "local"

_FRAME_LOCALS_ARE_COPIES = sys.version_info < (3, 13)  # 3.13: a proxy over the frame, nothing to clear
_NO_CHILDREN = (str, bytes, bytearray, int, float, complex, bool, type(None), range, types.ModuleType, type,
                types.CodeType, types.FrameType, types.BuiltinFunctionType, types.MethodDescriptorType,
                types.WrapperDescriptorType, types.GetSetDescriptorType, types.MemberDescriptorType, memoryview)
_PLAIN_KEYS = (str, int, float, bool, type(None))
_LRU = type(__import__("functools").lru_cache(maxsize=None)(lambda: None))
_GENERATORS = (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)
_CHECK_EVERY = 512  # objects between looks at the clock
MAX_CHAINS = 3  # chains kept per array, the shortest first


def _key_text(k) -> str:
    if type(k) in (int, float):
        return ANY
    if type(k) in _PLAIN_KEYS:
        text = repr(k)
        return text if len(text) <= 40 else text[:37] + "..."
    if type(k) is tuple and all(type(x) in _PLAIN_KEYS for x in k) and len(k) <= 4:
        text = repr(k)
        return text if len(text) <= 40 else text[:37] + "..."
    return "<" + type(k).__name__ + ">"


def _frame_locals(frame) -> list:
    """(name, value) of a frame's locals; the dict 3.11/3.12 keep on the frame
    for ``f_locals`` is emptied again, so that it holds nothing after."""
    try:
        loc = frame.f_locals
        items = list(loc.items())
        if _FRAME_LOCALS_ARE_COPIES and type(loc) is dict and loc is not frame.f_globals:
            loc.clear()
        return items
    except Exception:
        return []


def _children(obj, module_dicts: set):
    """(step kind, label, child) of what ``obj`` refers to, for the kinds of
    object a chain passes through; other objects: what the garbage collector
    says they refer to (no labels)."""
    t = type(obj)
    if t in _NO_CHILDREN or isinstance(obj, _NO_CHILDREN):
        return ()
    if isinstance(obj, dict):
        if id(obj) in module_dicts:
            return ()
        return [(KEY, _key_text(k), v) for k, v in list(dict.items(obj))]
    if isinstance(obj, (list, collections.deque)):
        return [(ITEM, ANY, v) for v in list(obj)]
    if isinstance(obj, tuple):
        fields = getattr(t, "_fields", None)
        items = tuple.__iter__(obj)
        if fields and isinstance(fields, tuple) and len(fields) == len(obj):
            return [(ATTR, str(f), v) for f, v in zip(fields, items)]
        return [(ITEM, str(i), v) for i, v in enumerate(items)]
    if isinstance(obj, (set, frozenset)):
        return [(MEMBER, ANY, v) for v in list(obj)]
    if t is types.FunctionType:
        out = []
        cells = obj.__closure__ or ()
        for name, cell in zip(obj.__code__.co_freevars, cells):
            try:
                out.append((CLOSURE, name, cell.cell_contents))
            except ValueError:  # an empty cell
                pass
        for i, v in enumerate(obj.__defaults__ or ()):
            out.append((ATTR, f"__defaults__[{i}]", v))
        for k, v in list((obj.__kwdefaults__ or {}).items()):
            out.append((ATTR, f"__kwdefaults__[{k!r}]", v))
        d = obj.__dict__
        out.extend((ATTR, str(k), v) for k, v in list(d.items()))
        return out
    if t is _LRU:
        out = []
        own = obj.__dict__
        for r in gc.get_referents(obj):
            if isinstance(r, dict) and r is not own:
                out.extend((CACHE, _key_text(k), v) for k, v in list(dict.items(r)))
            elif r is own:
                out.extend((ATTR, str(k), v) for k, v in list(own.items()))
        return out
    if isinstance(obj, _GENERATORS):
        frame = getattr(obj, "gi_frame", None) or getattr(obj, "cr_frame", None) or getattr(obj, "ag_frame", None)
        if frame is None:
            return ()
        return [(LOCAL, str(k), v) for k, v in _frame_locals(frame)]
    if t is types.MethodType:
        return [(ATTR, "__self__", obj.__self__), (ATTR, "__func__", obj.__func__)]
    out = []
    try:
        d = object.__getattribute__(obj, "__dict__")
    except Exception:
        d = None
    if isinstance(d, dict):
        out.extend((ATTR, str(k), v) for k, v in list(dict.items(d)))
    for klass in t.__mro__:
        slots = klass.__dict__.get("__slots__")
        if slots is None:
            continue
        for name in ((slots,) if isinstance(slots, str) else slots):
            if name in ("__dict__", "__weakref__"):
                continue
            descr = klass.__dict__.get(name)
            if isinstance(descr, types.MemberDescriptorType):
                try:
                    out.append((ATTR, name, descr.__get__(obj, t)))
                except AttributeError:
                    pass
    if out or d is not None:
        return out
    # Objects of C types: what they refer to, without names.
    return [(REF, type(r).__name__, r) for r in gc.get_referents(obj) if not isinstance(r, type)]


class Search:
    """One search for the chains that hold ``targets`` (id(array) -> the
    array's id in the journal) alive, within ``deadline`` (time.monotonic()).
    ``skip``: ids of objects that are not the program's (the caller's own
    list of the arrays, say). ``found``: id(array) -> its chains, shortest
    first, each (root kind, root name, module file, function, first line,
    steps, container type), steps a list of (kind, label) from the root
    down."""

    def __init__(self, targets: dict, deadline: float, skip=(), library: bool = True):
        self.targets = targets
        self.deadline = deadline
        self.library = library  # whether to search library roots for the arrays the program's own do not hold
        self.skip = set(skip)
        self.found: dict = {}
        # The arrays themselves (a view JAX made and its array are one): the
        # search is over when each has a chain, whichever object it holds.
        self.arrays = set(targets.values())
        self.found_arrays: set = set()
        self.complete = True
        self.visited = 0

    def run(self) -> dict:
        module_dicts = {}
        for name, mod in list(sys.modules.items()):
            d = getattr(mod, "__dict__", None) if mod is not None else None
            if isinstance(d, dict):
                module_dicts.setdefault(id(d), (name, mod, d))
        own_threads = {t for t, fr in _jaxmemprof_threads()}
        frames = []
        for ident, top in list(sys._current_frames().items()):
            if ident in own_threads:
                continue
            f = top
            while f is not None:
                frames.append(f)
                f = f.f_back
            del f
        del top
        user, library = [], []
        for key, (name, mod, d) in module_dicts.items():
            file = getattr(mod, "__file__", None) or ""
            if name.startswith("jaxmemprof") or name == "jaxmemprof":
                continue
            side = library if (name != "__main__" and (not file or is_builtin_library(file))) else user
            side.append((GLOBAL, name, file, "", 0, d))
        for f in frames:
            code = f.f_code
            if code.co_flags & 0x1 == 0:  # not CO_OPTIMIZED: a module or class body, its globals are a module's
                continue
            file = code.co_filename
            if is_own_file(file):
                continue
            side = library if is_builtin_library(file) else user
            side.append((FRAME_LOCAL, code.co_qualname if hasattr(code, "co_qualname") else code.co_name, file,
                         code.co_name, code.co_firstlineno, f))
        del frames
        try:
            self._walk(user, set(module_dicts))
            if self.library and len(self.found_arrays) < len(self.arrays) and self.complete:
                self._walk(library, set(module_dicts))
        finally:
            del user, library, module_dicts
        return self.found

    def _walk(self, roots: list, module_dicts: set) -> None:
        targets, found, skip = self.targets, self.found, self.skip
        found_arrays, n_arrays = self.found_arrays, len(self.arrays)
        seen = set(skip)
        seen.update(module_dicts)
        earlier = set(found)  # found by an earlier round: their chains are shorter, or the program's own
        seen.update(earlier)
        # A node: (parent node index, step kind, label, container type name)
        nodes: list = []
        root_of: list = []
        queue: collections.deque = collections.deque()
        for kind, name, file, function, line, holder in roots:
            if kind == GLOBAL:
                items = [(k, v) for k, v in list(dict.items(holder)) if isinstance(k, str)
                         and not (len(k) > 4 and k.startswith("__") and k.endswith("__"))]
                if name == "__main__":  # the program's own names before IPython's history's (_N, then Out, _)
                    items.sort(key=lambda kv: _history_rank(kv[0]))
            else:
                items = _frame_locals(holder)
            root_index = len(root_of)
            root_of.append((kind, name, file, function, line))
            for k, v in items:
                queue.append((v, len(nodes)))
                nodes.append((-1 - root_index, KEY if kind == GLOBAL else LOCAL, str(k), "module" if kind == GLOBAL
                              else "frame"))
            del items, holder
        del roots
        count = 0
        draining = False  # every array found: the chains already queued are read, no object is opened
        try:
            while queue:
                obj, node = queue.popleft()
                key = id(obj)
                if key in targets and key not in earlier:
                    chains = found.setdefault(key, [])
                    if len(chains) < MAX_CHAINS:
                        chains.append(self._chain(nodes, root_of, node))
                    found_arrays.add(targets[key])
                    draining = draining or len(found_arrays) == n_arrays
                    continue
                if key in seen or draining:
                    continue
                seen.add(key)
                count += 1
                if count % _CHECK_EVERY == 0 and time.monotonic() > self.deadline:
                    self.complete = False
                    break
                try:
                    kids = _children(obj, module_dicts)
                except Exception:
                    kids = ()
                if kids:
                    tname = type(obj).__name__
                    for step, label, child in kids:
                        if id(child) not in seen or id(child) in targets:
                            queue.append((child, len(nodes)))
                            nodes.append((node, step, label, tname))
                del kids, obj
        finally:
            queue.clear()
            self.visited += count

    @staticmethod
    def _chain(nodes: list, root_of: list, node: int) -> tuple:
        steps = []
        container = nodes[node][3]
        while node >= 0:
            parent, step, label, _ = nodes[node]
            steps.append((step, label))
            node = parent
        steps.reverse()
        kind, name, file, function, line = root_of[-1 - node]
        return kind, name, file, function, line, steps, container


def _history_rank(name: str) -> int:
    if not name.startswith(("_", "Out")):
        return 0
    if name[1:].isdigit():
        return 1
    return 2 if name == "Out" else 3 if name in ("_", "__", "___") else 0


def _jaxmemprof_threads():
    import threading

    for t in threading.enumerate():
        if t.name.startswith("jaxmemprof"):
            yield t.ident, t


def search(arrays: dict, budget_s: float, skip=(), library: bool = True) -> tuple[dict, bool, int]:
    """The chains holding ``arrays`` (id(array) -> journal id; the caller
    keeps them alive meanwhile) within ``budget_s`` seconds: (id(array) ->
    its chains, whether every root was searched, objects visited). ``library``:
    search library modules and frames too (JAX's caches: a larger walk)."""
    s = Search(arrays, time.monotonic() + budget_s, skip, library)
    s.run()
    return s.found, s.complete, s.visited


# The triggers of a run's last snapshot (the program ends, fails or is stopped).
END_TRIGGERS = ("exit", "exception", "oom", "signal")


class Searches:
    """When a run searches for holders, and what it writes: at each snapshot
    whose live bytes are above ``growth`` times the last searched one's (while no
    jitted call is in flight, and while the searches' time stays within
    ``share`` of the run's, the first ``first_s`` always allowed), and at the
    run's last snapshot (``end_s``, or ``share`` of the run if more). Only
    the last searches library roots too (for the arrays no root of the
    program's holds): their objects are many.
    Each search writes one row per array held (``py_holders``; a search at
    more live bytes replaces the last one's rows, so that the journal keeps
    two searches' rows at most: the largest before the end, and the end's),
    each chain once (``py_chains``), and its cost (``py_holder_searches``)."""

    def __init__(self, writer, *, share: float = 0.01, first_s: float = 0.5, end_s: float = 2.0,
                 growth: float = 1.0):
        self.writer = writer
        self.share, self.first_s, self.end_s, self.growth = share, first_s, end_s, growth
        self.t0 = time.monotonic()
        self.spent = 0.0
        self.searched_bytes = 0
        self.peak_search: int | None = None  # the snapshot of the search whose rows stand for the peak
        self.chains: dict = {}

    def budget(self, trigger: str, live_bytes: int, in_flight) -> float:
        """Seconds this snapshot's search may take; 0: no search."""
        elapsed = time.monotonic() - self.t0
        if trigger in END_TRIGGERS:
            return max(self.end_s, self.share * elapsed)
        if in_flight or live_bytes <= 0 or live_bytes <= self.searched_bytes * self.growth:
            return 0.0
        left = max(self.first_s, self.share * elapsed) - self.spent
        return left if left >= 0.02 else 0.0

    def after(self, jax, tracked: dict, index: int, trigger: str, live_bytes: int, in_flight=(),
              views=None) -> None:
        """Search after snapshot ``index`` if its budget allows; ``tracked``:
        id(array) -> the sampler's entry (its ``array_id``); ``views``:
        id(view) -> the tracked entry whose buffers a view JAX made shares
        (the program may hold either object)."""
        budget = self.budget(trigger, live_bytes, in_flight)
        if budget <= 0:
            return
        c0 = time.thread_time()
        live = jax.live_arrays()
        targets = {}
        for a in live:
            entry = tracked.get(id(a))
            if entry is None and views is not None:
                entry = views(id(a))
            if entry is not None and entry.array_id:
                targets[id(a)] = entry.array_id
        found, complete, visited = search(targets, budget, skip=(id(live), id(targets)),
                                          library=trigger in END_TRIGGERS)
        del live
        best: dict = {}  # array id -> its chains (an array and its view may both be held)
        for key, chains in found.items():
            best.setdefault(targets[key], []).extend(chains)
        rows, new_chains = [], []
        for aid, chains in best.items():
            ids = []
            for kind, name, file, function, line, steps, container in sorted(chains, key=lambda c: len(c[5])):
                ck = (kind, name, file, function, line, json.dumps(steps, ensure_ascii=False), container)
                cid = self.chains.get(ck)
                if cid is None:
                    cid = self.chains[ck] = len(self.chains) + 1
                    new_chains.append((cid, *ck))
                if cid not in ids and len(ids) < MAX_CHAINS:
                    ids.append(cid)
            rows.extend((index, aid, cid) for cid in ids)
        cost = time.thread_time() - c0
        self.spent += cost
        replaces = None
        if trigger not in END_TRIGGERS:
            self.searched_bytes = live_bytes
            replaces, self.peak_search = self.peak_search, index
        self.writer.add_py_holders(new_chains, rows, (index, trigger, cost, len(set(targets.values())), len(best),
                                                      int(complete), visited), replaces)

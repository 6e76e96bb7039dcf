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
chain is an item of a list, tuple, deque, dict or set, an attribute (named
as the program reads it where a library's class stores it under another
name: flax's ``Variable.value``, facts/libraries' ``ATTRIBUTES``), a
closure variable of a function, a local of a suspended generator, or an
entry of a ``functools.lru_cache``. An array reached by no chain is held only
by references this walk cannot see: C extensions, XLA, a bounded
``lru_cache`` (its entries hide their results from the garbage collector).

The walk only reads, and never runs the program's code (docs/holders.md):

- an object's kind is decided by ``type(obj)`` and the type's own
  dictionaries, read through ``type``'s descriptors (never ``isinstance``,
  which asks the object's ``__class__``; never an attribute lookup a
  metaclass could answer; never ``==``, ``hash()`` or ``str()`` of the
  program's objects: types are compared by identity);
- a container's items are read by its base type's C methods
  (``list.__getitem__``, ``dict.items``, ``set.__iter__``), a slice or a
  chunk at a time between looks at the clock, so that a list of 100M items
  costs no more than the budget; past ``MAX_FANOUT`` of one container's items
  only the arrays among them are taken (the search says it was cut);
- an instance's attributes come from the ``__dict__`` slot of the first base
  that made one (the interpreter's own descriptor, never a ``__dict__``
  property) and its member descriptors;
- a frame's locals are read only in the frame's own thread, at a point the
  program offers (capture/frame_locals.py: a step's snapshot in
  ``jaxmemprof.mark()``, the program's ``jaxmemprof.snapshot()``); a search
  run from jaxmemprof's thread reads module globals and what they reach, and
  says which threads' locals it could not read; a suspended generator's
  locals are what the garbage collector lists of it (no names);
- the arrays themselves are never held: they are known by ``id`` and a weak
  reference, and a chain ends where it meets one. A container the program
  drops while the walk has it queued is let go, unread, when its turn comes.
"""

from __future__ import annotations

import collections
import gc
import itertools
import json
import sys
import threading
import time
import types
import weakref

from jaxmemprof.capture.frame_locals import OTHER_THREAD, Unread, frame_locals, own_stack
from jaxmemprof.capture.library_roots import is_library
from jaxmemprof.facts.libraries import ATTRIBUTES
from jaxmemprof.facts.paths import is_own_file

# Kinds of a step from an object to one it refers to.
ITEM, KEY, ATTR, CLOSURE, LOCAL, CACHE, MEMBER, REF = ("item", "key", "attr", "closure", "local", "cache",
                                                     "member", "ref")
# The label of a step to one of many like it: a list's item, a set's member,
# a dict's entry under a number (a cache keyed by step).
ANY = "\u2026"
# Kinds of a root.
GLOBAL, FRAME_LOCAL = "global", "local"

_CHUNK = 4096  # a container's items read at once, between looks at the clock
_CHECK_EVERY = 512  # objects between looks at the clock
MAX_CHAINS = 3  # chains kept per array, the shortest first
MAX_FANOUT = 65536  # a container's items walked into; past them, only its arrays are taken

# The interpreter's own descriptors, read from ``type`` itself: a metaclass
# cannot answer for them.
_TYPE_MRO = type.__dict__["__mro__"].__get__
_TYPE_DICT = type.__dict__["__dict__"].__get__
_TYPE_NAME = type.__dict__["__name__"].__get__
_TYPE_QUALNAME = type.__dict__["__qualname__"].__get__
_MODULE_DICT = vars(types.ModuleType)["__dict__"].__get__
_SUBCLASS = type.__subclasscheck__  # (base, t): t's real bases, never a program's __subclasscheck__
_LRU = type(__import__("functools").lru_cache(maxsize=None)(lambda: None))
# Generators, coroutines and async generators: their locals are read as the
# garbage collector lists them (a C traverse, no names), never through their
# frame's f_locals, which another thread may be running or closing.
_GENERATORS = {id(types.GeneratorType), id(types.CoroutineType), id(types.AsyncGeneratorType)}
# Objects that refer to nothing a chain goes through, by the id of their
# exact type (a set of ints: no program's __hash__ or __eq__ is asked).
_LEAVES = {id(t) for t in (str, bytes, bytearray, int, float, complex, bool, type(None), range, types.ModuleType,
                           types.CodeType, types.FrameType, types.BuiltinFunctionType, types.MethodDescriptorType,
                           types.WrapperDescriptorType, types.GetSetDescriptorType, types.MemberDescriptorType,
                           memoryview, type(Ellipsis), type(NotImplemented))}
_LEAF_BASES = (type, types.ModuleType)  # classes and modules: their dicts are not walked into (modules are roots)
_PLAIN = {id(t) for t in (str, bool, type(None))}


def _plain_str(s) -> str:
    """``s`` as an exact ``str`` (a subclass's ``__str__`` is never asked)."""
    return str.__getitem__(s, slice(None))


def _type_name(t) -> str:
    try:
        return _plain_str(_TYPE_NAME(t))
    except Exception:
        return "?"


def _is_sub(t, bases) -> bool:
    for b in bases:
        if t is b or _SUBCLASS(b, t):
            return True
    return False


def _key_text(k) -> str:
    t = type(k)
    if t is int or t is float:
        return ANY
    if id(t) in _PLAIN:
        text = repr(k)
        return text if len(text) <= 40 else text[:37] + "..."
    if t is tuple and tuple.__len__(k) <= 4 and all(id(type(x)) in _PLAIN or type(x) is int or type(x) is float
                                                      for x in k):
        text = repr(k)
        return text if len(text) <= 40 else text[:37] + "..."
    return "<" + _type_name(t) + ">"


def _name(k) -> str:
    """An attribute's or a variable's name as a label."""
    return k if type(k) is str else _key_text(k)


class _Shape:
    """What the walk needs of one type, read from its own dictionaries once a
    search: the interpreter's ``__dict__`` descriptor of the first base that
    made one, its member descriptors (slots, a C type's members), a
    namedtuple's fields."""

    __slots__ = ("kind", "dict_get", "members", "fields", "name", "spelled")

    def __init__(self, t):
        self.name = _type_name(t)
        self.dict_get = None
        self.members = []
        self.fields = None
        self.spelled: dict = {}  # an attribute -> how the program reads it (a library's class: ATTRIBUTES)
        if id(t) in _LEAVES or _is_sub(t, _LEAF_BASES):
            self.kind = "leaf"
            return
        self.kind = ("dict" if _is_sub(t, (dict,)) else "list" if _is_sub(t, (list,))
                     else "deque" if _is_sub(t, (collections.deque,)) else "tuple" if _is_sub(t, (tuple,))
                     else "frozenset" if _is_sub(t, (frozenset,)) else "set" if _is_sub(t, (set,))
                     else "function" if t is types.FunctionType else "lru" if t is _LRU
                     else "generator" if id(t) in _GENERATORS else "method" if t is types.MethodType else "object")
        try:
            mro = _TYPE_MRO(t)
        except Exception:
            mro = ()
        seen_members = set()
        for klass in mro:
            if type(klass) is not type and not _SUBCLASS(type, type(klass)):
                continue
            try:
                own = dict(_TYPE_DICT(klass))
            except Exception:
                continue
            entry = own.get("__dict__")
            module = own.get("__module__")
            if type(module) is str and ATTRIBUTES:
                try:
                    qualname = _plain_str(_TYPE_QUALNAME(klass))
                except Exception:
                    qualname = ""
                for stored, read in ATTRIBUTES.get(f"{_plain_str(module)}.{qualname}", {}).items():
                    self.spelled.setdefault(stored, read)
            if self.dict_get is None and type(entry) is types.GetSetDescriptorType:
                self.dict_get = entry.__get__
            fields = own.get("_fields")
            if self.fields is None and type(fields) is tuple and all(type(f) is str for f in fields):
                self.fields = fields
            for value in own.values():
                if type(value) is types.MemberDescriptorType:
                    name = _plain_str(value.__name__)
                    if name not in seen_members and name not in ("__weakref__", "__dict__"):
                        seen_members.add(name)
                        self.members.append((name, value.__get__))


def _chunks(iterator):
    """Lists of up to ``_CHUNK`` items of ``iterator`` (each read by one C
    call); stops where the container changed size under it."""
    while True:
        try:
            chunk = list(itertools.islice(iterator, _CHUNK))
        except RuntimeError:  # changed size during iteration: what was read stands
            return
        if not chunk:
            return
        yield chunk
        if len(chunk) < _CHUNK:
            return


def _children(obj, shape: _Shape, module_dicts: set):
    """(step kind, label, child) of what ``obj`` refers to, lazily, a chunk
    at a time; for objects of other kinds: what the garbage collector says
    they refer to (no labels)."""
    kind = shape.kind
    if kind == "dict":
        if id(obj) in module_dicts:
            return
        for chunk in _chunks(iter(dict.items(obj))):
            for k, v in chunk:
                yield KEY, _key_text(k), v
    elif kind == "list":
        start = 0
        while True:
            chunk = list.__getitem__(obj, slice(start, start + _CHUNK))
            for v in chunk:
                yield ITEM, ANY, v
            if len(chunk) < _CHUNK:
                return
            start += _CHUNK
    elif kind == "deque":
        for chunk in _chunks(collections.deque.__iter__(obj)):
            for v in chunk:
                yield ITEM, ANY, v
    elif kind == "tuple":
        items = tuple.__getitem__(obj, slice(None))
        fields = shape.fields
        if fields is not None and len(fields) == len(items):
            for f, v in zip(fields, items):
                yield ATTR, f, v
        else:
            for i, v in enumerate(items):
                yield ITEM, str(i), v
    elif kind in ("set", "frozenset"):
        base = set if kind == "set" else frozenset
        for chunk in _chunks(base.__iter__(obj)):
            for v in chunk:
                yield MEMBER, ANY, v
    elif kind == "function":
        for name, cell in zip(obj.__code__.co_freevars, obj.__closure__ or ()):
            try:
                yield CLOSURE, name, cell.cell_contents
            except ValueError:  # an empty cell
                pass
        for i, v in enumerate(obj.__defaults__ or ()):
            yield ATTR, f"__defaults__[{i}]", v
        kwdefaults = obj.__kwdefaults__
        if type(kwdefaults) is dict:
            for k, v in list(dict.items(kwdefaults)):
                yield ATTR, f"__kwdefaults__[{_key_text(k)}]", v
        for k, v in list(dict.items(obj.__dict__)):
            yield ATTR, _name(k), v
    elif kind == "lru":
        own = obj.__dict__
        for r in gc.get_referents(obj):
            if type(r) is dict and r is not own:
                for chunk in _chunks(iter(dict.items(r))):
                    for k, v in chunk:
                        yield CACHE, _key_text(k), v
            elif r is own:
                for k, v in list(dict.items(own)):
                    yield ATTR, _name(k), v
    elif kind == "generator":
        # What the garbage collector lists of it: its frame's locals and stack;
        # a frame, where one is listed, by its own referents (its locals).
        for r in gc.get_referents(obj):
            t = type(r)
            if t is types.FrameType:
                for v in gc.get_referents(r):
                    if type(v) is not types.FrameType and type(v) is not types.CodeType:
                        yield LOCAL, ANY, v
            elif t is not types.CodeType:
                yield LOCAL, ANY, r
    elif kind == "method":
        yield ATTR, "__self__", obj.__self__
        yield ATTR, "__func__", obj.__func__
    else:
        d = None
        if shape.dict_get is not None:
            try:
                d = shape.dict_get(obj)
            except Exception:
                d = None
        spelled = shape.spelled
        if type(d) is dict:
            for chunk in _chunks(iter(dict.items(d))):
                for k, v in chunk:
                    label = _name(k)
                    yield ATTR, spelled.get(label, label), v
        some = d is not None
        for name, get in shape.members:
            try:
                value = get(obj)
            except Exception:  # an unset slot; a member of another base
                continue
            some = True
            yield ATTR, spelled.get(name, name), value
        if not some:  # objects of C types: what they refer to, without names
            for r in gc.get_referents(obj):
                if not _SUBCLASS(type, type(r)):
                    yield REF, _type_name(type(r)), r


class Search:
    """One search for the chains that hold ``targets`` (id(array) -> (a weak
    reference to it, the array's id in the journal)) alive, within
    ``deadline`` (time.monotonic()). ``skip``: ids of objects that are not
    the program's (the caller's own tables). ``found``: id(array) -> its
    chains, shortest first, each (root kind, root name, module file,
    function, first line, steps, container type), steps a list of (kind,
    label) from the root down."""

    def __init__(self, targets: dict, deadline: float, skip=(), library: bool = True, frames: bool = True):
        self.targets = targets
        self.deadline = deadline
        self.library = library  # whether to search library roots for the arrays the program's own do not hold
        self.frames = frames  # whether to read the locals of this thread's frames (the program's own thread)
        self.skip = set(skip)
        self.found: dict = {}
        # The arrays themselves (a view JAX made and its array are one): the
        # search is over when each has a chain, whichever object it holds.
        self.arrays = {aid for _, aid in targets.values()}
        self.found_arrays: set = set()
        self.complete = True  # every root searched, every container's items walked
        self.visited = 0
        self.unread = Unread()  # the program's frames whose locals were not read, and why
        self._shapes: dict = {}  # id(type) -> (type, _Shape), for this search

    def _shape(self, t) -> _Shape:
        got = self._shapes.get(id(t))
        if got is None:
            got = self._shapes[id(t)] = (t, _Shape(t))
        return got[1]

    def run(self) -> dict:
        module_dicts: dict[int, tuple[str, dict]] = {}
        for name, mod in list(dict.items(sys.modules)):
            if type(name) is not str or not _is_sub(type(mod), (types.ModuleType,)):
                continue
            d = _MODULE_DICT(mod)
            if type(d) is dict:
                module_dicts.setdefault(id(d), (name, d))
        # Only this thread's frames, and only when it is the program's thread
        # at a point the program offered: another thread's frames are never
        # read (capture/frame_locals.py).
        me = threading.current_thread()
        frames = own_stack(2) if self.frames and not me.name.startswith("jaxmemprof") else []
        for t in threading.enumerate():
            if t is not me and not t.name.startswith("jaxmemprof") and t.is_alive():
                self.unread.add(OTHER_THREAD, t.name)
        user: list = []
        library: list = []
        for _key, (name, d) in module_dicts.items():
            file = dict.get(d, "__file__")
            file = file if type(file) is str else ""
            if name.startswith("jaxmemprof"):
                continue
            side = library if (name != "__main__" and (not file or is_library(file))) else user
            side.append((GLOBAL, name, file, "", 0, d))
        for f in frames:
            code = f.f_code
            if code.co_flags & 0x1 == 0:  # not CO_OPTIMIZED: a module or class body, its globals are a module's
                continue
            file = code.co_filename
            if is_own_file(file):
                continue
            side = library if is_library(file) else user
            side.append((FRAME_LOCAL, code.co_qualname if hasattr(code, "co_qualname") else code.co_name, file,
                         code.co_name, code.co_firstlineno, f))
        del frames
        try:
            self._walk(user, set(module_dicts), self.unread)
            if self.library and len(self.found_arrays) < len(self.arrays) and time.monotonic() < self.deadline:
                self._walk(library, set(module_dicts), None)
        finally:
            del user, library, module_dicts
            self._shapes.clear()
        return self.found

    def _hit(self, child, nodes: list, root_of: list, parent: int, step: str, label: str, tname: str,
             earlier: set) -> bool:
        """Whether ``child`` is an array looked for (then its chain is kept)."""
        key = id(child)
        target = self.targets.get(key)
        if target is None or target[0]() is not child:  # not looked for, or another object at a freed one's id
            return False
        if key not in earlier:
            chains = self.found.setdefault(key, [])
            if len(chains) < MAX_CHAINS:
                nodes.append((parent, step, label, tname, 0))
                chains.append(self._chain(nodes, root_of, len(nodes) - 1))
                nodes.pop()
            self.found_arrays.add(target[1])
        return True

    def _walk(self, roots: list, module_dicts: set, unread: Unread | None) -> None:
        seen = set(self.skip)
        seen.update(module_dicts)
        earlier = set(self.found)  # found by an earlier round: their chains are shorter, or the program's own
        n_arrays = len(self.arrays)
        # A node: (parent node index, step kind, label, container type name, depth)
        nodes: list = []
        root_of: list = []
        queue: collections.deque = collections.deque()
        for kind, name, file, function, line, holder in roots:
            if kind == GLOBAL:
                items = [(k, v) for k, v in list(dict.items(holder)) if type(k) is str
                         and not (len(k) > 4 and k.startswith("__") and k.endswith("__"))]
                if name == "__main__":  # the program's own names before IPython's history's (_N, then Out, _)
                    items.sort(key=lambda kv: _history_rank(kv[0]))
            else:
                items = frame_locals(holder, unread)
            root_index = len(root_of)
            root_of.append((kind, name, file, function, line))
            step, tname = (KEY, "module") if kind == GLOBAL else (LOCAL, "frame")
            for k, v in items:
                if id(type(v)) in _LEAVES:
                    continue
                if self._hit(v, nodes, root_of, -1 - root_index, step, _name(k), tname, earlier):
                    continue
                queue.append((v, len(nodes)))
                nodes.append((-1 - root_index, step, _name(k), tname, 1))
            del items, holder
        del roots
        count = 0
        scanned = 0
        deadline = self.deadline
        # Every array found: only the nodes above the last one's depth are
        # still read (for the other chains as short as its).
        stop_depth = 1 if n_arrays and len(self.found_arrays) == n_arrays else None
        try:
            while queue:
                obj, node = queue.popleft()
                key = id(obj)
                depth = nodes[node][4]
                if stop_depth is not None and depth >= stop_depth:
                    break
                if key in seen:
                    continue
                seen.add(key)
                # The program let go of it while it waited in the queue: let it go too, unread.
                if sys.getrefcount(obj) <= 2:
                    continue
                t = type(obj)
                if id(t) in _LEAVES:
                    continue
                count += 1
                if count % _CHECK_EVERY == 0 and time.monotonic() > deadline:
                    self.complete = False
                    break
                shape = self._shape(t)
                if shape.kind == "leaf":
                    continue
                taken = 0
                try:
                    for step, label, child in _children(obj, shape, module_dicts):
                        scanned += 1
                        if scanned % _CHUNK == 0 and time.monotonic() > deadline:
                            self.complete = False
                            break
                        if self._hit(child, nodes, root_of, node, step, label, shape.name, earlier):
                            if stop_depth is None and len(self.found_arrays) == n_arrays:
                                stop_depth = depth + 1
                            continue
                        if stop_depth is not None:
                            continue
                        ck = id(child)
                        if ck in seen or id(type(child)) in _LEAVES:
                            continue
                        if taken >= MAX_FANOUT:
                            self.complete = False
                            continue
                        taken += 1
                        queue.append((child, len(nodes)))
                        nodes.append((node, step, label, shape.name, depth + 1))
                    else:
                        continue
                    break  # out of time inside a container
                except Exception:  # a container changed under the walk, an unreadable member: its other items
                    continue
                finally:
                    child = obj = None
        finally:
            queue.clear()
            self.visited += count

    @staticmethod
    def _chain(nodes: list, root_of: list, node: int) -> tuple:
        steps = []
        container = nodes[node][3]
        while node >= 0:
            parent, step, label, _, _ = nodes[node]
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


def search(arrays: dict, budget_s: float, skip=(), library: bool = True) -> tuple[dict, bool, int]:
    """The chains holding ``arrays`` (id(array) -> (a weak reference to it,
    its journal id)) within ``budget_s`` seconds: (id(array) ->
    its chains, whether every root was searched, objects visited). ``library``:
    search library modules and frames too (JAX's caches: a larger walk).
    ``searched()`` gives the whole ``Search`` (what it could not read too)."""
    s = searched(arrays, budget_s, skip, library)
    return s.found, s.complete, s.visited


def searched(arrays: dict, budget_s: float, skip=(), library: bool = True, frames: bool = True) -> Search:
    """``search()``'s finished ``Search``: also ``unread``, the program's
    frames it did not read. ``frames``: read the locals of this thread's
    frames (only in the program's own thread, at a point it offers)."""
    s = Search(arrays, time.monotonic() + budget_s, skip, library, frames)
    s.run()
    return s


# The event that says which of the program's frames a search could not read (analysis/py_holders.py).
UNREAD_EVENT = "holders-unread"
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
        self.own_searched = False  # a search ran in the program's thread (its locals read)
        self.chains: dict = {}

    def budget(self, trigger: str, live_bytes: int, in_flight, own: bool = True) -> float:
        """Seconds this snapshot's search may take; 0: no search. ``own``:
        the search would run in the program's thread (its frames read).
        Once one has, searches from jaxmemprof's thread stand back: without
        the program's locals their rows would replace better ones."""
        elapsed = time.monotonic() - self.t0
        if trigger in END_TRIGGERS:
            return max(self.end_s, self.share * elapsed)
        if in_flight or live_bytes <= 0 or live_bytes <= self.searched_bytes * self.growth or (
                self.own_searched and not own):
            return 0.0
        left = max(self.first_s, self.share * elapsed) - self.spent
        return left if left >= 0.02 else 0.0

    def after(self, jax, tracked: dict, index: int, trigger: str, live_bytes: int, in_flight=(),
              views=None) -> None:
        """Search after snapshot ``index`` if its budget allows; ``tracked``:
        id(array) -> the sampler's entry (its ``array_id``); ``views``:
        id(view) -> the tracked entry whose buffers a view JAX made shares
        (the program may hold either object)."""
        own = not threading.current_thread().name.startswith("jaxmemprof")  # the program's thread
        budget = self.budget(trigger, live_bytes, in_flight, own)
        if budget <= 0:
            return
        c0 = time.thread_time()
        # The arrays are looked for by id and a weak reference: the search
        # holds none of them, so that one the program drops meanwhile is
        # freed as under python.
        targets = {}
        live, a = jax.live_arrays(), None  # (a: bound even when nothing is live)
        for a in live:
            entry = tracked.get(id(a))
            if entry is None and views is not None:
                entry = views(id(a))
            if entry is not None and entry.array_id:
                try:
                    targets[id(a)] = (weakref.ref(a), entry.array_id)
                except TypeError:  # an array type without weak references
                    pass
        del live, a
        done = searched(targets, budget, skip=(id(targets),), library=trigger in END_TRIGGERS, frames=own)
        found, complete, visited = done.found, done.complete, done.visited
        best: dict = {}  # array id -> its chains (an array and its view may both be held)
        for key, chains in found.items():
            best.setdefault(targets[key][1], []).extend(chains)
        rows: list[tuple] = []
        new_chains: list = []
        for aid, chains in best.items():
            ids: list = []
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
            self.own_searched = self.own_searched or own
            replaces, self.peak_search = self.peak_search, index
        # Arrays not found while some of the program's locals were not read: said, in one line, with the search.
        if done.unread and len(best) < len(done.arrays) and hasattr(self.writer, "add_event"):
            self.writer.add_event(UNREAD_EVENT, done.unread.text(), index)
        self.writer.add_py_holders(new_chains, rows, (index, trigger, cost, len({aid for _, aid in targets.values()}), len(best),
                                                      int(complete), visited), replaces)

"""The holder search only reads (issue: observe, never act). Programs whose
objects are hostile to being looked at, and programs that a read of their
frames would change, run under ``jaxmemprof run`` exactly as under python;
in-process, the search is held to calling none of the program's code
(counted by hostile classes), holding none of its arrays, and keeping its
budget and memory on a 3M-item list."""

from __future__ import annotations

import collections
import sys
import threading
import time
import tracemalloc
import weakref

import jax.numpy as jnp
import pytest

from conftest import cpu_env, in_parallel, run_cli, write_script

from jaxmemprof.capture import py_holders
from jaxmemprof.capture.frame_locals import frame_locals
from jaxmemprof.capture.py_holders import Searches, search

# -- programs that a read of their frames would change --------------------------

TRACED = """
import sys
import jax.numpy as jnp

def tracer(frame, event, arg):
    # a local trace function on the program's own frames, which (as a
    # debugger's) takes a while: the sampler's turns come mostly inside it,
    # between 3.11's trampoline reading frame.f_locals and writing it back
    if frame.f_code.co_filename != __file__:
        return None
    n = 0
    for _ in range(3000):
        n += 1
    return tracer

def work():
    kept = []
    t = 0
    for i in range(3000):
        if i % 20 == 0:
            kept.append(jnp.ones((1024,)) * i)  # a new high: a holder search
        t += 1
    return t, len(kept)

sys.settrace(tracer)
print(work())
sys.settrace(None)
"""

LOCALS_HELD = """
import time
import jax.numpy as jnp

def train(lr=0.1, steps=120):
    hparams = locals()  # the usual way to log hyper-parameters
    kept = []
    for i in range(steps):
        kept.append(jnp.ones((1024,)) * i)
        time.sleep(0.004)
    return hparams

print(sorted(train()))
"""

HOSTILE_RUN = """
import time
import jax.numpy as jnp

CALLED = []

class Lazy:
    # a lazy proxy's pattern (django's SimpleLazyObject, werkzeug's LocalProxy)
    def __init__(self, wrapped):
        object.__setattr__(self, "_wrapped", wrapped)

    @property
    def __class__(self):
        CALLED.append("__class__")
        raise SystemExit(5)

    def __getattribute__(self, name):
        CALLED.append("__getattribute__ " + name)
        return object.__getattribute__(self, name)

kept = []
for i in range(120):
    kept.append(Lazy(jnp.ones((1024,)) * i))
    time.sleep(0.004)
print("called:", CALLED)
"""


@pytest.mark.parametrize("name,source", [("traced.py", TRACED), ("locals_held.py", LOCALS_HELD),
                                         ("hostile.py", HOSTILE_RUN)], ids=["settrace", "locals", "hostile"])
def test_run_is_python_for_programs_a_read_would_change(tmp_path, name, source):
    script = write_script(tmp_path, name, source)
    import subprocess

    def under_python():
        return subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=cpu_env(), capture_output=True,
                              text=True, timeout=300)

    def under_run():
        return run_cli("run", "-q", "--interval", "0.01", "-o", tmp_path / "run", script, cwd=tmp_path)

    py, run = in_parallel(under_python, under_run)
    assert py.returncode == 0, py.stderr
    assert (run.returncode, run.stdout) == (py.returncode, py.stdout), run.stderr
    assert "Error" not in run.stderr, run.stderr
    # the search did run while the program's frames were live
    import sqlite3

    with sqlite3.connect(tmp_path / "run" / "journal.sqlite") as con:
        searches = con.execute("SELECT COUNT(*) FROM py_holder_searches").fetchone()[0]
    assert searches >= 2


# -- in process: what the search may touch ------------------------------------

CALLS: list = []


class _Meta(type):
    def __eq__(cls, other):
        CALLS.append("meta __eq__")
        return type.__eq__(cls, other)

    def __hash__(cls):
        CALLS.append("meta __hash__")
        return type.__hash__(cls)

    def __getattribute__(cls, name):
        CALLS.append("meta __getattribute__ " + name)
        return type.__getattribute__(cls, name)

    def __instancecheck__(cls, obj):
        CALLS.append("meta __instancecheck__")
        return type.__instancecheck__(cls, obj)

    def __subclasscheck__(cls, sub):
        CALLS.append("meta __subclasscheck__")
        return type.__subclasscheck__(cls, sub)


class WithMeta(metaclass=_Meta):
    def __init__(self, value):
        self.value = value


class Proxy:
    def __init__(self, wrapped):
        object.__setattr__(self, "_wrapped", wrapped)

    @property
    def __class__(self):
        CALLS.append("__class__")
        raise SystemExit(5)

    def __getattribute__(self, name):
        CALLS.append("__getattribute__")
        return object.__getattribute__(self, name)

    def __getattr__(self, name):
        CALLS.append("__getattr__")
        raise AttributeError(name)


class DictProperty:
    def __init__(self, value):
        self.value = value  # in the instance's dict, which the property hides

    @property
    def __dict__(self):
        CALLS.append("__dict__ property")
        return {}


class Slotted:
    __slots__ = ("value", "__x")

    def __init__(self, value):
        self.value = value

    def __getattribute__(self, name):
        CALLS.append("slotted __getattribute__")
        return object.__getattribute__(self, name)


class Key:
    def __init__(self, n):
        self.n = n

    def __hash__(self):
        CALLS.append("key __hash__")
        return self.n

    def __eq__(self, other):
        CALLS.append("key __eq__")
        return self is other

    def __str__(self):
        CALLS.append("key __str__")
        return "k"

    def __repr__(self):
        CALLS.append("key __repr__")
        return "k"


class HostileList(list):
    def __iter__(self):
        CALLS.append("list __iter__")
        return list.__iter__(self)

    def __len__(self):
        CALLS.append("list __len__")
        return list.__len__(self)

    def __getitem__(self, i):
        CALLS.append("list __getitem__")
        return list.__getitem__(self, i)


class HostileDict(dict):
    def items(self):
        CALLS.append("dict items")
        return dict.items(self)

    def __iter__(self):
        CALLS.append("dict __iter__")
        return dict.__iter__(self)


class HostileSet(set):
    def __iter__(self):
        CALLS.append("set __iter__")
        return set.__iter__(self)


class Point(tuple):
    _fields = ("x", "y")

    def __len__(self):
        CALLS.append("tuple __len__")
        return 2

    def __iter__(self):
        CALLS.append("tuple __iter__")
        return tuple.__iter__(self)


class MetaFields(type):
    @property
    def _fields(cls):
        CALLS.append("metaclass _fields")
        return ("a",)


class Pair(tuple, metaclass=MetaFields):
    pass


class HostileDeque(collections.deque):
    def __iter__(self):
        CALLS.append("deque __iter__")
        return collections.deque.__iter__(self)


def _target(value) -> tuple:
    return id(value), (weakref.ref(value), id(value))


HOSTILE: dict = {}


def test_the_search_calls_none_of_the_programs_code():
    arrays = [jnp.full((8,), i, jnp.float32) for i in range(12)]
    slotted = Slotted(arrays[3])
    object.__setattr__(slotted, "_Slotted__x", arrays[11])  # a private (mangled) slot
    HOSTILE.update(
        meta=WithMeta(arrays[0]), proxy=Proxy(arrays[1]), dict_property=DictProperty(arrays[2]),
        slotted=slotted, keyed={Key(1): arrays[4]}, hostile_list=HostileList([arrays[5]]),
        hostile_dict=HostileDict(a=arrays[6]), hostile_set=HostileSet(["x", Key(2)]),
        point=Point((arrays[7], 1)), pair=Pair((arrays[8],)), hostile_deque=HostileDeque([arrays[9]]),
        meta_class=_Meta("Made", (), {"held": arrays[10]}),
    )
    targets = dict(_target(a) for a in arrays)
    del arrays, slotted
    try:
        CALLS.clear()
        found, complete, _ = search(targets, 30.0, library=False)
        assert CALLS == []
        paths = {targets[k][1]: [label for _, label in found[k][0][5][1:]] for k in found}
        # each array held through a hostile object is found, in the
        # program's names; not the one a class attribute holds (classes are
        # not walked into), nor one only a weak reference holds
        by_first = {path[0]: path for path in paths.values()}
        assert by_first == {
            "'meta'": ["'meta'", "value"], "'proxy'": ["'proxy'", "_wrapped"],
            # (its dict hidden by the property: reached as the garbage collector
            # lists the instance's referents; 3.11 lists a managed dict's values)
            "'dict_property'": by_first["'dict_property'"],
            "'slotted'": by_first["'slotted'"], "'keyed'": ["'keyed'", "<Key>"],
            "'hostile_list'": ["'hostile_list'", "\u2026"], "'hostile_dict'": ["'hostile_dict'", "'a'"],
            "'point'": ["'point'", "x"], "'pair'": ["'pair'", "0"], "'hostile_deque'": ["'hostile_deque'", "\u2026"],
        }
        assert by_first["'dict_property'"][1:] in (["dict", "'value'"], ["ArrayImpl"])
        assert sorted(path[1] for path in paths.values() if path[0] == "'slotted'") == ["_Slotted__x", "value"]
        assert len(paths) == 11
    finally:
        HOSTILE.clear()


def test_a_frames_locals_are_read_without_writing_them():
    """Read in its own thread (where the search reads frames): a dict the
    program holds from ``locals()`` is neither refreshed nor cleared."""
    seen = {}

    def program():
        a, b = object(), [1]
        held = locals()  # the dict the frame keeps, as the program sees it
        seen["before"] = sorted(held)
        seen["names"] = [k for k, _ in frame_locals(sys._getframe())]
        c = 3  # a local made after the read
        seen["held"] = sorted(held)

    program()
    assert {"a", "b"} <= set(seen["before"]) and "held" not in seen["before"]
    assert seen["held"] == seen["before"]  # not refreshed with `held`, nor cleared, by the read
    if sys.version_info >= (3, 13):
        assert {"a", "b", "held"} <= set(seen["names"])


def test_arrays_the_program_drops_are_freed_during_a_search():
    """The search holds none of the arrays: one the program drops while a
    long search runs is freed at once (the old search held the whole list
    of live arrays until it returned)."""

    class Writer:
        def __init__(self):
            self.rows = []

        def add_py_holders(self, chains, rows, search, replaces):
            self.rows.append(search)

    class Entry:
        def __init__(self, array_id):
            self.array_id = array_id

    graph = [[[j] for j in range(30000)] for _ in range(20)]  # a long walk: 600k lists
    # A second array no root of the program holds (a thread of jaxmemprof's
    # own, whose frames are not searched): the search walks on for it.
    hidden_ready, hidden_done = threading.Event(), threading.Event()
    hidden_box = []

    def hold_hidden():
        hidden = jnp.zeros((1000,), jnp.float32)
        hidden_box.append(id(hidden))
        hidden_ready.set()
        hidden_done.wait(120)

    holder = threading.Thread(target=hold_hidden, name="jaxmemprof-test-holder")
    holder.start()
    hidden_ready.wait(30)
    HOSTILE["graph"] = graph
    HOSTILE["dropped"] = jnp.ones((1000,), jnp.float32)
    dropped = weakref.ref(HOSTILE["dropped"])
    tracked = {id(HOSTILE["dropped"]): Entry(1), hidden_box[0]: Entry(2)}
    writer = Writer()
    searches = Searches(writer, first_s=30.0)
    from jaxmemprof.capture.sampler import jax_ready

    jax = jax_ready() or __import__("jax")
    thread = threading.Thread(target=searches.after, args=(jax, tracked, 1, "interval", 4000),
                              name="test-holder-search")
    try:
        thread.start()
        time.sleep(0.3)
        assert thread.is_alive(), "the search ended before the array was dropped: make the graph larger"
        del HOSTILE["dropped"]
        freed_during = dropped() is None and thread.is_alive()
        thread.join(60)
        assert freed_during
        assert writer.rows and writer.rows[0][3] == 2  # it looked for both arrays
    finally:
        hidden_done.set()
        holder.join(30)
        HOSTILE.clear()
        del graph


@pytest.mark.parametrize("item", ["float", "tuple"])
def test_a_3m_item_list_keeps_the_search_in_budget_and_memory(item):
    HOSTILE["big"] = ([float(i) for i in range(3_000_000)] if item == "float"
                      else [(i,) for i in range(3_000_000)])
    array = jnp.ones((4,))
    HOSTILE["after"] = [array]
    targets = dict([_target(array)])
    del array
    try:
        tracemalloc.start()
        c0 = time.thread_time()
        found, complete, _ = search(targets, 0.5)
        cost = time.thread_time() - c0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert cost < 0.5 * 1.5 + 0.1, cost
        assert peak < 50 * 2**20, peak
        # the array is reachable: a search that did not find it says it was cut
        assert len(found) == 1 or not complete
        if item == "tuple":  # 3M containers: past the fan-out cap, cut
            assert not complete
    finally:
        HOSTILE.clear()


def test_a_containers_items_past_the_fan_out_cap_are_scanned_for_arrays_only(monkeypatch):
    monkeypatch.setattr(py_holders, "MAX_FANOUT", 10)
    array = jnp.ones((4,))
    HOSTILE["wide"] = [[i] for i in range(50)] + [[array]] + [array]
    targets = dict([_target(array)])
    del array
    try:
        found, complete, _ = search(targets, 30.0)
        assert not complete  # cut: the lists past the cap were not walked into
        assert len(found) == 1  # the array itself among the items past the cap is still taken
    finally:
        HOSTILE.clear()


def test_a_search_with_nothing_live_ends_quietly(tmp_path):
    # The run's last snapshot of a program that let go of every array (its
    # main() returned) still gets its search: with nothing live, it once
    # stopped on its own UnboundLocalError (an event "the search for Python
    # holders stopped" in every such run).
    code = ("import jax\n"
            "from jaxmemprof.capture.py_holders import Searches\n"
            "class W:\n"
            "    rows = []\n"
            "    def add_py_holders(self, chains, rows, search, replaces): self.rows.append(search)\n"
            "assert not jax.live_arrays()\n"
            "w = W()\n"
            "Searches(w).after(jax, {}, 1, 'exit', 0)\n"
            "print(len(w.rows))\n")
    import subprocess

    proc = subprocess.run([sys.executable, "-c", code], env=cpu_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr

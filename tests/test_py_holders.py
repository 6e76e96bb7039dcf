"""Who keeps it alive: seeded programs, one per kind of Python reference
that keeps device arrays alive, recorded with ``jaxmemprof run``; each leak
finding must name the holder as the program spells it, the kind, the line
that made the container, and the count and bytes of the arrays it keeps (as
the program made them). Control programs whose memory does not grow must
claim no leak holder; a program that drops its arrays must see them freed at
the same moment under ``run`` as under python (the search keeps nothing)."""

from __future__ import annotations

import functools
import json

import pytest

from conftest import cli_batch, line_of, run_cli, run_script, write_script

from jaxmemprof import load_run
from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.report import build_report

HEAD = """\
import collections, functools
import jax, jax.numpy as jnp, jaxmemprof


def make(i):
    return jnp.full((16384,), i, jnp.float32)  # SITE: 64 KiB each


"""


def loop(keep: str, steps: int = 30, every: int = 1, indent: str = "") -> str:
    body = (f"for i in range({steps}):\n"
            f"    {keep}\n"
            f"    if i % {every} == 0:\n"
            f"        jaxmemprof.mark(f'step {{i}}')\n"
            f"        jaxmemprof.snapshot(f'step {{i}}')\n")
    return "".join(indent + line + "\n" for line in body.splitlines())


# name -> (source, holder, kind, container, arrays, bytes of one array)
LEAKS = {
    "list_append": (HEAD + "losses = []  # CREATED\n" + loop("losses.append(make(i))"),
                    "losses[…]", "global", "list", 30, 65536),
    "dict_cache": (HEAD + "cache = {}  # CREATED\n" + loop("cache[i] = make(i)"),
                   "cache[…]", "global", "dict", 30, 65536),
    "attribute": (HEAD + "class Trainer:\n    def __init__(self):\n        self.seen = []  # CREATED\n\n\n"
                  "trainer = Trainer()\n" + loop("trainer.seen.append(make(i))"),
                  "trainer.seen[…]", "attribute", "list", 30, 65536),
    "closure": (HEAD + "def make_logger():\n    kept = []  # CREATED\n\n    def log(a):\n        kept.append(a)\n"
                "    return log\n\n\nlog = make_logger()\n" + loop("log(make(i))"),
                "log.<closure kept>[…]", "closure", "list", 30, 65536),
    "module_global": (HEAD + "import registry\n" + loop("registry.KEPT.append(make(i))"),
                      "registry.KEPT[…]", "global", "list", 30, 65536),
    "lru_cache": (HEAD + "@functools.cache\ndef batch(i):  # CREATED\n    return make(i)\n\n\n"
                  + loop("batch(i)"),
                  "batch.<lru_cache>[…]", "lru_cache", "_lru_cache_wrapper", 30, 65536),
    "deque": (HEAD + "hist = collections.deque()  # CREATED\n" + loop("hist.append(make(i))"),
              "hist[…]", "global", "deque", 30, 65536),
    # a suspended generator's locals: as the garbage collector lists them, unnamed (never its frame's f_locals)
    "generator": (HEAD + "def batches():\n    produced = []\n    i = 0\n    while True:\n"
                  "        produced.append(make(i))\n        i += 1\n        yield i\n\n\ngen = batches()  # CREATED\n"
                  + loop("next(gen)"),
                  "gen.<local …>[…]", "generator", "list", 30, 65536),
    "metrics": (HEAD + "class Metrics:\n    def __init__(self):\n        self.history = {'loss': []}  # CREATED\n\n"
                "    def update(self, loss):\n        self.history['loss'].append(loss)\n\n\n"
                "metrics = Metrics()\nloss_fn = jax.jit(lambda x: jnp.sum(x * x))\nx = make(0)\n"
                + loop("metrics.update(loss_fn(x + i))  # SITE-SCALARS", steps=400, every=10),
                "metrics.history['loss'][…]", "attribute", "list", 400, 4),
    "frame_local": (HEAD + "def main():\n    losses = []  # CREATED\n" + loop("losses.append(make(i))", indent="    ")
                    + "\n\nmain()\n",
                    "losses[…] (local of main)", "local", "list", 30, 65536),
}

# Programs whose memory does not grow.
CONTROLS = {
    "dropped": HEAD + loop("a = make(i)"),
    "donated": HEAD + "step = jax.jit(lambda s: s + 1.0, donate_argnums=0)\nstate = make(0)\n"
               + loop("state = step(state)"),
    "stable_jit": HEAD + "f = jax.jit(lambda a: a * 2.0)\n" + loop("out = f(make(i))"),
    "bounded_deque": HEAD + "recent = collections.deque(maxlen=3)\n" + loop("recent.append(make(i))"),
    "sawtooth": HEAD + "epoch = []\n" + loop("epoch.append(make(i))\n    if len(epoch) == 5:\n        epoch.clear()"),
}

# Arrays dropped at step 20: python and run must see them die at the same moment.
DROPPED_AT_20 = HEAD + """\
import weakref
kept, refs = [], []
for i in range(30):
    if i == 20:
        kept.clear()
        print("after clear", sum(r() is not None for r in refs))
    a = make(i)
    kept.append(a)
    refs.append(weakref.ref(a))
    del a
    jaxmemprof.snapshot(f"step {i}")
print("at end", sum(r() is not None for r in refs))
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("holders")
    (tmp / "registry.py").write_text("KEPT = []  # CREATED\n")
    scripts = {name: write_script(tmp, f"{name}.py", src) for name, (src, *_) in LEAKS.items()}
    scripts.update({name: write_script(tmp, f"{name}.py", src) for name, src in CONTROLS.items()})
    scripts["dropped_at_20"] = write_script(tmp, "dropped_at_20.py", DROPPED_AT_20)
    jobs = [["run", "-q", "--interval", "1000", "-o", tmp / f"run-{name}", path] for name, path in scripts.items()]
    done = cli_batch(jobs, tmp)
    for job, proc in zip(jobs, done):
        assert proc.returncode == 0, (job, proc.stderr)
    python = run_script(scripts["dropped_at_20"])
    return tmp, {name: tmp / f"run-{name}" for name in scripts}, {j[-1].stem: p for j, p in zip(jobs, done)}, python


@functools.cache
def _report(path):
    """The run's report, built once for the module's tests (which only read it)."""
    return build_report(attribute(load_run(path)))


@pytest.mark.parametrize("name", list(LEAKS))
def test_each_kind_of_holder_is_named_with_its_line_count_and_bytes(runs, name):
    tmp, paths, _, _ = runs
    _, holder, kind, container, count, each = LEAKS[name]
    rep = _report(paths[name])
    leaks = [f for f in rep.findings if f.rule == "leak"]
    assert len(leaks) == 1, [(f.rule, f.site) for f in rep.findings]
    f = leaks[0]
    marker = "# SITE-SCALARS" if name == "metrics" else "# SITE"
    assert f.site.startswith(f"{name}.py:{line_of(tmp / f'{name}.py', marker)} ")
    assert f.fact("held_by") == holder
    assert f.fact("held_by_kind") == kind
    assert f.fact("held_by_container") == container
    made_in = "registry.py" if name == "module_global" else f"{name}.py"
    assert f.fact("held_by_created") == f"{made_in}:{line_of(tmp / made_in, '# CREATED')}"
    # Every array the program kept, each of the size it made (the end's search, or
    # for a frame's local, which is gone at the end, the peak's).
    assert f.fact("held_by_arrays") == count
    assert f.fact("held_by_bytes") == count * each
    assert f.fact("held_at") == ("peak" if name == "frame_local" else "end")
    # said with a local's function apart: "kept alive by `losses[…]` (a local of main; list, ...)"
    shown, _, function = holder.partition(" (local of ")
    said = run_cli("report", paths[name], check=0).stdout
    assert f"kept alive by `{shown}`" in said
    if function:
        assert f"`{shown}` (a local of {function.rstrip(')')}; {container}, " in said


def test_the_fix_is_in_the_programs_terms(runs):
    _, paths, _, _ = runs
    fixes = {}
    for name in ("metrics", "deque", "dict_cache", "lru_cache", "list_append"):
        (f,) = [f for f in _report(paths[name]).findings if f.rule == "leak"]
        from jaxmemprof.render.findings import words
        fixes[name] = words(f).fix
    assert "float(x)" in fixes["metrics"] and "metrics.history['loss']" in fixes["metrics"]
    assert "collections.deque(maxlen=N)" in fixes["deque"] and "`hist`" in fixes["deque"]
    assert "del cache[k]" in fixes["dict_cache"]
    assert "batch.cache_clear()" in fixes["lru_cache"]
    assert "`losses`" in fixes["list_append"]


@pytest.mark.parametrize("name", list(CONTROLS))
def test_no_leak_holder_is_claimed_where_memory_does_not_grow(runs, name):
    _, paths, _, _ = runs
    rep = _report(paths[name])
    assert not [f for f in rep.findings if f.rule == "leak"]
    assert not [f for f in rep.findings if f.fact("held_by") is not None]
    if name == "bounded_deque":  # what it holds is still named, at the end: its last three
        end = rep.holders[(rep.holders["at"] == "end") & (rep.holders["holder"] == "recent[…]")]
        assert end["arrays"].tolist() == [3] and end["bytes"].tolist() == [3 * 65536]


def test_the_search_keeps_nothing_alive(runs):
    _, paths, procs, python = runs
    # What the program itself saw through weak references: the same under run as under python.
    assert procs["dropped_at_20"].stdout == python.stdout == "after clear 0\nat end 10\n"
    run = load_run(paths["dropped_at_20"])
    arrays = attribute(run).arrays
    made = arrays[arrays["shape"] == "16384"]
    # The snapshot taken at step 19 is the 20th; the first 20 arrays end in the next one.
    snap = run.snapshots.set_index("label")["snapshot"]
    first_20 = made.sort_values("array_id").head(20)
    assert (first_20["end_snapshot"] == snap["step 20"]).all()
    searched = run.py_holders["searches"]
    assert len(searched) >= 2 and searched["snapshot"].min() < snap["step 20"]


def test_holders_are_exported_as_csv_and_json(runs):
    tmp, paths, _, _ = runs
    out = tmp / "export-list"
    done = cli_batch([["export", paths["list_append"], "--csv", out], ["report", "--json", paths["list_append"]]], tmp)
    assert [p.returncode for p in done] == [0, 0], [p.stderr for p in done]
    import pandas as pd
    table = pd.read_csv(out / "holders.csv")
    end = table[(table["at"] == "end") & (table["holder"] == "losses[…]")]
    assert end["arrays"].tolist() == [30] and end["bytes"].tolist() == [30 * 65536]
    data = json.loads(done[1].stdout)
    (leak,) = [f for f in data["findings"] if f["rule"] == "leak"]
    assert leak["facts"]["held_by"] == "losses[…]"
    assert any(r["holder"] == "losses[…]" for r in data["holders"])


def test_the_searches_time_is_in_the_runs_summary(runs):
    _, paths, _, _ = runs
    rep = _report(paths["list_append"])
    assert rep.headline.holder_searches >= 1
    searched = load_run(paths["list_append"]).py_holders["searches"]
    assert rep.headline.holder_search_cpu_s == pytest.approx(float(searched["cost_s"].sum()))


_HELD_HERE = []  # this module's global: a root of the program's own


class _Stand:
    """An object standing for an array (weak references, no children)."""


def test_the_search_ends_once_every_array_has_a_chain():
    """Two objects standing for one array (an array and the view JAX made of
    it): one held by the program, the other only by a library module. The
    array's chain is the program's, and the library's objects are not walked
    for the other (a whole walk of them took 0.46 s at the end of every run of
    the nnx program); the control, two arrays, walks them and finds both.
    (Plain objects stand for the arrays: the search follows references alone.)"""
    import json as library_module
    import weakref

    from jaxmemprof.capture.py_holders import search

    _HELD_HERE.append(_Stand())
    library_module._jaxmemprof_test_holds = _Stand()  # no local of this frame holds it
    held, other = weakref.ref(_HELD_HERE[0]), weakref.ref(library_module._jaxmemprof_test_holds)
    try:
        found, complete, one_array = search({id(held()): (held, 7), id(other()): (other, 7)}, 30.0)
        assert complete and set(found) == {id(held())}
        assert found[id(held())][0][1] == __name__  # the chain starts at this module's global
        found, complete, two_arrays = search({id(held()): (held, 7), id(other()): (other, 8)}, 30.0)
        assert complete and set(found) == {id(held()), id(other())}
        assert found[id(other())][0][1] == "json"
        assert one_array < two_arrays
    finally:
        del library_module._jaxmemprof_test_holds
        _HELD_HERE.clear()

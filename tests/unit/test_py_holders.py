"""analysis/py_holders.py: the Python references that held the arrays of
two real recordings, read back by site and chain, against what the programs
themselves hold (the tiny loop's locals of ``main``, the IPython shell's
names and output history); and each kind of step written as the program
would write it."""

from __future__ import annotations

import json

import pandas as pd

from conftest import line_of

from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.py_holders import (chosen_searches, describe, holders, holders_searched_at, of_site,
                                             search_cost, searches, site_holders)
from jaxmemprof.store.reader import load_run

from .programs import KEPT_BYTES, PARAMS_BYTES, TABLE_BYTES


def test_the_tiny_loops_locals_of_main_hold_its_arrays_at_the_peak(recorded, tiny_ar):
    table = holders(tiny_ar)
    peak = table[table["at"] == "peak"]
    script = recorded.script
    by = {h: r for h, r in zip(peak["holder"], peak.to_dict("records"))}
    kept = by["kept[…] (local of main)"]
    # Every kept array (one a step, 4 steps), each of the size the program made.
    assert (kept["arrays"], kept["bytes"], kept["kind"], kept["container"]) == (4, 4 * KEPT_BYTES, "local", "list")
    assert kept["created"] == f"tiny.py:{line_of(script, 'kept = []')}"
    assert kept["site"] == f"tiny.py:{line_of(script, '# LINE kept')} (main)"
    w, b = by["params['w'] (local of main)"], by["params['b'] (local of main)"]
    assert w["bytes"] + b["bytes"] == PARAMS_BYTES and w["container"] == b["container"] == "dict"
    # On both devices: a replicated array's bytes count on each.
    assert by["table (local of main)"]["bytes"] == 2 * TABLE_BYTES
    # The peak's search is the last before the end, at the run's largest live bytes before it.
    s = searches(tiny_ar.run)
    chosen = chosen_searches(tiny_ar.run)
    during = s[~s["trigger"].isin(["exit"])]
    assert chosen["peak"] == int(during.loc[during["live_bytes"].astype(float).idxmax(), "snapshot"])
    # main() has returned at the end: nothing of its is held there.
    assert table[table["at"] == "end"].empty


def test_the_shells_names_and_output_history_are_told_apart(recorded):
    run = load_run(recorded.history)
    table = holders(attribute(run))
    n = recorded.history_oracle["entry"]
    end = table[table["at"] == "end"].set_index("holder")
    # jnp.tanh(x) is held by the output history only; `kept` by its name first (shorter than _N, said before it).
    assert end.loc[f"_{n}", "kind"] == "output-history" and end.loc[f"_{n}", "bytes"] == 256 * 512 * 4
    assert end.loc["kept", "kind"] == "global" and end.loc["kept", "bytes"] == 128 * 4
    assert end.loc["x", "kind"] == "global"


def test_of_site_prefers_what_stays_to_the_end():
    t = pd.DataFrame([
        {"at": "peak", "site": "a.py:1 (f)", "holder": "early", "bytes": 10},
        {"at": "end", "site": "a.py:1 (f)", "holder": "late", "bytes": 5},
        {"at": "peak", "site": "b.py:2 (g)", "holder": "only", "bytes": 3},
    ])
    assert of_site(t, "a.py:1 (f)")["holder"] == "late"
    assert of_site(t, "a.py:1 (f)", at="peak")["holder"] == "early"
    assert of_site(t, "b.py:2 (g)")["holder"] == "only"
    assert of_site(t, "c.py:3 (h)") is None


def test_a_leak_is_held_by_what_accumulates_not_by_the_largest_state():
    # One line makes a step's new parameters (replaced each step: one generation, more bytes) and its
    # losses (kept each step: forty generations): what keeps the leak is the list of losses.
    t = pd.DataFrame([
        {"at": "end", "site": "t.py:9 (<module>)", "holder": "params[…][0]", "bytes": 2_000_000, "generations": 1},
        {"at": "end", "site": "t.py:9 (<module>)", "holder": "kept[…]", "bytes": 160_000, "generations": 40},
    ])
    assert of_site(t, "t.py:9 (<module>)")["holder"] == "params[…][0]"
    assert of_site(t, "t.py:9 (<module>)", kept=True)["holder"] == "kept[…]"


def test_each_step_is_written_as_the_program_would(tiny_ar, recorded):
    run, files = tiny_ar.run, tiny_ar.files
    script = str(recorded.script)

    def said(root_kind, root, steps, container="list", file=script, line=0):
        return describe({"root_kind": root_kind, "root": root, "file": file, "function": "", "line": line,
                         "steps": json.dumps(steps), "container": container}, run, files)

    assert said("global", "__main__", [["key", "log"], ["closure", "kept"], ["item", "…"]])["holder"] == \
        "log.<closure kept>[…]"
    assert said("global", "__main__", [["key", "log"], ["closure", "kept"], ["item", "…"]])["kind"] == "closure"
    assert said("global", "__main__", [["key", "batch"], ["cache", "…"]])["kind"] == "lru_cache"
    assert said("global", "__main__", [["key", "gen"], ["local", "acc"], ["item", "…"]])["holder"] == \
        "gen.<local acc>[…]"
    assert said("global", "__main__", [["key", "seen"], ["member", "…"]], "set")["holder"] == "seen{…}"
    assert said("global", "registry", [["key", "KEPT"], ["item", "…"]])["holder"] == "registry.KEPT[…]"
    assert said("local", "main", [["local", "kept"], ["item", "…"]])["holder"] == "kept[…] (local of main)"
    jax_cache = said("global", "jax._src.cache", [["key", "_cache"], ["key", "'w'"]], "dict",
                     file="/usr/lib/python3/site-packages/jax/_src/cache.py")
    assert jax_cache["kind"] == "jax-internal" and jax_cache["created"] == ""
    # The line that made the container: `kept = []` in main, found in the source.
    local = said("local", "main", [["local", "kept"], ["item", "…"]], line=line_of(recorded.script, "def main("))
    assert local["created"] == f"tiny.py:{line_of(recorded.script, 'kept = []')}"


def test_the_searches_cost_is_summed(tiny_ar):
    s = searches(tiny_ar.run)
    count, cpu = search_cost(tiny_ar.run)
    assert count == len(s) >= 2 and cpu == float(s["cost_s"].sum()) > 0


# -- the holders beside a peak come from one moment (site_holders): a peak whose own snapshot had no search
# shows the search before it, said so, its counts out of the site's arrays at that search's snapshot


def _table(rows):
    cols = ["at", "snapshot", "site", "holder", "kind", "container", "created", "arrays", "bytes", "generations",
            "shapes", "chain_id", "complete", "site_arrays"]
    return pd.DataFrame([dict(zip(cols, r)) for r in rows], columns=cols)


ROWS = [("peak", 41, "train.py:82 (main)", "loss_history[…] (local of main)", "local", "list", "", 112, 458752, 112,
         "(1024)", 1, True, 124),
        ("peak", 41, "train.py:77 (main)", "x (local of main)", "local", "frame", "", 1, 2097152, 1, "(512, 1024)", 2,
         True, 1)]


def test_a_peak_with_its_own_search_shows_it_as_before():
    sites = pd.DataFrame({"site": ["train.py:82 (main)", "train.py:77 (main)"], "count": [124, 1]})
    got = site_holders(_table(ROWS), 41, sites)
    assert got == {"train.py:82 (main)": "loss_history[…] (local of main) (112 of 124 arrays, 448.00 KiB)",
                   "train.py:77 (main)": "x (local of main)"}


def test_a_later_peak_shows_the_search_before_it_counted_at_that_search():
    # the peak (snapshot 43, after the loop) has 132 arrays at line 82; the search at 41 saw 124 there
    sites = pd.DataFrame({"site": ["train.py:82 (main)", "train.py:77 (main)"], "count": [132, 1]})
    got = site_holders(_table(ROWS), 43, sites)
    assert got == {"train.py:82 (main)": "loss_history[…] (local of main) (112 of 124 arrays, 448.00 KiB)",
                   "train.py:77 (main)": "x (local of main)"}
    assert holders_searched_at(_table(ROWS), 43) == 41  # said once, beside the table
    assert holders_searched_at(_table(ROWS), 41) is None  # the peak's own search


def test_no_search_before_the_peak_shows_nothing():
    assert site_holders(_table(ROWS), 30, None) == {}

"""analysis/py_holders.site_holders: the holders beside a peak come from one
moment. A peak whose own snapshot had no search shows the search before it,
said so, its counts out of the site's arrays at that search's snapshot (not
the peak's)."""

from __future__ import annotations

import pandas as pd

from jaxmemprof.analysis.py_holders import site_holders


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
    assert got == {
        "train.py:82 (main)": "loss_history[…] (local of main) (112 of 124 arrays, 448.00 KiB, searched at snapshot 41)",
        "train.py:77 (main)": "x (local of main), searched at snapshot 41"}


def test_no_search_before_the_peak_shows_nothing():
    assert site_holders(_table(ROWS), 30, None) == {}

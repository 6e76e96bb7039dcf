"""analysis/timeline.py: the run over time, held to what the program counted
on each device with jax.live_arrays() after each snapshot it took, and to its
marks (one a step, before that step's snapshot)."""

from __future__ import annotations

from jaxmemprof.analysis.timeline import OTHER, timeline

from .programs import STEPS, TABLE_BYTES, total


def test_the_totals_and_devices_at_each_snapshot_are_what_the_program_counted(tiny_ar, oracle, labelled):
    tl = timeline(tiny_ar)
    totals = tl.totals.set_index("snapshot")
    for label, snapshot in labelled.items():
        assert totals.at[snapshot, "live_bytes"] == total(oracle["live"][label]), label
        d = tl.devices[tl.devices["snapshot"] == snapshot]
        assert dict(zip(d["device"], d["live_bytes"])) == oracle["live"][label], label
    assert tl.peak_bytes == max(total(v) for v in oracle["live"].values())


def test_markers_are_placed_after_the_snapshot_before_them(tiny_ar, labelled):
    tl = timeline(tiny_ar)
    totals = tl.totals.set_index("snapshot")
    assert totals.at[labelled["start"], "markers_seen"] == 0
    for i in range(STEPS):
        assert totals.at[labelled[f"step {i}"], "markers_seen"] == i + 1
    m = tl.markers
    assert list(m["label"]) == [f"step {i}" for i in range(STEPS)]
    assert list(m["after_snapshot"]) == [labelled["start"]] + [labelled[f"step {i}"] for i in range(STEPS - 1)]


def test_the_top_sites_and_the_rest(tiny_ar, labelled, site):
    tl = timeline(tiny_ar, top_sites=1)
    assert tl.site_order == (site("table", "main"), OTHER)
    at = tl.sites[tl.sites["snapshot"] == labelled["start"]].set_index("site")["live_bytes"]
    assert at[site("table", "main")] == 2 * TABLE_BYTES
    assert int(at.sum()) == int(tl.totals.set_index("snapshot").at[labelled["start"], "live_bytes"])

"""analysis/groups.py: a snapshot's profile grouped and two compared, held
to what the program counted on each device with jax.live_arrays()."""

from __future__ import annotations

from jaxmemprof.analysis.groups import diff, summarize, top

from .programs import KEPT_BYTES, STEPS, total


def test_a_snapshot_by_device_is_what_each_device_held(tiny, tiny_ar, oracle, labelled):
    for label, snapshot in labelled.items():
        s = summarize(tiny.profile(snapshot), "device", tiny_ar.attribution)
        held = {d: int(b) for d, b in zip(s.rows["device"], s.rows["bytes"]) if b}
        assert held == oracle["live"][label], label
        assert s.total_bytes == total(oracle["live"][label])


def test_the_diff_of_two_snapshots_is_what_the_program_kept_between_them(tiny, tiny_ar, oracle, labelled, site):
    base, new = (tiny.profile(labelled[f"step {i}"]) for i in (0, STEPS - 1))
    d = diff(base, new, "site", tiny_ar.attribution)
    grown = (STEPS - 1) * KEPT_BYTES
    assert total(oracle["live"][f"step {STEPS - 1}"]) - total(oracle["live"]["step 0"]) == grown
    assert int(d.rows["delta_bytes"].sum()) == grown
    kept = d.rows[d.rows["site"] == site("kept", "main")].iloc[0]
    assert (kept["delta_bytes"], kept["delta_count"]) == (grown, STEPS - 1)


def test_top_keeps_the_largest_and_counts_the_rest(tiny, tiny_ar, labelled):
    s = summarize(tiny.profile(labelled["start"]), "site", tiny_ar.attribution)
    t = top(s, 1)
    assert len(t.rows) == 1 and t.omitted_rows == len(s.rows) - 1
    assert int(t.rows["bytes"].iloc[0]) + t.omitted_bytes == s.total_bytes
    assert list(s.rows["bytes"]) == sorted(s.rows["bytes"], reverse=True)

"""analysis/lifetimes.py: each array's bytes, devices and lifetime, and the
per-site totals, held to the program's own arrays (their shapes, what it
keeps from step to step, its marks) and to the device memory profiles it
saved itself (a plain directory of .prof files: births estimated)."""

from __future__ import annotations

from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.lifetimes import estimated_site_churn, site_lifetimes
from jaxmemprof.analysis.options import Options
from jaxmemprof.store.reader import load_run

from .programs import KEPT_BYTES, STEPS, TABLE_BYTES, peak_label, total


def test_the_kept_arrays_live_from_their_step_to_the_end(tiny_ar, labelled, site):
    a = tiny_ar.arrays
    kept = a[a["site"] == site("kept", "main")].sort_values("first_snapshot")
    assert len(kept) == STEPS and (kept["bytes"] == KEPT_BYTES).all()
    assert list(kept["first_snapshot"]) == [labelled[f"step {j}"] for j in range(STEPS)]
    assert (kept["last_snapshot"] == labelled[f"step {STEPS - 1}"]).all() and (kept["how"] == "freed").all()
    # The program marks a step after its work, before its snapshot: kept[j], first seen at step j's
    # snapshot, lives through the marks of steps j + 1 to the last.
    assert list(kept["lifetime_steps"]) == [STEPS - 1 - j for j in range(STEPS)]


def test_an_array_whole_on_two_devices_counts_on_each(tiny_ar, site):
    a = tiny_ar.arrays
    (table,) = a[a["site"] == site("table", "main")].to_dict("records")
    assert (table["bytes"], table["nbytes"], table["shards"]) == (2 * TABLE_BYTES, TABLE_BYTES, 2)
    assert table["devices"] == "cpu:0;cpu:1" and table["shape"] == "512x1024"
    assert not a["shared"].any()


def test_the_sites_at_the_peak_add_up_to_the_peak(tiny_ar, oracle, site):
    s = site_lifetimes(tiny_ar)
    assert int(s["live_bytes_at_peak"].sum()) == total(oracle["live"][peak_label(oracle)])
    (kept,) = s[s["site"] == site("kept", "main")].to_dict("records")
    assert (kept["arrays_born"], kept["bytes_born"]) == (STEPS, STEPS * KEPT_BYTES)


def test_births_estimated_from_the_programs_own_profiles(recorded, site):
    # a directory of profiles has no manifest: paths are shown relative to where the program ran
    where = Options(roots=(str(recorded.script.parent),))
    churn = estimated_site_churn(attribute(load_run(recorded.profiles), where))
    by_site = churn.set_index("site")
    kept = by_site.loc[site("kept", "main")]
    assert (kept["births"], kept["deaths"], kept["count_first"], kept["count_last"]) == (STEPS - 1, 0, 1, STEPS)
    assert kept["bytes_last"] == STEPS * KEPT_BYTES
    # every other line replaced its arrays with arrays of the same sizes: no count changed
    assert (by_site.drop(index=site("kept", "main"))["births"] == 0).all()

"""analysis/attributed.py: the stage every analysis reads, against what the
program counted with jax.live_arrays() at each of its snapshots."""

from __future__ import annotations

from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.options import Options

from .programs import KEPT_BYTES, PARAMS_BYTES, STEPS, TABLE_BYTES, X_BYTES, total


def test_the_sites_holding_each_snapshot_add_up_to_what_the_program_counted(tiny_ar, oracle, labelled):
    for label, snapshot in labelled.items():
        held = tiny_ar.sites_holding(snapshot)
        assert held.total_bytes == total(oracle["live"][label]), label
        assert int(held.rows["bytes"].sum()) + held.omitted_bytes == held.total_bytes
        assert (held.rows["bytes"] > 0).all()  # executables (0 bytes) left out


def test_each_line_holds_the_arrays_it_made(tiny_ar, labelled, site):
    rows = tiny_ar.sites_holding(labelled[f"step {STEPS - 1}"]).rows
    by_site = dict(zip(rows["site"], rows["bytes"]))
    assert by_site == {
        site("table", "main"): 2 * TABLE_BYTES,  # whole on each of the two devices
        site("call", "main"): PARAMS_BYTES + 4,  # the step's new parameters and its loss (a float32 scalar)
        site("call sums", "main"): 2 * 1024 * 4,  # the column sums, on both devices
        site("x", "main"): X_BYTES,
        site("kept", "main"): STEPS * KEPT_BYTES,
    }


def test_the_tables_are_computed_once_and_the_options_decide_how_many_sites_are_named(tiny, tiny_ar, labelled):
    assert tiny_ar.arrays is tiny_ar.arrays and tiny_ar.stack_sites is tiny_ar.stack_sites
    assert tiny_ar.peak.snapshot == labelled[f"step {STEPS - 1}"]
    one = attribute(tiny, Options(top_sites=1)).sites_holding(tiny_ar.peak.snapshot)
    assert len(one.rows) == 1 and one.omitted_rows == 4
    assert int(one.rows["bytes"].iloc[0]) + one.omitted_bytes == one.total_bytes

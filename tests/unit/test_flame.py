"""analysis/flame.py: the HTML page's cells, whose sums are the timeline, a
snapshot's flame graph and the growth between two; held to what the
program counted with jax.live_arrays() at its snapshots."""

from __future__ import annotations

from jaxmemprof.analysis.flame import keep_positions, role_cells, run_cells, site_growth, site_values

from .programs import KEPT_BYTES, STEPS, TABLE_BYTES, total


def _position(cells, tiny, snapshot) -> int:
    index = int((tiny.snapshots["snapshot"] == snapshot).to_numpy().argmax())
    return int(list(cells.positions).index(index))


def test_the_cells_at_each_snapshot_add_up_to_what_the_program_counted(tiny, tiny_ar, oracle, labelled):
    cells = run_cells(tiny_ar)
    assert len(cells.positions) == len(tiny.snapshots)  # a short run: every snapshot kept
    for label, snapshot in labelled.items():
        j = _position(cells, tiny, snapshot)
        assert int(cells.values_at(j)["bytes"].sum()) == total(oracle["live"][label]), label


def test_a_snapshots_sites_and_the_growth_between_two(tiny, tiny_ar, labelled, site):
    cells = run_cells(tiny_ar)
    first, last = (_position(cells, tiny, labelled[f"step {i}"]) for i in (0, STEPS - 1))
    values = site_values(cells, last)
    assert values[site("kept", "main")] == STEPS * KEPT_BYTES
    assert values[site("table", "main")] == 2 * TABLE_BYTES
    grown = site_growth(cells, first, last)
    # Between the first step and the last, the program kept one array a step; every other line
    # replaced its arrays by arrays of the same sizes.
    assert grown.to_dict("records") == [{"site": site("kept", "main"), "base_bytes": KEPT_BYTES,
                                         "new_bytes": STEPS * KEPT_BYTES, "delta_bytes": (STEPS - 1) * KEPT_BYTES}]


def test_a_long_run_keeps_its_peak_first_and_last(tiny):
    snaps = tiny.snapshots
    kept = keep_positions(snaps, max_points=2)
    peak = int(snaps["live_bytes"].to_numpy().argmax())
    assert {0, len(snaps) - 1, peak} <= set(kept.tolist())


def test_the_role_cells_of_a_device_are_its_roles_bytes(tiny_report, oracle):
    what = tiny_report.roles
    rc = role_cells(what)
    per_device: dict = {}
    for d, b in zip(what.by_role["device"], what.by_role["bytes"]):
        per_device[d] = per_device.get(d, 0) + int(b)
    for devices, each in rc.groups:
        assert all(per_device[d] == each for d in devices)
    # cpu:1 holds only the table's copy and the column sums: "other arrays" there
    assert per_device["cpu:1"] == oracle["before_call"][-1]["cpu:1"]

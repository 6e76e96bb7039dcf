"""analysis/runs.py: the run's peak and its overview, against the bytes the
program counted with jax.live_arrays() after each snapshot it took."""

from __future__ import annotations

from jaxmemprof.analysis.runs import overview, run_peak, stretched_sampling

from .programs import STEPS, peak_label, total


def test_the_peak_is_the_first_snapshot_holding_what_the_program_counted_most(tiny, oracle, labelled):
    label = peak_label(oracle)
    peak = run_peak(tiny.snapshots)
    assert peak.snapshot == labelled[label]
    assert peak.live_bytes == total(oracle["live"][label])
    assert run_peak(tiny.snapshots.iloc[0:0]) is None


def test_overview_counts_the_snapshots_the_program_asked_for_and_names_what_held_the_peak(tiny_ar, oracle, site):
    o = overview(tiny_ar, top_sites=2)
    assert o.triggers["api"] == 1 + STEPS  # jaxmemprof.snapshot("start"), then one a step
    assert o.peak_bytes == total(oracle["live"][peak_label(oracle)])
    rows = o.peak_sites.rows
    assert list(rows["site"]) == [site("table", "main"), site("call", "main")]  # the two largest, in order
    assert o.peak_sites.total_bytes == o.peak_bytes and o.oom_sites is None
    assert o.exit_status == 0 and o.ended_by == "exit"


def test_sampling_is_called_stretched_only_when_snapshots_came_over_twice_the_interval_apart(tiny):
    snaps = tiny.snapshots
    gap = float(snaps["t"].max() - snaps["t"].min()) / (len(snaps) - 1)
    settings = tiny.manifest["settings"]
    assert settings["interval"] == 1000 and stretched_sampling(snaps, settings) is None  # as recorded
    assert stretched_sampling(snaps, {"interval": gap / 3, "max_overhead": 0.02}) == (gap / 3, gap, 0.02)
    assert stretched_sampling(snaps, {"interval": gap / 2, "max_overhead": 0.02}) is None

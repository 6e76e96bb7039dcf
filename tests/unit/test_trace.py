"""analysis/trace.trace_model: the tiny run as a timeline, on the run's own
clock: each snapshot at its time from the run's start, in microseconds, as
long as it took; the live counter equal to the timeline's live bytes at each
snapshot; the markers at their journal times; no moment before the origin."""

from __future__ import annotations

import numpy as np

from jaxmemprof.analysis.trace import run_start_epoch, trace_model


def test_the_snapshots_and_the_live_counter_are_the_journals(tiny_ar, tiny_report):
    model = trace_model(tiny_report, tiny_ar)
    run = tiny_ar.run
    snaps = run.snapshots
    assert model.origin_epoch_s == run_start_epoch(run)
    assert model.origin_epoch_s == float(snaps["t_wall"].iloc[0] - snaps["t"].iloc[0])
    assert [s["snapshot"] for s in model.snapshots] == snaps["snapshot"].astype(int).tolist()
    expected_ts = np.round(snaps["t"].to_numpy(dtype=float) * 1e6, 3)
    assert np.allclose([s["ts"] for s in model.snapshots], expected_ts, atol=1.0)
    assert all(s["dur"] >= 0 for s in model.snapshots)
    live = next(c for c in model.counters if c.kind == "live" and c.key == "all")
    totals = tiny_report.timeline.totals
    assert [v for _, v in live.points] == totals["live_bytes"].astype(int).tolist()
    assert min(ts for ts, _ in live.points) >= 0


def test_the_markers_are_at_their_journal_times(tiny_ar, tiny_report):
    model = trace_model(tiny_report, tiny_ar)
    markers = tiny_ar.run.markers
    assert len(model.markers) == len(markers)
    if len(markers):
        start = run_start_epoch(tiny_ar.run)
        got = sorted(m["ts"] for m in model.markers)
        want = sorted(np.round((markers["t_wall"].to_numpy(dtype=float) - start) * 1e6, 3))
        assert np.allclose(got, want, atol=1.0)

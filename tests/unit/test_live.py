"""analysis/live.py: top's frames, fed the tiny run's own snapshots one after
the other as a run being written would show them; held to what the program
counted with jax.live_arrays() and to what it kept each step."""

from __future__ import annotations

from jaxmemprof.analysis.live import GROWING_FRAMES, Tracker
from jaxmemprof.store import layout
from jaxmemprof.store.follow import Poll

from .programs import KEPT_BYTES, STEPS, TABLE_BYTES, total


def _snap(run, snapshot):
    row = run.snapshots[run.snapshots["snapshot"] == snapshot].iloc[0]
    return (int(row["snapshot"]), float(row["t_wall"]), int(row["live_bytes"]), str(row["trigger"]),
            layout.snapshot_file(run.path, row["file"]))


def _poll(run, latest, previous) -> Poll:
    """What follow.poll says of the run when ``latest`` is its newest snapshot."""
    first = _snap(run, int(run.snapshots["snapshot"].min()))
    now = _snap(run, latest)
    return Poll(run.path, run.manifest, latest, 0, first, now, (latest, now[2]), previous=_snap(run, previous))


def test_each_frame_is_the_newest_snapshot_and_what_grew_since_the_one_before(tiny, tiny_ar, oracle, labelled, site):
    tracker = Tracker(None, tiny_ar.attribution)
    labels = ["start"] + [f"step {i}" for i in range(STEPS)]
    for before, now in zip(labels, labels[1:]):
        frame = tracker.update(_poll(tiny, labelled[now], labelled[before]))
        assert frame.error is None and frame.snapshot == labelled[now]
        assert frame.live_bytes == total(oracle["live"][now])
        assert frame.delta_bytes == total(oracle["live"][now]) - total(oracle["live"][before])
        sites = frame.sites.set_index("site")
        kept = sites.loc[site("kept", "main")]
        step = int(now.split()[1])
        assert (kept["bytes"], kept["delta_bytes"], kept["grew_frames"]) == ((step + 1) * KEPT_BYTES, KEPT_BYTES, step + 1)
        # since the run's first snapshot, which held the table alone
        assert sites.loc[site("table", "main"), "start_delta_bytes"] == 0
        devices = frame.devices.set_index("device")["bytes"].to_dict()
        assert devices == oracle["live"][now]
    assert devices["cpu:1"] >= TABLE_BYTES
    # kept grew in every frame: a growing line, with all it grew
    assert frame.growing == ((site("kept", "main"), STEPS * KEPT_BYTES, STEPS),) and STEPS >= GROWING_FRAMES


def test_the_same_snapshot_again_is_the_same_frame(tiny, tiny_ar, labelled):
    tracker = Tracker(None, tiny_ar.attribution)
    poll = _poll(tiny, labelled["step 1"], labelled["step 0"])
    a, b = tracker.update(poll), tracker.update(poll)
    assert (a.snapshot, a.live_bytes, a.delta_bytes) == (b.snapshot, b.live_bytes, b.delta_bytes)
    assert a.sites.equals(b.sites)

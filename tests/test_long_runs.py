"""Long runs keep their storage bounded: old interval snapshots are thinned on
a schedule as the run goes (the recent past, every labelled or triggered
snapshot, the peak and every array's birth and end stay), and the WAL is
checkpointed. Simulated through the run writer on a compressed clock, then
once through `jaxmemprof run`."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

from conftest import cpu_env, write_script

from jaxmemprof.pprof.writer import write_profile
from jaxmemprof.store import layout
from jaxmemprof.store.reader import load_run
from jaxmemprof.store.writer import RunWriter, SnapshotRecord, Thinning


def _profile(value: int) -> bytes:
    return write_profile([("allocations", "count"), ("space", "bytes")],
                         [((("f", "train.py", 10),), (1, value), {"kind": "buffer", "device": "cpu:0"})])


def _simulate(directory, sched: Thinning, n: int, interval: float = 0.5, peak_at: int = 1234):
    """n snapshots, one every ``interval`` s of a simulated clock: an api
    snapshot every 500th, the peak at ``peak_at``, a stretch of identical
    profiles (stored once), one array born per snapshot and ended at the
    next, and one executable row per snapshot."""
    w = RunWriter(directory, {"jaxmemprof_version": "test", "argv": ["sim"], "start_epoch": 0.0}, thinning=sched)
    for i in range(1, n + 1):
        live = 10_000_000 if i == peak_at else 1000 + i
        repeat = 2000 <= i <= 2100
        rec = SnapshotRecord(
            t_wall=i * interval, t_mono=i * interval, trigger="api" if i % 500 == 0 else "interval",
            label="checkpoint" if i % 500 == 0 else None, profile=_profile(7 if repeat else live),
            live_bytes=live, buffers=1, arrays=1,
            new_stacks=[(i, json.dumps([["train.py", 10, "f"]]))] if i == 1 else [],
            new_arrays=[(i, i, "[10]", "float32", 40, "[40]", '["cpu:0"]', "[null]", "SingleDeviceSharding",
                         None, 1)],
            ended_arrays=[(i - 1, i - 1, "freed")] if i > 1 else [],
            executables=[(1, "jit_step", 1, 1000)],
        )
        assert w.add_snapshot(rec) == i
    w.finish(end_time="x", exit_status=0, ended_by="exit", duration_s=n * interval)
    return w


def test_thinning_keeps_what_matters_and_bounds_the_files(tmp_path):
    sched = Thinning(recent_s=60.0, base_width_s=1.0, every=50)
    n, interval = 4000, 0.5
    w = _simulate(tmp_path / "run", sched, n, interval)
    con = sqlite3.connect(tmp_path / "run" / layout.JOURNAL)
    snaps = con.execute("SELECT snapshot, t_mono, trigger, file FROM snapshots").fetchall()
    thinned = {s for (s,) in con.execute("SELECT snapshot FROM thinned")}
    assert len(snaps) == n and w.thinned == len(thinned) > 0.8 * n  # every row stays
    now = n * interval
    for s, t, trigger, _ in snaps:
        if trigger != "interval" or s == 1234 or now - t < sched.recent_s:
            assert s not in thinned, (s, t, trigger)
    # Every birth and end stays; thinned snapshots lose only their executables.
    assert con.execute("SELECT count(*) FROM arrays").fetchone()[0] == n
    assert con.execute("SELECT count(*) FROM array_ends").fetchone()[0] == n - 1
    exe = {s for (s,) in con.execute("SELECT snapshot FROM executables")}
    assert exe == {s for s, *_ in snaps} - thinned
    # Exactly the files of kept snapshots remain (one shared by the identical stretch).
    kept_files = {f for s, _, _, f in snaps if s not in thinned}
    on_disk = {f"{layout.SNAPSHOT_DIR}/{p}" for p in os.listdir(tmp_path / "run" / layout.SNAPSHOT_DIR)}
    assert on_disk == kept_files
    # The schedule's bound: the recent past, about recent_s / (2 * base_width_s)
    # per doubling of age (plus one per bucket edge), and the kept specials.
    levels = 1 + int((now - sched.recent_s) and __import__("math").log2(now / sched.recent_s))
    bound = sched.recent_s / interval + levels * (sched.recent_s / (2 * sched.base_width_s) + 2) + n / 500 + 2
    assert len(on_disk) <= bound, (len(on_disk), bound)
    # Older snapshots are spread across the whole run, not only its ends.
    kept_t = sorted(t for s, t, trigger, _ in snaps if s not in thinned and trigger == "interval")
    gaps = [b - a for a, b in zip(kept_t, kept_t[1:])]
    assert max(gaps) <= 2 * sched.base_width_s * 2 ** levels
    con.close()
    run = load_run(tmp_path / "run")
    for s in (1234, 500, n):
        assert run.profile(s).samples["bytes"].sum() > 0


def test_the_wal_stays_small(tmp_path):
    sched = Thinning(recent_s=10.0, base_width_s=1.0, every=20)
    w = RunWriter(tmp_path / "run", {"jaxmemprof_version": "test"}, thinning=sched)
    big = [(i, i, "[10]", "float32", 40, "[40]", '["cpu:0"]', "[null]", "S" * 200, None, None)
           for i in range(1, 50_001)]
    sizes = []
    for i in range(1, 201):
        rows = big[(i - 1) * 250:i * 250]
        w.add_snapshot(SnapshotRecord(t_wall=i, t_mono=i, trigger="interval", label=None, profile=_profile(i),
                                      live_bytes=i, buffers=1, arrays=1, new_arrays=rows))
        sizes.append(os.path.getsize(tmp_path / "run" / (layout.JOURNAL + "-wal")))
    # 200 snapshots of ~80 KiB of rows each: ~16 MiB written. The WAL is
    # checkpointed every 20 snapshots and cut back to 1 MiB: it never holds
    # more than that and 20 snapshots' rows (SQLite alone lets it reach 4 MiB).
    assert max(sizes[50:]) <= 1024 * 1024 + 20 * 90 * 1024, max(sizes)
    w.finish(end_time="x")


def test_a_run_is_thinned_as_it_goes(tmp_path):
    script = write_script(tmp_path, "steady.py", """
        import time
        import jax.numpy as jnp
        import jaxmemprof
        x = jnp.ones((1000,))
        t0 = time.time()
        while time.time() - t0 < 4:
            y = x + len(str(time.time()))  # a new array, a new profile, each time
            time.sleep(0.01)
        jaxmemprof.snapshot("end of training")
    """)
    env = cpu_env(JAXMEMPROF_THINNING="0.5:0.05:10")
    proc = subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", str(tmp_path / "run"),
                           "--interval", "0.02", "--max-overhead", "0", str(script)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    run_dir = tmp_path / "run"
    con = sqlite3.connect(run_dir / layout.JOURNAL)
    total = con.execute("SELECT count(*) FROM snapshots").fetchone()[0]
    thinned = {s for (s,) in con.execute("SELECT snapshot FROM thinned")}
    kept = con.execute("SELECT snapshot, trigger, label, file FROM snapshots WHERE snapshot NOT IN "
                       "(SELECT snapshot FROM thinned)").fetchall()
    con.close()
    assert total >= 50 and len(thinned) >= total // 3, (total, len(thinned))
    assert {t for _, t, _, _ in kept} >= {"first", "api", "exit"}
    files = set(os.listdir(run_dir / layout.SNAPSHOT_DIR))
    assert files == {f.split("/")[-1] for *_, f in kept}
    manifest = json.loads((run_dir / layout.MANIFEST).read_text())
    assert manifest["settings"]["thinning"] == {"recent_s": 0.5, "base_width_s": 0.05, "every": 10}
    assert manifest["thinned_snapshots"] == len(thinned)
    # Read back: the thinned snapshots keep their rows (the timeline has them)
    # and are no "missing file"; asked for, one is a one-line error.
    from jaxmemprof.store.reader import load_run

    run = load_run(run_dir)
    assert not any("missing" in w for w in run.warnings), run.warnings
    assert len(run.snapshots) == total and set(run.snapshots.loc[run.snapshots["thinned"], "snapshot"]) == thinned
    report = subprocess.run([sys.executable, "-m", "jaxmemprof", "report", str(run_dir)], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0 and "missing" not in report.stdout + report.stderr
    some = min(thinned)
    show = subprocess.run([sys.executable, "-m", "jaxmemprof", "show", f"{run_dir}@{some}"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert show.returncode == 2 and show.stderr.count("\n") == 1 and "was thinned" in show.stderr

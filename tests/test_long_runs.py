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
from concurrent.futures import ThreadPoolExecutor

from conftest import cpu_env, write_script

import pandas as pd

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
    from test_fault_injection import cli_batch

    some = min(thinned)
    report, show = cli_batch([["report", run_dir], ["show", f"{run_dir}@{some}"]], tmp_path, workers=1, env=env)
    assert report.returncode == 0 and "missing" not in report.stdout + report.stderr
    assert show.returncode == 2 and show.stderr.count("\n") == 1 and "was thinned" in show.stderr


# Schema 1's arrays table (before array_kinds): every row its own description.
# Runs recorded before schema 2 hold this; the reader reads both.
_ARRAYS_V1 = """
CREATE TABLE arrays_v1 (
    array_id INTEGER PRIMARY KEY, py_id INTEGER NOT NULL, first_snapshot INTEGER NOT NULL,
    shape TEXT NOT NULL, dtype TEXT NOT NULL, nbytes INTEGER NOT NULL, shard_bytes TEXT NOT NULL,
    devices TEXT NOT NULL, addresses TEXT NOT NULL, sharding TEXT NOT NULL, memory_kind TEXT, stack_id INTEGER
);
INSERT INTO arrays_v1 SELECT a.array_id, a.py_id, a.first_snapshot, k.shape, k.dtype, k.nbytes, k.shard_bytes,
    k.devices, a.addresses, k.sharding, k.memory_kind, k.stack_id FROM arrays a JOIN array_kinds k USING (kind_id);
DROP TABLE arrays;
DROP TABLE array_kinds;
ALTER TABLE arrays_v1 RENAME TO arrays;
"""


def _as_schema_1(run_dir) -> None:
    con = sqlite3.connect(run_dir / layout.JOURNAL)
    con.executescript(_ARRAYS_V1)
    con.close()
    manifest = json.loads((run_dir / layout.MANIFEST).read_text())
    (run_dir / layout.MANIFEST).write_text(json.dumps(dict(manifest, schema_version=1)))


def _birth(array_id, shape, stack_id, address=None):
    n = 4 * __import__("math").prod(shape)
    return (array_id, 1000 + array_id, json.dumps(list(shape)), "float32", n, f"[{n}]", '["cpu:0"]',
            f"[{'null' if address is None else address}]", "SingleDeviceSharding", "device", stack_id)


def test_each_description_is_stored_once(tmp_path, monkeypatch):
    """Arrays of one shape, dtype, sharding and site share one array_kinds
    row; each reads back its own description, also once the writer has
    forgotten the descriptions it remembered (a program of endless shapes)."""
    from jaxmemprof.store import writer as writer_module

    monkeypatch.setattr(writer_module, "KINDS_REMEMBERED", 4)
    w = RunWriter(tmp_path / "run", {"jaxmemprof_version": "test", "start_epoch": 0.0}, thinning=Thinning(
        recent_s=5.0, base_width_s=1.0, every=10))
    stacks = [(1, json.dumps([["train.py", 10, "step"]])), (2, json.dumps([["train.py", 20, "init"]]))]
    expected = {}  # array_id -> (shape, stack_id, address)
    next_id, step = 1, []
    for i in range(1, 201):
        births = []
        # Two of one kind each snapshot (the step's parameters, ending at the
        # next), and from the 100th on one of a shape never seen before.
        ended = [(a, i - 1, "freed") for a in step]
        step = []
        for shape, site in (((64, 32), 1), ((64, 32), 1)) + ((((i, 3), 2),) if i >= 100 else ()):
            expected[next_id] = (shape, site, 4096 + next_id)
            births.append(_birth(next_id, shape, site, 4096 + next_id))
            if site == 1:
                step.append(next_id)
            next_id += 1
        w.add_snapshot(SnapshotRecord(t_wall=i, t_mono=i, trigger="interval", label=None, profile=_profile(i),
                                      live_bytes=i, buffers=1, arrays=1, new_stacks=stacks if i == 1 else [],
                                      new_arrays=births, ended_arrays=ended))
    w.finish(end_time="x", exit_status=0)
    con = sqlite3.connect(tmp_path / "run" / layout.JOURNAL)
    assert con.execute("SELECT count(*) FROM arrays").fetchone()[0] == len(expected) == 2 * 200 + 101
    kinds = con.execute("SELECT count(*) FROM array_kinds").fetchone()[0]
    # 101 new shapes, and (64, 32) again each time the 4 remembered are forgotten.
    assert 102 <= kinds < 102 + 101 / 3, kinds
    assert con.execute("SELECT count(DISTINCT kind_id) FROM arrays WHERE first_snapshot < 100").fetchone()[0] == 1
    con.close()
    run = load_run(tmp_path / "run")
    assert run.warnings == []
    got = {int(r.array_id): (r.shape, int(r.stack_id), r.addresses[0]) for r in run.arrays.itertuples()}
    assert got == expected
    assert list(run.arrays["nbytes"]) == [4 * expected[a][0][0] * expected[a][0][1] for a in run.arrays["array_id"]]
    ends = run.arrays.set_index("array_id")
    unique = next(a for a, (shape, _, _) in expected.items() if shape == (100, 3))
    assert ends.loc[1, "end_snapshot"] == 2 and ends.loc[1, "how"] == "freed"
    assert pd.isna(ends.loc[unique, "end_snapshot"]) and ends.loc[unique, "last_snapshot"] == 200


def test_a_thinned_long_run_keeps_every_array_and_the_peak(tmp_path):
    """The same records written with and without thinning: the arrays (births,
    ends, descriptions) and the peak read back the same, the storage far smaller."""
    sched = Thinning(recent_s=60.0, base_width_s=1.0, every=50)
    _simulate(tmp_path / "thinned", sched, 3000)
    _simulate(tmp_path / "whole", None, 3000)
    thinned, whole = load_run(tmp_path / "thinned"), load_run(tmp_path / "whole")
    assert thinned.warnings == whole.warnings == []
    import pandas.testing as pdt

    pdt.assert_frame_equal(thinned.arrays, whole.arrays)
    assert len(thinned.arrays) == 3000 and thinned.arrays["end_snapshot"].notna().sum() == 2999
    assert (thinned.arrays["last_snapshot"] == thinned.arrays["first_snapshot"]).iloc[:-1].all()
    peak = thinned.snapshots.loc[thinned.snapshots["live_bytes"].idxmax()]
    assert int(peak["snapshot"]) == 1234 and not peak["thinned"]
    assert thinned.profile(1234).samples["bytes"].sum() == 10_000_000
    pdt.assert_frame_equal(thinned.snapshots.drop(columns="thinned"), whole.snapshots.drop(columns="thinned"))
    assert thinned.snapshots["thinned"].sum() > 2000 and not whole.snapshots["thinned"].any()
    files = [len(os.listdir(d / layout.SNAPSHOT_DIR)) for d in (tmp_path / "thinned", tmp_path / "whole")]
    assert files[0] < files[1] / 4, files


OLD_FORMAT_SCRIPT = """
    import jax.numpy as jnp
    import jaxmemprof
    first = jnp.ones((256, 1024), jnp.float32)                   # FIRST: 1 MiB
    jaxmemprof.snapshot("one")
    jnp.full((64, 1024), 0, jnp.float32).block_until_ready()  # compiled here: the layers share one traceback
    layers = [jnp.full((64, 1024), i, jnp.float32) for i in range(8)]  # LAYERS: 8 x 256 KiB
    jaxmemprof.snapshot("layers")
    del first
    jaxmemprof.snapshot("freed")
    """


def test_a_run_in_the_previous_format_reads_and_reports_the_same(tmp_path):
    """A run recorded now and the same run rewritten in schema 1 (arrays
    describing themselves, no array_kinds): identical frames, and identical
    report and export output."""
    from conftest import line_of, run_cli

    script = write_script(tmp_path, "known.py", OLD_FORMAT_SCRIPT)
    new = tmp_path / "new"
    run_cli("run", "-q", "-o", new / "run", script, cwd=tmp_path, check=0)
    con = sqlite3.connect(new / "run" / layout.JOURNAL)
    layer_kinds = con.execute("SELECT count(DISTINCT kind_id), count(*) FROM arrays JOIN array_kinds "
                              "USING (kind_id) WHERE shape = '[64,1024]'").fetchone()
    con.close()
    assert layer_kinds == (1, 8)  # the eight layers share one description
    old = tmp_path / "old"
    __import__("shutil").copytree(new, old)
    _as_schema_1(old / "run")
    a, b = load_run(new / "run"), load_run(old / "run")
    import pandas.testing as pdt

    pdt.assert_frame_equal(a.arrays, b.arrays)
    pdt.assert_frame_equal(a.snapshots, b.snapshots)
    assert a.stacks == b.stacks and a.warnings == b.warnings == []
    # What the script made, found in both.
    arrays = b.arrays
    by_label = dict(zip(b.snapshots["label"], b.snapshots["snapshot"]))
    layers = arrays[arrays["shape"] == (64, 1024)]
    assert len(layers) == 8 and set(layers["nbytes"]) == {256 * 1024}
    assert set(layers["first_snapshot"]) == {by_label["layers"]} and layers["end_snapshot"].isna().all()
    first = arrays[arrays["shape"] == (256, 1024)]
    assert len(first) == 1 and int(first["end_snapshot"].iloc[0]) == by_label["freed"]
    assert int(first["last_snapshot"].iloc[0]) == by_label["layers"]
    assert any(ln == line_of(script, "# LAYERS") for _, ln, _ in b.stacks[int(layers["stack_id"].iloc[0])])
    assert any(ln == line_of(script, "# FIRST") for _, ln, _ in b.stacks[int(first["stack_id"].iloc[0])])
    from test_fault_injection import cli_batch

    # Each run's report and export in one process (through the CLI's entry point), the two at the same time.
    with ThreadPoolExecutor(2) as pool:
        outs = list(pool.map(lambda d: cli_batch([["report", "run"], ["export", "run", "--csv", "csv"]], d,
                                                 workers=1), (new, old)))
    for ours, theirs in zip(*outs):
        assert ours.returncode == theirs.returncode == 0, ours.stderr + theirs.stderr
        assert ours.stdout == theirs.stdout and ours.stderr == theirs.stderr
    for name in sorted(os.listdir(new / "csv")):
        assert (new / "csv" / name).read_bytes() == (old / "csv" / name).read_bytes(), name


KILLED_WRITER = """
import json, sys
sys.path.insert(0, sys.argv[2])
from test_long_runs import _birth, _profile
from jaxmemprof.store.writer import RunWriter, SnapshotRecord, Thinning
w = RunWriter(sys.argv[1], {"jaxmemprof_version": "test", "start_epoch": 0.0},
              thinning=Thinning(recent_s=2.0, base_width_s=0.5, every=7))
i = 0
while True:
    i += 1
    # Each snapshot: one array of the step's kind, one of a new kind; the
    # step's array of the snapshot before ends.
    w.add_snapshot(SnapshotRecord(
        t_wall=i * 0.1, t_mono=i * 0.1, trigger="interval", label=None, profile=_profile(i), live_bytes=i,
        buffers=1, arrays=1, new_stacks=[(1, json.dumps([["train.py", 10, "step"]]))] if i == 1 else [],
        new_arrays=[_birth(2 * i - 1, (8, 8), 1), _birth(2 * i, (i, 1), 1)],
        ended_arrays=[(2 * i - 3, i - 1, "freed")] if i > 1 else []))
    print(i, flush=True)
"""


def test_a_long_run_killed_mid_way_is_readable(tmp_path):
    """SIGKILL at an arbitrary moment of a thinned run: every committed
    snapshot's arrays are there, each with its description."""
    import signal

    here = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(tmp_path / "run"), here],
                            stdout=subprocess.PIPE, text=True, env=cpu_env())
    committed = 0
    for line in proc.stdout:
        committed = int(line)
        if committed >= 400:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    run = load_run(tmp_path / "run")
    n = int(run.snapshots["snapshot"].max())
    # The kill may land after the next snapshot's file is written and before its journal entry:
    # that file, and only it, is named.
    unfinished = "the run did not finish (killed): reading what was committed"
    orphan = f"1 snapshot file(s) without a journal entry (the run was killed while writing them?): {n + 1:06d}.prof.gz"
    assert run.warnings in ([unfinished], [unfinished, orphan]), run.warnings
    assert n >= committed and run.snapshots["thinned"].sum() > n / 3
    arrays = run.arrays.set_index("array_id")
    assert list(arrays.index) == list(range(1, 2 * n + 1))
    assert list(arrays["first_snapshot"]) == [(a + 1) // 2 for a in arrays.index]
    assert list(arrays["shape"]) == [(8, 8) if a % 2 else (a // 2, 1) for a in arrays.index]
    steps = arrays[arrays.index % 2 == 1]
    assert steps["end_snapshot"].iloc[:-1].tolist() == list(range(2, n + 1)) and pd.isna(steps["end_snapshot"].iloc[-1])


def test_committed_runs_of_schema_1_read_their_descriptions():
    """A run recorded in schema 1 (each arrays row its own description; the
    bundled run kept as it was, sample_runs/schema-1/): read with every
    column where it belongs."""
    import math

    import numpy as np

    from conftest import REPO

    for name in ("mlp-leak",):
        d = REPO / "sample_runs" / "schema-1" / name
        assert json.loads((d / layout.MANIFEST).read_text())["schema_version"] == 1
        con = sqlite3.connect(f"file:{d / layout.JOURNAL}?mode=ro", uri=True)  # a bundled run: read, never written
        rows = con.execute("SELECT count(*) FROM arrays").fetchone()[0]
        groups = con.execute("SELECT shape, dtype, nbytes, stack_id, count(*) FROM arrays "
                             "GROUP BY 1, 2, 3, 4").fetchall()
        con.close()
        run = load_run(d)
        assert run.warnings == [] and len(run.arrays) == rows > 50
        a = run.arrays
        assert all(n == np.dtype(t).itemsize * math.prod(s) for n, t, s in zip(a["nbytes"], a["dtype"], a["shape"]))
        assert all(sb == (n,) for sb, n in zip(a["shard_bytes"], a["nbytes"]))
        assert set(a["devices"]) == {("cpu:0",)} and set(a["sharding"]) == {"SingleDeviceSharding"}
        assert a["stack_id"].isin(list(run.stacks)).all() and (a["first_snapshot"] <= a["last_snapshot"]).all()
        # Counted by the reader as by the journal itself.
        by_kind = {(tuple(json.loads(s)), t, n, st): c for s, t, n, st, c in groups}
        assert a.groupby(["shape", "dtype", "nbytes", "stack_id"]).size().to_dict() == by_kind

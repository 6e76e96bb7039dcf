"""The timeline of a run: totals, devices, sites, executables and markers per
snapshot, checked against scripts whose arrays have known sizes on known lines.

Runs are recorded through the real CLI with ``--interval 1000``: besides the
script's own ``jaxmemprof.snapshot()`` calls there is only the exit snapshot,
so snapshot numbers are fixed.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from conftest import cpu_env, line_of, run_cli, run_script, write_script

from jaxmemprof.analysis.sites import Attribution
from jaxmemprof.analysis.timeline import (
    DEVICES_COLUMNS, EXECUTABLES_COLUMNS, MARKERS_COLUMNS, OTHER, SITES_COLUMNS, TOTALS_COLUMNS, timeline,
)
from jaxmemprof.store.reader import load_run
from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.options import Options

MiB = 1024 * 1024

KNOWN = """
import time
import numpy as np
import jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import jaxmemprof


def make_b():
    return jnp.ones((512,), jnp.float32), jnp.ones((512,), jnp.float32), jnp.ones((512,), jnp.float32)  # SITE-B


def main():
    jax.devices()
    jaxmemprof.snapshot("start")  # 1
    jaxmemprof.snapshot()  # 2, unlabelled
    a = jnp.zeros((256, 1024), jnp.float32)  # SITE-A
    jaxmemprof.snapshot("a")  # 3
    bs = make_b()
    jaxmemprof.mark("step 1")
    jaxmemprof.mark("step 2")
    jaxmemprof.snapshot("b")  # 4
    del a
    jaxmemprof.mark("step 3")
    jaxmemprof.snapshot("del-a")  # 5
    mesh = Mesh(np.array(jax.devices()[:2]), ("x",))
    rep = jax.device_put(np.zeros((1024,), np.float32), NamedSharding(mesh, P()))  # SITE-REP
    shd = jax.device_put(np.zeros((2048,), np.float32), NamedSharding(mesh, P("x")))  # SITE-SHD
    jaxmemprof.snapshot("sharded")  # 6
    return bs, rep, shd


main()
"""


@pytest.fixture(scope="module")
def known(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("timeline")
    script = write_script(tmp, "known.py", KNOWN)
    env = cpu_env(XLA_FLAGS="--xla_force_host_platform_device_count=2")
    run_cli("run", "-q", "--interval", "1000", "-o", tmp / "run", script, cwd=tmp, env=env, check=0)
    run = load_run(tmp / "run")
    att = Attribution(roots=(run.manifest["cwd"],))

    def site(marker):
        return f"known.py:{line_of(script, marker)} ({'make_b' if marker == 'SITE-B' else 'main'})"

    return run, att, site


def test_snapshots_are_where_the_script_put_them(known):
    run, _, _ = known
    assert run.snapshots["label"].tolist()[:1] + run.snapshots["label"].tolist()[2:6] == [
        "start", "a", "b", "del-a", "sharded"]
    assert run.snapshots["trigger"].tolist() == ["api", "api", "api", "api", "api", "api", "exit"]


def test_totals_and_peak(known):
    run, att, site = known
    tl = timeline(attribute(run))
    assert tl.source == "arrays"
    tot = tl.totals
    assert list(tot.columns) == TOTALS_COLUMNS
    assert tot["snapshot"].tolist() == [1, 2, 3, 4, 5, 6, 7]
    # 1 MiB at SITE-A, 3 x 2 KiB at SITE-B, then 2 x 4 KiB (replicated) + 2 x 4 KiB (sharded).
    assert tot["live_bytes"].tolist() == [0, 0, MiB, MiB + 6144, 6144, 6144 + 16384, 0]
    assert tot["arrays"].tolist() == [0, 0, 1, 4, 3, 5, 0]
    assert tot["buffers"].tolist() == [0, 0, 1, 4, 3, 7, 0]
    assert tot["markers_seen"].tolist() == [0, 0, 0, 2, 3, 3, 3]
    assert tot["label"].tolist() == ["start", None, "a", "b", "del-a", "sharded", None]
    # CPU has no allocator statistics: NA, never 0.
    for col in ("bytes_in_use", "peak_bytes_in_use", "bytes_limit", "pool_bytes", "largest_free_block_bytes",
                "unattributed_bytes", "fragmentation"):
        assert tot[col].isna().all(), col
    assert (tl.peak_snapshot, tl.peak_bytes) == (4, MiB + 6144)
    assert tl.peak_t == pytest.approx(float(tot.loc[3, "t"]))


def test_site_series_match_known_sizes(known):
    run, att, site = known
    tl = timeline(attribute(run))
    sites = tl.sites
    assert list(sites.columns) == SITES_COLUMNS
    # Largest peak first; equal peaks in site order.
    assert tl.site_order == (site("SITE-A"), site("SITE-REP"), site("SITE-SHD"), site("SITE-B"))
    wide = sites.pivot(index="snapshot", columns="site", values="live_bytes")
    assert wide[site("SITE-A")].tolist() == [0, 0, MiB, MiB, 0, 0, 0]
    assert wide[site("SITE-B")].tolist() == [0, 0, 0, 6144, 6144, 6144, 0]
    assert wide[site("SITE-REP")].tolist() == [0, 0, 0, 0, 0, 8192, 0]  # one copy per device
    assert wide[site("SITE-SHD")].tolist() == [0, 0, 0, 0, 0, 8192, 0]
    counts = sites.pivot(index="snapshot", columns="site", values="arrays")
    assert counts[site("SITE-B")].tolist() == [0, 0, 0, 3, 3, 3, 0]
    # Sites add up to the snapshot totals, and long form is sorted by snapshot.
    assert sites.groupby("snapshot")["live_bytes"].sum().tolist() == tl.totals["live_bytes"].tolist()
    assert sites["snapshot"].is_monotonic_increasing
    assert sites["t"].tolist() == np.repeat(tl.totals["t"].to_numpy(), 4).tolist()


def test_top_sites_and_other(known):
    run, att, site = known
    tl = timeline(attribute(run), top_sites=1)
    assert tl.site_order == (site("SITE-A"), OTHER)
    other = tl.sites[tl.sites["site"] == OTHER]
    assert other["live_bytes"].tolist() == [0, 0, 0, 6144, 6144, 6144 + 16384, 0]
    assert other["arrays"].tolist() == [0, 0, 0, 3, 3, 5, 0]
    assert timeline(attribute(run), top_sites=0).site_order == (OTHER,)


def test_devices_from_shards(known):
    run, att, _ = known
    dev = timeline(attribute(run)).devices
    assert list(dev.columns) == DEVICES_COLUMNS
    wide = dev.pivot(index="snapshot", columns="device", values="live_bytes")
    assert list(wide.columns) == ["cpu:0", "cpu:1"]
    assert wide["cpu:0"].tolist() == [0, 0, MiB, MiB + 6144, 6144, 6144 + 4096 + 4096, 0]
    assert wide["cpu:1"].tolist() == [0, 0, 0, 0, 0, 4096 + 4096, 0]
    bufs = dev.pivot(index="snapshot", columns="device", values="buffers")
    assert bufs.loc[6].tolist() == [5, 2]
    assert dev["bytes_in_use"].isna().all()


def test_markers_are_placed_after_the_right_snapshots(known):
    run, att, _ = known
    m = timeline(attribute(run)).markers
    assert list(m.columns) == MARKERS_COLUMNS
    assert m["label"].tolist() == ["step 1", "step 2", "step 3"]
    assert m["marker"].tolist() == [1, 2, 3]
    assert m["after_snapshot"].tolist() == [3, 3, 4]
    snaps = run.snapshots.set_index("snapshot")
    for t, after in zip(m["t"], m["after_snapshot"]):
        assert snaps.loc[after, "t"] <= t <= snaps.loc[after + 1, "t"]


def test_executables_series(known):
    run, att, _ = known
    ex = timeline(attribute(run)).executables
    assert list(ex.columns) == EXECUTABLES_COLUMNS
    assert ex["snapshot"].tolist() == [1, 2, 3, 4, 5, 6, 7]
    per_snapshot = run.executables.groupby("snapshot")["count"].sum()
    expected = [int(per_snapshot.get(s, 0)) for s in range(1, 8)]
    assert ex["executables"].tolist() == expected
    assert expected[0] == 0 and expected[2] >= 1  # jnp.zeros compiled at SITE-A
    assert (ex["code_bytes"] == 0).all()  # generated code size is 0 on CPU


def test_allocator_statistics(known):
    """CPU has no Device.memory_stats(): rows in the journal's own format (two
    devices, one reporting -1 for a missing value) are added to the real run."""
    run, att, _ = known
    rows = []
    for dev, in_use, pool, free_block in (("cpu:0", 2 * MiB, 10 * MiB, 4 * MiB), ("cpu:1", MiB, 4 * MiB, -1)):
        for key, value in (("bytes_in_use", in_use), ("peak_bytes_in_use", in_use + MiB),
                           ("bytes_limit", 16 * MiB), ("pool_bytes", pool),
                           ("largest_free_block_bytes", free_block), ("num_allocs", 7)):
            rows.append((4, dev, key, value))
    stats = pd.DataFrame(rows, columns=["snapshot", "device", "key", "value"])
    tl = timeline(attribute(dataclasses.replace(run, memory_stats=stats)))
    d = tl.devices.set_index(["snapshot", "device"])
    assert d.loc[(4, "cpu:0"), "bytes_in_use"] == 2 * MiB
    assert d.loc[(4, "cpu:0"), "unattributed_bytes"] == 2 * MiB - (MiB + 6144)
    assert d.loc[(4, "cpu:0"), "fragmentation"] == pytest.approx((8 - 4) / 8)
    assert d.loc[(4, "cpu:1"), "unattributed_bytes"] == MiB
    assert pd.isna(d.loc[(4, "cpu:1"), "largest_free_block_bytes"])  # -1: not reported
    assert pd.isna(d.loc[(4, "cpu:1"), "fragmentation"])
    assert d.loc[(4, "cpu:1"), "live_bytes"] == 0  # a device with statistics but no arrays
    assert pd.isna(d.loc[(3, "cpu:0"), "bytes_in_use"])
    tot = tl.totals.set_index("snapshot")
    assert tot.loc[4, "bytes_in_use"] == 3 * MiB
    assert tot.loc[4, "peak_bytes_in_use"] == 5 * MiB
    assert tot.loc[4, "bytes_limit"] == 32 * MiB
    assert tot.loc[4, "pool_bytes"] == 14 * MiB
    assert tot.loc[4, "largest_free_block_bytes"] == 4 * MiB
    assert tot.loc[4, "fragmentation"] == pytest.approx(0.5)
    assert tot.loc[4, "unattributed_bytes"] == 3 * MiB - (MiB + 6144)
    assert tot.loc[[1, 2, 3, 5, 6, 7], "bytes_in_use"].isna().all()


def test_missing_snapshot_file_is_skipped(known, tmp_path):
    """A snapshot the reader dropped (its file is missing) leaves a gap in the
    numbers; arrays alive across it still count in the others."""
    run, att, site = known
    snaps = run.snapshots[run.snapshots["snapshot"] != 4].reset_index(drop=True)
    tl = timeline(attribute(dataclasses.replace(run, snapshots=snaps)))
    wide = tl.sites.pivot(index="snapshot", columns="site", values="live_bytes")
    assert list(wide.index) == [1, 2, 3, 5, 6, 7]
    assert wide[site("SITE-A")].tolist() == [0, 0, MiB, 0, 0, 0]
    assert wide[site("SITE-B")].tolist() == [0, 0, 0, 6144, 6144, 0]


PROFILES = """
import os, sys
import jax, jax.numpy as jnp

out = sys.argv[1]
params = jnp.zeros((64, 1024), jnp.float32)  # SITE-PARAMS
keep = []
for i in range(12):
    keep.append(jnp.ones((1024,), jnp.float32))  # SITE-KEEP
    jax.profiler.save_device_memory_profile(os.path.join(out, f"p{i:03d}.prof"))
"""


def test_directory_of_profiles(tmp_path):
    script = write_script(tmp_path, "profiles.py", PROFILES)
    (tmp_path / "profs").mkdir()
    run_script(script, tmp_path / "profs")
    run = load_run(tmp_path / "profs")
    assert not run.has_arrays
    tl = timeline(attribute(run, Options(roots=(str(tmp_path),))), top_sites=2)  # .prof files: no recorded directory
    assert tl.source == "profiles"
    keep = f"profiles.py:{line_of(script, 'SITE-KEEP')} (<module>)"
    params = f"profiles.py:{line_of(script, 'SITE-PARAMS')} (<module>)"
    assert tl.site_order[:2] == (params, keep)
    wide = tl.sites.pivot(index="snapshot", columns="site", values="live_bytes")
    assert wide[keep].tolist() == [4096 * (i + 1) for i in range(12)]
    assert wide[params].tolist() == [262144] * 12
    assert tl.sites.pivot(index="snapshot", columns="site", values="arrays")[keep].tolist() == list(range(1, 13))
    assert tl.totals["live_bytes"].tolist() == [262144 + 4096 * (i + 1) for i in range(12)]
    assert tl.sites.groupby("snapshot")["live_bytes"].sum().tolist() == tl.totals["live_bytes"].tolist()
    dev = tl.devices
    assert dev["device"].unique().tolist() == ["cpu:0"]
    assert dev["live_bytes"].tolist() == tl.totals["live_bytes"].tolist()
    assert (tl.peak_snapshot, tl.peak_bytes) == (12, 262144 + 12 * 4096)
    assert tl.markers.empty and (tl.totals["markers_seen"] == 0).all()
    assert (tl.executables["executables"] >= 1).all()  # from the profiles' executable samples

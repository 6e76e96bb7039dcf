"""Lifetimes of arrays and sites: real scripts with known arrays, recorded
through `jaxmemprof run`, and a plain directory of profiles for the
estimated churn."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import line_of, run_cli, run_script, write_script

import jaxmemprof
from jaxmemprof.analysis.lifetimes import (
    ARRAY_COLUMNS,
    CHURN_COLUMNS,
    SITE_LIFETIME_COLUMNS,
    array_lifetimes,
    estimated_site_churn,
    site_lifetimes,
)
from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.options import Options

# The sampler's own first snapshot comes an interval after JAX holds arrays,
# where no step came meanwhile (capture/sampler.py, since the snapshots keyed
# to steps): with --interval 1000, never while these scripts run, and none
# later. settle() waits for the sampler's snapshots to be over where one may
# come (an interval under its 30 s), so that every later snapshot is one of
# the script's own; the tests check that they are. (It used to wait for the
# first one whatever the interval: 30 s for nothing in each recording.)
SETTLE = '''
import time
from jaxmemprof.capture import session as _session

def settle():
    s = _session.active()
    deadline = time.monotonic() + 30
    if not s.sampler.first_taken and s.sampler.interval > 30:
        return  # its first snapshot would come after the deadline: none to wait for
    while not s.sampler.first_taken and time.monotonic() < deadline:
        time.sleep(0.005)
    n, quiet = s.writer.snapshots, time.monotonic()
    while time.monotonic() - quiet < 0.3 and time.monotonic() < deadline:
        time.sleep(0.01)
        if s.writer.snapshots != n:
            n, quiet = s.writer.snapshots, time.monotonic()
'''

STEPS_SCRIPT = SETTLE + '''
import jax, jax.numpy as jnp
import jaxmemprof

# One jitted call makes W and no temporary: the sampler's first snapshot holds W alone.
W = jax.jit(lambda: jnp.zeros((64, 256), jnp.float32))()  # LINE-W
settle()
jaxmemprof.snapshot("start")
for i in range(3):
    tmp = jnp.full((1024,), float(i), jnp.float32)  # LINE-TMP
    jaxmemprof.snapshot(f"step {i}")
    del tmp
    jaxmemprof.mark(f"step {i}")
kept = jnp.ones((2048,), jnp.float32)  # LINE-KEPT
jaxmemprof.snapshot("kept")
jaxmemprof.mark("step 3")
jaxmemprof.snapshot("kept2")
del kept
jaxmemprof.snapshot("end")
'''

W_BYTES, TMP_BYTES, KEPT_BYTES = 64 * 256 * 4, 1024 * 4, 2048 * 4


@pytest.fixture(scope="module")
def steps_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("lifetimes")
    script = write_script(d, "steps.py", STEPS_SCRIPT)
    run_cli("run", "-o", d / "run", "--interval", "1000", script, cwd=d, check=0)
    run = jaxmemprof.load_run(d / "run")
    lines = {k: line_of(script, f"LINE-{k}") for k in ("W", "TMP", "KEPT")}
    return run, lines


def _numbers(run) -> dict:
    snaps = run.snapshots
    return {lab: int(n) for lab, n in zip(snaps["label"], snaps["snapshot"]) if isinstance(lab, str)}


def test_array_lifetimes_of_known_arrays(steps_run):
    run, ln = steps_run
    df = array_lifetimes(attribute(run))
    assert list(df.columns) == ARRAY_COLUMNS
    snaps = run.snapshots
    S = _numbers(run)
    first_n, last_n = int(snaps["snapshot"].iloc[0]), int(snaps["snapshot"].iloc[-1])
    t = dict(zip(snaps["snapshot"], snaps["t"]))
    # Every snapshot from "start" on is the script's own, then the exit snapshot.
    after = snaps[snaps["snapshot"] >= S["start"]]
    assert list(after["trigger"]) == ["api"] * 7 + ["exit"]
    assert list(after["snapshot"]) == list(range(S["start"], S["start"] + 8))
    assert last_n == S["end"] + 1

    by_site = {s: g.sort_values("first_snapshot") for s, g in df.groupby("site")}

    def site(k):
        return f"steps.py:{ln[k]} (<module>)"

    assert set(by_site) == {site("W"), site("TMP"), site("KEPT")}

    # The long-lived array: in the first snapshot and alive at the end: censored both ways.
    (w,) = by_site[site("W")].itertuples(index=False)
    assert (w.file, w.line, w.function) == ("steps.py", ln["W"], "<module>")
    assert (w.shape, w.dtype, w.bytes, w.nbytes, w.shards, w.devices) == ("64x256", "float32", W_BYTES, W_BYTES, 1, "cpu:0")
    assert (w.first_snapshot, w.last_snapshot, w.how) == (first_n, last_n, "alive")
    assert pd.isna(w.end_snapshot) and np.isnan(w.ended_t)
    assert w.alive_at_start and w.alive_at_end
    assert w.lifetime_snapshots == len(snaps)
    assert w.lifetime_steps == 4
    assert w.lifetime_s == pytest.approx(t[last_n] - t[first_n], abs=1e-12)
    assert w.first_t == t[first_n] and w.last_t == t[last_n]

    # Per-step temporaries: seen in their step's snapshot, gone in the next one.
    tmps = by_site[site("TMP")]
    assert len(tmps) == 3
    for i, r in enumerate(tmps.itertuples(index=False)):
        n = S[f"step {i}"]
        assert (r.first_snapshot, r.last_snapshot, r.end_snapshot, r.how) == (n, n, n + 1, "freed")
        assert (r.lifetime_snapshots, r.lifetime_steps) == (1, 1)
        assert (r.shape, r.bytes) == ("1024", TMP_BYTES)
        assert r.ended_t == t[n + 1]
        assert r.lifetime_s == pytest.approx(t[n + 1] - t[n], abs=1e-12)
        assert not r.alive_at_start and not r.alive_at_end
    assert S["step 1"] == S["step 0"] + 1 and S["kept"] == S["step 2"] + 1

    # Two snapshots and one marker.
    (k,) = by_site[site("KEPT")].itertuples(index=False)
    assert (k.first_snapshot, k.last_snapshot, k.end_snapshot, k.how) == (S["kept"], S["kept2"], S["end"], "freed")
    assert (k.lifetime_snapshots, k.lifetime_steps) == (2, 1)
    assert k.lifetime_s == pytest.approx(t[S["end"]] - t[S["kept"]], abs=1e-12)
    assert df["array_id"].is_monotonic_increasing


def test_site_lifetimes(steps_run):
    run, ln = steps_run
    ar = attribute(run)
    arrays, sites = ar.arrays, site_lifetimes(ar)
    assert list(sites.columns) == SITE_LIFETIME_COLUMNS

    def site(k):
        return f"steps.py:{ln[k]} (<module>)"

    rows = sites.set_index("site")
    # Largest memory-time first: the weights held all along.
    assert sites["site"].iloc[0] == site("W")
    assert list(sites["byte_seconds"]) == sorted(sites["byte_seconds"], reverse=True)

    w, tmp, kept = rows.loc[site("W")], rows.loc[site("TMP")], rows.loc[site("KEPT")]
    assert (w["arrays_born"], w["bytes_born"], w["alive_at_end"], w["alive_at_end_bytes"]) == (1, W_BYTES, 1, W_BYTES)
    assert (tmp["arrays_born"], tmp["bytes_born"], tmp["alive_at_end"], tmp["alive_at_end_bytes"]) == (3, 3 * TMP_BYTES, 0, 0)
    assert (kept["arrays_born"], kept["bytes_born"], kept["alive_at_end"]) == (1, KEPT_BYTES, 0)

    # The peak is the first snapshot holding W and kept; what each site held
    # there adds up to the peak's live bytes.
    peak = run.snapshots.loc[run.snapshots["live_bytes"].idxmax()]
    assert peak["label"] == "kept" and peak["live_bytes"] == W_BYTES + KEPT_BYTES
    assert (w["live_bytes_at_peak"], kept["live_bytes_at_peak"], tmp["live_bytes_at_peak"]) == (W_BYTES, KEPT_BYTES, 0)
    assert sites["live_bytes_at_peak"].sum() == peak["live_bytes"]

    life = arrays.loc[arrays["site"] == site("TMP"), "lifetime_s"].to_numpy()
    assert tmp["median_lifetime_s"] == pytest.approx(np.median(life))
    assert tmp["p90_lifetime_s"] == pytest.approx(np.quantile(life, 0.9))
    assert tmp["max_lifetime_s"] == pytest.approx(life.max())
    assert tmp["byte_seconds"] == pytest.approx(TMP_BYTES * life.sum())
    (w_life,) = arrays.loc[arrays["site"] == site("W"), "lifetime_s"]
    assert w["byte_seconds"] == pytest.approx(W_BYTES * w_life)


PROFILES_SCRIPT = '''
import os, sys, time
import jax, jax.numpy as jnp

out = sys.argv[1]
n = 0
def save():
    global n
    jax.profiler.save_device_memory_profile(os.path.join(out, f"{n:03d}.prof"))
    n += 1
    time.sleep(0.02)  # distinct modification times

def make_a(v):
    return jnp.full((256,), v, jnp.float32)  # LINE-A

def make_b():
    return jnp.ones((512,), jnp.float32)  # LINE-B

def make_c(size):
    return jnp.zeros((size,), jnp.float32)  # LINE-C

keep = jnp.zeros((1000,), jnp.float32)  # LINE-KEEP
save()                                     # 0: keep
a0, a1, a2 = make_a(0.0), make_a(1.0), make_a(2.0)
c = make_c(256)
save()                                     # 1: + 3 A, + C 1 KiB
del a0, a1
b = make_b()
c = make_c(512)
save()                                     # 2: - 2 A, + B, C 1 KiB -> 2 KiB
hidden = make_a(9.0)
del hidden                                 # born and freed between snapshots
a3, a4 = make_a(3.0), make_a(4.0)
del b
save()                                     # 3: + 2 A, - B
'''


@pytest.fixture(scope="module")
def profile_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("profiles")
    script = write_script(d, "profiles.py", PROFILES_SCRIPT)
    (d / "profs").mkdir()
    run_script(script, d / "profs", cwd=d)
    return d, script


def test_estimated_churn_from_a_directory_of_profiles(profile_dir):
    d, script = profile_dir
    run = jaxmemprof.load_run(d / "profs")
    assert not run.has_arrays and len(run.snapshots) == 4
    assert list(array_lifetimes(attribute(run)).columns) == ARRAY_COLUMNS
    assert array_lifetimes(attribute(run)).empty

    churn = estimated_site_churn(attribute(run, Options(roots=(str(d),))))  # .prof files: no recorded directory
    assert list(churn.columns) == CHURN_COLUMNS
    assert churn["estimated"].all()
    ln = {k: line_of(script, f"LINE-{k}") for k in ("A", "B", "C", "KEEP")}
    rows = churn.set_index("site")
    cols = ["births", "deaths", "bytes_born", "bytes_freed", "count_first", "count_last",
            "bytes_first", "bytes_last", "peak_count", "peak_bytes", "snapshots"]
    got = {s: tuple(int(v) for v in rows.loc[s, cols]) for s in rows.index}
    KiB = 1024
    assert got == {
        # 3 + 2 seen born, 2 freed; the hidden one is invisible: a lower bound.
        f"profiles.py:{ln['A']} (make_a)": (5, 2, 5 * KiB, 2 * KiB, 0, 3, 0, 3 * KiB, 3, 3 * KiB, 3),
        f"profiles.py:{ln['B']} (make_b)": (1, 1, 2 * KiB, 2 * KiB, 0, 0, 0, 0, 1, 2 * KiB, 1),
        # Counted per size: 1 KiB freed and 2 KiB made is one death and one birth.
        f"profiles.py:{ln['C']} (make_c)": (2, 1, 3 * KiB, 1 * KiB, 0, 1, 0, 2 * KiB, 1, 2 * KiB, 3),
        f"profiles.py:{ln['KEEP']} (<module>)": (0, 0, 0, 0, 1, 1, 4000, 4000, 1, 4000, 4),
    }
    assert (churn["count_first"] + churn["births"] - churn["deaths"] == churn["count_last"]).all()
    assert list(churn["site"][:2]) == [f"profiles.py:{ln['A']} (make_a)", f"profiles.py:{ln['C']} (make_c)"]


def test_empty_frames_keep_their_columns(profile_dir):
    d, _ = profile_dir
    run = jaxmemprof.load_run(d / "profs")
    assert list(site_lifetimes(attribute(run)).columns) == SITE_LIFETIME_COLUMNS

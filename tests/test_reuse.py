"""Buffer reuse and donation: a real script whose buffer addresses are known,
recorded through `jaxmemprof run`."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
import pytest

from conftest import line_of, run_cli, write_script
from test_lifetimes import SETTLE

import jaxmemprof
from jaxmemprof.analysis.lifetimes import peak_snapshot, site_lifetimes
from jaxmemprof.analysis.reuse import COUNT_COLUMNS, EVENT_COLUMNS, Reuse, reuse
from jaxmemprof.analysis.attributed import attribute

REUSE_SCRIPT = SETTLE + '''
import json, sys
import jax, jax.numpy as jnp, numpy as np
import jaxmemprof

warm = jax.jit(lambda: jnp.zeros((8,), jnp.float32))()  # LINE-WARM
settle()

# An array is freed, and a new one of the same size takes its address. CPU
# allocations land on a freed address often but not always: attempts that
# land elsewhere are kept aside (so that the next one lands elsewhere again)
# and freed before the next snapshot, which never sees them. On a loaded
# machine the freed memory can come back late, so they go on for up to 20 s,
# paced after the first 200. Once under load the block never came back in
# 7,840 attempts: something kept it. One thing in the program that can is the
# list that keeps the attempts, so it is made whole first: a list grown by
# appends reallocates its items through malloc, and at about 2,000 of them
# (16 KiB, the block's size) could take the freed block and hold it.
junk = [None] * 50_000
a = jax.device_put(np.full((4096,), 1.0, np.float32))  # LINE-A
pa = a.unsafe_buffer_pointer()
jaxmemprof.snapshot("a")
del a
attempt, deadline = 0, time.monotonic() + 20
while True:
    attempt += 1
    b = jax.device_put(np.full((4096,), 2.0, np.float32))  # LINE-B
    if b.unsafe_buffer_pointer() == pa:
        break
    junk[attempt] = b
    if time.monotonic() > deadline or attempt + 1 == len(junk):
        sys.exit(f"the freed address never came back ({attempt} attempts)")
    if attempt > 200:
        time.sleep(0.002)
del junk
jaxmemprof.snapshot("b")

# Donation: the output takes the donated input's buffer.
step = jax.jit(lambda s: s + 1.0, donate_argnums=0)
state = jax.jit(lambda: jnp.zeros((2048,), jnp.float32))()  # LINE-STATE
p0 = state.unsafe_buffer_pointer()
jaxmemprof.snapshot("state")
old = state
state = step(state)  # LINE-DONATE
assert old.is_deleted() and state.unsafe_buffer_pointer() == p0
jaxmemprof.snapshot("donated")
del old
state = step(state)  # LINE-REBIND (the donated input's last reference goes at once)
assert state.unsafe_buffer_pointer() == p0
jaxmemprof.snapshot("rebound")
print(json.dumps({"pa": pa, "p0": p0, "attempts": attempt}))
'''

KiB = 1024


@pytest.fixture(scope="module")
def reuse_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("reuse")
    script = write_script(d, "reuse_known.py", REUSE_SCRIPT)
    # The program exits 1 when the allocator never gave the freed address back: the run then has no
    # reuse to check, so the program is recorded again (at most three times) until one has.
    for _ in range(3):
        proc = run_cli("run", "-o", d / "run", "--force", "--interval", "1000", script, cwd=d)
        if "the freed address never came back" not in proc.stderr:
            break
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    run = jaxmemprof.load_run(d / "run")
    lines = {k: line_of(script, f"LINE-{k}") for k in ("WARM", "A", "B", "STATE", "DONATE", "REBIND")}
    return run, lines, seen


def test_reuse_and_donation_of_known_buffers(reuse_run):
    run, ln, seen = reuse_run
    ar = attribute(run)
    arrays = ar.arrays
    r = reuse(ar)
    assert isinstance(r, Reuse) and r.unknown_addresses == 0  # every buffer's address was read
    S = {lab: int(n) for lab, n in zip(run.snapshots["label"], run.snapshots["snapshot"]) if isinstance(lab, str)}
    assert list(run.snapshots.loc[run.snapshots["snapshot"] >= S["a"], "trigger"]) == ["api"] * 5 + ["exit"]
    assert run.markers.empty and arrays["lifetime_steps"].isna().all()

    def site(k):
        return f"reuse_known.py:{ln[k]} (<module>)"

    # Per site of the new buffer: buffers_born, bytes_born, reused_address(+bytes),
    # reused_same_size(+bytes), reused_immediately(+bytes), donated_in_place(+bytes).
    counts = COUNT_COLUMNS[:10]
    rows = r.by_site.set_index("site")
    got = {s: tuple(int(v) for v in rows.loc[s, counts]) for s in rows.index}
    B, STATE = 16 * KiB, 8 * KiB
    assert got == {
        site("WARM"): (1, 32, 0, 0, 0, 0, 0, 0, 0, 0),
        site("A"): (1, B, 0, 0, 0, 0, 0, 0, 0, 0),
        site("B"): (1, B, 1, B, 1, B, 1, B, 0, 0),
        site("STATE"): (1, STATE, 0, 0, 0, 0, 0, 0, 0, 0),
        site("DONATE"): (1, STATE, 1, STATE, 1, STATE, 1, STATE, 1, STATE),
        # A donated input whose last reference went at once ends 'freed': an
        # immediate same-size reuse, not visibly a donation (OBSERVABILITY).
        site("REBIND"): (1, STATE, 1, STATE, 1, STATE, 1, STATE, 0, 0),
    }
    assert list(r.by_site.columns) == ["site", "file", "line", "function"] + COUNT_COLUMNS
    assert r.by_site["reused_address_bytes"].is_monotonic_decreasing

    # Every array shard is a buffer born, or an alias of one (JAX 0.10.2 makes a
    # second jax.Array for a device_put array's shard when its address is read).
    shards = run.arrays.groupby(arrays.set_index("array_id").loc[run.arrays["array_id"], "site"].to_numpy()).size()
    assert (rows["buffers_born"] + rows["shared"]).to_dict() == shards.to_dict()
    assert rows.loc[[site("WARM"), site("STATE"), site("DONATE"), site("REBIND")], "shared"].sum() == 0
    assert arrays["shared"].sum() == rows["shared"].sum()
    # Aliases are left out of site totals, which then agree with JAX's own profile.
    peak = peak_snapshot(run)
    samples = run.profile(peak).samples
    held = site_lifetimes(ar)
    assert held["live_bytes_at_peak"].sum() == samples.loc[samples["kind"] == "buffer", "bytes"].sum()
    assert held.set_index("site").loc[site("B"), "arrays_born"] == 1

    (dev,) = r.by_device.to_dict("records")
    assert dev["device"] == "cpu:0"
    assert [dev[c] for c in counts] == [6, 32 + 2 * B + 3 * STATE, 3, B + 2 * STATE, 3, B + 2 * STATE,
                                        3, B + 2 * STATE, 1, STATE]

    # The three reuses, exactly.
    ev = r.events
    assert list(ev.columns) == EVENT_COLUMNS
    expected = [
        (site("B"), seen["pa"], S["b"], site("A"), S["a"], S["b"], "freed", False),
        (site("DONATE"), seen["p0"], S["donated"], site("STATE"), S["state"], S["donated"], "deleted", True),
        (site("REBIND"), seen["p0"], S["rebound"], site("DONATE"), S["donated"], S["rebound"], "freed", False),
    ]
    assert [
        (e.site, int(e.address), e.first_snapshot, e.previous_site, e.previous_last_snapshot,
         e.previous_end_snapshot, e.previous_how, bool(e.donated_in_place))
        for e in ev.itertuples(index=False)
    ] == expected
    assert list(ev["gap_snapshots"]) == [0, 0, 0] and ev["same_size"].all() and ev["immediately"].all()
    site_of = arrays.set_index("array_id")["site"]
    assert list(site_of[ev["array_id"]]) == list(ev["site"])
    assert list(site_of[ev["previous_array_id"]]) == list(ev["previous_site"])


def _edited_run(run, rows):
    """The real run with its arrays replaced by ``rows``: (array_id, first,
    last, end, how, shard_bytes, devices, addresses)."""
    df = pd.DataFrame(rows, columns=["array_id", "first_snapshot", "last_snapshot", "end_snapshot", "how",
                                     "shard_bytes", "devices", "addresses"])
    df["end_snapshot"] = df["end_snapshot"].astype("Int64")
    df["shape"] = [(b[0] // 4,) for b in df["shard_bytes"]]
    df["dtype"] = "float32"
    df["nbytes"] = [sum(b) for b in df["shard_bytes"]]
    df["stack_id"] = None
    df["process"] = 0
    return replace(run, arrays=df)


def test_matching_rules(reuse_run):
    """The rules on hand-made holders of a few addresses (the recorded run's
    snapshots and stacks, edited arrays): order, size, device, aliasing, zero
    bytes, unknown addresses, gaps, several shards."""
    run = _edited_run(reuse_run[0], [
        (1, 1, 2, 3, "freed", (100,), ("cpu:0",), (1000,)),
        (2, 3, 3, 4, "deleted", (50,), ("cpu:0",), (1000,)),  # reuse of 1, smaller
        (3, 4, 5, None, None, (50,), ("cpu:0",), (1000,)),  # reuse of 2: donated in place
        (4, 5, 5, 6, "freed", (50,), ("cpu:0",), (1000,)),  # 3 still alive: an alias
        (5, 4, 4, 5, "freed", (50,), ("cpu:1",), (1000,)),  # another device: no predecessor
        (6, 6, 6, 7, "freed", (0,), ("cpu:0",), (2000,)),  # zero bytes: never matched
        (7, 7, 7, None, None, (0,), ("cpu:0",), (2000,)),
        (8, 2, 2, 3, "freed", (64,), ("cpu:1",), (None,)),  # unknown address
        (9, 1, 1, 2, "freed", (8,), ("cpu:1",), (4000,)),
        (10, 5, 5, None, None, (8,), ("cpu:1",), (4000,)),  # reuse of 9, three snapshots later
        (11, 6, 6, None, None, (8, 8), ("cpu:0", "cpu:1"), (5000, 4000)),  # shard 2 aliases 10
    ])
    r = reuse(attribute(run))
    dev = r.by_device.set_index("device")
    assert dev.loc["cpu:0"].to_dict() == dict(
        buffers_born=6, bytes_born=208, reused_address=2, reused_address_bytes=100, reused_same_size=1,
        reused_same_size_bytes=50, reused_immediately=1, reused_immediately_bytes=50, donated_in_place=1,
        donated_in_place_bytes=50, shared=1, shared_bytes=50,
    )
    assert dev.loc["cpu:1"].to_dict() == dict(
        buffers_born=4, bytes_born=130, reused_address=1, reused_address_bytes=8, reused_same_size=1,
        reused_same_size_bytes=8, reused_immediately=0, reused_immediately_bytes=0, donated_in_place=0,
        donated_in_place_bytes=0, shared=1, shared_bytes=8,
    )
    ev = r.events
    assert list(zip(ev["array_id"], ev["previous_array_id"], ev["gap_snapshots"], ev["same_size"],
                    ev["donated_in_place"])) == [(2, 1, 0, False, False), (3, 2, 0, True, True),
                                                 (10, 9, 3, True, False)]

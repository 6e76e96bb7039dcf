"""analysis/shards.py: one row per buffer, and whose address each took;
held to the program's arrays (the table whole on each of two devices, the
rest on one), the bytes jax.live_arrays() held on each device at each
snapshot, and the addresses the program read of its own arrays."""

from __future__ import annotations

from jaxmemprof.analysis.shards import match_holders, shard_table

from .programs import TABLE_BYTES, reused_addresses


def test_each_array_has_a_buffer_on_each_of_its_devices(tiny, site, tiny_ar):
    shards = shard_table(tiny)
    per_array = shards.groupby("array_id").size()
    assert (per_array.reindex(tiny.arrays["array_id"]).to_numpy() == tiny.arrays["devices"].map(len).to_numpy()).all()
    sites = tiny_ar.arrays.set_index("array_id")["site"]
    (table,) = sites.index[sites == site("table", "main")]
    mine = shards[shards["array_id"] == table]
    assert sorted(mine["device"]) == ["cpu:0", "cpu:1"] and (mine["bytes"] == TABLE_BYTES).all()


def test_the_buffers_alive_at_each_snapshot_are_what_each_device_held(tiny, oracle, labelled):
    shards = shard_table(tiny)
    for label, snapshot in labelled.items():
        alive = shards[(shards["first_snapshot"] <= snapshot) & (shards["last_snapshot"] >= snapshot)]
        assert alive.groupby("device")["bytes"].sum().to_dict() == oracle["live"][label], label


def test_a_buffer_at_an_address_an_ended_one_held_reuses_it(tiny, oracle, labelled):
    shards = shard_table(tiny)
    holders = match_holders(shards)
    reused = {(int(a), int(f)) for a, f, r in zip(shards["address"], shards["first_snapshot"], holders["is_reuse"]) if r}
    expected = reused_addresses(oracle, labelled)
    assert set(expected) <= reused
    for i in holders.index[holders["is_reuse"]]:
        prev = int(holders.at[i, "previous"])
        assert shards.at[prev, "address"] == shards.at[i, "address"]  # the holder it took the address from
        assert shards.at[prev, "end_snapshot"] <= shards.at[i, "first_snapshot"]
    assert not holders["is_alias"].any()  # no array over another's buffer

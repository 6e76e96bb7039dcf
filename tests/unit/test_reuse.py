"""analysis/reuse.py: which buffers took an address an earlier one held,
held to the device addresses the program read of its own arrays
(unsafe_buffer_pointer()) at each of its snapshots."""

from __future__ import annotations

from jaxmemprof.analysis.reuse import reuse

from .programs import reused_addresses


def test_every_reuse_the_program_saw_is_found(tiny_ar, oracle, labelled):
    expected = reused_addresses(oracle, labelled)
    r = reuse(tiny_ar)
    ev = r.events
    found = {(int(a), int(f)): row for a, f, row in zip(ev["address"], ev["first_snapshot"], ev.to_dict("records"))}
    assert set(expected) <= set(found), (expected, sorted(found))
    for key, (nbytes, previous_bytes) in expected.items():  # the holder before, as the program saw it
        assert found[key]["previous_bytes"] == previous_bytes, (key, found[key])
        assert found[key]["same_size"] == (nbytes == previous_bytes) and found[key]["previous_end_snapshot"] <= key[1]
    # nothing was donated or deleted: every earlier holder was freed
    assert set(ev["previous_how"]) <= {"freed"} and not ev["donated_in_place"].any()


def test_the_counts_by_device_are_the_buffers_born_there(tiny, tiny_ar):
    r = reuse(tiny_ar)
    by_device = r.by_device.set_index("device")
    shards = tiny.arrays["devices"].map(len)
    assert int(by_device["buffers_born"].sum()) == int(shards.sum()) == r.buffers
    assert by_device.loc["cpu:1", "reused_address"] == 0  # its addresses are not read (--addresses auto)
    assert int(by_device["reused_address"].sum()) == len(r.events)
    assert int(by_device["donated_in_place"].sum()) == 0

"""analysis/advice/sharding.py: an array held whole on both devices of the
program's mesh, where sharding it over the mesh's axis would leave half on
each: the program's table (float32 [512, 1024], 2 MiB a device)."""

from __future__ import annotations

from jaxmemprof.analysis.rules.sharding import replication_findings

from .programs import TABLE, TABLE_BYTES


def test_the_replicated_table_is_found_with_what_sharding_it_saves(tiny_ar, line):
    (f,) = replication_findings(tiny_ar)
    assert f.rule == "replicated" and f.site == f"tiny.py:{line('jit sums')}"
    assert f.fact("function") == "column_sums" and f.fact("meshes") == [{"data": 2}]
    (table,) = f.fact("arrays")
    assert (table["owner"], table["shape"], table["bytes"], table["devices"]) == ("table", list(TABLE), TABLE_BYTES, 2)
    # the mesh's one axis (2 devices) divides both dimensions; the larger is chosen
    assert (table["axis"], table["axis_size"], table["dim"], table["spec"]) == ("data", 2, 1, "P(None, 'data')")
    assert table["saving_bytes"] == f.saving_bytes == TABLE_BYTES // 2  # per device


def test_the_step_on_one_device_has_nothing_to_shard(tiny_ar):
    assert [f.fact("function") for f in replication_findings(tiny_ar)] == ["column_sums"]

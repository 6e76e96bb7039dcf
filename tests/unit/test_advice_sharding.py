"""analysis/advice/sharding.py on the tiny run: the table held whole on both
devices of the program's mesh is the rule's candidate (replicas.py), and
what sharding it does to the true peak is read from XLA's compile of the
step with it sharded (jit_whatif), made at the end of the run."""

from __future__ import annotations

from jaxmemprof.analysis.advice.sharding import by_rule, verified_sharding
from jaxmemprof.analysis.cells import leaves

from .programs import TABLE, TABLE_BYTES


def test_the_table_is_the_candidate_and_its_sharded_compile_is_read(tiny_ar):
    calls, functions = tiny_ar.run.jit.calls, tiny_ar.run.jit.functions
    fid = int(functions.loc[functions["name"] == "column_sums", "function_id"].iloc[0])
    mine = calls[calls["function_id"] == fid].sort_values("call_index")
    inputs = [leaf for leaf in leaves(mine.iloc[-1]["inputs"]) if isinstance(leaf, dict)]
    (table,) = by_rule(inputs, set())
    assert (table["owner"], table["shape"], table["bytes"]) == ("table", list(TABLE), TABLE_BYTES)
    measured = verified_sharding(tiny_ar, fid, inputs)
    # compiled sharded at the end of the run: verified, or no finding (the peak is the step's, elsewhere)
    assert measured is None or measured["verified"] is False or (
        measured["true_peak_after_bytes"] < measured["true_peak_before_bytes"])
    w = tiny_ar.run.jit.whatif
    assert any("shard" in c for c in w.loc[w["function_id"] == fid, "change"])

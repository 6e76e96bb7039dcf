"""analysis/cells.py: the journal's JSON cells as the analyses read them:
a sampled call's leaves are the arguments the program passed, whose bytes
XLA's memory_analysis() counts; damage is the default, as Python's json
parser says."""

from __future__ import annotations

import json

from jaxmemprof.analysis.cells import json_cell, leaves

from .programs import BATCH, IN, OUT, STEPS


def _step_calls(run):
    fn = run.jit.functions
    (fid,) = fn.loc[fn["name"] == "step", "function_id"]
    calls = run.jit.calls
    return calls[calls["function_id"] == fid]


def test_a_sampled_calls_leaves_are_the_arrays_the_program_passed(tiny, oracle):
    calls = _step_calls(tiny)
    assert len(calls) == STEPS
    for text in calls["inputs"]:
        ins = leaves(text)
        assert {(leaf["owner"], tuple(leaf["shape"]), leaf["dtype"]) for leaf in ins} == {
            ("params['w']", (IN, OUT), "float32"), ("params['b']", (OUT,), "float32"),
            ("x", (BATCH, IN), "float32")}
        # what XLA counts as the call's arguments, to the byte
        assert sum(leaf["bytes"] for leaf in ins) == oracle["memory_analysis"]["argument"]
    for text in calls["outputs"]:
        outs = leaves(text)
        assert sorted(leaf["bytes"] for leaf in outs) == [4, OUT * 4, IN * OUT * 4]  # loss, b, w


def test_a_cell_is_what_json_parses_or_else_the_default(tiny):
    text = _step_calls(tiny)["inputs"].iloc[0]
    assert json_cell(text, []) == json.loads(text)
    assert json_cell(text[: len(text) // 2], []) == []  # cut short: not JSON
    assert json_cell(text, {}) == {}  # JSON, but not of the type asked for
    assert json_cell(None, {"a": 1}) == {"a": 1}
    assert leaves('[{"bytes": 1}, 2, "x", null]') == [{"bytes": 1}]  # only the dicts are leaves

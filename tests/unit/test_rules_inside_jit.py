"""analysis/rules/inside_jit.py on the tiny run: the hints about what fills
a step's own peak (XLA's buffers, analysis/inside_jit.py) name the step and
its lines, and say no more than those buffers hold."""

from __future__ import annotations

from jaxmemprof.analysis.inside_jit import largest_buffers
from jaxmemprof.analysis.rules import inside_jit as rule
from jaxmemprof.analysis.rules.base import Context
from jaxmemprof.analysis.timeline import timeline


def test_each_hint_is_about_a_function_and_saves_at_most_its_buffers(tiny_ar):
    found = rule.detect(Context(tiny_ar, timeline(tiny_ar)))
    assert found == rule.inside_jit_findings(tiny_ar)
    buffers = largest_buffers(tiny_ar)
    for f in found:
        assert f.rule in ("remat", "narrow-dtype") and f.severity == "low"
        mine = buffers[(buffers["function"] == f.fact("function")) & (buffers["at_peak"] == 1)]
        assert 0 < f.saving_bytes <= int(mine.loc[mine["kind"] == "temporary", "bytes"].sum())
        assert f.fact("program_peak_bytes") == int(mine["program_peak_bytes"].iloc[0])

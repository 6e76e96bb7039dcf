"""analysis/rules/allocator.py: a CPU run (the tiny one) gets no allocator
setting; an environment that sets both fraction variables is refused on a
GPU as JAX refuses it, and named with the jaxlib that reads which."""

from __future__ import annotations

from jaxmemprof.analysis.advice.allocator import FRACTION, OLD_FRACTION
from jaxmemprof.analysis.rules import allocator as rule
from jaxmemprof.analysis.rules.base import Context
from jaxmemprof.analysis.timeline import timeline


def test_a_cpu_run_gets_no_allocator_finding(tiny_ar, tiny_report):
    ctx = Context(tiny_ar, timeline(tiny_ar), device_peak=tiny_report.headline.true_peak_bytes)
    assert rule.detect(ctx) == []


def test_both_fraction_variables_are_refused_on_a_gpu():
    (f,) = rule.both_fractions_findings({FRACTION: ".5", OLD_FRACTION: ".6"}, "0.10.2", "gpu")
    assert (f.rule, f.case, f.severity) == ("allocator-env", "both-refused", "high")
    assert rule.both_fractions_findings({FRACTION: ".5"}, "0.10.2", "gpu") == []  # one of them: nothing to refuse

"""analysis/findings.py: findings in proportion to the run and ranked, on
the tiny run's own findings (its step is jitted without donation; the run's
true peak is not during its calls, so donating saves nothing at that peak:
the tests that need a saving give the finding its parameters' bytes)."""

from __future__ import annotations

from dataclasses import replace

from jaxmemprof.analysis.rules import ABOUT_A_CALL
from jaxmemprof.analysis.findings import SEVERITIES, Finding, by_effect, in_proportion, ranked

from .programs import PARAMS_BYTES


def _donate(report) -> Finding:
    (f,) = [f for f in report.findings if f.rule == "donate"]
    return f


def _saving(report) -> Finding:
    return replace(_donate(report), saving_bytes=PARAMS_BYTES, severity="medium")


def test_a_donation_that_does_not_lower_the_true_peak_saves_nothing_and_is_info(tiny_report):
    f = _donate(tiny_report)
    assert f.fact("function") == "step" and f.fact("donated_bytes") == PARAMS_BYTES and f.fact("verified")
    assert f.fact("true_peak_before_bytes") == f.fact("true_peak_after_bytes") == tiny_report.headline.true_peak_bytes
    assert f.saving_bytes == 0 and f.severity == "info"


def test_a_saving_under_one_percent_of_the_peak_is_info(tiny_report):
    f = _saving(tiny_report)
    assert f.severity == "medium"
    (small,) = in_proportion([f], 200 * PARAMS_BYTES)  # 0.5 % of that peak
    (large,) = in_proportion([f], 50 * PARAMS_BYTES)  # 2 %
    assert small.severity == "info" and large.severity == "medium"
    assert small.saving_bytes == f.saving_bytes and small.facts == f.facts


def test_advice_on_a_function_whose_calls_do_not_hold_the_peak_is_info(tiny_report):
    f = _saving(tiny_report)
    (same,) = by_effect([f], "step", "during a call of step", ABOUT_A_CALL)
    (other,) = by_effect([f], "column_sums", "during a call of column_sums", ABOUT_A_CALL)
    assert same is f
    assert other.severity == "info" and other.fact("peak_elsewhere") == "during a call of column_sums"
    assert by_effect([f], None, "", ABOUT_A_CALL) == [f]
    # the grouping is the rule's: a rule not about a call is left as it is
    assert by_effect([f], "column_sums", "during a call of column_sums", ()) == [f]


def test_ranked_by_severity_then_saving(tiny_report):
    found = ranked(tiny_report.findings + [Finding("x", "high", saving_bytes=1), Finding("y", "info", saving_bytes=9),
                                           Finding("z", "info", saving_bytes=None)])
    order = [SEVERITIES.index(f.severity) for f in found]
    assert order == sorted(order)
    assert found[0].rule == "x" and [f.rule for f in found if f.severity == "info"][-1] == "z"
    assert ranked(found) == found


def test_within_a_severity_an_unverified_bound_ranks_below_a_measured_saving(tiny_report):
    """A finding whose compile was over the budget says "up to": it never
    ranks above a verified finding of its severity, however large its bound;
    its severity is its rule's (a cap would hide a large bound in a run
    recorded without compiles)."""
    measured = _saving(tiny_report)
    assert measured.fact("verified")
    bound = replace(measured, saving_bytes=10 * PARAMS_BYTES,
                    facts={**measured.facts, "verified": False, "not_verified": "not verified: over the compile budget"})
    assert ranked([bound, measured]) == [measured, bound]
    assert bound.severity == "medium"
    high = replace(bound, severity="high")
    assert ranked([measured, high]) == [high, measured]  # the severity stands
    # a finding about no compile (no ``verified`` fact) ranks by its saving, as before
    other = Finding("x", "medium", saving_bytes=2 * PARAMS_BYTES)
    assert ranked([measured, other]) == [other, measured]

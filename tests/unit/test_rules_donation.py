"""analysis/rules/donation.py on the tiny run: the donate finding the
family's detector makes is the donation rule's candidate (donors.py) with
what XLA's compile of the donated step measured (verified_change): its
saving is the fall of the true peak, its severity follows that fall."""

from __future__ import annotations

from jaxmemprof.analysis.advice.donation import donation_candidates, verified_change
from jaxmemprof.analysis.rules import donation as rule
from jaxmemprof.analysis.rules.base import Context
from jaxmemprof.analysis.timeline import timeline


def test_the_donate_finding_is_the_candidate_with_its_measured_saving(tiny_ar):
    tl = timeline(tiny_ar)
    (c,) = donation_candidates(tiny_ar)
    (f,) = [f for f in rule.detect(Context(tiny_ar, tl)) if f.rule == "donate"]
    measured = verified_change(tiny_ar, c.function_id, [d.argument for d in c.donors])
    assert measured["verified"] and f.fact("arguments") == [d.argument for d in c.donors]
    assert f.saving_bytes == max(measured["saving_bytes"], 0)
    per_device = measured["saving_bytes_per_device"]
    assert f.severity == ("high" if per_device >= 256 * 1024**2 else "medium" if per_device > 0 else "low")

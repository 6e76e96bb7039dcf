"""analysis/rules/capacity.py on the tiny run: the fit finding of the fit
analysis/advice/capacity.py computes, found last by the report (it reads
the findings made before it), and none without --device-memory."""

from __future__ import annotations

from jaxmemprof.analysis.advice.capacity import will_it_fit
from jaxmemprof.analysis.rules import capacity as rule
from jaxmemprof.analysis.rules.base import Context
from jaxmemprof.analysis.timeline import timeline

MiB = 1024**2


def test_the_fit_is_found_only_for_a_device_and_is_the_fits_case(tiny_ar, tiny_report):
    tl = timeline(tiny_ar)
    assert rule.detect(Context(tiny_ar, tl)) == []
    peak = tiny_report.headline.true_peak_bytes
    for device_mib, severity in ((1024, "info"), (70, "high")):
        fit = will_it_fit(tiny_ar, device_mib * MiB, peak)
        (f,) = [f for f in rule.detect(Context(tiny_ar, tl, device_peak=peak, fit=fit)) if f.rule == "fit"]
        assert (f.case, f.severity, f.fact("peak_bytes")) == (fit.case, severity, peak)
        assert f.fact("fixes_that_fit") == []  # no measured fix was found before it here

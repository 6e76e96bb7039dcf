"""analysis/advice/capacity.py: whether the tiny run's peak fits a GPU of a
given size. The peak is the estimated true peak on the busiest device (the
bytes jax.live_arrays() held there before the step's largest call, less its
arguments, plus XLA's memory_analysis() peak of it); the rule is the one
documented there: the peak plus 5 % and 64 MiB within 0.75 of the device,
else within 0.95 with the fraction set, else it cannot fit."""

from __future__ import annotations

import math

import pytest

from jaxmemprof.analysis.advice.capacity import will_it_fit
from jaxmemprof.analysis.rules.capacity import fit_findings

from .programs import call_peak

MiB = 1024**2


def _true_peak(oracle) -> int:
    ma = oracle["memory_analysis"]
    return max(b["cpu:0"] for b in oracle["before_call"]) - ma["argument"] + call_peak(ma)


@pytest.mark.parametrize("device_mib, case", [(1024, "fits"), (85, "fits-with"), (70, "cannot")])
def test_the_fit_of_the_peak_on_a_device(tiny_ar, tiny_report, oracle, device_mib, case):
    peak = _true_peak(oracle)
    assert tiny_report.headline.true_peak_bytes == peak
    device = device_mib * MiB
    fit = will_it_fit(tiny_ar, device, peak)
    need = peak * 1.05 + 64 * MiB
    assert fit.peak_bytes == peak and fit.peak_source == "true_peak_bytes"
    assert need <= fit.needed_bytes < need + 1024
    assert fit.case == case
    assert fit.fits_by_default == (fit.needed_bytes <= 0.75 * device)
    percent = math.ceil(fit.needed_bytes / device * 100)
    assert fit.fraction_needed == percent / 100
    if case == "fits-with":
        assert fit.settings == {fit.fraction_variable: f".{percent}"}
    else:
        assert fit.settings == {}
    (f,) = [f for f in fit_findings(fit) if f.rule == "fit"]
    assert f.case == case and f.fact("peak_bytes") == peak


def test_two_processes_on_one_device_share_it(tiny_ar, oracle):
    fit = will_it_fit(tiny_ar, 1024 * MiB, _true_peak(oracle), processes=2)
    assert fit.case == "shared-fits" and fit.settings == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    with pytest.raises(ValueError):
        will_it_fit(tiny_ar, 0)

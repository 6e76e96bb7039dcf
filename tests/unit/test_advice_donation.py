"""analysis/advice/donation.py: what donating the step's arguments saves,
XLA's figures per function and the estimated true peak, held to the
program's sizes, XLA's memory_analysis() of its step and the bytes
jax.live_arrays() held on each device just before each call."""

from __future__ import annotations

from jaxmemprof.analysis.advice.donation import call_peaks, donation_candidates, donation_findings, jit_memory, \
    true_peak
from jaxmemprof.analysis.timeline import timeline

from .programs import PARAMS_BYTES, STEPS, call_peak, total


def test_the_parameters_the_step_replaces_are_worth_donating_and_save_their_bytes(tiny_ar, line):
    (c,) = donation_candidates(tiny_ar)  # x is made anew before each call, not by it: not a candidate
    assert (c.function, c.argument, c.position, c.leaves) == ("step", "params", 0, 2)
    assert c.saving_bytes == PARAMS_BYTES and c.calls_sampled == STEPS
    (f,) = donation_findings(tiny_ar)
    assert f.rule == "donate" and f.saving_bytes == PARAMS_BYTES and f.site == f"tiny.py:{line('jit')}"


def test_each_functions_figures_are_xlas(tiny_ar, oracle, line):
    rows = jit_memory(tiny_ar).set_index("function")
    step, ma = rows.loc["step"], oracle["memory_analysis"]
    assert (step["argument_bytes"], step["output_bytes"], step["alias_bytes"], step["temp_bytes"],
            step["generated_code_bytes"]) == (ma["argument"], ma["output"], ma["alias"], ma["temp"], ma["code"])
    assert step["call_peak_bytes"] == call_peak(ma)
    assert (step["calls"], step["compiles"], step["donated"]) == (STEPS, 1, "")
    assert step["jitted_at"] == f"tiny.py:{line('jit')}"


def test_each_calls_peak_is_the_bytes_live_before_it_less_its_arguments_plus_xlas_peak(tiny, tiny_ar, oracle):
    ma = oracle["memory_analysis"]
    devices = timeline(tiny_ar).devices
    steps = [p for p in call_peaks(tiny, devices) if p.function == "step"]
    assert [p.call_index for p in steps] == list(range(1, STEPS + 1))
    for p, before in zip(steps, oracle["before_call"]):
        assert p.live_before == before  # what the recorder counted just before the call
        assert p.device_bytes == before["cpu:0"] - ma["argument"] + call_peak(ma)
        assert p.bytes == total(before) - ma["argument"] + call_peak(ma)
    assert true_peak(tiny, devices) == max(steps, key=lambda p: p.device_bytes)

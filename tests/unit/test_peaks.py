"""analysis/peaks.py: each sampled call's peak and the run's true peak,
held to the bytes jax.live_arrays() held on each device just before each
call and XLA's memory_analysis() of the step; what the peak becomes with a
change made (other figures for a signature, bytes off a snapshot)."""

from __future__ import annotations

from jaxmemprof.analysis.peaks import FIGURES, busiest_snapshot, call_peaks, true_peak, true_peaks
from jaxmemprof.analysis.timeline import timeline

from .programs import STEPS, call_peak, total


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


def test_the_true_peak_with_a_change_made_is_the_same_model_with_other_figures(tiny, tiny_ar, oracle):
    tl = timeline(tiny_ar)
    device, summed, inside = true_peaks(tiny, tl)
    assert device == max(busiest_snapshot(tl), inside.device_bytes) and summed >= device
    step = next(p for p in call_peaks(tiny, tl.devices) if p.function == "step")
    # The step's own figures in place of the recorded ones change nothing.
    same = {(step.function_id, step.signature): dict(step.figures)}
    assert true_peaks(tiny, tl, same)[:2] == (device, summed)
    # 1 MiB more temporaries in the step: each of its calls' peaks rises by that, and no other.
    more = {(step.function_id, step.signature): {**step.figures, "temp_bytes": step.figures["temp_bytes"] + 2**20}}
    before = {(p.function, p.call_index): p.device_bytes for p in call_peaks(tiny, tl.devices)}
    after = {(p.function, p.call_index): p.device_bytes for p in call_peaks(tiny, tl.devices, more)}
    assert {k: after[k] - before[k] for k in before} == {k: 2**20 if k[0] == "step" else 0 for k in before}
    assert set(step.figures) == set(FIGURES)
    # Bytes taken off the snapshot that holds the snapshots' peak lower it by at most that.
    peak = tl.devices.loc[tl.devices["live_bytes"].idxmax()]
    less = {int(peak["snapshot"]): {str(peak["device"]): 1024}}
    assert busiest_snapshot(tl) - 1024 <= busiest_snapshot(tl, less) <= busiest_snapshot(tl)


def test_inputs_on_fewer_devices_than_the_call_are_not_its_argument_buffers():
    """truepeak.placement: the devices a call ran on (the most any input or
    output array is on) and the share of its inputs' bytes already there;
    an array on one device passed to a call on two is copied (it stays
    alive beside the copy), and damaged cells change nothing."""
    import json

    from jaxmemprof.truepeak import placement

    def leaf(nbytes, devices):
        return {"bytes": nbytes, "devices": devices}

    whole, sharded = leaf(3000, 1), leaf(1000, 2)
    assert placement(json.dumps([whole]), json.dumps([sharded])) == (2, 0.0)
    assert placement(json.dumps([sharded, whole]), json.dumps([sharded])) == (2, 0.25)
    assert placement(json.dumps([sharded]), json.dumps([sharded])) == (2, 1.0)
    assert placement(json.dumps([whole]), json.dumps([whole])) == (1, 1.0)
    assert placement(json.dumps([whole]), None) == (1, 1.0)  # outputs not recorded: the inputs say
    for damaged in ("[", "{}", "[1, null]", json.dumps([{"bytes": True, "devices": "x"}]), None):
        assert placement(damaged, damaged) == (1, 1.0)

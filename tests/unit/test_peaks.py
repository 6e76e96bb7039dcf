"""analysis/peaks.py: each sampled call's peak and the run's true peak,
held to the bytes jax.live_arrays() held on each device just before each
call and XLA's memory_analysis() of the step; what the peak becomes with a
change made (other figures for a signature, bytes off a snapshot); the
model computed once per attributed run, however many analyses read it."""

from __future__ import annotations

import jaxmemprof.analysis.peaks as peaks_module
from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.options import Options
from jaxmemprof.analysis.peaks import AT_LIVE_PEAK, FIGURES, busiest_snapshot, call_peaks, run_peaks
from jaxmemprof.analysis.report import build_report
from jaxmemprof.analysis.timeline import timeline

from .programs import STEPS, call_peak, peak_label, total


def test_each_calls_peak_is_the_bytes_live_before_it_less_its_arguments_plus_xlas_peak(tiny, tiny_ar, oracle):
    ma = oracle["memory_analysis"]
    devices = timeline(tiny_ar).devices
    steps = [p for p in call_peaks(tiny, devices) if p.function == "step"]
    assert [p.call_index for p in steps] == list(range(1, STEPS + 1))
    for p, before in zip(steps, oracle["before_call"]):
        assert p.live_before == before  # what the recorder counted just before the call
        assert p.device_bytes == before["cpu:0"] - ma["argument"] + call_peak(ma)
        assert p.bytes == total(before) - ma["argument"] + call_peak(ma)
    peaks = tiny_ar.peaks
    assert peaks.call == max(steps, key=lambda p: p.device_bytes)
    assert peaks.largest_sampled == peaks.call  # every call of the step was sampled


def test_the_run_peaks_live_peak_and_true_peak(tiny_ar, oracle):
    tl = timeline(tiny_ar)
    p = tiny_ar.peaks
    live = oracle["live"].values()
    assert p.live.snapshot == tl.peak_snapshot and p.live.live_bytes == max(map(total, live))
    assert dict(zip(p.live_devices["device"], p.live_devices["live_bytes"])) == oracle["live"][peak_label(oracle)]
    assert p.busiest_live_bytes == max(b for s in live for b in s.values())
    assert p.device_bytes == max(p.busiest_live_bytes, p.call.device_bytes)
    assert p.total_bytes == max(p.live.live_bytes, p.call.bytes) >= p.device_bytes
    assert p.where == (p.call.where if p.call.device_bytes > p.busiest_live_bytes else AT_LIVE_PEAK)
    assert p.where == "during a call of step"


def test_the_true_peak_with_a_change_made_is_the_same_model_with_other_figures(tiny, tiny_ar, oracle):
    tl = timeline(tiny_ar)
    p = tiny_ar.peaks
    device, summed = p.device_bytes, p.total_bytes
    step = next(c for c in p.calls if c.function == "step")
    # The step's own figures in place of the recorded ones change nothing.
    same = {(step.function_id, step.signature): dict(step.figures)}
    changed = p.with_change(same)
    assert (changed.device_bytes, changed.total_bytes) == (device, summed)
    # 1 MiB more temporaries in the step: each of its calls' peaks rises by that, and no other.
    more = {(step.function_id, step.signature): {**step.figures, "temp_bytes": step.figures["temp_bytes"] + 2**20}}
    before = {(c.function, c.call_index): c.device_bytes for c in p.calls}
    after = {(c.function, c.call_index): c.device_bytes for c in call_peaks(tiny, tl.devices, more)}
    assert {k: after[k] - before[k] for k in before} == {k: 2**20 if k[0] == "step" else 0 for k in before}
    assert p.with_change(more).device_bytes == device + 2**20  # the peak is the step's
    assert set(step.figures) == set(FIGURES)
    # Bytes taken off the snapshot that holds the snapshots' peak lower it by at most that.
    peak = tl.devices.loc[tl.devices["live_bytes"].idxmax()]
    less = {int(peak["snapshot"]): {str(peak["device"]): 1024}}
    assert busiest_snapshot(tl) - 1024 <= busiest_snapshot(tl, less) <= busiest_snapshot(tl)
    assert p.with_change(less=less).device_bytes == device  # the step's peak is above the snapshots'


def test_the_unchanged_peaks_are_computed_once_per_report(tiny, monkeypatch):
    """However many analyses read the true peak (the report's header, roles,
    the counters, each donation and sharding candidate, each remat wrap),
    the unchanged model is computed once; only a change made computes
    call peaks again."""
    made, unchanged = [], []
    real_run_peaks, real_call_peaks = peaks_module.run_peaks, peaks_module.call_peaks

    def counting_run_peaks(run, tl):
        made.append(run)
        return real_run_peaks(run, tl)

    def counting_call_peaks(run, devices=None, replace=None, gone=None, since=float("-inf")):
        if not replace and not gone:
            unchanged.append(run)
        return real_call_peaks(run, devices, replace, gone, since)

    monkeypatch.setattr(peaks_module, "run_peaks", counting_run_peaks)
    monkeypatch.setattr(peaks_module, "call_peaks", counting_call_peaks)
    ar = attribute(tiny, Options())
    report = build_report(ar)
    assert len(made) == 1 and len(unchanged) == 1
    assert any(f.facts.get("verified") for f in report.findings)  # a what-if was measured, against that one model
    assert ar.peaks is ar.peaks and len(made) == 1
    assert run_peaks(tiny, timeline(ar)).device_bytes == report.answer.true_peak_bytes


def test_the_call_peaks_parts_are_xlas_figures(tiny_ar, oracle):
    """truepeak's parts of the call peak (its temporaries, the outputs it
    writes to new buffers) and a device's peak during a call (the bytes
    live outside it plus the call peak), held to memory_analysis() and the
    bytes live before each call as the program counted them."""
    from jaxmemprof.facts.truepeak import FIGURES as ORDER, live_outside, peak_on_device, temporaries, written

    ma = oracle["memory_analysis"]
    step = next(c for c in tiny_ar.peaks.calls if c.function == "step")
    assert temporaries(step.figures) == ma["temp"] + ma["code"]
    assert written(step.figures) == ma["output"] - ma["alias"]
    before = oracle["before_call"][step.call_index - 1]
    outside = live_outside(before, step.figures["argument_bytes"])
    assert outside == {d: b - ma["argument"] for d, b in before.items()}
    figures = [step.figures[c] for c in ORDER]
    assert peak_on_device(outside["cpu:0"], figures) == step.device_bytes == before["cpu:0"] - ma["argument"] + call_peak(ma)
    # an argument on none of the call's devices is not taken off
    assert live_outside(before, ma["argument"], devices=[]) == dict(sorted(before.items()))

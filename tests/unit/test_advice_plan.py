"""analysis/advice/plan.py: the plan of a run recorded with --plan-scales 2
(the step compiled again at twice its batch), held to XLA's
memory_analysis() of the same step at both batches (the program's own
compiles) and to the bytes jax.live_arrays() held before its largest call."""

from __future__ import annotations

from jaxmemprof.analysis.advice.plan import build_plan, fits_by_default

from .programs import BATCH, call_peak


def test_the_steps_peak_at_each_batch_is_xlas(tiny_ar, oracle):
    plan = build_plan(tiny_ar)
    points = plan.points
    step = points[(points["function"] == "step") & (points["variant"] == "recorded")].set_index("batch")
    assert sorted(step.index) == [BATCH, 2 * BATCH]
    assert step.at[BATCH, "call_peak_bytes"] == call_peak(oracle["memory_analysis"])
    assert step.at[2 * BATCH, "call_peak_bytes"] == call_peak(oracle["memory_analysis_2x"])
    # outside the call: what was live before its largest call, less its arguments
    outside = oracle["before_call"][-1]["cpu:0"] - oracle["memory_analysis"]["argument"]
    assert (step["live_outside_bytes"] == outside).all()
    assert (step["peak_bytes"] == step["live_outside_bytes"] + step["call_peak_bytes"]).all()
    (planned,) = [f for f in plan.functions if f.function == "step"]
    assert planned.recorded_batch == BATCH and planned.batch_inputs == ["x"] and planned.batch_flow == "per-step"


def test_with_a_device_size_each_point_says_whether_it_fits(tiny_ar):
    points = build_plan(tiny_ar).points
    # a device whose default pool (0.75 of it) holds the smallest point's peak with its headroom
    # (5 % and 64 MiB), not the largest's
    low, high = (int(p) * 1.05 + 64 * 1024**2 for p in (points["peak_bytes"].min(), points["peak_bytes"].max()))
    device = int((low + high) / 2 / 0.75)
    fitted = build_plan(tiny_ar, device_bytes=device).points
    assert list(fitted["fits"]) == [fits_by_default(int(p), device) for p in fitted["peak_bytes"]]
    assert set(fitted["fits"]) == {True, False}
    assert build_plan(tiny_ar).device_bytes is None

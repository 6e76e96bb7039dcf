"""analysis/inside_jit.py: what fills a jitted function's own peak, by the
user's lines, held to XLA's memory_analysis() of the same step (the
program's own compile of it, at the recorded shapes)."""

from __future__ import annotations

from jaxmemprof.analysis.inside_jit import largest_buffers, peak_by_line, program_curves

from .programs import BATCH, OUT, PARAMS_BYTES, X_BYTES, call_peak


def _step(df):
    return df[df["function"] == "step"]


def test_the_arguments_at_the_steps_peak_are_xlas_arguments(tiny_ar, oracle):
    rows = _step(peak_by_line(tiny_ar))
    args = rows[rows["kind"] == "argument"]
    assert dict(zip(args["site"], args["bytes"])) == {"argument params": PARAMS_BYTES, "argument x": X_BYTES}
    assert int(args["bytes"].sum()) == oracle["memory_analysis"]["argument"]
    # the lines at the peak add up to the program's peak
    assert int(rows["bytes"].sum()) == int(rows["program_peak_bytes"].iloc[0])


def test_the_steps_temporaries_are_xlas_and_were_made_by_the_users_line(tiny_ar, oracle, site):
    b = _step(largest_buffers(tiny_ar))
    temps = b[b["kind"] == "temporary"]
    assert int(temps["bytes"].sum()) == oracle["memory_analysis"]["temp"] == BATCH * OUT * 4  # one activation
    assert set(temps["site"]) == {site("h", "loss")}


def test_the_curve_adds_up_at_each_position_and_stays_within_xlas_allocations(tiny_ar, oracle):
    c = _step(program_curves(tiny_ar))
    for position, g in c.groupby("position"):
        assert int(g["bytes"].sum()) == int(g["position_bytes"].iloc[0]), position
    assert int(c["position_bytes"].max()) <= call_peak(oracle["memory_analysis"])


def test_the_programs_peak_is_the_top_of_its_curve(tiny_ar):
    c = _step(program_curves(tiny_ar))
    assert int(c["program_peak_bytes"].iloc[0]) == int(c["position_bytes"].max())

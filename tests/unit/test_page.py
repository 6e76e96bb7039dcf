"""analysis/page.py: what the HTML page draws beyond the report, held to the
report's own figures on the tiny run: the lines held at the live peak are
the report's peak sites with their bytes, the positions point at the live
peak and at the last snapshot taken while the program ran, and the roles'
cells and the plan's fit line are there."""

from __future__ import annotations

from jaxmemprof.analysis.advice.plan import largest_fitting_peak
from jaxmemprof.analysis.page import profiles_model, report_model


def test_the_report_pages_model_is_the_reports_peak_and_its_final_snapshot(tiny_report, tiny_ar):
    model = report_model(tiny_report, tiny_ar)
    snaps = model.snapshots
    assert int(snaps["snapshot"].iloc[model.peak_j]) == tiny_report.timeline.peak_snapshot
    running = [j for j, t in enumerate(snaps["trigger"]) if t != "exit"]
    assert model.final_j == running[-1]
    peak = tiny_report.peak_sites.rows.set_index("site")["bytes"]
    assert model.held and all(int(peak[h["site"]]) == h["bytes"] for h in model.held)
    assert [h["bytes"] for h in model.held] == sorted((h["bytes"] for h in model.held), reverse=True)
    assert all(g["delta_bytes"] == g["new_bytes"] - g["base_bytes"] != 0 for g in model.grew)
    assert model.roles is not None  # the tiny step's roles, as cells
    plan = tiny_report.plan
    assert model.fit_peak_bytes == (largest_fitting_peak(plan.device_bytes) if plan.device_bytes else None)


def test_a_diff_pages_model_is_what_grew_from_the_first_profile_to_the_second(tiny, tiny_ar):
    first, last = (tiny.profile(int(s)) for s in tiny.snapshots["snapshot"].iloc[[0, -2]])
    model = profiles_model([first, last], tiny_ar.attribution)
    assert model.grew and all(g["delta_bytes"] == g["new_bytes"] - g["base_bytes"] != 0 for g in model.grew)
    assert max(g["new_bytes"] for g in model.grew) <= last.total_bytes
    held = profiles_model([last], tiny_ar.attribution).held
    assert held and abs(sum(h["share"] for h in held) - 1.0) < 1e-9 or len(held) == 5

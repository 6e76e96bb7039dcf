"""analysis/page.py: the documents every format prints, and what the HTML
page draws beyond the report, held to the report's own figures on the tiny
run (and a job of two copies of it): the lines held at the live peak are
the report's peak sites with their bytes, the positions point at the live
peak and at the last snapshot taken while the program ran, and the roles'
cells and the plan's fit line are there."""

from __future__ import annotations

from jaxmemprof.analysis.advice.plan import largest_fitting_peak
from jaxmemprof.analysis.job import analyse_processes, build_job_report
from jaxmemprof.analysis.options import Options
from jaxmemprof.analysis.page import (LIFETIME_ARRAYS, LIFETIME_PER_SITE, SITES_PER_PROCESS, TIMELINE_ROWS,
                                      job_document, lifetime_arrays, page_processes, profiles_model, report_model,
                                      run_document, timeline_rows)
from jaxmemprof.store.job import load_job


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


def test_the_run_document_holds_the_reports_rows_shaped_as_printed(tiny_report, tiny_ar):
    """role_groups, jit_peak_functions and plan_peaks: the report's own rows,
    grouped and ordered once, for the terminal and the page alike."""
    doc = run_document(tiny_report, tiny_ar, top=3, explain=True)
    assert (doc.report, doc.top, doc.explain, doc.page) == (tiny_report, 3, True, None)
    by_role = tiny_report.roles.by_role
    # each device in one group; a group's devices hold the same roles, the groups' differ; rows largest first
    devices = [d for group, _ in doc.role_groups for d in group]
    assert sorted(devices) == sorted(set(by_role["device"])) and len(devices) == len(set(devices))

    def held(device):
        rows = by_role[by_role["device"] == device]
        return sorted(zip(rows["role"], rows["bytes"], rows["largest_owner"]))

    kinds = [{tuple(held(d)) for d in group} for group, _ in doc.role_groups]
    assert all(len(k) == 1 for k in kinds) and len(set.union(*kinds)) == len(kinds)
    for group, rows in doc.role_groups:
        assert list(rows["bytes"]) == sorted(rows["bytes"], reverse=True)
        assert sorted(zip(rows["role"], rows["bytes"], rows["largest_owner"])) == held(group[0])
    peak = tiny_report.jit_peak
    largest = peak[peak["largest_signature"].astype(bool)]
    assert [set(r["function_id"]) for r in doc.jit_peak] == [{f} for f in dict.fromkeys(largest["function_id"])]
    assert sum(len(r) for r in doc.jit_peak) == len(largest)
    plan = tiny_report.plan
    for f in plan.functions:
        busiest = doc.plan_peaks[f.function_id]
        mine = plan.points[(plan.points["function_id"] == f.function_id) & plan.points["peak_bytes"].notna()]
        assert busiest.batches == sorted(set(mine["batch"])) and len(busiest.batches) >= 2  # recorded, and twice it
        for v in busiest.variants:
            for b, p in busiest.points(v):  # the busiest device's peak: the largest of the devices' at that batch
                at = mine[(mine["variant"] == v) & (mine["batch"] == b)]
                assert p == at["peak_bytes"].max() and len(at) == len(busiest.devices)
    with_page = run_document(tiny_report, tiny_ar, page=True)
    assert with_page.page.snapshots_total == len(tiny_ar.run.snapshots) and with_page.page.process == 0


def test_the_page_draws_the_largest_arrays_a_few_per_line(tiny_report):
    drawn = lifetime_arrays(tiny_report.arrays)
    assert list(drawn["bytes"]) == sorted(drawn["bytes"], reverse=True)
    assert drawn["site"].value_counts().max() <= LIFETIME_PER_SITE and len(drawn) <= LIFETIME_ARRAYS
    counts = drawn["site"].value_counts()
    left = tiny_report.arrays.drop(drawn.index)
    could = left[left["site"].map(counts).fillna(0) < LIFETIME_PER_SITE]  # not drawn, though its line had room
    assert could.empty if len(drawn) < LIFETIME_ARRAYS else could["bytes"].max() <= drawn["bytes"].min()


def test_a_jobs_document_groups_alike_processes_and_draws_the_largest(job):
    """Two copies of the tiny run: one line for both processes' peak sites and
    roles; the page draws both, the one holding most at the job's peak first;
    the CSV document holds each process's report."""
    j = load_job(job)
    rep = build_job_report(j, analyse_processes(j, Options(), workers=1))
    doc = job_document(j, rep, Options(), page=True, reports=True)
    assert list(doc.by_peak["process"]) == [0, 1]  # the same peak: by process
    (sites, procs), = doc.alike_sites
    assert procs == [0, 1] and 0 < len(sites) <= SITES_PER_PROCESS
    own = rep.peak_sites[rep.peak_sites["process"] == 0].sort_values("bytes", ascending=False, kind="stable")
    assert list(sites) == list(zip(own["site"], own["bytes"]))[:len(sites)]
    (roles, procs), = doc.alike_roles
    assert procs == [0, 1] and [b for _, b in roles] == sorted((b for _, b in roles), reverse=True)
    assert doc.drawn == page_processes(rep) and sorted(doc.drawn) == [0, 1]
    assert [p.process for p in doc.processes] == [0, 1]
    assert all(p.document.page is not None and p.title.startswith(f"process {p.process}") for p in doc.processes)
    assert [n for n, _ in doc.reports] == [0, 1]
    assert list(doc.t) == list(rep.timeline["t"])  # a short timeline is drawn whole


def test_the_terminals_timeline_rows_keep_the_first_the_peak_and_the_last(tiny_report):
    totals = tiny_report.timeline.totals
    rows = timeline_rows(totals, tiny_report.timeline.peak_snapshot)
    assert len(totals) > TIMELINE_ROWS  # tiny has more snapshots than are shown
    peak = totals.index[totals["snapshot"] == tiny_report.timeline.peak_snapshot][0]
    assert {totals.index[0], peak, totals.index[-1]} <= set(rows) and rows == sorted(rows)
    assert TIMELINE_ROWS - 1 <= len(rows) <= TIMELINE_ROWS
    assert timeline_rows(totals.head(3), None) == list(totals.index[:3])  # a short run: every row


def test_the_snapshots_the_program_took_itself_are_among_the_terminals_rows():
    # 40 snapshots keyed to steps and two the program asked for
    # (jaxmemprof.snapshot): those two are shown, within the rows' number.
    import pandas as pd

    trig = ["step"] * 40
    trig[17] = trig[29] = "api"
    totals = pd.DataFrame({"snapshot": range(1, 41), "trigger": trig})
    rows = timeline_rows(totals, peak=5, n=6)
    assert {0, 4, 17, 29, 39} <= set(rows) and len(rows) == 6 and rows == sorted(rows)
    rows = timeline_rows(totals, peak=5)  # room for one beside the first, the peak and the last
    assert {0, 4, 17, 39} == set(rows) and len(rows) == TIMELINE_ROWS
    assert timeline_rows(totals.assign(trigger="step"), peak=5) == timeline_rows(totals.assign(trigger="x"), peak=5)

"""analysis/report.py: the report's headline figures, held to what the
program counted (jax.live_arrays() at its snapshots and before each call of
its step, XLA's memory_analysis() of the step)."""

from __future__ import annotations

from jaxmemprof.analysis.report import probe_warnings

from .programs import STEPS, call_peak, peak_label, total


def test_the_summary_is_the_programs_own_figures(tiny, tiny_report, oracle, labelled):
    s = tiny_report.headline
    label = peak_label(oracle)
    assert s["peak_bytes"] == total(oracle["live"][label]) and s["peak_snapshot"] == labelled[label]
    assert (s["devices"], s["markers"], s["snapshots"]) == (2, STEPS, len(tiny.snapshots))
    assert s["finished"] and s["exit_status"] == 0 and s["per_array_data"]
    # The true peak: the busiest device's bytes before the step's largest call, less its arguments,
    # plus XLA's peak for it; and summed over the devices.
    ma = oracle["memory_analysis"]
    before = max(oracle["before_call"], key=lambda b: b["cpu:0"])
    assert s["true_peak_bytes"] == before["cpu:0"] - ma["argument"] + call_peak(ma)
    assert s["true_peak_total_bytes"] == max(s["peak_bytes"], total(before) - ma["argument"] + call_peak(ma))
    assert s["true_peak_where"] == "during a call of step"


def test_the_peak_by_device_is_what_each_device_held(tiny_report, oracle):
    d = tiny_report.peak_devices
    assert dict(zip(d["device"], d["live_bytes"])) == oracle["live"][peak_label(oracle)]


def test_the_sections_are_all_there(tiny_report, tiny):
    assert len(tiny_report.timeline.totals) == len(tiny.snapshots)
    assert len(tiny_report.arrays) == len(tiny.arrays)
    assert set(tiny_report.jit_memory["function"]) == {"step", "column_sums"}
    assert tiny_report.plan is not None and tiny_report.roles.where == "during a call of step"
    assert probe_warnings(tiny) == [] and tiny_report.warnings == []


def _paths_into_the_rules(ar) -> set[tuple[str, ...]]:
    """Every path of files by which build_report reaches the attribution
    rules (analysis/sites.py), consecutive frames of one file as one stop."""
    import os
    import sys

    import jaxmemprof.analysis.report as report

    package = os.path.dirname(os.path.dirname(report.__file__))
    paths = set()

    def watch(frame, event, arg):
        if event != "call" or not frame.f_code.co_filename.endswith(os.path.join("analysis", "sites.py")):
            return
        files, f = [], frame
        while f is not None and not (f.f_code.co_name == "build_report" and f.f_code.co_filename == report.__file__):
            if f.f_code.co_filename.startswith(package):
                files.append(os.path.relpath(f.f_code.co_filename, package))
            f = f.f_back
        if f is None:
            return
        path = ["analysis/report.py"]
        for name in reversed(files):
            if path[-1] != name:
                path.append(name)
        paths.add(tuple(path))

    sys.setprofile(watch)
    try:
        report.build_report(ar)
    finally:
        sys.setprofile(None)
    return paths


def test_the_reports_attribution_is_one_stage(tiny, mlp_leak):
    """Followed from build_report, the attribution rules are reached through
    the stage alone: no path goes back into a file it left, and the files on
    all paths together are few (every analysis reads tables attributed once)."""
    from jaxmemprof.analysis.attributed import attribute

    for run in (tiny, mlp_leak):
        paths = _paths_into_the_rules(attribute(run))  # a fresh stage: nothing attributed before the report
        assert paths, "the trace saw no attribution"
        assert all(len(set(p)) == len(p) for p in paths), paths
        assert all(p[1] == "analysis/attributed.py" for p in paths), paths
        assert len({f for p in paths for f in p}) <= 8, paths

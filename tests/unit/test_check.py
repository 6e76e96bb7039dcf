"""analysis/check.py: the gates of ``check`` and the pytest plugin's figures
for one test, on the tiny run, against what the program counted
(jax.live_arrays() at its snapshots and before each call, XLA's
memory_analysis() of its step)."""

from __future__ import annotations

from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.check import Limits, asked, check_report, measure_test, measure_totals, unchecked_report, \
    unchecked_run
from jaxmemprof.analysis.report import build_report
from jaxmemprof.store.reader import load_run

from .programs import call_peak, peak_label, total


def _peak(oracle) -> int:
    return total(oracle["live"][peak_label(oracle)])


def _inside(oracle, *, on) -> int:
    """The step's largest call: the bytes live before it (on cpu:0, or on
    all devices), less its arguments, plus XLA's peak for it."""
    ma = oracle["memory_analysis"]
    before = max(oracle["before_call"], key=lambda b: b["cpu:0"])
    live = before["cpu:0"] if on == "device" else total(before)
    return live - ma["argument"] + call_peak(ma)


def test_max_peak_holds_at_the_peak_and_fails_a_byte_below_it(tiny_report, oracle, site):
    peak = _peak(oracle)
    (held,) = check_report(tiny_report, Limits(max_peak=peak))
    (failed,) = check_report(tiny_report, Limits(max_peak=peak - 1))
    assert held.held and held.value == peak
    assert not failed.held and failed.value == peak
    assert failed.site == site("table", "main")  # the line holding most of it


def test_max_true_peak_reads_the_busiest_devices_call_peak(tiny_report, oracle):
    expected = _inside(oracle, on="device")
    (o,) = check_report(tiny_report, Limits(max_true_peak=expected))
    assert o.held and o.value == expected and o.facts == {"where": "during a call of step", "devices": 2}
    (o,) = check_report(tiny_report, Limits(max_true_peak=expected - 1))
    assert not o.held


def test_fail_on_names_the_findings_of_that_rule(tiny_report, line):
    (o,) = check_report(tiny_report, Limits(fail_on=("donate",)))
    assert not o.held and o.value == 1
    ((rule, severity, where),) = o.details
    assert rule == "donate" and where == f"tiny.py:{line('jit')}"
    (o,) = check_report(tiny_report, Limits(fail_on=("leak",)))
    assert o.held and o.value == 0


def test_max_increase_against_itself_is_no_increase(tiny_report, oracle):
    outcomes = check_report(tiny_report, Limits(max_increase_pct=0.0), baseline=tiny_report)
    assert [o.facts["what"] for o in outcomes] == ["peak", "true peak"]
    assert all(o.held and o.value == 0.0 for o in outcomes)
    assert outcomes[0].facts["bytes"] == _peak(oracle)
    assert asked(Limits(max_peak=1, max_increase_pct=5.0)) == ("max-peak", "max-increase")


def test_a_run_without_jitted_calls_cannot_check_the_true_peak(recorded):
    run = load_run(recorded.history)  # op by op: nothing jitted
    report = build_report(attribute(run))
    assert report.headline.true_peak_total_bytes is None
    u = unchecked_report(report, Limits(max_true_peak=1 << 30))
    assert u.checks == ("max-true-peak",) and u.reason == "no-jit"
    assert unchecked_run(run, Limits(max_peak=1 << 30)) is None  # its snapshots are all there


def test_one_tests_figures_count_from_its_start_snapshot(tiny_ar, oracle, labelled):
    m = measure_test(tiny_ar)
    base = total(oracle["live"]["start"])  # the snapshot labelled "start"
    assert m.snapshot_peak_bytes == _peak(oracle) - base
    assert m.peak_snapshot == labelled[peak_label(oracle)]
    assert m.jit_peak_bytes == _inside(oracle, on="all") - base
    assert m.peak_bytes == max(m.snapshot_peak_bytes, m.jit_peak_bytes)
    assert m.jit_where == "during a call of step"
    assert m.leak_bytes == total(oracle["live"]["end"]) - base  # all freed by the exit
    # counted from the "start" snapshot on (a timed one may come before it:
    # with --interval 1000 none does, the first waiting an interval)
    snaps = tiny_ar.run.snapshots
    assert m.snapshots == int((snaps["snapshot"] >= labelled["start"]).sum())


def test_the_figures_without_pandas_are_the_same(tiny, tiny_ar):
    """measure_totals (the plugin's in-memory runs) on the journal's own rows."""
    snaps = tiny.snapshots[["snapshot", "t_wall", "trigger", "label", "live_bytes"]].to_dict("records")
    compiles = tiny.jit.compiles.to_dict("records")
    calls = tiny.jit.calls.to_dict("records")
    functions = dict(zip(tiny.jit.functions["function_id"], tiny.jit.functions["name"]))
    a, b = measure_test(tiny_ar), measure_totals(snaps, compiles, calls, functions)
    for field in ("peak_bytes", "snapshot_peak_bytes", "peak_snapshot", "jit_peak_bytes", "jit_where",
                  "leak_bytes", "snapshots"):
        assert getattr(a, field) == getattr(b, field), field


def test_max_growth_holds_where_no_line_leaks(tiny_report):
    """The program keeps 4 KiB a step: under what the leak analysis calls a leak (64 KiB)."""
    (o,) = check_report(tiny_report, Limits(max_growth=0))
    assert o.held and o.value == 0 and o.details == () and o.unit == "bytes/step"

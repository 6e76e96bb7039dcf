"""analysis/answer.py: the answer every output leads with, held to the
report's own parts on the tiny run (the true peak and its call from the
model of peaks, what it is from the roles, the lines inside the call from
XLA's buffers at its peak), and the top fix's choice on findings made here."""

from __future__ import annotations

from jaxmemprof.analysis.answer import INSIDE_LINES, top_fix
from jaxmemprof.analysis.findings import Finding


def test_the_answer_is_the_reports_true_peak_its_roles_and_the_lines_inside_its_call(tiny_report):
    rep = tiny_report
    a, s = rep.answer, rep.headline
    assert a.true_peak_bytes == s["true_peak_bytes"]
    assert a.true_peak_total_bytes == s["true_peak_total_bytes"]
    assert a.live_peak_bytes == s["peak_bytes"] and a.live_peak_snapshot == s["peak_snapshot"]
    assert a.inside_call and a.true_peak_where == s["true_peak_where"]
    function = a.true_peak_where.removeprefix("during a call of ")
    jm = rep.jit_memory.set_index("function")
    assert a.true_peak_jitted_at == jm.loc[function, "jitted_at"]
    # what it is: the roles of the call on its busiest device, every one of 1 % or more, the rest summed
    roles = rep.roles.by_role
    total = int(roles.groupby("device")["bytes"].sum().max())
    assert sum(b for _, b in a.composition) + a.composition_rest == total
    assert all(b >= 0.01 * total for _, b in a.composition)
    assert [b for _, b in a.composition] == sorted((b for _, b in a.composition), reverse=True)
    # the lines inside the call: XLA's buffers at its own peak, by line, the largest first, no arguments
    fid = int(jm.loc[function, "function_id"])
    rows = rep.jit_peak[(rep.jit_peak["function_id"] == fid) & rep.jit_peak["largest_signature"].astype(bool)]
    rows = rows[~rows["site"].str.startswith("argument ")].sort_values("bytes", ascending=False, kind="stable")
    assert list(a.inside) == [(int(b), str(k), str(x)) for b, k, x in
                              zip(rows["bytes"], rows["kind"], rows["site"])][:INSIDE_LINES]
    assert a.inside  # the step's temporaries are at its lines


def _finding(rule, saving, verified=None):
    facts = {} if verified is None else {"verified": verified}
    return Finding(rule=rule, severity="medium", site=f"{rule}.py:1", saving_bytes=saving, facts=facts)


def test_the_top_fix_is_the_largest_measured_saving_else_the_first_that_saves():
    leak, hint = _finding("leak", 9000), _finding("remat", 5000, verified=False)
    small, large = _finding("donate", 100, verified=True), _finding("replicated", 300, verified=True)
    assert top_fix([leak, hint, small, large]) == (large, 4)  # measured first, the largest of those
    assert top_fix([leak, hint]) == (hint, 2)  # a leak's figure is a projection: not a fall of the peak
    assert top_fix([leak, _finding("donate", None)]) == (None, None)

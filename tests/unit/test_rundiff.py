"""analysis/rundiff.py: two runs compared, against each run's own report
(its headline's true peaks, its roles, its findings)."""

from __future__ import annotations

from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.options import Options
from jaxmemprof.analysis.report import build_report
from jaxmemprof.analysis.rundiff import ALL_DEVICES, FINDING, KEPT, LINE, ROLE, TRUE_PEAK, run_diff, top


def test_a_run_against_itself_changes_nothing(tiny_ar, tiny_report):
    d = run_diff((tiny_ar, tiny_report), (tiny_ar, tiny_report), ("a", "b"))
    assert d.true_peak_delta == 0 and d.base_true_peak_bytes == tiny_report.headline.true_peak_bytes
    peaks = d.section(TRUE_PEAK).records()
    assert peaks and all(r["delta_bytes"] == 0 for r in peaks)
    assert [r["device"] for r in peaks][-1] == ALL_DEVICES  # two devices: the sum too
    assert peaks[-1]["base_bytes"] == tiny_report.headline.true_peak_total_bytes
    assert len(d.section(ROLE)) == 0 and len(d.section(LINE)) == 0
    found = d.section(FINDING).records()
    assert len(found) == len({(f.rule, f.case, f.site) for f in tiny_report.findings})
    assert all(r["change"] == KEPT and r["delta_bytes"] in (0, None) for r in found)


def test_two_runs_are_each_their_reports(tiny_ar, tiny_report, mlp_leak):
    ar = attribute(mlp_leak, Options())
    rep = build_report(ar)
    d = run_diff((tiny_ar, tiny_report), (ar, rep), ("tiny", "mlp"))
    assert (d.base_true_peak_bytes, d.new_true_peak_bytes) == (tiny_report.headline.true_peak_bytes,
                                                                rep.headline.true_peak_bytes)
    by_role = {(str(r), str(o)): int(b) for r, o, b in zip(tiny_report.roles.by_role["device"],
                                                            tiny_report.roles.by_role["role"],
                                                            tiny_report.roles.by_role["bytes"])}
    mine = {(str(r), str(o)): int(b) for r, o, b in zip(rep.roles.by_role["device"], rep.roles.by_role["role"],
                                                        rep.roles.by_role["bytes"])}
    for r in d.section(ROLE).records():
        key = (r["device"], r["what"])
        assert (r["base_bytes"], r["new_bytes"]) == (by_role.get(key, 0), mine.get(key, 0))
    assert {r["change"] for r in d.section(FINDING).records()} <= {"resolved", "new"}  # two programs
    short = top(d, 1)
    assert len(short.section(ROLE)) == min(1, len(d.section(ROLE)))
    assert short.omitted.get(ROLE, 0) == len(d.section(ROLE)) - len(short.section(ROLE))


def test_two_programs_share_no_script_line(tiny_ar, tiny_report, mlp_leak):
    """tiny.py and train_mlp.py are two programs (under half their lines alike): a line of one is never a
    line of the other, whatever their numbers."""
    from conftest import REPO

    from jaxmemprof.analysis.rundiff import site_keys

    # the bundled run was recorded in another checkout: its script read from this one
    sa, sb = site_keys(tiny_ar.run.manifest, dict(mlp_leak.manifest, cwd=str(REPO)))
    assert sa.key("tiny.py:72") != sb.key("sample_runs/train_mlp.py:72")

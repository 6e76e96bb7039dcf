"""analysis/job.py: a job's report from its processes' own. The job is two
copies of the tiny run (process-0 and process-1), so each process holds what
the program counted and the job holds twice that at every moment."""

from __future__ import annotations

import shutil

from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.job import (SUMMARY_OPTIONS, analyse_processes, build_job_report, default_options,
                                     process_result, read_process_result, write_process_result)
from jaxmemprof.analysis.options import Options
from jaxmemprof.analysis.report import build_report
from jaxmemprof.store.job import load_job
from jaxmemprof.store.reader import load_run

from .programs import PARAMS_BYTES, peak_label, total


def test_each_process_and_the_job_hold_what_the_program_counted(job, oracle):
    peak = total(oracle["live"][peak_label(oracle)])
    j = load_job(job)
    results = analyse_processes(j, Options(), workers=1)
    assert sorted(results) == [0, 1]
    for r in results.values():
        assert r.error is None and r.headline["peak_bytes"] == peak
    rep = build_job_report(j, results)
    assert rep.process_count == 2 and rep.alignment == "wall clocks"
    assert rep.job_peak_bytes == 2 * peak  # the same bytes at the same times
    assert list(rep.processes["peak_bytes"]) == [peak, peak] and rep.unfinished == []
    (donate,) = [f for f in rep.findings if f.finding.rule == "donate"]
    # The same saving in each process (tiny's donation does not lower its true peak: 0), summed.
    assert donate.processes == (0, 1) and donate.finding.fact("donated_bytes") == PARAMS_BYTES
    assert donate.saving_bytes_total == 2 * donate.finding.saving_bytes
    assert not [f for f in rep.findings if f.finding.rule in ("imbalance", "unfinished")]


def test_a_process_summary_reads_back_as_the_analysis_it_saves(recorded, oracle, tmp_path):
    path = tmp_path / "process-0"
    shutil.copytree(recorded.tiny, path)
    assert read_process_result(0, path, default_options(Options())) is None  # none written yet
    assert write_process_result(path)
    saved = read_process_result(0, path, default_options(Options()))
    fresh = process_result(0, build_report(attribute(load_run(path), SUMMARY_OPTIONS)))
    assert saved.peak_sites.equals(fresh.peak_sites)
    assert [(f.rule, f.site, f.saving_bytes) for f in saved.findings] == \
        [(f.rule, f.site, f.saving_bytes) for f in fresh.findings]
    assert saved.headline["peak_bytes"] == total(oracle["live"][peak_label(oracle)])
    assert saved.roles == fresh.roles
    assert read_process_result(0, path, {"top_sites": 3, "steps": 1000}) is None  # made with other options

"""analysis/headline.py: the report's headline figures, typed, held to what
the program measured (the live bytes at each snapshot, the bytes before
each call, XLA's memory_analysis()); each true peak has one name and one
meaning, the same in the Answer and in the JSON's summary object."""

from __future__ import annotations

import json
from dataclasses import fields

from jaxmemprof.analysis.headline import Headline, headline
from jaxmemprof.analysis.timeline import timeline
from jaxmemprof.render.tables import report_document

from .programs import STEPS, call_peak, peak_label, total


def test_the_headline_is_the_programs_own_figures(tiny, tiny_ar, oracle, labelled):
    tl = timeline(tiny_ar)
    h = headline(tiny_ar, tl, tiny_ar.peaks, None, 0)
    label = peak_label(oracle)
    assert h.peak_bytes == total(oracle["live"][label]) and h.peak_snapshot == labelled[label]
    assert (h.devices, h.markers, h.snapshots) == (2, STEPS, len(tiny.snapshots))
    ma = oracle["memory_analysis"]
    before = max(oracle["before_call"], key=lambda b: b["cpu:0"])
    # true_peak_bytes: the busiest device; true_peak_total_bytes: all devices, at the same call
    assert h.true_peak_bytes == before["cpu:0"] - ma["argument"] + call_peak(ma)
    assert h.true_peak_total_bytes == max(h.peak_bytes, total(before) - ma["argument"] + call_peak(ma))
    assert h.true_peak_total_bytes > h.true_peak_bytes  # two devices
    assert h.true_peak_where == "during a call of step"


def test_one_name_one_meaning_in_the_answer_and_the_json(tiny_report):
    h, a = tiny_report.headline, tiny_report.answer
    assert isinstance(h, Headline)
    assert (a.true_peak_bytes, a.true_peak_total_bytes, a.true_peak_where) == \
        (h.true_peak_bytes, h.true_peak_total_bytes, h.true_peak_where)
    assert (a.live_peak_bytes, a.live_peak_snapshot, a.live_peak_t) == (h.peak_bytes, h.peak_snapshot, h.peak_t)
    summary = json.loads(json.dumps(report_document(tiny_report)["summary"], default=str))
    assert list(summary) == [f.name for f in fields(Headline)]  # the JSON's keys are its fields, in order
    assert summary["true_peak_bytes"] == h.true_peak_bytes and summary["true_peak_total_bytes"] == h.true_peak_total_bytes
    assert not any(k.startswith("estimated_") for k in summary)
    assert dict(h) == h.as_dict() and h["devices"] == h.devices == 2

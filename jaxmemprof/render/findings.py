"""Findings in words: the one place that turns a finding's facts into text.

Each rule's words are declared beside its facts, in jaxmemprof/analysis/rules/ (one
module per family of rules): for each case a function that gives five
pieces (``Words``):

- ``brief`` and ``brief_fix``: one sentence and the change to make, short
  enough for the terminal (``report``, ``run``'s summary);
- ``message``, ``fix`` and ``evidence``: the full sentences, with the
  trade-offs and every figure behind the finding (``report --explain``,
  JSON, CSV).

A rule that jaxmemprof/analysis/rules/ does not declare (one added by a caller's
``extra_rules``) may put its own words in its facts under those names.
"""

from __future__ import annotations

import dataclasses
import json

from jaxmemprof.analysis.findings import Finding
from jaxmemprof.analysis.rules import RULES, Words
from jaxmemprof.facts.devices import display
from jaxmemprof.units import format_bytes

COLUMNS = ["rule", "case", "severity", "site", "saving_bytes", "saves", "message", "fix", "evidence", "brief",
           "brief_fix", "facts"]


def words(f: Finding) -> Words:
    rule = RULES.get(f.rule)
    template = rule.words_for(f.case) if rule is not None else None
    if template is None:
        message = str(f.fact("message", f.rule))
        fix = str(f.fact("fix", ""))
        return Words(str(f.fact("brief", message)), str(f.fact("brief_fix", fix)), message, fix,
                     str(f.fact("evidence", "")))
    w = template(f, f.facts)
    elsewhere = f.fact("peak_elsewhere")
    if elsewhere:  # analysis/findings.py by_effect: the run's peak is in another function's call
        w = dataclasses.replace(w, brief=f"{w.brief} (not at the run's peak)",
                                message=f"{w.message} This does not lower the run's peak, which is {elsewhere}.")
    # a device named in the words as every output names it (tpu:0, not TPU_0(process=0,(0,0,0,0)))
    return dataclasses.replace(w, **{k: display(getattr(w, k)) for k in ("brief", "brief_fix", "message", "fix",
                                                                        "evidence")})


def saves(f: Finding, w: Words) -> str:
    """What acting on it saves, in words: the rule's own ('saves 4.02 MiB (compiled)', 'saves up to 12.09 MiB
    (not verified)'), else the bytes; '' where nothing is saved."""
    if w.saves:
        return w.saves
    return f"saves {format_bytes(f.saving_bytes)}" if f.saving_bytes else ""


def records(findings: list[Finding]) -> list[dict]:
    """One dict per finding (in the order given: the report's, ranked), its facts (as data) beside its words;
    ``saving_bytes`` on the busiest device, as its words say it (``Finding.device_saving``)."""
    out = []
    for f in findings:
        w = words(f)
        out.append({"rule": f.rule, "case": f.case, "severity": f.severity, "site": f.site,
                    "saving_bytes": f.device_saving, "saves": saves(f, w), "message": w.message, "fix": w.fix,
                    "evidence": w.evidence, "brief": w.brief, "brief_fix": w.brief_fix, "facts": dict(f.facts)})
    return out


def table(findings: list[Finding]):
    """The findings as rows (findings.csv): the facts as one JSON cell."""
    import pandas as pd

    rows = records(findings)
    for r in rows:
        r["facts"] = json.dumps(r["facts"], sort_keys=True, default=str)
    df = pd.DataFrame(rows, columns=COLUMNS)
    df["saving_bytes"] = df["saving_bytes"].astype("Int64")
    return df

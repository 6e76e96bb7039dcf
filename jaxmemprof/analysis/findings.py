"""Findings: what the analyses conclude, as records a person can act on.

Every rule (leaks, recompiles, and later donation and allocator advice) adds
to one list; ``report`` ranks it, ``export`` writes it as findings.csv.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import pandas as pd

SEVERITIES = ("high", "medium", "low", "info")
COLUMNS = ["rule", "severity", "site", "message", "saving_bytes", "fix", "evidence"]


@dataclass(frozen=True)
class Finding:
    rule: str  # e.g. "leak", "recompile"
    severity: str  # high, medium, low, info
    site: str  # path:line (function), or "" when it is about the whole run
    message: str  # one sentence: what was found
    evidence: str  # the figures behind it
    saving_bytes: int | None = None  # what acting on it saves, where known
    fix: str = ""  # what to change


# Rules whose saving is not what they are about (a recompilation costs time;
# its saving is the code of the executables, where known).
_NOT_IN_PROPORTION = ("recompile",)


def in_proportion(findings: list[Finding], peak_bytes: int) -> list[Finding]:
    """Severities in proportion to the run: a finding that saves under 1 % of
    the peak is ``info`` (on a run whose peak is GiB-scale, that is every
    saving under 10 MiB)."""
    return [replace(f, severity="info")
            if f.saving_bytes is not None and f.rule not in _NOT_IN_PROPORTION and f.saving_bytes < 0.01 * peak_bytes
            else f for f in findings]


def findings_frame(findings: list[Finding]) -> pd.DataFrame:
    """Findings ranked: severity, then bytes saved (largest first)."""
    if not findings:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in COLUMNS})
    df = pd.DataFrame([asdict(f) for f in findings])[COLUMNS]
    order = df["severity"].map({s: i for i, s in enumerate(SEVERITIES)}).fillna(len(SEVERITIES))
    saving = df["saving_bytes"].fillna(-1)
    df = df.assign(_o=order, _s=-saving).sort_values(["_o", "_s", "rule", "site"], kind="stable")
    df = df.drop(columns=["_o", "_s"]).reset_index(drop=True)
    df["saving_bytes"] = df["saving_bytes"].astype("Int64")
    return df

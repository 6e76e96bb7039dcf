"""Findings: what the analyses conclude, as records a person can act on.

Every rule (leaks, recompiles, and later donation and allocator advice) adds
to one list; ``report`` ranks it, ``export`` writes it as findings.csv.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

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

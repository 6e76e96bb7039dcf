"""Shared by the benchmark scripts (run as `python benchmarks/NAME.py`)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def git_state() -> str:
    """The commit measured, and whether jaxmemprof/ had uncommitted changes."""
    try:
        rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "jaxmemprof"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return rev + (" + uncommitted changes in jaxmemprof/" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _num(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    return v


@dataclass
class Results:
    """Rows of a results CSV (benchmark, case, value, unit, reference, ratio,
    target, met), and the summary lines printed along the way."""

    rows: list = field(default_factory=list)
    lines: list = field(default_factory=list)

    def add(self, benchmark, case, value, unit, reference=None, ratio=None, target=None, met=None):
        self.rows.append({
            "benchmark": benchmark, "case": case, "value": _num(value), "unit": unit,
            "reference": _num(reference), "ratio": _num(ratio), "target": target or "",
            "met": met if isinstance(met, str) else "" if met is None else ("yes" if met else "no"),
        })

    def say(self, line=""):
        self.lines.append(line)
        print(line, flush=True)

    def write(self, path) -> None:
        """The rows to the CSV ``path`` (its folder made), and a line saying so."""
        import csv
        from pathlib import Path

        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=("benchmark", "case", "value", "unit", "reference", "ratio", "target",
                                              "met"))
            w.writeheader()
            w.writerows(self.rows)
        self.say(f"wrote {path}")

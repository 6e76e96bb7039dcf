"""Shared by the benchmark scripts (run as `python benchmarks/NAME.py`)."""

from __future__ import annotations

import subprocess
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

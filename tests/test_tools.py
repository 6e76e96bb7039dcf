"""The linter and the type checker over the code, as configured in pyproject.toml: any finding of
``ruff check`` (jaxmemprof, tests, benchmarks) or of ``mypy`` (jaxmemprof) fails, with their output.
Both come with the test extra. About 1 s for ruff; mypy about 30 s of CPU cold, 2 s with its cache,
which lives in the temporary directory, one per checkout."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from conftest import REPO


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "NO_COLOR": "1"})


def test_ruff_finds_nothing():
    p = _run("ruff", "check", "--no-cache", "jaxmemprof", "tests", "benchmarks")
    assert p.returncode == 0, f"ruff check:\n{p.stdout}{p.stderr}"


def test_mypy_finds_nothing():
    key = hashlib.sha256(str(REPO).encode()).hexdigest()[:12]
    cache = Path(tempfile.gettempdir()) / f"jaxmemprof-mypy-{key}"
    p = _run("mypy", "--cache-dir", str(cache))
    assert p.returncode == 0, f"mypy:\n{p.stdout}{p.stderr}"

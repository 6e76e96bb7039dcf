"""The tests mirror the analyses: every module of jaxmemprof/analysis/ (and
analysis/advice/) has its own tests/unit/test_<name>.py (advice's:
test_advice_<name>.py) that imports it and calls it on a recorded run.
Read from the source with ``ast``: nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

ANALYSIS = REPO / "jaxmemprof" / "analysis"
UNIT = Path(__file__).resolve().parent


def _modules() -> dict[str, str]:
    """test file name -> the analysis module it must import."""
    out = {}
    for path in sorted(ANALYSIS.rglob("*.py")):
        if path.name == "__init__.py":
            continue
        parts = path.relative_to(ANALYSIS).with_suffix("").parts
        out["test_" + "_".join(parts) + ".py"] = ".".join(("jaxmemprof", "analysis", *parts))
    return out


def _imported(path: Path) -> set[str]:
    """The modules a file imports (``from P import M`` counts as P.M too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def test_the_analyses_are_found():
    modules = _modules()
    assert "test_report.py" in modules and "test_advice_donation.py" in modules
    assert modules["test_advice_plan.py"] == "jaxmemprof.analysis.advice.plan"
    assert len(modules) >= 20


def test_every_analysis_module_has_a_unit_test_module_that_imports_it():
    missing, unused = [], []
    for name, module in _modules().items():
        test = UNIT / name
        if not test.is_file():
            missing.append(f"tests/unit/{name} (for {module})")
        elif module not in _imported(test):
            unused.append(f"tests/unit/{name} does not import {module}")
    assert not missing, "analysis modules without unit tests: " + ", ".join(missing)
    assert not unused, "; ".join(unused)


def test_no_unit_test_module_is_left_over_from_a_module_that_is_gone():
    """A test_<name>.py here is a mirror of an analysis module (or this file)."""
    expected = set(_modules()) | {Path(__file__).name}
    stray = sorted(p.name for p in UNIT.glob("test_*.py") if p.name not in expected)
    assert not stray, f"tests/unit/ has test modules for no analysis module: {stray}"

"""Any valid pprof reads, not only JAX's: a real Go heap profile, checked
against `go tool pprof`."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import REPO, line_of, run_cli


@pytest.fixture(scope="module")
def go_heap(tmp_path_factory):
    if shutil.which("go") is None:
        if os.environ.get("CI"):
            pytest.fail("go is missing: .ci/run must install golang-go")
        pytest.skip("go not installed")
    d = tmp_path_factory.mktemp("goheap")
    src = d / "go_heap.go"
    shutil.copy(REPO / "tests" / "scripts" / "go_heap.go", src)
    env = dict(os.environ, GOCACHE=str(d / "gocache"), GOPATH=str(d / "gopath"), GOFLAGS="-mod=mod")
    subprocess.run(["go", "run", "go_heap.go", "heap.prof"], cwd=d, env=env, check=True, timeout=300)
    return d, d / "heap.prof", src


def _pprof_total(prof, index):
    out = subprocess.run(
        ["go", "tool", "pprof", "-top", "-unit=B", f"-sample_index={index}", str(prof)],
        capture_output=True, text=True, check=True,
    ).stdout
    return int(re.search(r"of (\d+)B total", out).group(1))


@pytest.mark.parametrize("index", [None, "inuse_space", "alloc_space", "inuse_objects"])
def test_go_heap_profile_totals_match_pprof(go_heap, index):
    d, prof, src = go_heap
    args = ["show", prof.name, "--json"] + (["--sample-index", index] if index else [])
    doc = json.loads(run_cli(*args, cwd=d, check=0).stdout)
    # pprof's default for a heap profile is inuse_space; so is ours.
    expected_type = (index or "inuse_space")
    assert doc["value_type"].startswith(expected_type + "/")
    assert doc["totals"]["bytes"] == _pprof_total(prof, expected_type)


def test_go_heap_sites_are_the_allocating_lines(go_heap):
    d, prof, src = go_heap
    rows = {r["site"]: r for r in json.loads(run_cli("show", prof.name, "--json", cwd=d, check=0).stdout)["rows"]}
    a = rows[f"go_heap.go:{line_of(src, 'func allocA()')} (main.allocA)"]
    b = rows[f"go_heap.go:{line_of(src, 'func allocB()')} (main.allocB)"]
    assert (a["bytes"], a["count"]) == (3 << 20, 3)
    # Go rounds a 64 KiB slice up to its size class; at least the bytes asked for.
    assert b["bytes"] >= 5 * (64 << 10) and b["count"] >= 5

"""`show` and `diff` on real JAX profiles whose arrays, sizes and lines are known."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, line_of, run_cli, run_script

from jaxmemprof.analysis.groups import keyed_samples
from jaxmemprof.analysis.sites import Attribution
from jaxmemprof.pprof.reader import load_profile

SCRIPT = REPO / "tests" / "scripts" / "known_sites.py"
MiB, KiB = 1024 * 1024, 1024
STEP_OUT = MiB + 4 * KiB  # one call of step(): w * 2.0 and b + 1.0


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    """(directory, base.prof, new.prof, line numbers) recorded by real JAX."""
    d = tmp_path_factory.mktemp("known")
    script = d / "known_sites.py"
    shutil.copy(SCRIPT, script)
    run_script(script, "base.prof", "new.prof", cwd=d)
    lines = {m: line_of(script, f"# SITE-{m}") for m in ("W", "B", "STEP", "CACHE")}
    return d, d / "base.prof", d / "new.prof", lines


def _json(*args, cwd):
    return json.loads(run_cli(*args, "--json", cwd=cwd, check=0).stdout)


def _site_bytes(doc):
    return {row["site"]: row["bytes"] for row in doc["rows"]}


def test_show_attributes_bytes_to_the_user_lines(profiles):
    d, base, _, ln = profiles
    doc = _json("show", base.name, cwd=d)
    assert _site_bytes(doc) == {
        f"known_sites.py:{ln['W']} (init_params)": 1 * MiB,
        f"known_sites.py:{ln['B']} (init_params)": 4 * KiB,
        f"known_sites.py:{ln['STEP']} (<module>)": 3 * STEP_OUT,
    }
    assert doc["totals"]["bytes"] == 1 * MiB + 4 * KiB + 3 * STEP_OUT
    first = doc["rows"][0]
    assert (first["file"], first["line"], first["function"]) == ("known_sites.py", ln["STEP"], "<module>")
    assert first["share"] == pytest.approx(3 * STEP_OUT / doc["totals"]["bytes"])
    assert [r["device"] for r in doc["devices"] if r["bytes"]] == ["cpu:0"]
    kinds = {r["kind"]: r["bytes"] for r in doc["kinds"]}
    assert kinds["buffer"] == doc["totals"]["bytes"]


def test_buffer_counts_per_site(profiles):
    d, base, _, ln = profiles
    prof = load_profile(base)
    samples = keyed_samples(prof, "site", Attribution(roots=(str(d),)))
    buffers = samples[samples["kind"] == "buffer"].groupby("line")["count"].sum().to_dict()
    assert buffers == {ln["W"]: 1, ln["B"]: 1, ln["STEP"]: 6}


def test_compile_path_and_fast_path_are_one_site(profiles):
    d, base, _, ln = profiles
    prof = load_profile(base)
    # The profile itself has stacks of different depths for the step line...
    depth_of_step = set()
    for sid, stack in enumerate(prof.stacks):
        frames = prof.frames.loc[list(stack)]
        if ((frames["line"] == ln["STEP"]) & frames["file"].str.endswith("known_sites.py")).any():
            if (prof.samples.loc[prof.samples["stack_id"] == sid, "kind"] == "buffer").any():
                depth_of_step.add(len(stack))
    assert len(depth_of_step) >= 2, depth_of_step
    # ...but show reports it once, by site and by user stack.
    for by in ("site", "stack"):
        doc = _json("show", base.name, "--by", by, cwd=d)
        keys = [r[by] for r in doc["rows"] if f":{ln['STEP']} " in r[by]]
        assert keys == [f"known_sites.py:{ln['STEP']} (<module>)"], keys


def test_show_by_stack_function_file(profiles):
    d, base, _, ln = profiles
    stacks = {r["stack"]: r["bytes"] for r in _json("show", base.name, "--by", "stack", cwd=d)["rows"]}
    init_call = line_of(d / "known_sites.py", "w, b = init_params()")
    assert stacks[f"known_sites.py:{ln['W']} (init_params) <- known_sites.py:{init_call} (<module>)"] == MiB
    functions = {r["function"]: r["bytes"] for r in _json("show", base.name, "--by", "function", cwd=d)["rows"]}
    assert functions == {"init_params": MiB + 4 * KiB, "<module>": 3 * STEP_OUT}
    files = _json("show", base.name, "--by", "file", cwd=d)["rows"]
    assert [(r["file"], r["bytes"]) for r in files] == [("known_sites.py", MiB + 4 * KiB + 3 * STEP_OUT)]


def test_diff_names_the_lines_that_grew_and_shrank(profiles):
    d, base, new, ln = profiles
    doc = _json("diff", base.name, new.name, cwd=d)
    rows = {r["site"]: r for r in doc["rows"]}
    step = rows[f"known_sites.py:{ln['STEP']} (<module>)"]
    assert (step["base_bytes"], step["new_bytes"], step["delta_bytes"]) == (3 * STEP_OUT, 2 * STEP_OUT, -STEP_OUT)
    cache = rows[f"known_sites.py:{ln['CACHE']} (<module>)"]
    assert (cache["base_bytes"], cache["new_bytes"], cache["delta_bytes"]) == (0, 5 * 2 * KiB, 5 * 2 * KiB)
    # Unchanged lines (W, B) are left out, and counted.
    assert f"known_sites.py:{ln['W']} (init_params)" not in rows
    assert doc["unchanged_rows"] == 2 and len(rows) == 2
    # Sorted by |delta|, and the deltas add up exactly.
    assert [r["site"] for r in doc["rows"][:2]] == [step["site"], cache["site"]]
    t = doc["totals"]
    assert t["delta_bytes"] == sum(r["delta_bytes"] for r in doc["rows"]) == t["new_bytes"] - t["base_bytes"]
    assert t["delta_bytes"] == 10 * KiB - STEP_OUT
    assert t["base_bytes"] == MiB + 4 * KiB + 3 * STEP_OUT  # totals include unchanged groups


def test_terminal_output(profiles):
    d, base, new, ln = profiles
    out = run_cli("show", base.name, cwd=d, check=0).stdout
    assert re.search(rf"3\.01 MiB\s+7\s+75\.0%\s+75\.0%\s+known_sites\.py:{ln['STEP']} \(<module>\)", out), out
    assert "total: 4.02 MiB" in out
    out = run_cli("diff", base.name, new.name, cwd=d, check=0).stdout
    assert re.search(rf"-1\.00 MiB\s+3\.01 MiB\s+2\.01 MiB\s+-2\s+known_sites\.py:{ln['STEP']}", out), out
    assert re.search(rf"\+10\.00 KiB\s+0 B\s+10\.00 KiB\s+\+7\s+known_sites\.py:{ln['CACHE']}", out), out
    assert "\x1b[" not in out  # no colour off a terminal


def test_top_limits_rows_and_reports_the_rest(profiles):
    d, base, _, _ = profiles
    doc = _json("show", base.name, "--top", "1", cwd=d)
    assert len(doc["rows"]) == 1
    assert doc["omitted"] == {"rows": 2, "bytes": MiB + 4 * KiB, "count": 5}
    out = run_cli("show", base.name, "--top", "1", cwd=d, check=0).stdout
    assert "... 2 more sites hold 1.00 MiB" in out


def test_csv_show_and_diff_columns(profiles):
    d, base, new, ln = profiles
    rows = list(csv.DictReader(io.StringIO(run_cli("show", base.name, "--csv", "-", cwd=d, check=0).stdout)))
    assert list(rows[0]) == ["site", "file", "line", "function", "bytes", "count", "share"]
    assert rows[0]["bytes"] == str(3 * STEP_OUT) and rows[0]["line"] == str(ln["STEP"])
    out = run_cli("diff", base.name, new.name, "--csv", "-", "--by", "function", cwd=d, check=0).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    assert list(rows[0]) == ["function", "base_bytes", "new_bytes", "delta_bytes", "base_count", "new_count", "delta_count"]
    # A negative delta stays a plain number (not neutralised as a formula).
    assert {r["function"]: int(r["delta_bytes"]) for r in rows}["<module>"] == 10 * KiB - STEP_OUT


def test_csv_to_file_says_where_and_never_overwrites(profiles, tmp_path):
    d, base, _, _ = profiles
    target = tmp_path / "sites.csv"
    proc = run_cli("show", base, "--csv", target, check=0)
    assert proc.stdout == "" and str(target) in proc.stderr
    assert target.read_text().startswith("site,file,line,function,bytes,count,share\n")
    proc = run_cli("show", base, "--csv", target, check=2)
    assert "already exists" in proc.stderr and "--force" in proc.stderr
    run_cli("show", base, "--csv", target, "--force", check=0)


def test_library_and_user_patterns(profiles):
    d, base, _, ln = profiles
    # Marking the script as library code leaves no user frame: the site falls
    # back to the innermost frame, inside JAX (except for fast-path calls,
    # whose only frame is the script's).
    doc = _json("show", base.name, "--lib", "known_sites.py", cwd=d)
    assert "init_params" not in {r["function"] for r in doc["rows"]}
    assert any(r["file"].startswith("jax/_src/") and r["bytes"] for r in doc["rows"])
    assert doc["totals"]["bytes"] == MiB + 4 * KiB + 3 * STEP_OUT
    # Asking to see into JAX: the arrays made through Python-level JAX code
    # (init_params, the compiling first call) move into jax/_src files; the
    # fast-path calls, made in C++, stay on the script's line.
    doc = _json("show", base.name, "--user", "*/jax/_src/*", cwd=d)
    in_jax = sum(r["bytes"] for r in doc["rows"] if r["file"].startswith("jax/_src/"))
    assert in_jax == MiB + 4 * KiB + STEP_OUT
    assert _site_bytes(doc)[f"known_sites.py:{ln['STEP']} (<module>)"] == 2 * STEP_OUT
    doc = _json("show", base.name, "--all-frames", "--by", "function", cwd=d)
    assert "__call__" in {r["function"] for r in doc["rows"]}


def _pprof_top(cmd, *args):
    out = subprocess.run(
        [*cmd, "-top", "-unit=B", "-nodecount=1000000", "-nodefraction=0", "-edgefraction=0", *map(str, args)],
        capture_output=True, text=True, check=True,
    ).stdout
    total = int(re.search(r"Showing nodes accounting for (-?\d+)B?, .* of (-?\d+)B? total", out).group(1))
    flat = {}
    for line in out.splitlines():
        m = re.match(r"\s*(-?\d+)B?\s+-?[\d.]+%\s+-?[\d.]+%\s+-?\d+B?\s+-?[\d.]+%\s+(.+)$", line)
        if m:
            flat[m.group(2)] = int(m.group(1))
    return total, flat


def _pprof_name(function: str) -> str:
    # pprof drops <...> (C++ template arguments) from names: <module> -> <unknown>.
    return re.sub(r"<[^>]*>", "", function) or "<unknown>"


@pytest.mark.parametrize("index", ["space", "allocations"])
def test_show_agrees_with_go_pprof(profiles, pprof_cmd, index):
    d, base, new, _ = profiles
    for prof in (base, new):
        total, flat = _pprof_top(pprof_cmd, f"-sample_index={index}", prof)
        doc = _json("show", prof, "--all-frames", "--by", "function", "--sample-index", index, cwd=d)
        assert doc["totals"]["bytes"] == total
        ours = {}
        for r in doc["rows"]:
            ours[_pprof_name(r["function"])] = ours.get(_pprof_name(r["function"]), 0) + r["bytes"]
        assert {k: v for k, v in ours.items() if v} == {k: v for k, v in flat.items() if v}


def test_diff_agrees_with_go_pprof(profiles, pprof_cmd):
    d, base, new, _ = profiles
    total, flat = _pprof_top(pprof_cmd, "-sample_index=space", f"-diff_base={base}", new)
    doc = _json("diff", base, new, "--all-frames", "--by", "function", cwd=d)
    assert doc["totals"]["delta_bytes"] == total
    ours = {}
    for r in doc["rows"]:
        ours[_pprof_name(r["function"])] = ours.get(_pprof_name(r["function"]), 0) + r["delta_bytes"]
    assert {k: v for k, v in ours.items() if v} == {k: v for k, v in flat.items() if v}
    # Site grouping moves bytes between groups but never changes the total.
    assert _json("diff", base, new, cwd=d)["totals"]["delta_bytes"] == total


def test_show_does_not_import_jax(profiles):
    d, base, _, _ = profiles
    code = (
        "import sys\n"
        "from jaxmemprof.cli import main\n"
        "try:\n"
        f"    main(['show', {str(base)!r}, '--json'])\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "try:\n"
        f"    main(['diff', {str(base)!r}, {str(base)!r}])\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "bad = sorted(m for m in sys.modules if m == 'jax' or m.startswith(('jax.', 'jaxlib')))\n"
        "sys.stderr.write('JAXMODULES=' + ','.join(bad))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=d)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().endswith("JAXMODULES="), proc.stderr


def test_version_and_help():
    assert run_cli("--version", check=0).stdout.strip().endswith("0.1.0")
    for cmd in ("show", "diff"):
        out = run_cli(cmd, "--help", check=0).stdout
        assert "Examples:" in out and f"jaxmemprof {cmd} " in out


def test_an_empty_profile(tmp_path):
    """A valid profile with no samples (JAX with no live arrays) shows zero."""
    from jaxmemprof.pprof import profile_pb2

    msg = profile_pb2.Profile(string_table=[b"", b"space", b"bytes"])
    msg.sample_type.add(type=1, unit=2)
    (tmp_path / "empty.prof").write_bytes(msg.SerializeToString())
    out = run_cli("show", "empty.prof", cwd=tmp_path, check=0).stdout
    assert "total: 0 B in 0 allocations" in out
    doc = json.loads(run_cli("diff", "empty.prof", "empty.prof", "--json", cwd=tmp_path, check=0).stdout)
    assert doc["rows"] == [] and doc["totals"]["delta_bytes"] == 0

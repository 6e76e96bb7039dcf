"""``diff BEFORE AFTER`` of two run directories says what the fix did:
the README's MLP (it forgets to donate) against a copy of it under another
name whose jit of train_step donates (0, 1). Held to the program's own
figures: each run's true peak (report --json), the donation finding's
compiled saving in BEFORE, the roles of each run's call."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest

from conftest import in_parallel, run_cli

from jaxmemprof.analysis.rundiff import Sites, line_map, script_of

REPO = Path(__file__).resolve().parents[1]
MLP = REPO / "sample_runs" / "train_mlp.py"
JIT = "donate_argnums=(0, 1) if args.donate else ()"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("rundiff")
    text = MLP.read_text()
    assert JIT in text
    (d / "train_mlp.py").write_text(text)
    (d / "train_mlp_fixed.py").write_text(text.replace(JIT, "donate_argnums=(0, 1)"))
    in_parallel(*(lambda name=name, out=out: run_cli("run", "-q", "-o", d / out, d / name, "--leak", "--steps", "4",
                                                     cwd=d, check=0)
                  for name, out in (("train_mlp.py", "before"), ("train_mlp_fixed.py", "after"))))
    reports = in_parallel(*(lambda out=out: json.loads(run_cli("report", d / out, "--json", check=0).stdout)
                            for out in ("before", "after")))
    return d, reports


def _diff(d, *args):
    return run_cli("diff", "before", "after", *args, cwd=d, check=0).stdout


def test_the_true_peak_fell_by_the_donations_compiled_saving(runs):
    d, (before, after) = runs
    doc = json.loads(_diff(d, "--json"))
    s = doc["summary"]
    b, a = before["summary"]["true_peak_bytes"], after["summary"]["true_peak_bytes"]
    assert (s["base_true_peak_bytes"], s["new_true_peak_bytes"]) == (b, a)
    assert s["delta_true_peak_bytes"] == a - b < 0
    donate = [f for f in before["findings"] if f["rule"] == "donate"]
    assert donate and donate[0]["saving_bytes"] == b - a  # the fall XLA's compile said, to the byte
    text = _diff(d)
    assert re.search(r"true peak 38\.\d\d MiB -> 34\.\d\d MiB \(-4\.02 MiB\)", text), text
    rows = doc["rows"]
    peak = [r for r in rows if r["section"] == "true peak"]
    assert [(r["device"], r["delta_bytes"]) for r in peak] == [("cpu:0", a - b)]
    # by role: the changes add up to the fall, each role's bytes those of its run's report
    roles = [r for r in rows if r["section"] == "role"]
    assert sum(r["delta_bytes"] for r in roles) == a - b
    for r in roles:
        for side, rep in (("base_bytes", before), ("new_bytes", after)):
            mine = {x["role"]: x["bytes"] for x in rep["roles"]["by_role"]} if "roles" in rep else None
            if mine is not None:
                assert mine.get(r["what"], 0) == r[side]
    assert {r["what"]: r["delta_bytes"] < 0 for r in roles}.get("new state") is True
    # the donation finding is resolved; its fix's site named as BEFORE's script names it
    found = {(r["kind"], r["change"]) for r in rows if r["section"] == "finding"}
    assert ("donate", "resolved") in found
    assert "What the memory is, by role" in text and "new state" in text


def test_a_copy_under_another_name_is_one_site_per_line(runs):
    """Every line of the script inside the call is one row, named by AFTER's
    script, where a diff of the two snapshots lists each twice."""
    d, _ = runs
    rows = json.loads(_diff(d, "--json"))["rows"]
    lines = [r for r in rows if r["section"] == "line"]
    assert lines
    keys = {}
    for r in lines:
        m = re.match(r"train_mlp(_fixed)?\.py:(\d+)", r["what"])
        if m:
            keys.setdefault((m[2], r["kind"]), []).append(r)
    assert keys and all(len(v) == 1 for v in keys.values()), keys
    renamed = [r for r in lines if r["base_what"]]
    assert renamed and all(r["what"].startswith("train_mlp_fixed.py:") and r["base_what"].startswith("train_mlp.py:")
                           for r in renamed)
    # XLA's line 43 (predict) temporary grew where the donated step reuses buffers: both runs' bytes in one row
    assert any(r["base_bytes"] and r["new_bytes"] for r in renamed)


def test_every_format_shows_the_same_rows(runs):
    d, _ = runs
    doc = json.loads(_diff(d, "--json"))
    table = list(csv.DictReader(io.StringIO(_diff(d, "--csv", "-"))))
    assert len(table) == len(doc["rows"])
    for j, c in zip(doc["rows"], table):
        assert {k: ("" if v is None else str(v)) for k, v in j.items()} == c
    text = _diff(d, "--top", "0")
    for r in doc["rows"]:
        if r["section"] in ("role", "line"):
            assert r["what"] in text
    assert text.count("resolved  ") + text.count("new  ") >= 1


def test_snapshots_keep_their_meaning(runs):
    d, _ = runs
    out = run_cli("diff", "before@peak", "after@peak", cwd=d, check=0).stdout
    assert "by site" in out and "delta count" in out
    # the snapshots' lines matched by the script too: line 82's arrays are one row, not +X and -X
    rows = json.loads(run_cli("diff", "before@peak", "after@peak", "--json", cwd=d, check=0).stdout)["rows"]
    at_82 = [r for r in rows if r["site"].endswith(":82 (main)")]
    assert len(at_82) <= 1 and all(r["site"] == "train_mlp_fixed.py:82 (main)" and r["base_bytes"] for r in at_82)
    whole = json.loads(run_cli("show", "after@peak", "--json", cwd=d, check=0).stdout)["rows"]
    assert any(r["site"] == "train_mlp_fixed.py:82 (main)" and r["bytes"] > 0 for r in whole)
    proc = run_cli("diff", "before", "after", "--by", "file", cwd=d)
    assert proc.returncode == 2 and "before@peak after@peak" in proc.stderr
    proc = run_cli("diff", "before", "after", "--html", d / "x.html", cwd=d)
    assert proc.returncode == 2 and "before@peak" in proc.stderr


def test_lines_follow_an_edit_that_moves_them(tmp_path):
    """A line keeps its identity across lines added above it, when both
    scripts can be read (difflib's match of the two texts)."""
    a = ["import jax", "def f(x):", "    return x * 2", "f(1)"]
    b = ["import jax", "# a comment", "def f(x):", "    return x * 3", "f(1)"]
    assert line_map(a, b) == {1: 1, 2: 3, 3: 4, 4: 5}
    (tmp_path / "a.py").write_text("\n".join(a))
    (tmp_path / "b.py").write_text("\n".join(b))
    ma = {"argv": ["a.py"], "cwd": str(tmp_path)}
    mb = {"argv": ["b.py", "--x"], "cwd": str(tmp_path)}
    assert script_of(ma) == str(tmp_path / "a.py") and script_of({"argv": ["-c"], "cwd": "/"}) is None
    sa, sb = Sites(ma, line_map(a, b)), Sites(mb)
    assert sa.key("a.py:3 (f)") == sb.key("b.py:4 (f)")
    assert sa.key("lib/m.py:3 (g)") == sb.key("lib/m.py:3 (g)") != sa.key("a.py:3 (g)")

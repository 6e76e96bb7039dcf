"""Every column and key jaxmemprof writes has a meaning in jaxmemprof/glossary/,
every finding's facts are those its rule declares (jaxmemprof/analysis/rules/), and
docs/columns.md and docs/glossary.md are exactly what the generator makes.

The outputs checked are real: the committed sample run (export, report
--json, show, diff, check), a job made of two copies of it, a plain directory
of its .prof files, and a small run recorded here. The facts of every rule
and case come from the rules themselves, fed the figures they read.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from conftest import REPO, run_cli, write_script

from jaxmemprof import glossary as g
from jaxmemprof.glossary.docs import documents
from jaxmemprof.glossary.tables import Table, tables
from jaxmemprof.glossary.terms import TERMS
from jaxmemprof.analysis.rules import RULES
from jaxmemprof.store.jit_tables import JitTables
from jaxmemprof.analysis.attributed import attribute

SAMPLE = REPO / "sample_runs" / "runs" / "mlp-leak"
GiB = 1024**3
MiB = 1024**2


def documented() -> dict[str, Table]:
    """Each documented table, by its IN_TABLE name (show and diff by their titles)."""
    return {t.title if t.name in ("show", "diff") else t.name: t for _, group in tables() for t in group}


def header(path: Path) -> list[str]:
    with open(path, newline="", encoding="utf-8") as f:
        return next(csv.reader(f))


def check_export(directory: Path, *, estimated=False):
    """Each exported CSV's header is its documented columns, in order."""
    from jaxmemprof.render.tables import EXPORT_FILES

    tables = documented()
    for name in EXPORT_FILES:
        cols = header(directory / name)
        for c in cols:
            g.meaning(c, name)  # KeyError names the column
        key = "lifetimes.csv (estimated)" if estimated and name == "lifetimes.csv" else name
        if estimated and name in ("arrays.csv", "reuse.csv", "reuse_devices.csv"):
            continue  # no per-array data: these have no rows (and only the process column)
        assert cols == list(tables[key].columns), (
            f"{name}: exported {cols}, documented {list(tables[key].columns)}: update jaxmemprof/glossary/tables.py "
            f"and run {g.REGENERATE}")


def check_rows(rows: list[dict], table: Table, *, lead_process=True):
    """JSON rows carry the table's columns (without the CSV's leading process)."""
    cols = list(table.columns)
    if lead_process and cols[:1] == ["process"] and "process" not in cols[1:]:
        cols = cols[1:]
    for r in rows:
        extra = set(r) - set(cols)
        assert not extra, f"{table.name}: JSON keys {sorted(extra)} are not documented"
        assert [k for k in r if k in cols] == [c for c in cols if c in r]
        for k in r:
            g.meaning(k, table.name)


def check_facts(finding: dict):
    rule, facts = finding["rule"], finding["facts"]
    allowed = g.documented_facts(rule)
    assert allowed, f"rule {rule!r} is not declared in jaxmemprof/analysis/rules/"
    missing = set(facts) - allowed
    assert not missing, f"facts {sorted(missing)} of rule {rule!r} are not among its Rule's facts (jaxmemprof/analysis/rules/)"
    for k in facts:
        g.fact_meaning(rule, k)


def same_facts(finding, key=None):
    """A Finding's facts are the documented ones of its rule and case, in the documented order."""
    rule = RULES[finding.rule]
    key = key or ((finding.rule, finding.case) if finding.case in rule.facts else (finding.rule, ""))
    want = [k for k in rule.facts[key[1]] if k not in rule.optional or k in finding.facts]
    assert list(finding.facts) == want, f"{key}: facts {list(finding.facts)}, documented {want}"
    for k in finding.facts:
        g.fact_meaning(finding.rule, k)


# -- the committed sample run ------------------------------------------------------------


@pytest.fixture(scope="module")
def sample_export(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("export") / "csv"
    run_cli("export", SAMPLE, "--csv", out, check=0)
    return out


@pytest.fixture(scope="module")
def sample_report() -> dict:
    return json.loads(run_cli("report", SAMPLE, "--json", "--device-memory", "16GiB", check=0).stdout)


def test_every_exported_column_of_the_sample_run_is_documented(sample_export):
    check_export(sample_export)


def test_every_key_of_the_sample_report_json_is_documented(sample_report):
    t = documented()
    doc = sample_report
    assert list(doc) == list(t["report --json"].columns)
    for k in doc:
        g.meaning(k, "report --json")
    assert list(doc["summary"]) == list(t["summary"].columns)
    for name, section in (("timeline.csv", "timeline"), ("devices.csv", "devices"), ("sites.csv", "sites"),
                          ("arrays.csv", "arrays"), ("lifetimes.csv", "lifetimes"), ("leaks.csv", "leaks"),
                          ("recompiles.csv", "recompiles"), ("jit.csv", "jit_memory"), ("jit_peak.csv", "jit_peak"),
                          ("jit_buffers.csv", "jit_buffers"), ("executables", "executables"),
                          ("markers", "markers"), ("peak_sites", "peak_sites")):
        check_rows(doc[section], t[name])
    assert list(doc["arrays"][0]) == list(t["arrays.csv"].columns)
    assert list(doc["reuse"]) == list(t["reuse"].columns)
    check_rows(doc["reuse"]["by_site"], t["reuse.csv"])
    check_rows(doc["reuse"]["by_device"], t["reuse_devices.csv"])
    assert list(doc["fit"]) == list(t["fit"].columns)
    for f in doc["findings"]:
        assert list(f) == list(t["findings.csv"].columns[1:])
        check_facts(f)
    assert {f["rule"] for f in doc["findings"]} >= {"leak", "donate", "fit"}


def test_show_diff_and_check_json_are_documented(tmp_path):
    t = documented()
    show = json.loads(run_cli("show", f"{SAMPLE}@peak", "--json", check=0).stdout)
    assert list(show) == [c for c in t["show and diff --json"].columns if c != "unchanged_rows"]
    check_rows(show["rows"], t["show --by site"])
    diff = json.loads(run_cli("diff", f"{SAMPLE}@first", f"{SAMPLE}@peak", "--json", check=0).stdout)
    assert list(diff) == ["schema_version", "command", "inputs", "by", "value_type", "totals", "unchanged_rows",
                          "devices", "kinds", "omitted", "rows"]
    assert set(diff) == set(t["show and diff --json"].columns)
    check_rows(diff["rows"], t["diff --by site"])
    for c in list(show["totals"]) + list(diff["totals"]) + list(show["omitted"]) + list(diff["omitted"]):
        g.meaning(c, "show")
    run_cli("show", f"{SAMPLE}@peak", "--csv", tmp_path / "show.csv", check=0)
    assert header(tmp_path / "show.csv") == list(t["show --by site"].columns)
    run_cli("diff", f"{SAMPLE}@first", f"{SAMPLE}@peak", "--csv", tmp_path / "diff.csv", check=0)
    assert header(tmp_path / "diff.csv") == list(t["diff --by site"].columns)
    for by in ("function", "file", "stack", "device", "kind"):
        run_cli("show", f"{SAMPLE}@peak", "--by", by, "--csv", tmp_path / f"{by}.csv", check=0)
        assert header(tmp_path / f"{by}.csv") == [by, "bytes", "count", "share"]
        assert by in t["other --by"].columns

    proc = run_cli("check", SAMPLE, "--json", "--max-peak", "1GiB", "--max-true-peak", "1GiB", "--max-growth",
                   "1GiB/step", "--fail-on", "leak", "--baseline", SAMPLE, "--max-increase", "5")
    doc = json.loads(proc.stdout)
    # and the TPU slice's gate, on the bundled run compiled for two slices (docs/targets.md)
    slices = json.loads(run_cli("check", REPO / "sample_runs" / "runs" / "mlp-target", "--json", "--target-fits",
                                "v5e:2x2", check=0).stdout)
    doc["checks"] += slices["checks"]
    assert list(doc) == list(t["check --json"].columns)
    for c in doc["checks"]:
        extra = set(c) - set(t["check"].columns)
        assert not extra, f"check --json keys {sorted(extra)} are not documented"
        for k in c:
            g.meaning(k, "check")
    # every key but the one said only when XLA:TPU refused a step (test_targets.py makes one)
    assert {k for c in doc["checks"] for k in c} | {"error"} == set(t["check"].columns)


# -- a job, a directory of profiles, a run recorded here ------------------------------------


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    """Two copies of the sample run as the processes of one job."""
    path = tmp_path_factory.mktemp("job") / "job"
    for n in (0, 1):
        shutil.copytree(SAMPLE, path / f"process-{n}")
    return path


def test_every_column_of_a_job_is_documented(job, tmp_path):
    from jaxmemprof.render.job import JOB_FILES

    t = documented()
    out = tmp_path / "csv"
    run_cli("export", job, "--csv", out, check=0)
    check_export(out)
    for name in JOB_FILES:
        cols = header(out / name)
        assert cols == list(t[name].columns), f"{name}: exported {cols}, documented {list(t[name].columns)}"
        for c in cols:
            g.meaning(c, name)
    doc = json.loads(run_cli("report", job, "--json", check=0).stdout)
    assert list(doc) == list(t["job report --json"].columns)
    assert list(doc["job"]) == list(t["job"].columns)
    for name, section in (("processes.csv", "processes"), ("job_timeline.csv", "timeline"),
                          ("job_peak_sites.csv", "peak_sites")):
        check_rows(doc[section], t[name], lead_process=False)
    for f in doc["findings"]:
        assert list(f) == list(t["job_findings.csv"].columns) + ["process_list"]
        check_facts(f)
    g.meaning("process_list")


def test_a_directory_of_profiles_exports_documented_columns(tmp_path):
    profs = tmp_path / "profiles"
    profs.mkdir()
    for p in sorted((SAMPLE / "snapshots").glob("*.prof.gz"))[::20]:
        shutil.copy(p, profs / p.name)
    out = tmp_path / "csv"
    run_cli("export", profs, "--csv", out, check=0)
    check_export(out, estimated=True)
    doc = json.loads(run_cli("report", profs, "--json", check=0).stdout)
    assert doc["lifetimes_estimated"] is True
    check_rows(doc["lifetimes"], documented()["lifetimes.csv (estimated)"])


SCRIPT = """
import functools
import jax
import jax.numpy as jnp
import jaxmemprof

@jax.jit
def step(w, x):
    return w - 0.1 * x.sum() * w, (w * x).sum()

w = jnp.ones((256, 256))
x = jnp.ones((256, 256))
kept = []
for i in range(8):
    w, loss = step(w, x)
    kept.append(loss)
    jaxmemprof.mark(f"step {i}")
jaxmemprof.snapshot("done")
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("rec")
    script = write_script(d, "train.py", SCRIPT)
    out = d / "run"
    run_cli("run", "-q", "--interval", "0.05", "-o", out, script, cwd=d, check=0)
    return out


def test_a_run_recorded_now_exports_documented_columns(recorded, tmp_path):
    out = tmp_path / "csv"
    run_cli("export", recorded, "--csv", out, check=0)
    check_export(out)
    t = documented()
    doc = json.loads(run_cli("report", recorded, "--json", check=0).stdout)
    assert list(doc) == list(t["report --json"].columns)
    assert list(doc["summary"]) == list(t["summary"].columns)
    for name, section in (("timeline.csv", "timeline"), ("arrays.csv", "arrays"), ("jit.csv", "jit_memory"),
                          ("jit_peak.csv", "jit_peak"), ("jit_buffers.csv", "jit_buffers"), ("markers", "markers")):
        assert doc[section], f"the recorded run has no {section} rows to check"
        check_rows(doc[section], t[name])
    for f in doc["findings"]:
        check_facts(f)


# -- the facts of every rule and case, from the rules themselves ----------------------------


def test_leak_and_recompile_facts():
    from jaxmemprof.analysis import leaks
    from jaxmemprof.analysis.rules import leaks as rules

    site = {"site": "t.py:3 (f)", "file": "t.py", "line": 3, "function": "f"}
    lk = pd.DataFrame([{**site, "growth_bytes_per_s": 10.0, "growth_bytes_per_step": 4.0, "live_bytes_first": 0,
                        "live_bytes_last": 400, "arrays_first": 1, "arrays_last": 100, "p_value": 1e-9, "tau": 0.9,
                        "projected_bytes_after": 4400, "projected_growth_bytes": 4000, "projected_steps": 1000,
                        "projected_seconds": float("nan"), "projected_share_of_peak": 0.4, "snapshots_used": 50,
                        "device_limit_bytes": pd.NA, "steps_to_limit": pd.NA}])
    rc = pd.DataFrame([{**site, "name": "jit_f", "first_snapshot": 2, "first_count": 1, "last_count": 12,
                        "max_count": 12, "growth": 11, "first_code_bytes": 0, "last_code_bytes": 0,
                        "new_after_setup": 11, "suspect": True}])
    rj = pd.DataFrame([{"site": "t.py:9 (g)", "file": "t.py", "line": 9, "function": "g", "name": "h",
                        "functions": 20, "after_setup": 19, "suspect": True}])
    for frame, columns in ((lk, leaks.LEAK_COLUMNS), (rc, leaks.RECOMPILE_COLUMNS), (rj, leaks.REJIT_COLUMNS)):
        assert list(frame.columns) == list(columns)
    growing = lk.assign(site="t.py:5 (f)", line=5, arrays_first=100)  # as many arrays at the last: they grew in size
    found = rules.leak_findings(pd.concat([lk, growing], ignore_index=True), rc, rj)
    assert [(f.rule, f.case) for f in found] == [("leak", ""), ("leak", "growing-arrays"), ("recompile", "executables"),
                                                 ("recompile", "rejit")]
    for f in found:
        same_facts(f)


def test_donation_facts(sample_report, monkeypatch):
    from jaxmemprof.analysis.findings import Finding
    from jaxmemprof.analysis.rules import donation

    donate = [f for f in sample_report["findings"] if f["rule"] == "donate"][0]
    same_facts(Finding(rule="donate", severity="medium", facts=donate["facts"]))

    fn = pd.DataFrame([{"function_id": 1, "name": "step", "qualname": "step", "file": "/x/t.py", "line": 3,
                        "jit_file": "/x/t.py", "jit_line": 5, "jit_function": "<module>", "wrapper": "jax.jit",
                        "wrapper_options": "{}", "params": '["state"]', "donate_argnums": "[0]",
                        "donate_argnames": "[]"}])
    events = pd.DataFrame([{"kind": "warning", "message": "Some donated buffers were not usable: float32[4]"},
                           {"kind": "exception", "message": "RuntimeError: Array has been deleted with shape=f32[4]"}])
    run = SimpleNamespace(jit=JitTables(functions=fn), events=events)
    lost = [{"name": "state", "arg": 0, "path": "[0]", "dtype": "float32", "shape": [4], "donated": True}]
    monkeypatch.setattr(donation, "donation_candidates", lambda run, attribution=None: [])
    monkeypatch.setattr(donation, "unusable_donations",
                        lambda run: [(fn.iloc[0], {"call_index": 2}, lost, [{"dtype": "int32", "shape": []}])])
    found = donation.donation_findings(attribute(run))
    assert [f.rule for f in found] == ["donation-unusable", "donated-then-used"]
    for f in found:
        same_facts(f)


def _devices(**stats) -> pd.DataFrame:
    row = {"snapshot": 3, "t": 1.0, "device": "cuda:0", "live_bytes": 0, "buffers": 0, "bytes_in_use": None,
           "peak_bytes_in_use": None, "bytes_limit": None, "pool_bytes": None, "largest_free_block_bytes": None,
           "fragmentation": None, "unattributed_bytes": None}
    row.update(stats)
    return pd.DataFrame([row])


def test_allocator_facts():
    from jaxmemprof.analysis.rules import allocator as a

    run = SimpleNamespace(manifest={"backend": "gpu", "jaxlib_version": "0.10.2", "environment": {}, "devices": []},
                          events=pd.DataFrame(), snapshots=pd.DataFrame(), path="run")
    # The peak needs more than the pool's limit, and the pool is fragmented: raise, fragmentation, platform.
    devices = _devices(bytes_limit=12 * GiB, pool_bytes=12 * GiB, peak_bytes_in_use=11 * GiB, bytes_in_use=1 * GiB,
                       largest_free_block_bytes=1 * GiB, fragmentation=0.9)
    found = a.allocator_findings(attribute(run), int(11.5 * GiB), processes_per_gpu=1, timeline=SimpleNamespace(devices=devices))
    cases = {(f.rule, f.case) for f in found}
    assert {("allocator-fraction", "raise"), ("allocator-fragmentation", ""), ("allocator-platform", "")} <= cases
    found += a.allocator_findings(attribute(run), int(15.5 * GiB), processes_per_gpu=1, timeline=SimpleNamespace(devices=devices))
    peak = a.PeakEstimate(1 * GiB, "peak_bytes_in_use", "cuda:0")
    stats = a.device_stats(devices)
    frac = a.fraction_config({}, "0.10.2")
    found += a._preallocate_rule({}, "0.10.2", peak, stats, frac, 2)
    found += a._preallocate_rule({}, "0.10.2", peak, stats, frac, 1)
    both = {a.FRACTION: ".5", a.OLD_FRACTION: ".5"}
    found += a.env_findings(both, "0.10.2") + a.env_findings(both, "0.4.31")
    found += a.env_findings({a.FRACTION: ".5"}, "0.4.31") + a.env_findings({a.PREALLOCATE: "no"}, "0.10.2")
    seen = set()
    for f in found:
        same_facts(f)
        seen.add((f.rule, f.case))
    allocator_cases = {(name, c) for name, r in RULES.items() if name.startswith("allocator-") for c in r.facts}
    assert seen >= allocator_cases, f"cases not exercised: {sorted(allocator_cases - seen)}"


def test_fit_facts():
    from jaxmemprof.analysis.advice.capacity import will_it_fit
    from jaxmemprof.analysis.rules.capacity import fit_findings

    run = SimpleNamespace(manifest={"backend": "cpu", "jaxlib_version": "0.10.2", "environment": {}})
    cases = set()
    for device, processes in ((16 * GiB, 1), (320 * MiB, 1), (100 * MiB, 1), (16 * GiB, 2), (1 * GiB, 4)):
        fit = will_it_fit(attribute(run), device, 200 * MiB, processes=processes)
        f = fit_findings(fit)[0]
        assert f.rule == "fit"
        same_facts(f, ("fit", ""))
        cases.add(f.case)
    assert cases == {"fits", "fits-with", "cannot", "shared-fits", "shared-cannot"}


def test_inside_jit_facts():
    from jaxmemprof.analysis.rules import inside_jit

    b = pd.DataFrame([{"function_id": 1, "function": "step", "site": "t.py:4 (loss)", "kind": "temporary",
                       "op": "jit(step)/jvp(loss)/dot_general", "shape": "f32[1024]", "bytes": 800, "at_peak": 1,
                       "program_peak_bytes": 1000, "name": "dot.1{}", "signature": "float32[8]",
                       "largest_signature": True}])
    run = SimpleNamespace(jit=JitTables(functions=pd.DataFrame([{"function_id": 1, "wrapper": "flax.nnx.jit"}])))
    found = inside_jit.inside_jit_findings(SimpleNamespace(jit_buffers=b, run=run))
    assert [f.rule for f in found] == ["remat", "narrow-dtype"]
    for f in found:
        same_facts(f)


def test_job_facts():
    from jaxmemprof.analysis.rules.job import imbalance, unfinished

    procs = pd.DataFrame({"process": [0, 1, 2], "snapshots": [5, 5, 0], "peak_bytes": [100 * MiB, 10 * MiB, 0],
                          "finished": [True, True, False], "running": [False, False, False], "last_t": [1.0, 1.0, None], "error": [None, None, "gone"]})
    sites = pd.DataFrame({"process": [0, 1], "site": ["t.py:1 (f)", "t.py:1 (f)"], "bytes": [100 * MiB, 10 * MiB],
                          "count": [1, 1]})
    found = [j.finding for j in imbalance(procs, sites) + unfinished(procs)]
    assert [f.rule for f in found] == ["imbalance", "unfinished"]
    for f in found:
        same_facts(f)
    for k in found[0].facts["sites"][0]:
        g.fact_meaning("imbalance", k)


def test_every_rule_has_its_facts_and_words():
    """A rule is one declaration: every case it writes facts for has words
    (and every case with words has facts), each fact has a meaning, and the
    module it names as its maker makes findings of that rule."""
    for name, rule in RULES.items():
        assert rule.name == name and rule.finds and rule.facts, name
        for case in rule.facts:
            cases = [case] if case else list(rule.words)
            assert all(rule.words_for(c) for c in cases), f"{name}: case {case!r} has facts but no words"
        for case in rule.words:
            assert case in rule.facts or "" in rule.facts, f"{name}: case {case!r} has words but no facts"
        assert set(rule.optional) <= set(rule.fact_names()), name
        for n in rule.fact_names():
            g.fact_meaning(name, n)
        maker = (REPO / "jaxmemprof" / rule.made_by).read_text()
        assert f'"{name}"' in maker, f"{rule.made_by} makes no finding of rule {name!r}"


# -- the documents -----------------------------------------------------------------------------


def test_every_meaning_is_one_sentence():
    texts = list(g.GLOSSARY.items()) + [(k, v) for t in g.IN_TABLE.values() for k, v in t.items()] + \
        [(k, v) for r in RULES.values() for k, v in r.meanings.items()] + list(TERMS.items())
    for name, text in texts:
        assert text.strip() == text and text.endswith(".") and "\n" not in text, name
        assert text[0].isupper() or text[0] in "`'", name
    names = {t.name for _, group in tables() for t in group}
    assert set(g.IN_TABLE) <= names, sorted(set(g.IN_TABLE) - names)


def test_committed_docs_are_the_generated_ones():
    for path, text in documents(REPO).items():
        assert path.exists() and path.read_text(encoding="utf-8") == text, (
            f"{path.relative_to(REPO)} differs from what jaxmemprof/glossary/ generates: run "
            f"`{g.REGENERATE}` and commit the result")

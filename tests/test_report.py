"""`jaxmemprof report` and `jaxmemprof export` on a run whose behaviour is known:
a long-lived array, per-step temporaries, and a leak of 4 KiB per step."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess

import pandas as pd
import pytest

from conftest import line_of, run_cli, write_script

from jaxmemprof.units import format_bytes

KiB, MiB = 1024, 1024 * 1024
STEPS = 20
PEAK = MiB + STEPS * 4 * KiB + 64 * 64 * 4  # params, kept losses, one temporary

SCRIPT = """
import jax
import jax.numpy as jnp
import jaxmemprof

jax.devices()
jaxmemprof.snapshot("start")  # before any array: no other snapshot comes first
params = jnp.zeros((256, 1024), jnp.float32)  # LINE-PARAMS
step = jax.jit(lambda p, i: (p * 0.5, jnp.full((1024,), i, jnp.float32)))
history = []
for i in range(STEPS):
    tmp = jnp.ones((64, 64), jnp.float32) * i  # LINE-TMP
    params, loss = step(params, i)  # LINE-STEP
    history.append(loss)  # keeps 4 KiB every step
    jaxmemprof.mark(f"step {i}")
    jaxmemprof.snapshot()
""".replace("STEPS", str(STEPS))


@pytest.fixture(scope="module")
def leaky(tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    script = write_script(d, "leaky.py", SCRIPT)
    run_cli("run", "-q", "--interval", "1000", "-o", d / "run", script, cwd=d, check=0)
    return d, d / "run", script


def test_report_sections_and_the_leak(leaky):
    d, run_dir, script = leaky
    out = run_cli("report", run_dir, cwd=d, check=0).stdout
    for section in ("What held the live peak", "Timeline", "Lifetimes by site", "Buffer reuse",
                    "Leaks and recompiles", "Findings"):
        assert section in out, section
    step_site = f"leaky.py:{line_of(script, 'LINE-STEP')} (<module>)"
    # what grew, in words: the site, the bytes over the steps and a step's growth
    leak = re.search("^" + re.escape(step_site) + rf" grew .* over {STEPS} steps \(.*, \+4\.00 KiB a step\)$",
                     out, re.M)
    assert leak, out
    # the statistics under --explain
    explained = run_cli("report", run_dir, "--explain", cwd=d, check=0).stdout
    assert re.search(r"^\s*\+4\.00 KiB\s.*" + re.escape(step_site), explained, re.M), explained
    # Each finding: severity, rule, site and saving on its first line.
    assert re.search(r"^\d\. (high|medium|low) leak  " + re.escape(step_site) + r"  saves ", out, re.M), out
    assert f"{STEPS} markers" in out


def test_report_json_has_every_section(leaky):
    d, run_dir, script = leaky
    doc = json.loads(run_cli("report", run_dir, "--json", cwd=d, check=0).stdout)
    assert doc["schema_version"] == 2 and doc["command"] == "report"
    for key in ("summary", "peak_sites", "timeline", "devices", "sites", "lifetimes", "arrays", "reuse",
                "leaks", "recompiles", "findings", "markers", "executables"):
        assert key in doc, key
    s = doc["summary"]
    # start + one snapshot per step + exit
    assert s["snapshots"] == STEPS + 2 and s["markers"] == STEPS
    step_site = f"leaky.py:{line_of(script, 'LINE-STEP')} (<module>)"
    [leak] = doc["leaks"]
    assert leak["site"] == step_site and leak["growth_bytes_per_step"] == 4 * KiB
    [finding] = [f for f in doc["findings"] if f["rule"] == "leak"]
    assert finding["site"] == step_site
    # The peak, at the last step: params (1 MiB, replaced each step), the kept
    # losses and that step's temporary.
    assert s["peak_bytes"] == PEAK
    assert doc["peak_sites"][0]["site"] == step_site


def test_export_csv_tables_parse_back(leaky, tmp_path):
    d, run_dir, script = leaky
    out = tmp_path / "tables"
    proc = run_cli("export", run_dir, "--csv", out, cwd=d, check=0)
    assert str(out) in proc.stderr and proc.stdout == ""
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(["timeline.csv", "devices.csv", "sites.csv", "arrays.csv", "lifetimes.csv",
                            "reuse.csv", "reuse_devices.csv", "leaks.csv", "recompiles.csv", "jit.csv",
                            "jit_peak.csv", "jit_buffers.csv", "jit_curve.csv", "roles.csv", "owners.csv", "plan.csv",
                            "plan_models.csv", "targets.csv", "target_points.csv", "target_lines.csv", "findings.csv",
                            "holders.csv"])
    timeline = pd.read_csv(out / "timeline.csv")
    assert len(timeline) == STEPS + 2
    assert timeline["live_bytes"].iloc[-2] == PEAK
    arrays = pd.read_csv(out / "arrays.csv")
    tmp_line = line_of(script, "LINE-TMP")
    tmps = arrays[arrays["line"] == tmp_line]
    # One temporary per step, each alive for exactly one snapshot (replaced by
    # the next step's), but the last, which the exit snapshot sees too.
    assert len(tmps) == STEPS and (tmps["bytes"] == 64 * 64 * 4).all()
    assert tmps["lifetime_snapshots"].tolist() == [1] * (STEPS - 1) + [2]
    assert tmps["how"].tolist() == ["freed"] * (STEPS - 1) + ["alive"]
    assert (tmps["shape"] == "64x64").all() and (tmps["dtype"] == "float32").all()
    # The first params were replaced before any snapshot saw them; each step's
    # new params live one snapshot, the last until the end.
    assert (arrays["line"] != line_of(script, "LINE-PARAMS")).all()
    params = arrays[(arrays["line"] == line_of(script, "LINE-STEP")) & (arrays["bytes"] == MiB)]
    assert params["how"].tolist() == ["freed"] * (STEPS - 1) + ["alive"]
    lifetimes = pd.read_csv(out / "lifetimes.csv")
    step_site = f"leaky.py:{line_of(script, 'LINE-STEP')} (<module>)"
    row = lifetimes.set_index("site").loc[step_site]
    assert row["arrays_born"] == 2 * STEPS  # new params and one loss per step
    leaks = pd.read_csv(out / "leaks.csv")
    assert leaks["growth_bytes_per_step"].tolist() == [4096]
    findings = list(csv.DictReader(io.StringIO((out / "findings.csv").read_text())))
    # The leak, and params, replaced by each step without being donated.
    assert sorted(f["rule"] for f in findings) == ["donate", "leak"]
    [donate] = [f for f in findings if f["rule"] == "donate"]
    assert json.loads(donate["facts"])["donated_bytes"] == MiB and "donate_argnums=(0,)" in donate["fix"]
    jit = pd.read_csv(out / "jit.csv")
    assert jit["alias_bytes"].tolist() == [0]
    # One line makes the new params (replaced each step) and the losses (kept each step): at the end each
    # is held by its own name, and the leak is said to be kept by the list, which holds the 20 losses.
    held = pd.read_csv(out / "holders.csv", keep_default_na=False)
    end = held[(held["at"] == "end") & (held["site"] == step_site)].set_index("holder")
    assert end.loc["history[…]", ["arrays", "bytes", "generations"]].tolist() == [STEPS, STEPS * 4 * KiB, STEPS]
    assert end.loc["params", ["arrays", "bytes", "generations"]].tolist() == [1, MiB, 1]
    [leak] = [json.loads(f["facts"]) for f in findings if f["rule"] == "leak"]
    assert (leak["held_by"], leak["held_by_arrays"], leak["held_by_bytes"]) == ("history[…]", STEPS, STEPS * 4 * KiB)
    assert list(findings[0]) == ["process", "rule", "case", "severity", "site", "saving_bytes", "saves", "message",
                                 "fix", "evidence", "brief", "brief_fix", "facts"]
    saving = int(donate["saving_bytes"])  # the words say the figure, and whether XLA compiled it
    assert donate["saves"] in (f"saves {format_bytes(saving)} (compiled)", f"saves up to {format_bytes(saving)} (not verified)")
    # The facts behind the words, as data: what to donate, by position.
    facts = json.loads(donate["facts"])
    assert (facts["function"], facts["argnums"], facts["option"]) == ("<lambda>", [0], "donate_argnums=(0,)")
    # Never overwrite without --force.
    proc = run_cli("export", run_dir, "--csv", out, cwd=d, check=2)
    assert "--force" in proc.stderr
    run_cli("export", run_dir, "--csv", out, "--force", cwd=d, check=0)


def _pprof_total(cmd, *args):
    out = subprocess.run([*cmd, "-top", "-unit=B", "-nodefraction=0", *map(str, args)],
                         capture_output=True, text=True, check=True).stdout
    return int(re.search(r"accounting for (-?\d+)B?,", out).group(1)), out


def test_export_pprof_with_user_stacks(leaky, tmp_path, pprof_cmd):
    d, run_dir, script = leaky
    peak = tmp_path / "peak.pb.gz"
    run_cli("export", f"{run_dir}@peak", "--format", "pprof", "-o", peak, cwd=d, check=0)
    total, out = _pprof_total(pprof_cmd, "-sample_index=space", peak)
    assert total == PEAK
    # pprof now names the user's code, not JAX's internals.
    assert "__call__" not in out and "<unknown>" in out  # <module>, as pprof prints it
    raw = subprocess.run([*pprof_cmd, "-traces", str(peak)], capture_output=True, text=True, check=True).stdout
    assert "pxla.py" not in raw
    # A diff reopens as a diff: its total is NEW - BASE.
    diff = tmp_path / "growth.pb.gz"
    run_cli("export", f"{run_dir}@start", f"{run_dir}@final", "--format", "pprof", "-o", diff, cwd=d, check=0)
    total, _ = _pprof_total(pprof_cmd, "-sample_index=space", diff)
    base, _ = _pprof_total(pprof_cmd, "-sample_index=space", run_dir / "snapshots" / "000001.prof.gz")
    assert base == 0 and total == PEAK


def test_report_of_a_plain_directory_of_profiles(tmp_path):
    write_script(tmp_path, "save.py", """
        import jax, jax.numpy as jnp
        keep = []
        for i in range(8):
            keep.append(jnp.zeros((16384,), jnp.float32))  # 64 KiB more each time
            jax.profiler.save_device_memory_profile(f"profs/{i:02d}.prof")
    """)
    (tmp_path / "profs").mkdir()
    from conftest import cpu_env
    import sys

    subprocess.run([sys.executable, "save.py"], cwd=tmp_path, env=cpu_env(), check=True)
    out = run_cli("report", "profs", cwd=tmp_path, check=0).stdout
    assert "estimated" in out and "no per-array data" in out
    doc = json.loads(run_cli("report", "profs", "--json", cwd=tmp_path, check=0).stdout)
    assert doc["lifetimes_estimated"] is True
    [leak] = doc["leaks"]
    assert leak["site"].startswith("save.py:")


def test_report_bad_input(tmp_path):
    proc = run_cli("report", tmp_path / "nope", check=2)
    assert proc.stderr.startswith("jaxmemprof: error: ") and "nope" in proc.stderr
    (tmp_path / "empty").mkdir()
    proc = run_cli("report", tmp_path / "empty", check=2)
    assert "neither a jaxmemprof run" in proc.stderr

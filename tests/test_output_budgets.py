"""Output that reads at a glance, held to its budgets on recorded runs.

A 40-step training run (sample_runs/train_mlp.py, with its leak and its
missing donation) reported at 100 columns: at most 60 lines, none wider, and
exactly the two findings the program has, each in three lines; `run`'s
closing summary in at most 16 lines. An 8-device run's identical per-device
rows are one row.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest

from conftest import REPO, cpu_env, line_of, run_cli, write_script

TRAIN = REPO / "sample_runs" / "train_mlp.py"


@pytest.fixture(scope="module")
def training(tmp_path_factory):
    d = tmp_path_factory.mktemp("budgets")
    script = shutil.copy(TRAIN, d / "train_mlp.py")
    proc = run_cli("run", "-o", d / "run", script, "--leak", "--steps", "40", cwd=d, check=0,
                   env=cpu_env(COLUMNS="100"))
    return d, d / "run", proc


def _lines(text: str) -> list[str]:
    return text.rstrip("\n").split("\n")


def _findings(text: str) -> list[list[str]]:
    """The findings section's entries, each as its lines."""
    section = text[text.index("\nFindings"):].split("\n")[1:]
    entries: list[list[str]] = []
    for line in section:
        if re.match(r"^\d+\. ", line):
            entries.append([line])
        elif line.startswith("   ") and entries:
            entries[-1].append(line)
    return entries


def test_report_of_a_training_run_fits_one_screen(training):
    d, run_dir, _ = training
    out = run_cli("report", run_dir, cwd=d, check=0, env=cpu_env(COLUMNS="100")).stdout
    lines = _lines(out)
    assert len(lines) <= 60, out
    assert max(len(line) for line in lines) <= 100, out
    jit_line = line_of(d / "train_mlp.py", "step_fn = jax.jit(train_step")
    step_line = line_of(d / "train_mlp.py", "= step_fn(params, momentum, x, y)")  # makes the losses it keeps
    found = _findings(out)
    assert [f[0].split()[1:3] for f in found] == [["medium", "donate"], ["medium", "leak"]], out
    for entry in found:
        assert len(entry) == 3, entry  # severity, rule, site and saving; one sentence; the fix
        assert "saves " in entry[0] and entry[2].lstrip().startswith("fix: ")
    assert f"train_mlp.py:{jit_line}" in found[0][0]
    assert "donate_argnums=(0, 1)" in found[0][2]
    assert f"train_mlp.py:{step_line} (main)" in found[1][0]
    # Nothing is lost: --explain says every finding in full, with its evidence.
    unwrapped = cpu_env()
    unwrapped.pop("COLUMNS", None)
    full = run_cli("report", run_dir, "--explain", cwd=d, check=0, env=unwrapped).stdout
    assert "evidence: " in full and "Mann-Kendall" in full and "params[0][0] float32[512,1024]" in full
    assert "Reuse is observed at snapshot resolution" in full


def test_json_carries_facts_beside_words(training):
    d, run_dir, _ = training
    doc = json.loads(run_cli("report", run_dir, "--json", cwd=d, check=0).stdout)
    [donate] = [f for f in doc["findings"] if f["rule"] == "donate"]
    facts = donate["facts"]
    assert facts["function"] == "train_step" and facts["arguments"] == ["params", "momentum"]
    assert facts["argnums"] == [0, 1] and facts["option"] == "donate_argnums=(0, 1)"
    # params and momentum of a 512-1024-1024-10 MLP, float32
    assert donate["saving_bytes"] == 2 * 4 * (512 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10)
    # The words are there too, brief and in full.
    assert donate["brief"].startswith("Donate 'params', 'momentum' of train_step")
    assert donate["message"].startswith("Donate 'params', 'momentum' of train_step (defined at ")
    [leak] = [f for f in doc["findings"] if f["rule"] == "leak"]
    assert leak["facts"]["growth_bytes_per_step"] == 4096  # 1024 float32 losses kept per step


def test_run_summary_is_short(training):
    _, run_dir, proc = training
    summary = proc.stderr[proc.stderr.index("jaxmemprof: "):]
    lines = _lines(summary)
    assert len(lines) <= 16, summary
    assert max(len(line) for line in lines) <= 100, summary
    assert lines[-1].lstrip().startswith("fix: ")  # the last finding's fix closes it
    assert f"(next: jaxmemprof report {run_dir})" in " ".join(summary.split())


EIGHT = """
import jax
jax.config.update("jax_num_cpu_devices", 8)
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, Mesh, PartitionSpec as P
import jaxmemprof

mesh = Mesh(np.array(jax.devices()), ("d",))
x = jax.device_put(jnp.ones((8, 1024 * 256), jnp.float32), NamedSharding(mesh, P("d")))  # LINE-X
jaxmemprof.snapshot("placed")
y = x * 2
jaxmemprof.snapshot("doubled")
"""


def test_identical_device_rows_are_one(tmp_path):
    script = write_script(tmp_path, "eight.py", EIGHT)
    run_cli("run", "-q", "--addresses", "all", "-o", tmp_path / "run", script, cwd=tmp_path, check=0)
    out = run_cli("report", tmp_path / "run", cwd=tmp_path, check=0, env=cpu_env(COLUMNS="100")).stdout
    # Each device holds 1 MiB of x (and of y): one line for the eight.
    assert "cpu:0-7 (8 devices)" in out, out
    assert not re.search(r"^cpu:[1-7]\b", out, re.M), out

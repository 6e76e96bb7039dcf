"""Holders at the peak's own moment (issue 64 item 4, issue 63 item 5): the
README's MLP names its leak's holder with the list's length at the snapshot
its search followed (a search in the program's thread, at a step), and the
peak's row says which snapshot that was; a flax TrainState held by a local
is named through it, not by the step's 4-byte loss."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pandas as pd

from conftest import cli_batch, cpu_env, line_of, run_cli, write_script

ROOT = Path(__file__).resolve().parents[1]


def test_the_leaks_holder_counts_the_list_at_its_searchs_snapshot(tmp_path):
    script = tmp_path / "train_mlp.py"
    shutil.copy(ROOT / "sample_runs" / "train_mlp.py", script)
    proc = run_cli("run", "--interval", "0.1", "-o", tmp_path / "run", script, "--leak", "--steps", "40", "--batch",
                   "64", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    cli_batch([["export", tmp_path / "run", "--csv", tmp_path / "csv"]], cwd=tmp_path)
    held = pd.read_csv(tmp_path / "csv" / "holders.csv")
    peak = held[(held["at"] == "peak") & held["holder"].str.startswith("loss_history[")]
    assert len(peak) == 1, held
    row = peak.iloc[0]
    with sqlite3.connect(tmp_path / "run" / "journal.sqlite") as con:
        trigger = con.execute("SELECT trigger FROM snapshots WHERE snapshot = ?", (int(row["snapshot"]),)).fetchone()[0]
        steps_before = con.execute("SELECT COUNT(*) FROM markers WHERE after_snapshot < ?",
                                   (int(row["snapshot"]),)).fetchone()[0]
    # searched in the program's thread at a step's snapshot, which the step's marker took
    assert trigger == "step"
    # the list's length then: one loss a step, each appended before the step's marker
    assert int(row["arrays"]) == steps_before
    assert row["holder"] == "loss_history[…] (local of main)"
    # out of the site's arrays alive at that same snapshot: the list's, the params', momentum's, losses
    assert int(row["site_arrays"]) == steps_before + 12
    report = run_cli("report", tmp_path / "run", "--json", cwd=tmp_path)
    doc = json.loads(report.stdout)
    peak_snapshot = doc["summary"]["peak_snapshot"]
    said = run_cli("report", tmp_path / "run", cwd=tmp_path, env={**cpu_env(), "COLUMNS": "200"}).stdout
    if peak_snapshot != int(row["snapshot"]):
        assert f"holders as searched at snapshot {int(row['snapshot'])}" in said
    assert "loss_history" in proc.stderr
    assert doc["summary"]["program_thread_wall_s"] >= doc["summary"]["program_thread_cpu_s"] * 0.5 > 0
    # the closing lines say that cost where it is 2% of the run's wall time or more (the report always does)
    own = f"{doc['summary']['program_thread_wall_s']:.2f} s in its thread"
    assert f"snapshots in the program's thread took {doc['summary']['program_thread_wall_s']:.2f} s" in said
    worth = doc["summary"]["program_thread_wall_s"] >= 0.02 * doc["summary"]["duration_s"]
    assert (own in proc.stderr) == worth, proc.stderr


TRAIN_STATE = """
import jax, jax.numpy as jnp, optax
import flax.linen as nn
from flax.training import train_state
import jaxmemprof


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(10)(nn.relu(nn.Dense(256)(x)))


@jax.jit
def train_step(state, x, y):
    def loss_fn(p):
        return jnp.mean((state.apply_fn(p, x) - y) ** 2)
    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


def main():
    model = MLP()
    x, y = jnp.ones((64, 128)), jnp.ones((64, 10))
    state = train_state.TrainState.create(apply_fn=model.apply, params=model.init(jax.random.PRNGKey(0), x),
                                          tx=optax.adam(1e-3))
    for step in range(12):
        state, loss = train_step(state, x, y)  # LINE-STATE
        jaxmemprof.mark("step")
    print(float(loss) > 0)


main()
"""


def test_a_train_state_held_by_a_local_is_named_through_it(tmp_path):
    script = write_script(tmp_path, "ts.py", TRAIN_STATE)
    proc = run_cli("run", "-o", tmp_path / "run", "--verify-seconds", "0", script, cwd=tmp_path,
                   env={**cpu_env(), "COLUMNS": "300"})
    assert proc.returncode == 0, proc.stderr
    site = f"ts.py:{line_of(script, 'LINE-STATE')} (main)"
    line = next((ln for ln in proc.stderr.splitlines() if site in ln and "kept alive by" in ln), proc.stderr)
    assert "kept alive by state." in line and "(local of main)" in line, line

"""The true peak over every call, not the sampled ones (issue 64, item 1):
the probe counts the bytes live before every call of a user's function
(capture/jit/calllive.py), and the model takes the largest over them. The
program keeps a 64 MiB array before calls that no sample sees; its own
figures (memory_analysis() and the array's bytes) are the oracle."""

from __future__ import annotations

import json
import shutil
import sqlite3

import pytest

from conftest import cli_batch, run_cli, write_script

KEPT = """
import json
import jax, jax.numpy as jnp

def figures(fn, *args):
    ma = fn.lower(*args).compile().memory_analysis()
    return (ma.argument_size_in_bytes + ma.output_size_in_bytes - ma.alias_size_in_bytes
            + ma.temp_size_in_bytes + ma.generated_code_size_in_bytes)

@jax.jit
def step(x):
    return jnp.sort(jnp.concatenate([x, x]) * 2.0)[: x.shape[0]] * 0.5

x = jnp.ones((1 << 20,), jnp.float32)  # 4 MiB
for _ in range(5):
    x = step(x)
kept = jnp.ones((16 << 20,), jnp.float32)  # 64 MiB, kept before calls that are not sampled
for _ in range(20):
    x = step(x)
print(json.dumps({"call": figures(step, x), "kept": kept.nbytes}))
"""


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    """KEPT recorded once: (the run, its oracle)."""
    tmp = tmp_path_factory.mktemp("kept")
    script = write_script(tmp, "kept.py", KEPT)
    proc = run_cli("run", "-q", "-o", tmp / "run", script, cwd=tmp, check=0)
    return tmp / "run", json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_kept_array_before_unsampled_calls_is_in_the_true_peak(kept):
    run, oracle = kept
    need = oracle["kept"] + oracle["call"]  # every call after the 5th: the kept array beside the call's own peak
    report, text, over, under = cli_batch([["report", run, "--json"], ["report", run],
                                           ["check", run, "--max-true-peak", str(need - 1)],
                                           ["check", run, "--max-true-peak", str(need)]], run.parent, workers=1)
    assert report.returncode == 0, report.stderr
    s = json.loads(report.stdout)["summary"]
    assert s["true_peak_bytes"] == need
    assert s["true_peak_where"] == "during a call of step"
    # the call named: the first of those the kept array was live before (the 6th), none of them sampled
    assert "true peak " in text.stdout and "during a call of step (kept.py:9; call 6 of 25)" in text.stdout, text.stdout
    assert "no jitted call needed more" not in text.stdout
    assert (over.returncode, under.returncode) == (1, 0), over.stdout + under.stdout


def test_a_run_recorded_before_every_call_was_counted_says_its_figure_is_the_sampled_calls(kept, tmp_path):
    run, oracle = kept
    old = tmp_path / "old"
    shutil.copytree(run, old)
    with sqlite3.connect(old / "journal.sqlite") as con:
        con.execute("DROP TABLE jit_call_live")
    proc = run_cli("report", old, cwd=tmp_path, check=0)
    header = proc.stdout.splitlines()[2]
    assert header.startswith("true peak ") and "no jitted call needed more" not in header, header
    assert header == f"true peak {(oracle['kept'] + (4 << 20)) / 2**20:.2f} MiB at the live peak (no sampled call needed more)"

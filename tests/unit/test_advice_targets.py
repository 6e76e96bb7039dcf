"""analysis/advice/targets.py: a tiny step recorded with ``run --target
v5e:2x2 --target v6e:2x2`` (libtpu's deviceless topologies), its rows held
to the journal's compiles (jit_targets, jit_compiles) and to the chips'
table (jaxmemprof.facts.tpus); the figures themselves are held to an independent
compile in tests/test_targets.py."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from conftest import cpu_env, write_script

from jaxmemprof.facts import tpus
from jaxmemprof.analysis.advice.targets import build_targets
from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.options import Options
from jaxmemprof.store.reader import load_run
from jaxmemprof.facts.truepeak import FIGURES, call_peak

pytestmark = pytest.mark.skipif(tpus.libtpu_missing(), reason="libtpu is not installed")

STEP = """
import jax, jax.numpy as jnp
f = jax.jit(lambda w, x: (w + 0.1 * jnp.tanh(x.T @ x), jnp.sum(x)))
w = jnp.ones((128, 128))
for i in range(3):
    w, s = f(w, jnp.full((64, 128), float(i)))
print(float(s))
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("target")
    script = write_script(d, "step.py", STEP)
    proc = subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", str(d / "run"), "--target",
                           "v5e:2x2", "--target", "v6e:2x2", str(script)],
                          env=cpu_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return load_run(d / "run")


def test_each_slice_has_a_row_of_its_compiles_and_its_chip(run):
    t = build_targets(attribute(run, Options()))
    assert t.asked == ["v5e:2x2", "v6e:2x2"]
    rows = t.rows.set_index("target")
    table = run.jit.targets
    for name in t.asked:
        r = rows.loc[name]
        mine = table[(table["target"] == name) & (table["variant"] == "recorded")].iloc[0]
        figures = {f: int(mine[f]) for f in FIGURES}
        assert {f: int(r[f]) for f in FIGURES} == figures
        assert r["call_peak_bytes"] == call_peak(figures)
        assert r["peak_bytes"] == r["call_peak_bytes"] + r["live_outside_bytes"]
        assert (r["hbm_bytes"], r["usable_bytes"]) == (tpus.chip(name)[2], tpus.usable_bytes(name))
        assert bool(r["fits"]) is (int(r["peak_bytes"]) <= int(r["usable_bytes"]))
        for variant in ("donated", "bfloat16"):
            v = table[(table["target"] == name) & (table["variant"] == variant)].iloc[0]
            assert r[f"{variant}_peak_bytes"] == call_peak({f: int(v[f]) for f in FIGURES}) + r["live_outside_bytes"]
        assert r["compiles"] == 3 and r["compile_s"] > 0
        assert pd.isna(r["largest_batch"]) and pd.isna(r["next_batch"])  # without --plan, no search
    assert t.compiles == 6 and t.not_compiled("v5e:2x2") is None
    # each slice's buffers at its program's peak add up to it, and to its arguments and outputs there
    for name in t.asked:
        lines = t.lines[t.lines["target"] == name]
        r = rows.loc[name]
        assert lines["bytes"].sum() == lines["program_peak_bytes"].iloc[0]
        # the call's peak holds XLA:TPU's reservation (its temporaries' block) for the whole call: the sweep's
        # peak is the arguments and outputs live there with what of the block is in use then, never more
        below = r["call_peak_bytes"] - r["generated_code_bytes"] - lines["program_peak_bytes"].iloc[0]
        assert 0 <= below <= r["temp_bytes"]


def test_the_runs_own_figures_stand_beside_the_targets(run):
    t = build_targets(attribute(run, Options()))
    compiles = run.jit.compiles
    own = compiles.iloc[compiles[list(FIGURES)].sum(axis=1).argmax()]
    r = t.rows.iloc[0]
    assert {f"run_{f}": int(own[f]) for f in FIGURES} == {f"run_{f}": int(r[f"run_{f}"]) for f in FIGURES}
    assert r["run_backend"] == "cpu" and r["run_call_peak_bytes"] == call_peak({f: int(own[f]) for f in FIGURES})

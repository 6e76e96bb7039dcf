"""analysis/leaks.py on the bundled mlp-leak run (sample_runs/train_mlp.py
--leak, read only): its loop keeps one (batch,) float32 array of per-example
losses a step, at the line that calls the step; batch 1024, the script's
default."""

from __future__ import annotations

from conftest import REPO, line_of

from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.leaks import leaks, recompiles, rejits
from jaxmemprof.analysis.rules.leaks import leak_findings
from jaxmemprof.analysis.options import Options

SCRIPT = REPO / "sample_runs" / "train_mlp.py"
BATCH = 1024  # train_mlp.py's --batch default (the run's argv sets none)


def test_the_leak_is_one_batch_of_losses_a_step_at_the_line_that_keeps_them(mlp_leak):
    assert "--batch" not in mlp_leak.manifest["argv"]
    line = line_of(SCRIPT, "params, momentum, losses = step_fn(")
    ar = attribute(mlp_leak, Options())
    rows = leaks(ar)
    (leak,) = rows.to_dict("records")
    assert leak["site"] == f"sample_runs/train_mlp.py:{line} (main)"
    assert leak["growth_bytes_per_step"] == BATCH * 4
    assert leak["projected_growth_bytes"] == BATCH * 4 * Options().steps
    (f,) = leak_findings(rows, recompiles(ar), rejits(ar))
    assert f.rule == "leak" and f.site == leak["site"] and f.saving_bytes == BATCH * 4 * Options().steps


def test_a_step_compiled_once_is_no_recompilation(mlp_leak):
    counts = mlp_leak.jit.counts
    assert list(counts["compiles"]) == [1]  # the probe saw train_step compiled once
    ar = attribute(mlp_leak, Options())
    r = recompiles(ar)
    assert r.empty or not r["suspect"].any()
    assert rejits(ar).empty or not rejits(ar)["suspect"].any()

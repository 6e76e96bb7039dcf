"""The backend seam (jaxmemprof/facts/backends/): one module per backend behind one
protocol, chosen from the run's recorded backend. The GPU's pool rule is the
GPU's (and a CPU run's, which plans for a GPU), unchanged; a TPU has none."""

from __future__ import annotations

import pytest

from jaxmemprof.facts import backends
from jaxmemprof.facts.backends import gpu, tpu
from jaxmemprof.facts.backends.base import Backend

LIMIT = 16_909_336_064  # a v5e chip's bytes_limit
MiB = 1024**2


def test_chosen_from_the_recorded_backend():
    assert backends.get("tpu").name == "tpu"
    assert backends.get("cuda").name == backends.get("rocm").name == backends.get("gpu").name == "gpu"
    assert backends.get("cpu").name == backends.get(None).name == backends.get("whatever").name == "cpu"
    assert backends.of_run({"backend": "TPU"}).name == "tpu" and backends.of_run(None).name == "cpu"
    assert all(isinstance(b, Backend) for b in backends.BACKENDS.values())


def test_the_gpu_pool_rule_lives_in_the_gpu_module():
    g = backends.get("gpu")
    assert g.has_pool and g.allocator_advice and not g.queue_advice
    assert g.usable_bytes(16 * 1024**3) == int(16 * 1024**3 * gpu.DEFAULT_FRACTION) == 12 * 1024**3
    assert g.needed_bytes(100 * MiB) == 100 * MiB + 5 * MiB + 64 * MiB
    # the donated batch 16: 14.76 GiB needs 99 % with the GPU's headroom: "cannot fit" by the pool rule
    assert not g.fits(15_844_778_496, LIMIT) and not g.fits_at_all(15_844_778_496, LIMIT)


def test_a_cpu_run_keeps_the_gpu_rule_it_had():
    c, g = backends.get("cpu"), backends.get("gpu")
    for peak in (0, 10 * MiB, 5 * 1024**3, 11 * 1024**3, 15 * 1024**3):
        assert c.fits(peak, 16 * 1024**3) == g.fits(peak, 16 * 1024**3)
        assert c.fits_at_all(peak, 16 * 1024**3) == g.fits_at_all(peak, 16 * 1024**3)
    assert c.largest_fitting_peak(16 * 1024**3) == g.largest_fitting_peak(16 * 1024**3)
    assert not c.allocator_advice and not c.queue_advice


def test_a_tpu_has_no_pool_the_whole_chip_is_usable():
    t = backends.get("tpu")
    assert not t.has_pool and not t.allocator_advice and t.queue_advice
    assert t.usable_bytes(LIMIT) == LIMIT and t.needed_bytes(123) == 123
    assert t.fits(15_844_778_496, LIMIT) and t.fits(LIMIT, LIMIT) and not t.fits(LIMIT + 1, LIMIT)
    assert t.largest_fitting_peak(LIMIT) == LIMIT
    assert "max_inflight_computations" in tpu.INFLIGHT_CAP


@pytest.mark.parametrize("name,stats,expected", [
    ("tpu", {"peak_bytes_in_use": 7_893_998_592, "peak_bytes_reserved": 9_008_840_704, "bytes_limit": LIMIT},
     (16_902_839_296, 7_893_998_592, 9_008_840_704, True)),
    ("gpu", {"peak_bytes_in_use": 5 * MiB, "bytes_limit": 12 * MiB, "pool_bytes": 12 * MiB}, (5 * MiB, 5 * MiB, None, False)),
    ("cpu", {}, None),
])
def test_the_chips_own_peak(name, stats, expected):
    cp = backends.get(name).chip_peak(stats)
    if expected is None:
        assert cp is None
        return
    assert (cp.bytes, cp.in_use_bytes, cp.reserved_bytes, cp.upper_bound) == expected
    assert cp.limit_bytes == stats["bytes_limit"]


def _points(rows):
    import pandas as pd

    from jaxmemprof.analysis.advice.plan import PLAN_COLUMNS

    out = pd.DataFrame([{**dict.fromkeys(PLAN_COLUMNS), "function_id": 1, "function": "step", "variant": "recorded",
                         "device": "TPU_0(process=0,(0,0,0,0))", "compile_s": 1.0, "backend": "tpu", **r}
                        for r in rows], columns=PLAN_COLUMNS)
    out["peak_bytes"] = out["peak_bytes"].astype("Int64")
    return out


def test_a_tpu_plan_takes_xla_tpus_refusal_as_the_next_batch():
    """On a TPU the plan's largest batch is one that compiled within the chip, and the next is the one
    XLA:TPU refused (RESOURCE_EXHAUSTED at compile), as the chip says; the GPU's rule knows no refusal."""
    from jaxmemprof.analysis.advice.plan import batch_models

    refusal = ("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries "
               "(30.01G) exceeds available HBM (15.75G).")
    points = _points([{"batch": 8, "peak_bytes": 10 * 1024**3}, {"batch": 16, "peak_bytes": 15 * 1024**3},
                      {"batch": 32, "peak_bytes": None, "error": refusal}])
    tpu_row = batch_models(points, LIMIT, backends.get("tpu")).iloc[0]
    assert tpu_row["largest_batch"] == 16 and tpu_row["next_batch"] == 32
    gpu_row = batch_models(points, LIMIT, backends.get("gpu")).iloc[0]  # the pool: 0.75 of the chip holds batch 8 only
    assert gpu_row["largest_batch"] == 8 and gpu_row["next_batch"] == 16

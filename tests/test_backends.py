"""The backend seam (jaxmemprof/backends/): one module per backend behind one
protocol, chosen from the run's recorded backend. The GPU's pool rule is the
GPU's (and a CPU run's, which plans for a GPU), unchanged; a TPU has none."""

from __future__ import annotations

import pytest

from jaxmemprof import backends
from jaxmemprof.backends import gpu, tpu
from jaxmemprof.backends.base import Backend

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

"""The backends, one module each (cpu.py, gpu.py, tpu.py) behind one small
protocol, :class:`Backend`: a new backend is one new file here, added to
``_MODULES``, and its tests (tests/test_backends.py).

A run's backend is chosen once, from what it recorded (``manifest["backend"]``:
``cpu``, ``gpu``, ``cuda``, ``rocm``, ``tpu``), by :func:`of_run`; fit, the
plan, ``check``, the targets, the report's counters and the pytest plugin ask
it, never the backend's name. What a backend says:

- ``keys``: which ``memory_stats()`` keys mean what (``in_use``,
  ``peak_in_use``, ``limit``, and where the backend has them ``reserved``,
  ``peak_reserved``, ``pool``, ``largest_free_block``);
- ``usable_bytes(device_bytes)``: what a program may use of a device of that
  size with no setting changed (a GPU's default pool; a TPU's whole
  ``bytes_limit``);
- ``needed_bytes(peak)``: what a peak needs of that (a GPU: the fit rule's
  headroom; a TPU: the peak itself), ``fits(peak, device_bytes)``,
  ``fits_at_all(peak, device_bytes)`` (with any setting) and
  ``largest_fitting_peak(device_bytes)``;
- ``chip_peak(stats)``: the device's own peak from its counters (a TPU:
  ``peak_bytes_in_use + peak_bytes_reserved``, an upper bound; a GPU: the
  BFC's ``peak_bytes_in_use``);
- ``allocator_advice``: whether the GPU allocator's variables apply;
  ``queue_advice``: whether the advice on queued steps (async dispatch) does.

Plain Python: no jax, no pandas."""

from __future__ import annotations

from jaxmemprof.facts.backends import cpu, gpu, tpu
from jaxmemprof.facts.backends.base import Backend, ChipPeak

_MODULES = (cpu, gpu, tpu)

BACKENDS: dict[str, Backend] = {m.BACKEND.name: m.BACKEND for m in _MODULES}
_BY_PLATFORM: dict[str, Backend] = {p: m.BACKEND for m in _MODULES for p in m.BACKEND.platforms}


def get(name: object) -> Backend:
    """The backend of a recorded backend or platform name (``cuda`` is the
    GPU's); an unknown or missing one is the CPU's (what it is today)."""
    return _BY_PLATFORM.get(str(name or "").strip().lower(), BACKENDS["cpu"])


def of_run(manifest: dict | None) -> Backend:
    """The backend a run recorded (``manifest["backend"]``)."""
    return get((manifest or {}).get("backend"))


__all__ = ["BACKENDS", "Backend", "ChipPeak", "get", "of_run"]

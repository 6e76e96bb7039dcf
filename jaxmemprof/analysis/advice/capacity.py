"""Will it fit? A run's peak against a device of a given size, by the
rule of the run's backend (jaxmemprof/facts/backends/: chosen once from the
backend the run recorded, or the one asked).

A TPU run (backends/tpu.py): no pool, no preallocation, no fraction: the
step fits when the peak it needs is within the chip's memory (its
``bytes_limit``: a v5e's 15.75 GiB), as XLA:TPU compiles and the chip runs
it; case ``fits`` or ``cannot``, no settings.

A GPU run, and a CPU run (record a small run on a laptop, then ask whether
the job fits an 80 GB GPU and with which settings): the GPU's pool rule
(figures in :mod:`jaxmemprof.facts.backends.gpu`):

- the peak: the estimated true peak when the caller has one (XLA
  temporaries included), else the allocator's high-water mark, else the most
  live array bytes on one device in a snapshot;
- the pool it needs: peak + 5 % + 64 MiB (allocator rounding and slack, XLA's
  own small buffers);
- the default pool: 0.75 of the device (XLA's default fraction; JAX
  preallocates it at the first operation);
- the fraction needed: the smallest whole percent of the device that holds
  the pool needed; it fits at all when that is at most 0.95 (the CUDA context
  and libraries' workspaces live outside the pool).

For several processes on one GPU, each needs its pool and together at most
0.95 of the device; default preallocation (0.75 each) cannot hold two.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import dataclass, field

from jaxmemprof.facts import backends
from jaxmemprof.analysis.advice.allocator import estimate_peak
from jaxmemprof.facts.backends.gpu import (DEFAULT_FRACTION, MAX_FRACTION_PERCENT, PREALLOCATE, fraction_env_name,
                                     fraction_setting, percent_needed)

if TYPE_CHECKING:
    from jaxmemprof.analysis.attributed import Attributed


@dataclass(frozen=True)
class Fit:
    device_bytes: int  # the GPU's memory
    peak_bytes: int  # the peak used (per device)
    peak_source: str  # where the peak came from (allocator.PEAK_SOURCES)
    peak_device: str | None  # the device it was measured on, where known
    needed_bytes: int  # peak + 5 % + 64 MiB (a TPU: the peak)
    default_fraction: float  # XLA's default pool fraction (0.75; a TPU: 1, no pool)
    default_pool_bytes: int  # default_fraction x device_bytes (a TPU: the whole device)
    fits_by_default: bool  # the needed pool fits the default pool (one process)
    fraction_needed: float  # smallest whole percent holding the needed pool (may exceed 1)
    fits_at_all: bool  # fraction_needed x processes <= 0.95
    settings: dict  # environment variable -> value to set ({} when nothing is needed)
    case: str  # fits (by default), fits-with (settings), cannot; shared-fits, shared-cannot (processes > 1)
    jaxlib_version: str | None = None  # the jaxlib the settings are named for
    fraction_variable: str = "XLA_CLIENT_MEM_FRACTION"
    processes: int = 1  # processes sharing the device
    environment: dict = field(default_factory=dict)  # the run's allocation environment
    backend: str | None = None  # the backend the run was recorded on


def will_it_fit(ar: Attributed, device_bytes: int, true_peak_bytes: int | None = None,
                jaxlib_version: str | None = None, *, processes: int = 1, backend: str | None = None) -> Fit:
    """Whether ``run``'s peak fits a device with ``device_bytes`` of memory
    (``jaxmemprof.units.parse_size("80GB")``), and with which settings, by
    the rule of ``backend`` (default: the one the run recorded; a CPU run
    is asked of a GPU). ``jaxlib_version``: the jaxlib on the GPU machine,
    which names the fraction variable (default: the one that recorded the
    run). ``processes``: how many such processes will share the device."""
    device_bytes = int(device_bytes)
    if device_bytes <= 0:
        raise ValueError(f"device_bytes must be positive, not {device_bytes}")
    processes = max(1, int(processes))
    run = ar.run
    m = run.manifest or {}
    peak = estimate_peak(ar, true_peak_bytes)
    version = jaxlib_version if jaxlib_version is not None else m.get("jaxlib_version")
    name = fraction_env_name(version)
    rule = backends.get(backend) if backend is not None else ar.backend
    environment = {str(k): str(v) for k, v in (m.get("environment") or {}).items()}
    if not rule.has_pool:  # a TPU: the whole device, no headroom, no setting (backends/tpu.py)
        need = rule.needed_bytes(peak.bytes)
        fits = need * processes <= rule.usable_bytes(device_bytes)
        return Fit(
            device_bytes=device_bytes, peak_bytes=peak.bytes, peak_source=peak.source, peak_device=peak.device,
            needed_bytes=need, default_fraction=1.0, default_pool_bytes=rule.usable_bytes(device_bytes),
            fits_by_default=fits and processes == 1, fraction_needed=round(need / device_bytes, 4),
            fits_at_all=fits, settings={},
            case=("fits" if fits else "cannot") if processes == 1 else ("shared-fits" if fits else "shared-cannot"),
            jaxlib_version=version, fraction_variable=name, processes=processes, environment=environment,
            backend=rule.name)
    need = rule.needed_bytes(peak.bytes)
    default_pool = int(device_bytes * DEFAULT_FRACTION)
    pct = percent_needed(need, device_bytes)
    fits_at_all = pct * processes <= MAX_FRACTION_PERCENT
    fits_by_default = processes == 1 and need <= default_pool

    settings: dict = {}
    if processes > 1:
        case = "shared-fits" if fits_at_all else "shared-cannot"
        if fits_at_all:
            settings = {PREALLOCATE: "false"}
    elif fits_by_default:
        case = "fits"
    elif fits_at_all:
        case = "fits-with"
        settings = {name: fraction_setting(pct)}
    else:
        case = "cannot"
    return Fit(
        device_bytes=device_bytes, peak_bytes=peak.bytes, peak_source=peak.source, peak_device=peak.device,
        needed_bytes=need,
        default_fraction=DEFAULT_FRACTION, default_pool_bytes=default_pool, fits_by_default=fits_by_default,
        fraction_needed=pct / 100, fits_at_all=fits_at_all, settings=settings, case=case,
        jaxlib_version=version, fraction_variable=name, processes=processes,
        environment=environment, backend=m.get("backend") if backend is None else backend,
    )



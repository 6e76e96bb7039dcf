"""Will it fit? A run's peak against a GPU of a given size.

Works on any run, a CPU run included: record a small run on a laptop, then
ask whether the job fits an 80 GB GPU and with which settings.

The arithmetic (figures in :mod:`jaxmemprof.analysis.advice.allocator`):

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

from jaxmemprof.analysis.advice.allocator import (
    DEFAULT_FRACTION,
    MAX_FRACTION_PERCENT,
    PREALLOCATE,
    estimate_peak,
    fraction_env_name,
    fraction_setting,
    needed_bytes,
    percent_needed,
)

if TYPE_CHECKING:
    from jaxmemprof.analysis.attributed import Attributed


@dataclass(frozen=True)
class Fit:
    device_bytes: int  # the GPU's memory
    peak_bytes: int  # the peak used (per device)
    peak_source: str  # where the peak came from (allocator.PEAK_SOURCES)
    peak_device: str | None  # the device it was measured on, where known
    needed_bytes: int  # peak + 5 % + 64 MiB
    default_fraction: float  # XLA's default pool fraction (0.75)
    default_pool_bytes: int  # default_fraction x device_bytes
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
                jaxlib_version: str | None = None, *, processes: int = 1) -> Fit:
    """Whether ``run``'s peak fits a GPU with ``device_bytes`` of memory
    (``jaxmemprof.units.parse_size("80GB")``), and with which settings.
    ``jaxlib_version``: the jaxlib on the GPU machine, which names the
    fraction variable (default: the one that recorded the run).
    ``processes``: how many such processes will share the GPU."""
    device_bytes = int(device_bytes)
    if device_bytes <= 0:
        raise ValueError(f"device_bytes must be positive, not {device_bytes}")
    processes = max(1, int(processes))
    run = ar.run
    m = run.manifest or {}
    version = jaxlib_version if jaxlib_version is not None else m.get("jaxlib_version")
    name = fraction_env_name(version)
    peak = estimate_peak(ar, true_peak_bytes)
    need = needed_bytes(peak.bytes)
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
        environment={str(k): str(v) for k, v in (m.get("environment") or {}).items()},
        backend=m.get("backend"),
    )



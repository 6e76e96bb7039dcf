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

from dataclasses import dataclass, field

from jaxmemprof.analysis.advice.allocator import (
    DEFAULT_FRACTION,
    DOCS_URL,
    MAX_FRACTION_PERCENT,
    PREALLOCATE,
    UNDERUSED_SHARE,
    both_fractions_findings,
    estimate_peak,
    fraction_env_name,
    fraction_setting,
    needed_bytes,
    percent_needed,
)
from jaxmemprof.analysis.findings import Finding
from jaxmemprof.units import format_bytes

EXCLUDES = ("library workspaces (cuDNN, cuBLAS, NCCL), the CUDA context and allocator fragmentation "
            "are not in this estimate")


@dataclass(frozen=True)
class Fit:
    device_bytes: int  # the GPU's memory
    peak_bytes: int  # the peak used (per device)
    peak_source: str  # where the peak came from, in words
    needed_bytes: int  # peak + 5 % + 64 MiB
    default_fraction: float  # XLA's default pool fraction (0.75)
    default_pool_bytes: int  # default_fraction x device_bytes
    fits_by_default: bool  # the needed pool fits the default pool (one process)
    fraction_needed: float  # smallest whole percent holding the needed pool (may exceed 1)
    fits_at_all: bool  # fraction_needed x processes <= 0.95
    settings: dict  # environment variable -> value to set ({} when nothing is needed)
    message: str
    jaxlib_version: str | None = None  # the jaxlib the settings are named for
    fraction_variable: str = "XLA_CLIENT_MEM_FRACTION"
    processes: int = 1  # processes sharing the device
    environment: dict = field(default_factory=dict)  # the run's allocation environment
    backend: str | None = None  # the backend the run was recorded on


def will_it_fit(run, device_bytes: int, true_peak_bytes: int | None = None,
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
    m = run.manifest or {}
    version = jaxlib_version if jaxlib_version is not None else m.get("jaxlib_version")
    name = fraction_env_name(version)
    peak = estimate_peak(run, true_peak_bytes)
    need = needed_bytes(peak.bytes)
    default_pool = int(device_bytes * DEFAULT_FRACTION)
    pct = percent_needed(need, device_bytes)
    fits_at_all = pct * processes <= MAX_FRACTION_PERCENT
    fits_by_default = processes == 1 and need <= default_pool

    head = (f"A peak of {format_bytes(peak.bytes)} ({format_bytes(need)} with headroom) per process"
            if processes > 1 else f"A peak of {format_bytes(peak.bytes)} ({format_bytes(need)} with headroom)")
    device = f"a {format_bytes(device_bytes)} device"
    settings: dict = {}
    if processes > 1:
        if fits_at_all:
            settings = {PREALLOCATE: "false"}
            text = (f"{head} fits {processes} processes on {device} ({pct / 100:.2f} of it each), but not "
                    f"under default preallocation ({DEFAULT_FRACTION:.2f} each): set {PREALLOCATE}=false, "
                    f"or {name}={fraction_setting(pct)} in each process.")
        else:
            text = (f"{head} needs {pct} % of {device}: {processes} processes cannot share it (at most "
                    f"{fraction_setting(MAX_FRACTION_PERCENT)} of a device should go to JAX's pools).")
    elif fits_by_default:
        text = (f"{head} fits {device} under default preallocation (pool {format_bytes(default_pool)} "
                f"= {DEFAULT_FRACTION:.2f} of it).")
    elif fits_at_all:
        settings = {name: fraction_setting(pct)}
        text = (f"{head} does not fit the default pool of {device} ({format_bytes(default_pool)} = "
                f"{DEFAULT_FRACTION:.2f} of it); it fits with {name}={fraction_setting(pct)}.")
    else:
        text = (f"{head} needs {pct} % of {device}: it cannot fit (at most "
                f"{fraction_setting(MAX_FRACTION_PERCENT)} of a device should go to JAX's pool).")
    text += f" The estimate is a lower bound: {EXCLUDES}"
    if "temporaries not included" in peak.source:
        text += ", nor are XLA's temporaries inside a computation"
    text += "."
    return Fit(
        device_bytes=device_bytes, peak_bytes=peak.bytes, peak_source=peak.source, needed_bytes=need,
        default_fraction=DEFAULT_FRACTION, default_pool_bytes=default_pool, fits_by_default=fits_by_default,
        fraction_needed=pct / 100, fits_at_all=fits_at_all, settings=settings, message=text,
        jaxlib_version=version, fraction_variable=name, processes=processes,
        environment={str(k): str(v) for k, v in (m.get("environment") or {}).items()},
        backend=m.get("backend"),
    )


def fit_findings(fit: Fit) -> list[Finding]:
    """The fit as a finding (rule ``fit``), and a warning when the run's own
    environment would stop a GPU run (both fraction variables set)."""
    pct = round(fit.fraction_needed * 100)
    evidence = (
        f"peak {format_bytes(fit.peak_bytes)} ({fit.peak_bytes} bytes), from {fit.peak_source}; with "
        f"headroom (+5 % + 64 MiB) {format_bytes(fit.needed_bytes)} ({fit.needed_bytes} bytes); device "
        f"{format_bytes(fit.device_bytes)} ({fit.device_bytes} bytes); default pool "
        f"{fit.default_fraction:.2f} x device = {format_bytes(fit.default_pool_bytes)} "
        f"({fit.default_pool_bytes} bytes); fraction needed {fit.fraction_needed:.2f}"
        + (f" per process, {fit.processes} processes" if fit.processes > 1 else "")
        + f"; jaxlib {fit.jaxlib_version or '(unknown)'} reads {fit.fraction_variable}"
    )
    version_note = ""
    if "xla_gpu_memory_fraction_policy" in (fit.environment.get("XLA_FLAGS") or ""):
        version_note = (" XLA_FLAGS sets --xla_gpu_memory_fraction_policy, which changes the default pool: "
                        "check it against these figures.")
    if fit.settings:
        what = ", ".join(f"{k}={v}" for k, v in fit.settings.items())
        if PREALLOCATE in fit.settings:
            trade = ("Memory is then allocated on demand: more prone to fragmentation, and freed memory stays "
                     "with its process.")
        else:
            trade = ("What the pool takes, other processes and the libraries outside it cannot have; above "
                     f"{fraction_setting(MAX_FRACTION_PERCENT)} they may fail to allocate.")
        fix = f"Set {what}. {trade}"
        severity = "medium"
    elif fit.fits_by_default:
        fix = "Nothing to set."
        if fit.peak_bytes < UNDERUSED_SHARE * fit.default_pool_bytes:
            fix += (f" To leave the rest of the GPU to other processes: {PREALLOCATE}=false, or "
                    f"{fit.fraction_variable}={fraction_setting(pct)}.")
        severity = "info"
    else:
        fix = ("Lower the peak (donate arguments, rematerialise with jax.checkpoint, smaller batches, shard "
               "over more devices) or use a device with more memory.")
        severity = "high"
    out = [Finding(rule="fit", severity=severity, site="", message=fit.message, evidence=evidence,
                   fix=fix + version_note + f" See {DOCS_URL}")]
    out += both_fractions_findings(fit.environment, fit.jaxlib_version, str(fit.backend or "").lower())
    return out

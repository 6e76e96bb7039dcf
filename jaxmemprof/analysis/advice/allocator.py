"""Allocator settings for a GPU run: what to set, and the figures behind it.

The rules read what a run recorded: the backend, the jaxlib version, the
allocation environment variables set at run time (``manifest["environment"]``),
the allocator statistics of each device (``memory_stats``: ``bytes_limit``,
``peak_bytes_in_use``, ``pool_bytes``, ``largest_free_block_bytes``), and the
peak the program needs. Each finding says what to set, the figures behind it,
the trade-off, and where JAX documents it (:data:`DOCS_URL`).

Rules (all about the whole run, so ``site`` is empty):

- ``allocator-fraction``: the peak, with headroom (:func:`needed_bytes`: 5 %
  plus 64 MiB), needs more than the allocator's limit (``bytes_limit`` = device
  memory x fraction): raise the fraction to the one that holds it, or, when
  even :data:`MAX_FRACTION_PERCENT` of the device would not, say so.
- ``allocator-preallocate``: several processes share a GPU and their
  preallocated pools add up to more than the device, or the peak is below
  :data:`UNDERUSED_SHARE` (25 %) of a preallocated pool: preallocate less.
- ``allocator-fragmentation``: a BFC pool of at least 1 GiB was at least 30 %
  fragmented (docs/jax-facts.md, memory_stats): ``TF_GPU_ALLOCATOR=cuda_malloc_async``.
- ``allocator-platform`` (info): when one of the above fired or the run ran
  out of memory, ``XLA_PYTHON_CLIENT_ALLOCATOR=platform`` measures exact use,
  slowly: a debugging aid only.
- ``allocator-env``: the environment itself is wrong for the jaxlib that ran:
  both fraction variables set, the new name under an old jaxlib (ignored), a
  preallocation value jaxlib reads as true.

Which fraction variable to name depends on the jaxlib version recorded in
the manifest (never both; see :func:`fraction_env_name`).

Only GPU runs get settings: a CPU or TPU run returns ``[]``, except that an
environment that makes the CUDA plugin fail (both fraction variables under a
jaxlib that refuses them) is reported whatever the backend, since that
failure is what leaves a program on the CPU. To plan a GPU job from a CPU
run, use :mod:`jaxmemprof.analysis.advice.capacity`.

This module never imports jax: versions are read from the manifest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from jaxmemprof.analysis.timeline import timeline as build_timeline
# The GPU's pool and its variables are the GPU backend's (backends/gpu.py); named here for the rules, which
# import them from this module (hence noqa F401).
from jaxmemprof.facts.backends.gpu import (ALLOCATOR, DEFAULT_FRACTION, FRACTION, GPU_BACKENDS,  # noqa: F401
                                     HEADROOM_BYTES, HEADROOM_PERCENT, MAX_FRACTION_PERCENT,
                                     NEW_FRACTION_NAME_SINCE, OLD_FRACTION, PREALLOCATE, PREALLOCATE_OFF,
                                     TF_GPU_ALLOCATOR, fraction_env_name, fraction_setting, needed_bytes,
                                     parse_version, percent_needed, reads_new_fraction_name)
from jaxmemprof.store.reader import read_manifest

if TYPE_CHECKING:
    from jaxmemprof.analysis.attributed import Attributed

DOCS_URL = "https://docs.jax.dev/en/latest/gpu_memory_allocation.html"

MiB = 1024**2
GiB = 1024**3

UNDERUSED_SHARE = 0.25
FRAGMENTATION_MIN = 0.30
FRAGMENTATION_MIN_POOL_BYTES = 1 * GiB


@dataclass(frozen=True)
class FractionConfig:
    """How the run's environment sets the pool fraction for its jaxlib."""

    value: float  # the fraction in effect (the default when none is set)
    variable: str | None  # the variable it came from; None: XLA's default
    both_set: bool  # both names set
    ignored: str | None  # a variable set but not read by that jaxlib


def fraction_config(env: dict, jaxlib_version: str | None) -> FractionConfig:
    """The fraction in effect, read as that jaxlib reads it (an empty value
    counts as unset, as in ``os.getenv(name, '')``)."""
    new, old = env.get(FRACTION) or "", env.get(OLD_FRACTION) or ""
    both = bool(new and old)
    if reads_new_fraction_name(jaxlib_version):
        name, text, ignored = (FRACTION, new, None) if new else (OLD_FRACTION, old, None)
    else:
        name, text, ignored = OLD_FRACTION, old, (FRACTION if new else None)
    value = _float(text) if text else None
    if value is None or value <= 0:
        return FractionConfig(DEFAULT_FRACTION, None, both, ignored)
    return FractionConfig(value, name, both, ignored)


def fraction_fix(env: dict, jaxlib_version: str | None, setting: str) -> dict:
    """The fraction to set, as facts: ``set`` (``NAME=setting``, naming the
    variable that jaxlib reads) and ``unset`` (the other name, when the
    environment has it: jaxlib refuses both together, or does not read it)."""
    name = fraction_env_name(jaxlib_version)
    other = OLD_FRACTION if name == FRACTION else FRACTION
    return {"set": f"{name}={setting}", "unset": other if env.get(other) else "", "jaxlib_version": jaxlib_version}


def preallocates(env: dict) -> bool:
    """Whether the allocator preallocates its pool at start: the BFC allocator
    (default) with preallocation not turned off."""
    if not uses_bfc(env):
        return False
    value = env.get(PREALLOCATE) or ""
    return value == "" or value not in PREALLOCATE_OFF


def uses_bfc(env: dict) -> bool:
    """Whether the BFC allocator runs: XLA_PYTHON_CLIENT_ALLOCATOR default or
    bfc (platform, cuda_async and vmm are other allocators; xla_client.py line
    195), and, for default, TF_GPU_ALLOCATOR not asking for cudaMallocAsync
    (docs/jax-facts.md, allocator settings)."""
    allocator = (env.get(ALLOCATOR) or "default").lower()
    if allocator not in ("default", "bfc"):
        return False
    return not (allocator == "default" and (env.get(TF_GPU_ALLOCATOR) or "") == "cuda_malloc_async")


def _float(text) -> float | None:
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


# -- the peak the program needs --------------------------------------------------


# Where a peak came from, best first (the names of the figures it is).
PEAK_SOURCES = ("true_peak_bytes", "peak_bytes_in_use", "device_live_bytes", "live_bytes")


@dataclass(frozen=True)
class PeakEstimate:
    """The peak the allocator advice and the fit compare with a device's
    memory, and which figure it is (the best the run has: ``PEAK_SOURCES``)."""

    bytes: int
    source: str  # one of PEAK_SOURCES
    device: str | None  # the device it was measured on, where known

    @property
    def has_temporaries(self) -> bool:
        """Whether it includes XLA's temporaries inside calls."""
        return self.source in ("true_peak_bytes", "peak_bytes_in_use")

    def facts(self) -> dict:
        return {"peak_bytes": int(self.bytes), "peak_source": self.source, "peak_device": self.device}


def estimate_peak(ar: Attributed, true_peak_bytes: int | None = None, devices: pd.DataFrame | None = None) -> PeakEstimate:
    """The peak on the busiest device, best source first: the estimated true
    peak given by the caller (XLA temporaries included); the allocator's
    high-water mark ``peak_bytes_in_use``; the most live array bytes on one
    device in a snapshot; the most live bytes of any snapshot."""
    if true_peak_bytes is not None:
        return PeakEstimate(int(true_peak_bytes), "true_peak_bytes", None)
    if devices is None:
        devices = build_timeline(ar, top_sites=0).devices
    hwm = devices.dropna(subset=["peak_bytes_in_use"]) if "peak_bytes_in_use" in devices else devices.iloc[0:0]
    if len(hwm):
        row = hwm.loc[hwm["peak_bytes_in_use"].astype("int64").idxmax()]
        return PeakEstimate(int(row["peak_bytes_in_use"]), "peak_bytes_in_use", str(row["device"]))
    if len(devices) and (devices["live_bytes"] > 0).any():
        row = devices.loc[devices["live_bytes"].astype("int64").idxmax()]
        return PeakEstimate(int(row["live_bytes"]), "device_live_bytes", str(row["device"]))
    snaps = ar.run.snapshots
    live = int(snaps["live_bytes"].max()) if len(snaps) else 0
    return PeakEstimate(live, "live_bytes", None)


# -- devices and processes -------------------------------------------------------


@dataclass(frozen=True)
class DeviceStats:
    device: str
    bytes_limit: int | None  # the last one recorded
    pool_bytes: int | None  # the largest
    peak_bytes_in_use: int | None  # the largest


def device_stats(devices: pd.DataFrame) -> list[DeviceStats]:
    out: list = []
    if devices.empty:
        return out
    for dev, g in devices.groupby("device", sort=True):
        limit = g["bytes_limit"].dropna()
        pool = g["pool_bytes"].dropna()
        hwm = g["peak_bytes_in_use"].dropna()
        if limit.empty and pool.empty and hwm.empty:
            continue
        out.append(DeviceStats(
            str(dev),
            int(limit.iloc[-1]) if len(limit) else None,
            int(pool.max()) if len(pool) else None,
            int(hwm.max()) if len(hwm) else None,
        ))
    return out


def processes_per_device(run) -> int:
    """How many JAX processes used one physical GPU, where the run can tell:
    this process and the other processes of a multi-process run directory
    (``process-N`` siblings) on the same host whose devices name the same
    ``local_hardware_id``. Process count alone cannot tell: processes of a
    multi-controller job normally own distinct GPUs. 1 when unknown."""
    m = run.manifest or {}
    manifests = [m]
    path = Path(run.path)
    if path.name.startswith("process-") and path.parent.is_dir():
        for sib in sorted(path.parent.glob("process-*/manifest.json")):
            if sib.parent.resolve() == path.resolve():
                continue
            try:
                manifests.append(read_manifest(sib))
            except (OSError, ValueError, UnicodeDecodeError):
                continue
    users: dict[tuple, set] = {}
    for i, doc in enumerate(manifests):
        for d in doc.get("devices") or []:
            if not isinstance(d, dict) or d.get("local_hardware_id") is None:
                continue
            key = (doc.get("hostname"), str(d.get("kind")), d.get("local_hardware_id"))
            users.setdefault(key, set()).add(doc.get("process_index", i))
    return max((len(v) for v in users.values()), default=1)


def had_oom(run) -> bool:
    ev = run.events
    if ev is not None and len(ev) and "kind" in ev and (ev["kind"] == "oom").any():
        return True
    snaps = run.snapshots
    return bool(len(snaps) and "trigger" in snaps and (snaps["trigger"] == "oom").any())


def is_rocm(manifest: dict) -> bool:
    kinds = " ".join(str(d.get("kind", "")) for d in manifest.get("devices") or [] if isinstance(d, dict))
    return bool(re.search(r"\b(AMD|Instinct|Radeon|gfx\d+)", kinds)) or str(manifest.get("backend")).lower() == "rocm"


# -- the rules -------------------------------------------------------------------



"""The GPU backend (CUDA and ROCm): XLA's BFC allocator takes a pool of the
device, 0.75 of it by default, preallocated at the first operation; the fit
rule is the peak plus 5 % and 64 MiB within that pool, and at most 0.95 of a
device with the fraction set (the CUDA context and the libraries' workspaces
live outside it). The allocator's variables (``XLA_PYTHON_CLIENT_*``,
``XLA_CLIENT_MEM_FRACTION``) and their advice are this backend's alone
(analysis/advice/allocator.py and analysis/rules/allocator.py read them
here). Its counters are the BFC's: ``peak_bytes_in_use`` is the device's own
peak; ``pool_bytes`` and ``largest_free_block_bytes`` its pool."""

from __future__ import annotations

import re

from jaxmemprof.facts.backends.base import Backend

MiB = 1024**2

FRACTION = "XLA_CLIENT_MEM_FRACTION"
OLD_FRACTION = "XLA_PYTHON_CLIENT_MEM_FRACTION"  # deprecated name
PREALLOCATE = "XLA_PYTHON_CLIENT_PREALLOCATE"
ALLOCATOR = "XLA_PYTHON_CLIENT_ALLOCATOR"
TF_GPU_ALLOCATOR = "TF_GPU_ALLOCATOR"

# The jaxlib that first reads XLA_CLIENT_MEM_FRACTION. Checked in
# jaxlib/xla_client.py, generate_pjrt_gpu_plugin_options(), of the installed
# jaxlib and of the 0.4.31 and 0.4.32 wheels (fetched with pip download):
# - jaxlib 0.4.31 (line 223) reads only XLA_PYTHON_CLIENT_MEM_FRACTION;
# - jaxlib 0.4.32 (lines 223-233) reads XLA_CLIENT_MEM_FRACTION, falls back
#   to XLA_PYTHON_CLIENT_MEM_FRACTION, and raises ValueError ("... is
#   specified together with XLA_PYTHON_CLIENT_MEM_FRACTION. Remove the latter
#   one, it is deprecated.") when both are set;
# - the installed jaxlib 0.10.2 does the same (xla_client.py lines 180-190).
# The CUDA plugin calls that function in its initialize() (jax-ml/jax
# jax_plugins/cuda/__init__.py; not installed here) and JAX only logs an exception raised there
# ("Jax plugin configuration error", jax/_src/xla_bridge.py lines 506-511 in
# 0.10.2): the CUDA backend is then missing and JAX runs on what is left.
NEW_FRACTION_NAME_SINCE = (0, 4, 32)

# XLA's default pool fraction: GpuAllocatorConfig::memory_fraction = 0.75
# (xla/pjrt/gpu/gpu_helpers.h). It lives in the CUDA plugin, not in Python:
# the installed jaxlib 0.10.2 passes memory_fraction only when a variable is
# set (xla_client.py lines 201-202). Since jaxlib 0.4.1 it is a fraction of
# total memory (earlier: of the memory available at start).
DEFAULT_FRACTION = 0.75

# Never advise giving the pool more than this share of the device: the CUDA
# context, cuBLAS/cuDNN handles and NCCL buffers live outside it.
MAX_FRACTION_PERCENT = 95
HEADROOM_PERCENT = 5  # BFC rounds chunks up and bins them; slack
HEADROOM_BYTES = 64 * MiB  # small buffers XLA allocates beside the program's

GPU_BACKENDS = ("gpu", "cuda", "rocm")
# jaxlib turns preallocation off only for these values (xla_client.py line 204:
# ``preallocate not in ('false', 'False', '0')``); any other non-empty value is on.
PREALLOCATE_OFF = ("false", "False", "0")


def parse_version(text) -> tuple[int, ...] | None:
    """``"0.4.32"`` -> (0, 4, 32); ``"0.4.32.dev20240901+cuda12"`` ->
    (0, 4, 32); None when there is no leading version number."""
    if text is None:
        return None
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)", str(text))
    if not m:
        return None
    parts = tuple(int(p) for p in m.group(1).split("."))
    return (parts + (0, 0, 0))[:3]


def reads_new_fraction_name(jaxlib_version: str | None) -> bool:
    """Whether that jaxlib reads ``XLA_CLIENT_MEM_FRACTION`` (0.4.32 and
    later). An unknown version is taken to be a current one."""
    v = parse_version(jaxlib_version)
    return v is None or v >= NEW_FRACTION_NAME_SINCE


def fraction_env_name(jaxlib_version: str | None) -> str:
    """The one fraction variable to recommend for that jaxlib."""
    return FRACTION if reads_new_fraction_name(jaxlib_version) else OLD_FRACTION


def fraction_setting(percent: int) -> str:
    """82 -> ``".82"`` (the form JAX's documentation uses); 100 -> ``"1.00"``."""
    return f"{percent // 100}.{percent % 100:02d}" if percent >= 100 else f".{percent:02d}"


def needed_bytes(peak_bytes: int) -> int:
    """The pool a peak needs: the peak, plus 5 % (allocator rounding and
    fragmentation slack), plus 64 MiB (XLA's own small buffers)."""
    peak = max(int(peak_bytes), 0)
    return peak + -(-peak * HEADROOM_PERCENT // 100) + HEADROOM_BYTES


def percent_needed(need: int, total: int) -> int:
    """The smallest whole percent of ``total`` that holds ``need``."""
    if total <= 0:
        return 10**9
    return max(1, -(-int(need) * 100 // int(total)))


class Gpu(Backend):
    name = "gpu"
    platforms = GPU_BACKENDS
    keys = {"in_use": "bytes_in_use", "peak_in_use": "peak_bytes_in_use", "limit": "bytes_limit",
            "pool": "pool_bytes", "largest_free_block": "largest_free_block_bytes"}
    has_pool = True
    allocator_advice = True
    fit_words = "the peak + 5 % + 64 MiB within XLA's default pool (0.75 of the device)"

    def usable_bytes(self, device_bytes: int) -> int:
        return int(int(device_bytes) * DEFAULT_FRACTION)

    def needed_bytes(self, peak_bytes: int) -> int:
        return needed_bytes(peak_bytes)

    def fits_at_all(self, peak_bytes: int, device_bytes: int) -> bool:
        return percent_needed(needed_bytes(peak_bytes), device_bytes) <= MAX_FRACTION_PERCENT


GPU = Gpu()
BACKEND = GPU

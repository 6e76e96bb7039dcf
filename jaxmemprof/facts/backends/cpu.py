"""The CPU backend: JAX's CPU client reports no memory_stats() (None), so
there are no counters to read. A run recorded on a CPU is most often a small
run planning a GPU job: its fit and plan keep the GPU's pool rule
(backends/gpu.py), as they always have; the GPU allocator's variables are
not advised for the run itself."""

from __future__ import annotations

from jaxmemprof.facts.backends.gpu import GPU
from jaxmemprof.facts.backends.base import Backend


class Cpu(Backend):
    name = "cpu"
    platforms = ("cpu", "")
    has_pool = True  # the fit is asked for a GPU of that size (analysis/advice/capacity.py)
    fit_words = GPU.fit_words

    def usable_bytes(self, device_bytes: int) -> int:
        return GPU.usable_bytes(device_bytes)

    def needed_bytes(self, peak_bytes: int) -> int:
        return GPU.needed_bytes(peak_bytes)

    def fits_at_all(self, peak_bytes: int, device_bytes: int) -> bool:
        return GPU.fits_at_all(peak_bytes, device_bytes)


BACKEND = Cpu()

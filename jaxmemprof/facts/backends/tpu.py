"""The TPU backend (docs/jax-facts.md, "On a TPU": measured on a v5e chip): no
pool, no preallocation, no fraction variable (the GPU's do nothing here):
a program may use the whole ``bytes_limit`` (15.75 GiB of a v5e, the same
figure XLA:TPU's out-of-memory message prints as "available HBM"), and
XLA:TPU refuses at compile what cannot fit. "Fits" is therefore the peak
the step needs within ``bytes_limit``, no headroom added: what the chip ran.

Two counters: arrays (arguments, outputs, ``device_put``) are in
``bytes_in_use``/``peak_bytes_in_use``; the running program's temporaries
are a reservation in ``bytes_reserved``/``peak_bytes_reserved``: the
program's buffer assignment's temporaries in device memory (colour 0) plus
:data:`RESERVATION_BEYOND_ASSIGNMENT`, not XLA:TPU's
``memory_analysis().temp_size`` (so every temporaries figure on a TPU is
read from XLA's dump: jaxmemprof/xla/dump.reserved_figures). The chip's
own peak is their sum, an upper bound where the two high-water marks did not
coincide (in a training loop they nearly do). Python runs ahead of the chip
(async dispatch): outputs of queued steps are allocated at dispatch and show
in ``peak_bytes_in_use`` beyond what one step needs, bounded by donation, an
in-flight cap or a sync every few steps (:data:`INFLIGHT_CAP`)."""

from __future__ import annotations

from jaxmemprof.facts.backends.base import Backend, ChipPeak

# What bounds the outputs of queued steps, as code (measured on a v5e chip, a 512 MiB state, 16 steps
# undonated: peak_bytes_in_use 8,990 MiB by default, 2,126 MiB with N=2, 1,598 MiB with N=1).
INFLIGHT_CAP = "jax.config.update('jax_pjrt_client_create_options', {'max_inflight_computations': 2})"
INFLIGHT_MEASURED = "8,990 -> 2,126 MiB with 2, measured on a v5e chip"
# What the chip reserves for a program beyond its buffer assignment's temporaries (peak_bytes_reserved
# less them: the same on a ViT-B/16 step undonated and donated, v5e, libtpu 0.0.42.1). Not added to any
# figure: unexplained, and 15.5 KiB (docs/tpu.md, "The program's reservation").
RESERVATION_BEYOND_ASSIGNMENT = 15_872


class Tpu(Backend):
    name = "tpu"
    platforms = ("tpu",)
    keys = {"in_use": "bytes_in_use", "peak_in_use": "peak_bytes_in_use", "limit": "bytes_limit",
            "reserved": "bytes_reserved", "peak_reserved": "peak_bytes_reserved",
            "largest_free_block": "largest_free_block_bytes"}
    has_pool = False
    queue_advice = True
    fit_words = "the peak within the chip's bytes_limit (no pool: XLA:TPU refuses at compile what cannot fit)"

    def chip_peak(self, stats: dict) -> ChipPeak | None:
        in_use = stats.get(self.keys["peak_in_use"])
        if in_use is None:
            return None
        reserved = stats.get(self.keys["peak_reserved"])
        limit = stats.get(self.keys["limit"])
        total = int(in_use) + int(reserved or 0)
        return ChipPeak(total, int(in_use), None if reserved is None else int(reserved),
                        None if limit is None else int(limit), bool(reserved))


BACKEND = Tpu()

"""The chip's own counters beside the model: what the device's
``memory_stats()`` reached (the rows the sampler recorded in the journal's
``memory_stats`` table), read by the run's backend (jaxmemprof/facts/backends/),
beside what the step needs (the true peak, analysis/peaks.py), and the
difference named.

On a TPU (backends/tpu.py) the chip's peak is ``peak_bytes_in_use`` (arrays)
plus ``peak_bytes_reserved`` (the running program's reservation: XLA's
temporaries), an upper bound where the two high-water marks did not
coincide. The model says the same two parts: the arrays the call needs
(the bytes live outside it, its arguments and outputs) and XLA's
temporaries and code. Arrays in use beyond the model's are outputs of steps
Python dispatched ahead of the chip (async dispatch): counted in whole
generations of the largest call's new outputs (its outputs less what it
aliases), the rest padding and small buffers. A run with donated state has
no such generations: the outputs reuse the inputs.

One object, the report's ``Headline.chip`` (None where the backend
reports no counters: a CPU)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jaxmemprof.facts import truepeak
from jaxmemprof.facts.devices import display

if TYPE_CHECKING:
    from jaxmemprof.analysis.attributed import Attributed

# Outputs less aliased under this share of the call's outputs: the state is donated, no generation to count.
DONATED_SHARE = 0.05


def stats_by_device(run) -> dict:
    """device -> {key: the largest value recorded} (a high-water mark's last; a limit's constant)."""
    ms = getattr(run, "memory_stats", None)
    if ms is None or len(ms) == 0:
        return {}
    out: dict = {}
    for (device, key), value in ms.groupby(["device", "key"], sort=True)["value"].max().items():
        out.setdefault(str(device), {})[str(key)] = int(value)
    return out


def chip_counters(ar: Attributed, inside=None, needed_bytes: int | None = None,
                  busiest_live_bytes: int = 0) -> dict | None:
    """The counters beside the model (the keys: ``Headline.chip`` in
    docs/columns.md), read by the run's backend (``Attributed.backend``).
    ``inside``: the call at the true peak (peaks.CallPeak);
    ``needed_bytes``: the true peak on the busiest device;
    ``busiest_live_bytes``: the snapshots' peak on the busiest device."""
    stats, rule = stats_by_device(ar.run), ar.backend
    read = {d: rule.chip_peak(s) for d, s in stats.items()}
    read = {d: p for d, p in read.items() if p is not None}
    if not read:
        return None
    device = max(read, key=lambda d: (read[d].bytes, d))
    cp = read[device]
    out = {"backend": rule.name, "device": display(device), "chip_peak_bytes": cp.bytes, "peak_in_use_bytes": cp.in_use_bytes,
           "peak_reserved_bytes": cp.reserved_bytes, "bytes_limit": cp.limit_bytes,
           "share_of_limit": None if cp.share_of_limit is None else round(cp.share_of_limit, 4),
           "upper_bound": cp.upper_bound, "needed_bytes": needed_bytes, "over_needed_bytes": None,
           "over_needed_share": None, "arrays_needed_bytes": None, "temporaries_bytes": None, "queued_bytes": None,
           "queued_generations": None, "queued_function": None, "outputs_per_call_bytes": None, "other_bytes": None}
    if needed_bytes is None:
        return out
    out["over_needed_bytes"] = int(cp.bytes - needed_bytes)
    out["over_needed_share"] = round((cp.bytes - needed_bytes) / needed_bytes, 4) if needed_bytes else None
    in_call = inside is not None and inside.device_bytes > busiest_live_bytes and inside.figures
    fig = inside.figures if in_call else {}
    temporaries = truepeak.temporaries(fig)
    arrays = int(needed_bytes) - temporaries
    out["arrays_needed_bytes"], out["temporaries_bytes"] = arrays, temporaries
    if not rule.queue_advice:
        return out
    beyond = cp.in_use_bytes - arrays  # arrays in use the step does not need
    outputs = int(fig.get("output_bytes") or 0)
    new_outputs = truepeak.written(fig)
    if new_outputs < DONATED_SHARE * outputs:  # donated: a queued step's outputs reuse its inputs
        new_outputs = 0
    generations = max(int(beyond / new_outputs + 0.25), 0) if new_outputs > 0 and beyond > 0 else 0
    out.update({"queued_bytes": generations * new_outputs, "queued_generations": generations,
                "queued_function": inside.function if in_call else None,
                "outputs_per_call_bytes": new_outputs if in_call else None,
                "other_bytes": int(beyond - generations * new_outputs)})
    return out

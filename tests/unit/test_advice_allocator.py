"""analysis/advice/allocator.py on a CPU run: the peak it reads (the most
live bytes on one device: the CPU has no allocator statistics), held to what
the program counted on each device with jax.live_arrays(); a CPU run gets
no GPU settings."""

from __future__ import annotations

from jaxmemprof.analysis.advice.allocator import device_stats, estimate_peak, had_oom
from jaxmemprof.analysis.rules.allocator import allocator_findings
from jaxmemprof.analysis.timeline import timeline


def test_the_peak_is_the_busiest_devices_most_live_bytes(tiny_ar, oracle):
    per_device = [(b, d) for live in oracle["live"].values() for d, b in live.items()]
    most, device = max(per_device)
    peak = estimate_peak(tiny_ar)
    assert (peak.bytes, peak.source, peak.device) == (most, "device_live_bytes", device)
    assert not peak.has_temporaries
    given = estimate_peak(tiny_ar, true_peak_bytes=most + 1)  # the caller's estimate comes first
    assert (given.bytes, given.source, given.has_temporaries) == (most + 1, "true_peak_bytes", True)


def test_a_cpu_run_has_no_allocator_statistics_and_gets_no_settings(tiny, tiny_ar):
    assert tiny.manifest["backend"] == "cpu" and tiny.memory_stats.empty
    assert device_stats(timeline(tiny_ar, top_sites=0).devices) == []
    assert allocator_findings(tiny_ar) == [] and not had_oom(tiny)

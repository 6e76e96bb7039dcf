"""The allocator's settings: ``allocator-platform``, ``-fraction``,
``-preallocate``, ``-fragmentation`` and ``-env``, found here from the run's
environment, the allocator's statistics and the peak
(analysis/advice/allocator.py reads them), on a backend whose allocator
they are (a GPU's: jaxmemprof/facts/backends/, ``allocator_advice``); and in their
place on a TPU, ``queued-steps``: outputs of steps dispatched ahead of the
chip, from its own counters beside the true peak (analysis/counters.py),
and what bounds them."""

from __future__ import annotations

import re

import pandas as pd

from jaxmemprof.analysis.advice.allocator import (
    ALLOCATOR,
    DEFAULT_FRACTION,
    DOCS_URL,
    FRACTION,
    FRAGMENTATION_MIN,
    FRAGMENTATION_MIN_POOL_BYTES,
    GPU_BACKENDS,
    MAX_FRACTION_PERCENT,
    OLD_FRACTION,
    PREALLOCATE,
    PREALLOCATE_OFF,
    UNDERUSED_SHARE,
    DeviceStats,
    FractionConfig,
    PeakEstimate,
    device_stats,
    estimate_peak,
    fraction_config,
    fraction_env_name,
    fraction_fix,
    fraction_setting,
    had_oom,
    is_rocm,
    needed_bytes,
    percent_needed,
    preallocates,
    processes_per_device,
    reads_new_fraction_name,
    uses_bfc,
)
from jaxmemprof.facts import backends
from jaxmemprof.analysis.attributed import Attributed
from jaxmemprof.facts.backends.tpu import INFLIGHT_CAP, INFLIGHT_MEASURED
from jaxmemprof.analysis.findings import Finding
from jaxmemprof.analysis.rules.base import (LOWER_THE_PEAK, POOL_TRADE_OFF, TPU_DOCS, Context, Rule, Words, exact, fmt,
                                            peak_source, set_fraction)
from jaxmemprof.analysis.timeline import timeline as build_timeline
from jaxmemprof.units import format_bytes


def detect(ctx: Context) -> list[Finding]:
    return allocator_findings(ctx.ar, ctx.device_peak, timeline=ctx.tl) + queued_findings(ctx.ar)


def queued_findings(ar: Attributed) -> list[Finding]:
    """On a backend whose counters show the outputs of queued steps (a TPU):
    one finding when whole generations of the largest call's outputs were in
    use beyond what the step needs (analysis/counters.py)."""
    if not ar.backend.queue_advice:
        return []
    c = ar.chip
    if not c or not c.get("queued_generations"):
        return []
    share = c.get("share_of_limit")
    # no saving: bounding the queue lowers what the counters read, not what the step needs (the true peak)
    return [Finding(rule="queued-steps", severity="medium" if share is not None and share >= NEAR_LIMIT else "low",
                    facts={
                        "function": c["queued_function"], "generations": int(c["queued_generations"]),
                        "queued_bytes": int(c["queued_bytes"]), "outputs_per_call_bytes": int(c["outputs_per_call_bytes"]),
                        "device": c["device"], "chip_peak_bytes": int(c["chip_peak_bytes"]),
                        "peak_in_use_bytes": int(c["peak_in_use_bytes"]),
                        "peak_reserved_bytes": c.get("peak_reserved_bytes"), "bytes_limit": c.get("bytes_limit"),
                        "share_of_limit": share, "needed_bytes": int(c["needed_bytes"]),
                        "inflight_cap": INFLIGHT_CAP})]


NEAR_LIMIT = 0.95  # the counters at or above this share of bytes_limit: medium (they read as full)


def _queued(f: Finding, x: dict) -> Words:
    g, fn = x["generations"], x["function"]
    gens = f"{g} more generation{'s' if g > 1 else ''} of {fn}'s outputs"
    limit = x.get("bytes_limit")
    of = f" of {fmt(limit)} ({100 * x['chip_peak_bytes'] / limit:.2f} %)" if limit else ""
    return Words(
        brief=(f"{gens} ({fmt(x['queued_bytes'])}) were kept for steps queued ahead of the chip: its counters read "
               f"{fmt(x['chip_peak_bytes'])}{of} while the step needs {fmt(x['needed_bytes'])}."),
        brief_fix=f"donate {fn}'s state, or cap the steps in flight ({INFLIGHT_CAP})",
        message=(f"{gens} ({fmt(x['queued_bytes'])}, {fmt(x['outputs_per_call_bytes'])} each) were in use for steps "
                 f"Python dispatched ahead of the chip (async dispatch): the chip's counters read "
                 f"{fmt(x['chip_peak_bytes'])}{of} on {x['device']} while the step needs {fmt(x['needed_bytes'])}. "
                 "Not a failure by itself (near the limit the runtime waits for memory before it dispatches more), "
                 "but memory_stats() and XProf read it as used, and it is no headroom."),
        fix=(f"Donate {fn}'s state (the donate finding: each step's outputs then reuse its inputs, and no "
             f"generation is kept); or bound the queue before the first device use with {INFLIGHT_CAP} "
             f"({INFLIGHT_MEASURED}); or block on a step's output every few steps (jax.block_until_ready: public "
             f"training code keeps at most 2 steps in flight by blocking on step n-2). See {TPU_DOCS}"),
        evidence=(f"peak_bytes_in_use {exact(x['peak_in_use_bytes'])} + peak_bytes_reserved "
                  f"{exact(x.get('peak_reserved_bytes') or 0)} = {exact(x['chip_peak_bytes'])} (an upper bound: two "
                  f"high-water marks); the true peak {exact(x['needed_bytes'])}; arrays beyond the step's: {g} x "
                  f"{fn}'s outputs less aliased ({exact(x['outputs_per_call_bytes'])})"))


QUEUED_STEPS = Rule(
    "queued-steps", made_by="analysis/rules/allocator.py",
    finds=("On a TPU, whole generations of a call's outputs in use for steps queued ahead of the chip (async "
             "dispatch), beyond what the step needs: donate, cap the steps in flight, or sync every few steps "
             "(analysis/rules/allocator.py)."),
    facts={"": ("function", "generations", "queued_bytes", "outputs_per_call_bytes", "device", "chip_peak_bytes",
                "peak_in_use_bytes", "peak_reserved_bytes", "bytes_limit", "share_of_limit", "needed_bytes",
                "inflight_cap")},
    meanings={"function": "The jitted function at the true peak, whose outputs are counted.",
              "generations": "Whole generations of its new outputs in use beyond the step's arrays.",
              "queued_bytes": "`generations x outputs_per_call_bytes`.",
              "outputs_per_call_bytes": "Its outputs less what it aliases (donation), per device.",
              "device": "The device whose counters peaked highest.",
              "chip_peak_bytes": "`peak_bytes_in_use + peak_bytes_reserved` there: an upper bound.",
              "peak_in_use_bytes": "Its `peak_bytes_in_use` (arrays).",
              "peak_reserved_bytes": "Its `peak_bytes_reserved` (the running program's reservation).",
              "bytes_limit": "Its `bytes_limit`.",
              "share_of_limit": "`chip_peak_bytes / bytes_limit` (medium from 0.95).",
              "needed_bytes": "The true peak on the busiest device: what the step needs.",
              "inflight_cap": "The line that caps the computations in flight."},
    words={"": _queued},
)


def _platform(f: Finding, x: dict) -> Words:
    reasons = ["the run ran out of device memory" if r == "oom" else f"{r} fired" for r in x["because"]]
    return Words(
        brief="Measure what the program needs exactly, once, with XLA_PYTHON_CLIENT_ALLOCATOR=platform.",
        brief_fix="XLA_PYTHON_CLIENT_ALLOCATOR=platform for one (slow) measuring run",
        message=("To measure exactly how much device memory this program needs, run it once "
                 "with XLA_PYTHON_CLIENT_ALLOCATOR=platform."),
        fix=("XLA_PYTHON_CLIENT_ALLOCATOR=platform allocates exactly what is needed and frees it at once "
             "(no pool, no preallocation, the only mode that returns memory to the device): very slow, "
             f"a debugging aid for one measuring run, not a setting to keep. See {DOCS_URL}"),
        evidence="why: " + "; ".join(reasons) + f"; peak used here: {fmt(x['peak_bytes'])} from {peak_source(x)}")


def _fraction_evidence(x: dict) -> str:
    variable = x.get("fraction_variable")
    from_what = f"{variable}={x.get('fraction_value')}" if variable else f"the default {DEFAULT_FRACTION:.2f}"
    return (f"peak {exact(x['peak_bytes'])}, from {peak_source(x)}; with headroom (+5 % + 64 MiB) "
            f"{exact(x['needed_bytes'])}; bytes_limit on {x['device']} {exact(x['bytes_limit'])} = "
            f"{x['fraction']:.2f} ({from_what}) x about {fmt(x['device_bytes'])} of device memory; fraction needed "
            f"{x['fraction_needed']:.2f}")


def _fraction_raise(f: Finding, x: dict) -> Words:
    return Words(
        brief=f"The peak needs {fmt(x['needed_bytes'])} but the pool's limit on {x['device']} is "
              f"{fmt(x['bytes_limit'])}.",
        brief_fix=set_fraction(x),
        message=(f"The peak needs {fmt(x['needed_bytes'])} with headroom but the allocator's limit on "
                 f"{x['device']} is {fmt(x['bytes_limit'])}: raise the memory fraction to {x['setting']}."),
        fix=(f"Set {set_fraction(x)}. Trade-off: {POOL_TRADE_OFF}; above "
             f"{fraction_setting(MAX_FRACTION_PERCENT)} they may fail to allocate. See {DOCS_URL}"),
        evidence=_fraction_evidence(x))


def _fraction_cannot(f: Finding, x: dict) -> Words:
    pct = round(x["fraction_needed"] * 100)
    most = fraction_setting(MAX_FRACTION_PERCENT)
    return Words(
        brief=f"The peak needs {fmt(x['needed_bytes'])}, {pct} % of the {fmt(x['device_bytes'])} device: "
              f"no memory fraction holds it.",
        brief_fix="lower the peak (donation, jax.checkpoint, smaller batches, sharding) or use a larger device",
        message=(f"The peak needs {fmt(x['needed_bytes'])} with headroom, {pct} % of the {fmt(x['device_bytes'])} "
                 f"device: no memory fraction up to {most} holds it."),
        fix=(f"{LOWER_THE_PEAK} TF_FORCE_UNIFIED_MEMORY=1 with {x['fraction_env_name']} above 1 lets the pool "
             f"spill into host memory, at a large cost in speed. See {DOCS_URL}"),
        evidence=_fraction_evidence(x))


def _preallocate_shared(f: Finding, x: dict) -> Words:
    n, frac, need = x["processes"], x["fraction"], x["needed_bytes"]
    evidence = (f"{n} processes on one GPU; fraction {frac:.2f} ({x.get('fraction_variable') or 'default'}); "
                f"{PREALLOCATE}={x.get('preallocate') or 'unset (true)'}; this process's peak "
                f"{fmt(x['peak_bytes'])} from {peak_source(x)}, {fmt(need)} with headroom")
    fix = (f"Set {PREALLOCATE}=false in each process (memory is allocated on demand: more prone to "
           "fragmentation, and freed memory stays with its process), or give each process "
           f"{set_fraction(x)} ({MAX_FRACTION_PERCENT} % / {n})")
    total, each = x.get("device_bytes"), x.get("bytes_each")
    if total:
        evidence += f"; device about {fmt(total)}, {fmt(each)} each at {x['share']}"
        if need <= each:
            fix += f", which holds this process's peak ({fmt(need)} with headroom)."
        else:
            fix += (f". Neither is enough if every process peaks like this one: {n} x {fmt(need)} = "
                    f"{fmt(n * need)} is more than {fraction_setting(MAX_FRACTION_PERCENT)} of the "
                    f"{fmt(total)} GPU; run fewer processes per GPU or lower the peak.")
    else:
        fix += "."
    return Words(
        brief=f"{n} processes share one GPU and each preallocates {frac:.0%} of it.",
        brief_fix=f"{PREALLOCATE}=false in each process, or {x['set']} each",
        message=(f"{n} processes share one GPU and each preallocates {frac:.0%} of it: "
                 f"together they ask for {frac * n:.0%} of its memory."),
        fix=fix + f" See {DOCS_URL}", evidence=evidence)


def _preallocate_underused(f: Finding, x: dict) -> Words:
    pool, need, peak = x["pool_bytes"], x["needed_bytes"], x["peak_bytes"]
    return Words(
        brief=f"The peak is {peak / pool:.0%} of the {fmt(pool)} pool preallocated on {x['device']}.",
        brief_fix=f"only if something else needs the GPU: {PREALLOCATE}=false, or {x['set']}",
        message=(f"The peak ({fmt(peak)}) is {peak / pool:.0%} of the {fmt(pool)} pool preallocated on "
                 f"{x['device']}: {fmt(pool - need)} of it is never needed."),
        fix=("Only worth changing if something else needs the GPU: set "
             f"{PREALLOCATE}=false to allocate on demand (more prone to fragmentation; freed memory stays with "
             f"the process), or keep preallocation and set {set_fraction(x)} to preallocate only what the peak "
             f"needs. See {DOCS_URL}"),
        evidence=(f"peak {exact(peak)}, from {peak_source(x)}; pool {fmt(pool)} ({pool} bytes; fraction "
                  f"{x['fraction']:.2f}); with headroom (+5 % + 64 MiB) the peak needs {fmt(need)} = "
                  f"{x['fraction_needed']:.2f} of the device; threshold: peak below {UNDERUSED_SHARE:.0%} of the pool"))


def _fragmentation(f: Finding, x: dict) -> Words:
    fix = ("Set TF_GPU_ALLOCATOR=cuda_malloc_async: CUDA's stream-ordered allocator (cudaMallocAsync, CUDA "
           "11.2 or later) replaces the BFC pool and its fragmentation. Trade-off: no preallocated pool "
           "(memory is taken from the device as needed), speed may differ (measure), and the BFC "
           "statistics (pool_bytes, largest_free_block_bytes) are no longer reported. BFC's own "
           "out-of-memory message suggests it when fragmentation is the cause.")
    if not x.get("preallocates"):
        fix += (f" Preallocation is off ({PREALLOCATE}={x.get('preallocate')}), which JAX's documentation "
                "says is more prone to fragmentation: turning it back on is the first thing to try.")
    return Words(
        brief=f"The pool on {x['device']} was {x['fragmentation']:.0%} fragmented: {fmt(x['free_bytes'])} free, "
              f"largest block {fmt(x['largest_free_block_bytes'])}.",
        brief_fix="TF_GPU_ALLOCATOR=cuda_malloc_async" if x.get("preallocates")
        else f"turn preallocation back on ({PREALLOCATE} unset), or TF_GPU_ALLOCATOR=cuda_malloc_async",
        message=(f"The allocator pool on {x['device']} was {x['fragmentation']:.0%} fragmented at snapshot "
                 f"{x['snapshot']}: {fmt(x['free_bytes'])} free, but the largest free block is "
                 f"{fmt(x['largest_free_block_bytes'])}."),
        fix=fix + f" See {DOCS_URL}",
        evidence=(f"pool_bytes {exact(x['pool_bytes'])}, bytes_in_use {exact(x['bytes_in_use'])}, "
                  f"largest_free_block_bytes {exact(x['largest_free_block_bytes'])}; fragmentation = (pool - in use "
                  f"- largest free block) / (pool - in use) = {x['fragmentation']:.2f}; threshold "
                  f"{FRAGMENTATION_MIN:.2f} on pools of {format_bytes(FRAGMENTATION_MIN_POOL_BYTES)} or more"))


def _version(x: dict) -> str:
    return x.get("jaxlib_version") or "(unknown version)"


def _env_both_refused(f: Finding, x: dict) -> Words:
    where = {
        "gpu": "yet this run reports a GPU backend: was the environment changed after JAX started?",
        "other-platforms": (f"this run asked for JAX_PLATFORMS={x.get('jax_platforms')}; a GPU run with this "
                            "environment would start without its CUDA backend"),
    }.get(x.get("backend_seen"), f"this run used the {x.get('backend') or 'unknown'} backend, which that failure "
                                 f"may explain")
    return Words(
        brief=f"Both {FRACTION} and {OLD_FRACTION} are set: JAX then starts without its CUDA backend.",
        brief_fix=f"unset {OLD_FRACTION}",
        message=(f"Both {FRACTION}={x['fraction_value']} and {OLD_FRACTION}={x['old_fraction_value']} are set: jaxlib "
                 f"{_version(x)} raises ValueError when both are, and JAX then starts without its CUDA backend."),
        fix=f"Unset {OLD_FRACTION} (deprecated) and keep {FRACTION}={x['fraction_value']}. See {DOCS_URL}",
        evidence=(f"jaxlib 0.4.32 and later read {FRACTION} and refuse {OLD_FRACTION} beside it "
                  "(jaxlib/xla_client.py, generate_pjrt_gpu_plugin_options); the CUDA plugin calls it while "
                  "initialising and JAX only logs the error ('Jax plugin configuration error'); " + where))


def _env_both_old(f: Finding, x: dict) -> Words:
    return Words(
        brief=f"Both {FRACTION} and {OLD_FRACTION} are set: jaxlib {_version(x)} reads only {OLD_FRACTION}.",
        brief_fix=f"unset {FRACTION}",
        message=(f"Both {FRACTION}={x['fraction_value']} and {OLD_FRACTION}={x['old_fraction_value']} are set: jaxlib "
                 f"{_version(x)} reads only {OLD_FRACTION}, and jaxlib 0.4.32 and later refuse the two together."),
        fix=(f"Unset {FRACTION} and keep {OLD_FRACTION}={x['old_fraction_value']} while on jaxlib {_version(x)}; after "
             f"upgrading to 0.4.32 or later, rename it to {FRACTION}. See {DOCS_URL}"),
        evidence=(f"jaxlib before 0.4.32 reads only {OLD_FRACTION} (jaxlib/xla_client.py of 0.4.31); "
                  "from 0.4.32 on, both set raise ValueError"))


def _env_ignored(f: Finding, x: dict) -> Words:
    return Words(
        brief=f"{FRACTION} is ignored: jaxlib {_version(x)} reads only {OLD_FRACTION}.",
        brief_fix=f"{OLD_FRACTION}={x['fraction_value']} instead",
        message=(f"{FRACTION}={x['fraction_value']} is ignored: jaxlib {_version(x)} reads only {OLD_FRACTION}, so the "
                 f"pool used the default fraction {DEFAULT_FRACTION:.2f}."),
        fix=f"Set {OLD_FRACTION}={x['fraction_value']} instead (and unset {FRACTION}), or upgrade jaxlib. See {DOCS_URL}",
        evidence=f"{FRACTION} is read from jaxlib 0.4.32 on (jaxlib/xla_client.py)")


def _env_spelling(f: Finding, x: dict) -> Words:
    return Words(
        brief=f"{PREALLOCATE}={x['preallocate']} leaves preallocation on.",
        brief_fix=f"{PREALLOCATE}=false",
        message=(f"{PREALLOCATE}={x['preallocate']} leaves preallocation on: jaxlib turns it off only for "
                 "false, False or 0."),
        fix=f"Set {PREALLOCATE}=false. See {DOCS_URL}",
        evidence="jaxlib/xla_client.py: preallocate = value not in ('false', 'False', '0')")


ALLOCATOR_PLATFORM = Rule(
    "allocator-platform", made_by="analysis/rules/allocator.py",
    finds=("Measure exact use once with `XLA_PYTHON_CLIENT_ALLOCATOR=platform`, after another allocator finding "
             "or an OOM (analysis/rules/allocator.py)."),
    facts={"": ("because", "peak_bytes", "peak_source", "peak_device")},
    meanings={"peak_bytes": "The peak used: the best of `peak_source`, on the busiest device.",
              "because": ("Why: `oom` (the run ran out of memory) and the rules that fired (`allocator-fraction`, "
                          "`allocator-fragmentation`).")},
    words={"": _platform},
)


ALLOCATOR_FRACTION = Rule(
    "allocator-fraction", made_by="analysis/rules/allocator.py",
    finds=("The peak needs more than the allocator's limit: raise the fraction (case `raise`), or no fraction "
             "holds it (case `cannot`) (analysis/rules/allocator.py)."),
    facts={"raise": ("peak_bytes", "peak_source", "peak_device", "needed_bytes", "device", "bytes_limit", "fraction",
                     "fraction_variable", "fraction_value", "device_bytes", "fraction_needed", "setting", "set",
                     "unset", "jaxlib_version"),
           "cannot": ("peak_bytes", "peak_source", "peak_device", "needed_bytes", "device", "bytes_limit", "fraction",
                      "fraction_variable", "fraction_value", "device_bytes", "fraction_needed", "fraction_env_name")},
    meanings={"peak_bytes": "The peak used: the best of `peak_source`, on the busiest device.",
              "device": "The device whose limit is checked.",
              "bytes_limit": "That device's allocator limit (the last recorded).",
              "fraction": "The pool fraction in effect (0.75 when no variable sets it).",
              "fraction_variable": "The variable the fraction came from; null for XLA's default.",
              "fraction_value": "That variable's value as set; null when none is.",
              "device_bytes": "The device's memory, estimated as `bytes_limit / fraction`.",
              "setting": "The fraction to set (`.82`).",
              "set": "The assignment to make, naming the variable that jaxlib reads (`XLA_CLIENT_MEM_FRACTION=.82`).",
              "unset": "The other fraction variable, to unset, when the environment has it; else empty.",
              "jaxlib_version": "The jaxlib version the run recorded.",
              "fraction_env_name": "The fraction variable that jaxlib reads."},
    words={"raise": _fraction_raise, "cannot": _fraction_cannot},
)


ALLOCATOR_PREALLOCATE = Rule(
    "allocator-preallocate", made_by="analysis/rules/allocator.py",
    finds=("Preallocate less: processes sharing a GPU (case `shared`), or a peak far below the pool (case "
             "`underused`) (analysis/rules/allocator.py)."),
    facts={"shared": ("peak_bytes", "peak_source", "peak_device", "processes", "fraction", "fraction_variable",
                      "preallocate", "needed_bytes", "share", "share_percent", "device_bytes", "bytes_each", "set",
                      "unset", "jaxlib_version"),
           "underused": ("peak_bytes", "peak_source", "peak_device", "device", "pool_bytes", "fraction",
                         "needed_bytes", "fraction_needed", "set", "unset", "jaxlib_version")},
    meanings={"peak_bytes": "The peak used: the best of `peak_source`, on the busiest device.",
              "processes": "Processes that share one GPU.",
              "fraction": "The pool fraction in effect (0.75 when no variable sets it).",
              "fraction_variable": "The variable the fraction came from; null for XLA's default.",
              "preallocate": "`XLA_PYTHON_CLIENT_PREALLOCATE` as set (empty: unset, which preallocates).",
              "share": "The fraction to give each process, as set (`.47`: 95 % over the processes).",
              "share_percent": "That share in percent.",
              "device_bytes": "The device's memory, estimated as `bytes_limit / fraction`; null when unknown.",
              "bytes_each": "Bytes of the device each process gets at `share`; null when unknown.",
              "device": "The device whose pool is checked.",
              "pool_bytes": "Its pool (or its limit, without pool statistics).",
              "set": "The fraction assignment to make, naming the variable that jaxlib reads.",
              "unset": "The other fraction variable, to unset, when the environment has it; else empty.",
              "jaxlib_version": "The jaxlib version the run recorded."},
    words={"shared": _preallocate_shared, "underused": _preallocate_underused},
)


ALLOCATOR_FRAGMENTATION = Rule(
    "allocator-fragmentation", made_by="analysis/rules/allocator.py",
    finds="A pool of 1 GiB or more at least 30 % fragmented (analysis/rules/allocator.py).",
    facts={"": ("device", "snapshot", "fragmentation", "pool_bytes", "bytes_in_use", "largest_free_block_bytes",
                "free_bytes", "preallocate", "preallocates")},
    meanings={"device": "The device at its worst fragmentation.",
              "snapshot": "The snapshot of that worst fragmentation.",
              "fragmentation": "Its `fragmentation` then, 0 to 1 (reported from 0.30).",
              "pool_bytes": "Its `pool_bytes` then.",
              "bytes_in_use": "Its `bytes_in_use` then.",
              "largest_free_block_bytes": "Its `largest_free_block_bytes` then.",
              "free_bytes": "`pool_bytes - bytes_in_use`.",
              "preallocate": "`XLA_PYTHON_CLIENT_PREALLOCATE` as set (empty: unset).",
              "preallocates": "True when the allocator preallocates its pool (BFC, preallocation not turned off)."},
    words={"": _fragmentation},
)


ALLOCATOR_ENV = Rule(
    "allocator-env", made_by="analysis/rules/allocator.py",
    finds=("The allocation environment is wrong for the jaxlib that ran (cases `both-refused`, "
             "`both-old-jaxlib`, `new-name-ignored`, `preallocate-spelling`) (analysis/rules/allocator.py)."),
    facts={"both-refused": ("fraction_value", "old_fraction_value", "jaxlib_version", "backend", "backend_seen",
                            "jax_platforms"),
           "both-old-jaxlib": ("fraction_value", "old_fraction_value", "jaxlib_version"),
           "new-name-ignored": ("fraction_value", "old_fraction_value", "jaxlib_version"),
           "preallocate-spelling": ("preallocate",)},
    meanings={"fraction_value": "`XLA_CLIENT_MEM_FRACTION` as set (a string; empty when unset).",
              "old_fraction_value": "`XLA_PYTHON_CLIENT_MEM_FRACTION` as set (a string; empty when unset).",
              "jaxlib_version": "The jaxlib version the run recorded.",
              "backend": "The backend the run used.",
              "backend_seen": ("`gpu` (a GPU backend ran nonetheless), `other-platforms` (`JAX_PLATFORMS` asked "
                               "for none) or `other`."),
              "jax_platforms": "`JAX_PLATFORMS` as set (empty when unset).",
              "preallocate": ("`XLA_PYTHON_CLIENT_PREALLOCATE` as set: a value jaxlib reads as true (`no`, `off`, "
                              "...).")},
    words={"both-refused": _env_both_refused, "both-old-jaxlib": _env_both_old, "new-name-ignored": _env_ignored, "preallocate-spelling": _env_spelling},
)


def allocator_findings(ar: Attributed, true_peak_bytes: int | None = None, *, processes_per_gpu: int | None = None,
                       timeline=None) -> list[Finding]:
    """Allocator advice for a GPU run (``[]`` for other backends, but see the
    module docstring). ``true_peak_bytes``: the estimated peak on the busiest
    device, XLA temporaries included, where known. ``processes_per_gpu``:
    how many processes share one GPU, when the caller knows (otherwise read
    from the run, :func:`processes_per_device`). ``timeline``: the run's
    Timeline, if already computed."""
    run = ar.run
    m = run.manifest or {}
    env = {str(k): str(v) for k, v in (m.get("environment") or {}).items()}
    jaxlib = m.get("jaxlib_version")
    backend = str(m.get("backend") or "").lower()
    if not backends.get(backend).allocator_advice:  # the GPU's allocator variables are the GPU's alone
        return both_fractions_findings(env, jaxlib, backend)
    found = env_findings(env, jaxlib, backend=backend)

    devices = (timeline if timeline is not None else build_timeline(ar, top_sites=0)).devices
    peak = estimate_peak(ar, true_peak_bytes, devices)
    stats = device_stats(devices)
    frac = fraction_config(env, jaxlib)
    oom = had_oom(run)
    n = int(processes_per_gpu) if processes_per_gpu else processes_per_device(run)

    capacity = _fraction_rule(env, jaxlib, peak, stats, frac, oom)
    found += capacity
    found += _preallocate_rule(env, jaxlib, peak, stats, frac, n)
    fragmentation = [] if is_rocm(m) else _fragmentation_rule(env, devices, oom)
    found += fragmentation

    reasons = ["oom"] if oom else []
    reasons += [f.rule for f in capacity + fragmentation]
    if reasons and (env.get(ALLOCATOR) or "").lower() != "platform":
        found.append(Finding(rule="allocator-platform", severity="info",
                             facts={"because": reasons, **peak.facts()}))
    return found


def _limit_for(peak: PeakEstimate, stats: list[DeviceStats]) -> DeviceStats | None:
    with_limit = [s for s in stats if s.bytes_limit]
    if not with_limit:
        return None
    if peak.device is not None:
        for s in with_limit:
            if s.device == peak.device:
                return s
    return min(with_limit, key=lambda s: (s.bytes_limit, s.device))


def _fraction_rule(env, jaxlib, peak: PeakEstimate, stats, frac: FractionConfig, oom: bool) -> list[Finding]:
    dev = _limit_for(peak, stats)
    if dev is None or peak.bytes <= 0:
        return []
    limit = dev.bytes_limit
    need = needed_bytes(peak.bytes)
    if need <= limit:
        return []
    total = int(round(limit / frac.value))
    pct = percent_needed(need, total)
    facts = {**peak.facts(), "needed_bytes": need, "device": dev.device, "bytes_limit": limit,
             "fraction": frac.value, "fraction_variable": frac.variable,
             "fraction_value": env.get(frac.variable) if frac.variable else None,
             "device_bytes": total, "fraction_needed": pct / 100}
    if pct <= MAX_FRACTION_PERCENT:
        setting = fraction_setting(pct)
        return [Finding(rule="allocator-fraction", case="raise", severity="high" if (peak.bytes > limit or oom)
                        else "medium", facts=facts | {"setting": setting, **fraction_fix(env, jaxlib, setting)})]
    return [Finding(rule="allocator-fraction", case="cannot", severity="high",
                    facts=facts | {"fraction_env_name": fraction_env_name(jaxlib)})]


def _preallocate_rule(env, jaxlib, peak: PeakEstimate, stats, frac: FractionConfig, n: int) -> list[Finding]:
    if not preallocates(env):
        return []
    dev = _limit_for(peak, stats)
    pool = None
    if dev is not None:
        pool = dev.pool_bytes or dev.bytes_limit
    if n > 1 and frac.value * n * 100 > MAX_FRACTION_PERCENT:
        share = MAX_FRACTION_PERCENT // n
        total = int(round(dev.bytes_limit / frac.value)) if dev is not None and dev.bytes_limit else None
        return [Finding(rule="allocator-preallocate", case="shared", severity="high", facts={
            **peak.facts(), "processes": n, "fraction": frac.value, "fraction_variable": frac.variable,
            "preallocate": env.get(PREALLOCATE) or "", "needed_bytes": needed_bytes(peak.bytes),
            "share": fraction_setting(share), "share_percent": share, "device_bytes": total,
            "bytes_each": total * share // 100 if total else None,
            **fraction_fix(env, jaxlib, fraction_setting(share))})]
    if not pool or peak.bytes <= 0 or peak.bytes >= UNDERUSED_SHARE * pool:
        return []
    need = needed_bytes(peak.bytes)
    total = int(round(dev.bytes_limit / frac.value)) if dev.bytes_limit else pool
    pct = percent_needed(need, total)
    return [Finding(rule="allocator-preallocate", case="underused", severity="low", saving_bytes=int(pool - need),
                    facts={**peak.facts(), "device": dev.device, "pool_bytes": pool, "fraction": frac.value,
                           "needed_bytes": need, "fraction_needed": pct / 100,
                           **fraction_fix(env, jaxlib, fraction_setting(pct))})]


def _fragmentation_rule(env, devices: pd.DataFrame, oom: bool) -> list[Finding]:
    if not uses_bfc(env) or devices.empty or "fragmentation" not in devices:
        return []
    d = devices.dropna(subset=["fragmentation", "pool_bytes", "bytes_in_use", "largest_free_block_bytes"])
    d = d[(d["pool_bytes"].astype("int64") >= FRAGMENTATION_MIN_POOL_BYTES) & (d["fragmentation"] >= FRAGMENTATION_MIN)]
    if d.empty:
        return []
    row = d.loc[d["fragmentation"].astype(float).idxmax()]
    pool, used, largest = int(row["pool_bytes"]), int(row["bytes_in_use"]), int(row["largest_free_block_bytes"])
    return [Finding(rule="allocator-fragmentation", severity="high" if oom else "medium",
                    saving_bytes=int(pool - used - largest), facts={
                        "device": str(row["device"]), "snapshot": int(row["snapshot"]),
                        "fragmentation": float(row["fragmentation"]), "pool_bytes": pool, "bytes_in_use": used,
                        "largest_free_block_bytes": largest, "free_bytes": pool - used,
                        "preallocate": env.get(PREALLOCATE) or "", "preallocates": preallocates(env)})]


def both_fractions_findings(env: dict, jaxlib_version: str | None, backend: str = "gpu") -> list[Finding]:
    """Both fraction variables set under a jaxlib that refuses them together:
    the CUDA plugin fails to initialise, whatever the backend that then ran
    (``backend_seen``: ``gpu`` when a GPU backend ran nonetheless,
    ``other-platforms`` when JAX_PLATFORMS asked for none, else ``other``)."""
    new, old = env.get(FRACTION) or "", env.get(OLD_FRACTION) or ""
    if not (new and old and reads_new_fraction_name(jaxlib_version)):
        return []
    platforms = (env.get("JAX_PLATFORMS") or "").lower()
    if backend in GPU_BACKENDS:
        seen = "gpu"
    elif platforms and not re.search(r"\b(cuda|gpu)\b", platforms):
        seen = "other-platforms"
    else:
        seen = "other"
    return [Finding(rule="allocator-env", case="both-refused", severity="high", facts={
        "fraction_value": new, "old_fraction_value": old, "jaxlib_version": jaxlib_version, "backend": backend,
        "backend_seen": seen, "jax_platforms": env.get("JAX_PLATFORMS") or ""})]


def env_findings(env: dict, jaxlib_version: str | None, backend: str = "gpu") -> list[Finding]:
    """Problems of the allocation environment itself for that jaxlib
    (rule ``allocator-env``)."""
    out = both_fractions_findings(env, jaxlib_version, backend)
    new, old = env.get(FRACTION) or "", env.get(OLD_FRACTION) or ""
    facts = {"fraction_value": new, "old_fraction_value": old, "jaxlib_version": jaxlib_version}
    if new and old and not reads_new_fraction_name(jaxlib_version):
        out.append(Finding(rule="allocator-env", case="both-old-jaxlib", severity="medium", facts=facts))
    elif new and not reads_new_fraction_name(jaxlib_version):
        out.append(Finding(rule="allocator-env", case="new-name-ignored", severity="medium", facts=facts))
    pre = env.get(PREALLOCATE)
    if pre and pre not in PREALLOCATE_OFF and pre.lower() in ("false", "no", "off", "n", "f"):
        out.append(Finding(rule="allocator-env", case="preallocate-spelling", severity="medium",
                           facts={"preallocate": pre}))
    return out


RULES = (ALLOCATOR_PLATFORM, ALLOCATOR_FRACTION, ALLOCATOR_PREALLOCATE, ALLOCATOR_FRAGMENTATION, ALLOCATOR_ENV,
         QUEUED_STEPS)

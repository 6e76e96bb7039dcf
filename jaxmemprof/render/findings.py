"""Findings in words: the one place that turns a finding's facts into text.

Each rule (and case) has a template that gives five pieces:

- ``brief`` and ``brief_fix``: one sentence and the change to make, short
  enough for the terminal (``report``, ``run``'s summary);
- ``message``, ``fix`` and ``evidence``: the full sentences, with the
  trade-offs and every figure behind the finding (``report --explain``,
  JSON, CSV).

A rule without a template (one added by a caller's ``extra_rules``) may put
its own words in its facts under those names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from jaxmemprof.analysis.advice.allocator import (
    DEFAULT_FRACTION,
    DOCS_URL,
    FRACTION,
    FRAGMENTATION_MIN,
    FRAGMENTATION_MIN_POOL_BYTES,
    MAX_FRACTION_PERCENT,
    OLD_FRACTION,
    PREALLOCATE,
    UNDERUSED_SHARE,
    fraction_setting,
)
from jaxmemprof.analysis.findings import Finding, ranked
from jaxmemprof.units import format_bytes

DONATION_DOCS = "https://docs.jax.dev/en/latest/faq.html#buffer-donation"
COLUMNS = ["rule", "case", "severity", "site", "saving_bytes", "message", "fix", "evidence", "brief", "brief_fix",
           "facts"]
CAPACITY_EXCLUDES = ("library workspaces (cuDNN, cuBLAS, NCCL), the CUDA context and allocator fragmentation "
                     "are not in this estimate")


@dataclass(frozen=True)
class Words:
    brief: str
    brief_fix: str
    message: str
    fix: str
    evidence: str
    saves: str = ""  # what acting on it saves, in words, where "saves N" alone would mislead


def words(f: Finding) -> Words:
    template = _TEMPLATES.get((f.rule, f.case)) or _TEMPLATES.get((f.rule, ""))
    if template is None:
        message = str(f.fact("message", f.rule))
        fix = str(f.fact("fix", ""))
        return Words(str(f.fact("brief", message)), str(f.fact("brief_fix", fix)), message, fix,
                     str(f.fact("evidence", "")))
    w = template(f, f.facts)
    elsewhere = f.fact("peak_elsewhere")
    if elsewhere:  # analysis/findings.py by_effect: the run's peak is in another function's call
        w = Words(brief=f"{w.brief} (not at the run's peak)", brief_fix=w.brief_fix,
                  message=f"{w.message} This does not lower the run's peak, which is {elsewhere}.",
                  fix=w.fix, evidence=w.evidence)
    return w


def records(findings: list[Finding]) -> list[dict]:
    """One dict per finding, ranked: its facts (as data) beside its words."""
    out = []
    for f in ranked(findings):
        w = words(f)
        out.append({"rule": f.rule, "case": f.case, "severity": f.severity, "site": f.site,
                    "saving_bytes": f.saving_bytes, "message": w.message, "fix": w.fix, "evidence": w.evidence,
                    "brief": w.brief, "brief_fix": w.brief_fix, "facts": dict(f.facts)})
    return out


def table(findings: list[Finding]):
    """The findings as rows (findings.csv): the facts as one JSON cell."""
    import pandas as pd

    rows = records(findings)
    for r in rows:
        r["facts"] = json.dumps(r["facts"], sort_keys=True, default=str)
    df = pd.DataFrame(rows, columns=COLUMNS)
    df["saving_bytes"] = df["saving_bytes"].astype("Int64")
    return df


# -- shared phrases --------------------------------------------------------------------


def _b(n) -> str:
    return "?" if n is None else format_bytes(n)


def _exact(n) -> str:
    """Bytes in units and exactly: ``1.00 GiB (1073741824 bytes)``."""
    return f"{_b(n)} ({n} bytes)"


def _peak_source(facts: dict) -> str:
    device = facts.get("peak_device")
    return {
        "estimated_true_peak_bytes": "the estimated true peak (XLA temporaries included)",
        "peak_bytes_in_use": f"the allocator's high-water mark (peak_bytes_in_use) on {device}",
        "device_live_bytes": f"the most live array bytes on {device} in a snapshot (XLA temporaries not included)",
        "live_bytes": "the most live bytes in a snapshot (XLA temporaries not included)",
    }.get(facts.get("peak_source"), str(facts.get("peak_source")))


def _set_fraction(facts: dict) -> str:
    """``NAME=.80``, and the other name to unset where the run sets it."""
    text = facts["set"]
    if facts.get("unset"):
        why = ("jaxlib raises ValueError when both are set" if text.startswith(FRACTION + "=")
               else f"jaxlib {facts.get('jaxlib_version')} does not read it")
        text += f" and unset {facts['unset']} ({why})"
    return text


def _list(names) -> str:
    return ", ".join(str(n) for n in names)


_LOWER_THE_PEAK = ("Lower the peak (donate arguments, rematerialise with jax.checkpoint, smaller batches, shard "
                   "over more devices) or use a device with more memory.")
_POOL_TRADE_OFF = ("What the pool takes, other processes and the libraries outside it (CUDA context, cuDNN/cuBLAS "
                   "workspaces, NCCL) cannot have")


# -- leaks and recompiles ---------------------------------------------------------------


def _leak(f: Finding, x: dict) -> Words:
    per_s = _b(x["growth_bytes_per_s"]) if x.get("growth_bytes_per_s") is not None else "?"
    if x.get("growth_bytes_per_step") is not None:
        rate = f"{format_bytes(x['growth_bytes_per_step'])} per step ({per_s}/s)"
        horizon = f"{x['projected_steps']} more steps"
    else:
        rate = f"{per_s}/s"
        horizon = f"another {float(x.get('projected_seconds') or 0):.1f} s"
    share = x.get("projected_share_of_peak") or 0.0
    evidence = (f"{_b(x['live_bytes_first'])} -> {_b(x['live_bytes_last'])} over {x['snapshots_used']} snapshots "
                f"({x['arrays_last']} arrays alive at the last); Mann-Kendall tau {x['tau']:.2f}, "
                f"p = {x['p_value']:.2g}; projected {_b(x['projected_bytes_after'])} after {horizon} "
                f"(+{_b(x['projected_growth_bytes'])}" + (f", {share:.0%} of the run's peak)" if share else ")"))
    fix = (f"Find what keeps the arrays made at {f.site} alive: an array appended to a list or stored "
           "in a dict each step (e.g. losses kept for logging: keep a Python float via float() or "
           "jax.device_get, or only the last few), a cache that is never evicted, or a closure or "
           "global holding them.")
    return Words(
        brief=f"Live memory made here grows {rate}, steadily across the run.",
        saves=f"saves {_b(x['projected_growth_bytes'])} over {horizon}",
        brief_fix="keep a Python float (float(x)) or the last few arrays, not every step's; evict caches",
        message=f"Live memory at {f.site} keeps growing: {rate}.", fix=fix, evidence=evidence)


def _recompile(f: Finding, x: dict) -> Words:
    what = x.get("name") or "executables"
    count = x["executables"]
    evidence = (f"{count} executables loaded at most; {x['first_count']} when first seen (snapshot "
                f"{x['first_snapshot']}), {x['last_count']} at the last snapshot; generated code "
                f"{_b(x['generated_code_bytes'])}")
    fix = ("Each new input shape, dtype or static-argument value compiles the function again: pad or "
           "bucket shapes to a few sizes, keep changing Python values out of static_argnums (equinox's "
           "filter_jit makes every non-array argument static: pass a changing number as an array, "
           "jnp.asarray(lr)), and create jax.jit(f) once, outside loops.")
    return Words(brief=f"{what} was compiled {count} times.",
                 brief_fix="keep shapes and static arguments to a few values (pad or bucket); jit once, outside loops",
                 message=f"{what} was compiled {count} times at {f.site}.", fix=fix, evidence=evidence)


def _rejit(f: Finding, x: dict) -> Words:
    count = x["functions"]
    fix = ("Create the jitted function once, outside the loop (at module level, or before the loop), "
           "and pass what changes as arguments.")
    return Words(brief=f"{x['function']} was jitted {count} times: each new one is traced and compiled again.",
                 brief_fix="create the jitted function once, outside the loop, and pass what changes as arguments",
                 message=f"{x['function']} was jitted {count} times at {f.site}: each new jitted function is traced "
                         f"and compiled again.",
                 fix=fix,
                 evidence=f"{count} jitted functions made on that line, {x['after_setup']} of them after the setup")


# -- donation ---------------------------------------------------------------------------


def _arguments(x: dict) -> str:
    return ", ".join(f"argument {a}" if positional else f"'{a}'"
                     for a, positional in zip(x["arguments"], x.get("by_position") or [False] * len(x["arguments"])))


_VERBS = {"jax.pmap": "pmap", "flax.nnx.jit": "nnx.jit", "equinox.filter_jit": "filter_jit"}


def _donate_fix(f: Finding, x: dict) -> tuple[str, str]:
    """(the full fix, the short one)."""
    name, change, option = x["function"], x.get("change"), x.get("option", "")
    if change == "equinox-restructure":
        kept = x["pass_first"]
        several = len(kept) > 1
        full = (f'filter_jit {name} with donate="all-except-first" and pass {_list(kept)} as its first '
                f"argument{' (one tuple)' if several else ''} (at {f.site}): the program uses "
                f"{'them' if several else 'it'} after the call, and equinox donates every array argument "
                f"but the first's")
        return full, f'pass {_list(kept)} first and filter_jit {name} with donate="all-except-first"'
    verb = _VERBS.get(x.get("wrapper"), "jit")
    if change == "through-wrapper":
        full = f"jit {name} with {option}, through {x.get('wrapper')} (at {f.site}) if it passes them to jax.jit"
    else:
        full = f"{verb} {name} with {option} (at {f.site})"
    edited = x.get("edited_line") or ""
    short = edited or f"{verb} {name} with {option}"
    if edited:
        full += f":  {edited}"
    if x.get("also_donates"):
        full += f" (that donates {_list(x['also_donates'])} too: the program drops them with each call)"
    if x.get("first_kept"):
        full += (f"; the first call's {_list(x['first_kept'])} stayed referenced after it (a variable set before "
                 f"the loop?): donating deletes it, so if the program uses it again, give the first call a copy "
                 f"(jax.tree.map(jnp.copy, ...))")
    return full, short


def _donate(f: Finding, x: dict) -> Words:
    what = _arguments(x)
    devices = x.get("devices") or 1
    per_device = (f" ({_b(x['saving_bytes_per_device'])} on each of {devices} devices)" if devices > 1 else "")
    shown: dict = {}
    for argument, i, o in x.get("leaves") or []:
        shown.setdefault(argument, []).append(f"{i} -> {o}")
    matches = "; ".join(m for ms in shown.values() for m in ms[:6])
    each = "in each after the first" if x.get("first_kept") else "in each"
    evidence = (f"{x['calls_sampled']} calls sampled (the first ones, then one in 50; calls between them "
                f"are not seen); {each}, the program dropped {what} during the call or right after it, "
                f"before running anything else, and every leaf has an output of the same shape and dtype: "
                f"{matches}. See {DONATION_DOCS}")
    full, short = _donate_fix(f, x)
    return Words(
        brief=f"Donate {what} of {x['function']}: XLA can write the outputs into their buffers{per_device}.",
        brief_fix=short,
        message=(f"Donate {what} of {x['function']} (defined at {x['defined_at']}): XLA can then write the outputs "
                 f"into their {_b(f.saving_bytes)} of buffers{per_device} instead of holding old and new values "
                 f"at once during each call (up to that much less at each call's peak; XLA's temporaries may "
                 f"change too)."),
        fix=full, evidence=evidence)


def _unusable(f: Finding, x: dict) -> Words:
    args = _list(x["arguments"])
    warned = " (JAX warned: 'Some donated buffers were not usable')" if x.get("jax_warned") else ""
    return Words(
        brief=f"{x['function']} donates {args}, but no output can take {'its' if len(x['arguments']) == 1 else 'their'}"
              f" buffers.",
        brief_fix=f"stop donating {args}, or return an output of the same shape and dtype",
        message=(f"{x['function']} donates {_list(x['lost_leaves'])}, but no output has that shape and dtype, so the "
                 f"buffer cannot be reused and stays alive{warned}."),
        fix=(f"stop donating {args} of {x['function']}, or return an output of the same shape and dtype so that "
             f"XLA can write into it"),
        evidence=f"outputs of the sampled call {x['call_index']}: {_list(x['outputs']) or 'none'}. See {DONATION_DOCS}")


def _donated_then_used(f: Finding, x: dict) -> Words:
    names = _list(x.get("donating") or []) or "a jitted function"
    return Words(
        brief=f"An array was used after it was donated: {x['error'][:120]}",
        brief_fix="use the output instead of the donated input (state = step(state)), or pass jnp.copy(x)",
        message=f"The program used an array after donating it: {x['error']}",
        fix=("keep using the function's output instead of the donated input (state = step(state)), or "
             "stop donating that argument, or pass a copy (jnp.copy(x)) where the original is still needed"),
        evidence=(f"functions that donate arguments in this run: {names}. A donated array is deleted "
                  f"when the call starts; see {DONATION_DOCS}"))


# -- allocator ---------------------------------------------------------------------------


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
        evidence="why: " + "; ".join(reasons) + f"; peak used here: {_b(x['peak_bytes'])} from {_peak_source(x)}")


def _fraction_evidence(x: dict) -> str:
    variable = x.get("fraction_variable")
    from_what = f"{variable}={x.get('fraction_value')}" if variable else f"the default {DEFAULT_FRACTION:.2f}"
    return (f"peak {_exact(x['peak_bytes'])}, from {_peak_source(x)}; with headroom (+5 % + 64 MiB) "
            f"{_exact(x['needed_bytes'])}; bytes_limit on {x['device']} {_exact(x['bytes_limit'])} = "
            f"{x['fraction']:.2f} ({from_what}) x about {_b(x['device_bytes'])} of device memory; fraction needed "
            f"{x['fraction_needed']:.2f}")


def _fraction_raise(f: Finding, x: dict) -> Words:
    return Words(
        brief=f"The peak needs {_b(x['needed_bytes'])} but the pool's limit on {x['device']} is "
              f"{_b(x['bytes_limit'])}.",
        brief_fix=_set_fraction(x),
        message=(f"The peak needs {_b(x['needed_bytes'])} with headroom but the allocator's limit on "
                 f"{x['device']} is {_b(x['bytes_limit'])}: raise the memory fraction to {x['setting']}."),
        fix=(f"Set {_set_fraction(x)}. Trade-off: {_POOL_TRADE_OFF}; above "
             f"{fraction_setting(MAX_FRACTION_PERCENT)} they may fail to allocate. See {DOCS_URL}"),
        evidence=_fraction_evidence(x))


def _fraction_cannot(f: Finding, x: dict) -> Words:
    pct = round(x["fraction_needed"] * 100)
    most = fraction_setting(MAX_FRACTION_PERCENT)
    return Words(
        brief=f"The peak needs {_b(x['needed_bytes'])}, {pct} % of the {_b(x['device_bytes'])} device: "
              f"no memory fraction holds it.",
        brief_fix="lower the peak (donation, jax.checkpoint, smaller batches, sharding) or use a larger device",
        message=(f"The peak needs {_b(x['needed_bytes'])} with headroom, {pct} % of the {_b(x['device_bytes'])} "
                 f"device: no memory fraction up to {most} holds it."),
        fix=(f"{_LOWER_THE_PEAK} TF_FORCE_UNIFIED_MEMORY=1 with {x['fraction_env_name']} above 1 lets the pool "
             f"spill into host memory, at a large cost in speed. See {DOCS_URL}"),
        evidence=_fraction_evidence(x))


def _preallocate_shared(f: Finding, x: dict) -> Words:
    n, frac, need = x["processes"], x["fraction"], x["needed_bytes"]
    evidence = (f"{n} processes on one GPU; fraction {frac:.2f} ({x.get('fraction_variable') or 'default'}); "
                f"{PREALLOCATE}={x.get('preallocate') or 'unset (true)'}; this process's peak "
                f"{_b(x['peak_bytes'])} from {_peak_source(x)}, {_b(need)} with headroom")
    fix = (f"Set {PREALLOCATE}=false in each process (memory is allocated on demand: more prone to "
           "fragmentation, and freed memory stays with its process), or give each process "
           f"{_set_fraction(x)} ({MAX_FRACTION_PERCENT} % / {n})")
    total, each = x.get("device_bytes"), x.get("bytes_each")
    if total:
        evidence += f"; device about {_b(total)}, {_b(each)} each at {x['share']}"
        if need <= each:
            fix += f", which holds this process's peak ({_b(need)} with headroom)."
        else:
            fix += (f". Neither is enough if every process peaks like this one: {n} x {_b(need)} = "
                    f"{_b(n * need)} is more than {fraction_setting(MAX_FRACTION_PERCENT)} of the "
                    f"{_b(total)} GPU; run fewer processes per GPU or lower the peak.")
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
        brief=f"The peak is {peak / pool:.0%} of the {_b(pool)} pool preallocated on {x['device']}.",
        brief_fix=f"only if something else needs the GPU: {PREALLOCATE}=false, or {x['set']}",
        message=(f"The peak ({_b(peak)}) is {peak / pool:.0%} of the {_b(pool)} pool preallocated on "
                 f"{x['device']}: {_b(pool - need)} of it is never needed."),
        fix=("Only worth changing if something else needs the GPU: set "
             f"{PREALLOCATE}=false to allocate on demand (more prone to fragmentation; freed memory stays with "
             f"the process), or keep preallocation and set {_set_fraction(x)} to preallocate only what the peak "
             f"needs. See {DOCS_URL}"),
        evidence=(f"peak {_exact(peak)}, from {_peak_source(x)}; pool {_b(pool)} ({pool} bytes; fraction "
                  f"{x['fraction']:.2f}); with headroom (+5 % + 64 MiB) the peak needs {_b(need)} = "
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
        brief=f"The pool on {x['device']} was {x['fragmentation']:.0%} fragmented: {_b(x['free_bytes'])} free, "
              f"largest block {_b(x['largest_free_block_bytes'])}.",
        brief_fix="TF_GPU_ALLOCATOR=cuda_malloc_async" if x.get("preallocates")
        else f"turn preallocation back on ({PREALLOCATE} unset), or TF_GPU_ALLOCATOR=cuda_malloc_async",
        message=(f"The allocator pool on {x['device']} was {x['fragmentation']:.0%} fragmented at snapshot "
                 f"{x['snapshot']}: {_b(x['free_bytes'])} free, but the largest free block is "
                 f"{_b(x['largest_free_block_bytes'])}."),
        fix=fix + f" See {DOCS_URL}",
        evidence=(f"pool_bytes {_exact(x['pool_bytes'])}, bytes_in_use {_exact(x['bytes_in_use'])}, "
                  f"largest_free_block_bytes {_exact(x['largest_free_block_bytes'])}; fragmentation = (pool - in use "
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


def _fit(f: Finding, x: dict) -> Words:
    pct = round(x["fraction_needed"] * 100)
    n = x.get("processes") or 1
    peak, need, device_bytes = x["peak_bytes"], x["needed_bytes"], x["device_bytes"]
    head = f"A peak of {_b(peak)} ({_b(need)} with headroom)" + (" per process" if n > 1 else "")
    device = f"a {_b(device_bytes)} device"
    name, pool, most = x["fraction_variable"], x["default_pool_bytes"], fraction_setting(MAX_FRACTION_PERCENT)
    says = {
        "shared-fits": (f"{head} fits {n} processes on {device} ({pct / 100:.2f} of it each), but not under "
                        f"default preallocation ({DEFAULT_FRACTION:.2f} each): set {PREALLOCATE}=false, or "
                        f"{name}={fraction_setting(pct)} in each process."),
        "shared-cannot": (f"{head} needs {pct} % of {device}: {n} processes cannot share it (at most {most} of a "
                          "device should go to JAX's pools)."),
        "fits": f"{head} fits {device} under default preallocation (pool {_b(pool)} = {DEFAULT_FRACTION:.2f} of it).",
        "fits-with": (f"{head} does not fit the default pool of {device} ({_b(pool)} = {DEFAULT_FRACTION:.2f} of "
                      f"it); it fits with {name}={fraction_setting(pct)}."),
        "cannot": (f"{head} needs {pct} % of {device}: it cannot fit (at most {most} of a device should go to "
                   "JAX's pool)."),
    }[f.case]
    bound = f" The estimate is a lower bound: {CAPACITY_EXCLUDES}"
    if x.get("peak_source") in ("device_live_bytes", "live_bytes"):
        bound += ", nor are XLA's temporaries inside a computation"
    settings = x.get("settings") or {}
    if settings:
        what = ", ".join(f"{k}={v}" for k, v in settings.items())
        trade = ("Memory is then allocated on demand: more prone to fragmentation, and freed memory stays with its "
                 "process." if PREALLOCATE in settings else
                 f"What the pool takes, other processes and the libraries outside it cannot have; above {most} they "
                 "may fail to allocate.")
        fix, brief_fix = f"Set {what}. {trade}", what
    elif x.get("fits_by_default"):
        fix = brief_fix = "Nothing to set."
        if x.get("underused"):
            fix += (f" To leave the rest of the GPU to other processes: {PREALLOCATE}=false, or "
                    f"{name}={fraction_setting(pct)}.")
    else:
        fix, brief_fix = _LOWER_THE_PEAK, "lower the peak, or use a larger device"
    if x.get("fraction_policy_set"):
        fix += (" XLA_FLAGS sets --xla_gpu_memory_fraction_policy, which changes the default pool: check it against "
                "these figures.")
    evidence = (f"peak {_exact(peak)}, from {_peak_source(x)}; with headroom (+5 % + 64 MiB) {_exact(need)}; "
                f"device {_exact(device_bytes)}; default pool {x['default_fraction']:.2f} x device = {_exact(pool)}; "
                f"fraction needed {x['fraction_needed']:.2f}" + (f" per process, {n} processes" if n > 1 else "")
                + f"; jaxlib {x.get('jaxlib_version') or '(unknown)'} reads {name}")
    return Words(brief=says.split(": set ")[0].rstrip(".") + ".", brief_fix=brief_fix, message=says + bound + ".",
                 fix=fix + f" See {DOCS_URL}", evidence=evidence)


# -- inside jit ---------------------------------------------------------------------------


def _by_line(x: dict) -> str:
    return ", ".join(f"{_b(v)} at {s}" for s, v in x["by_line"])


def _remat(f: Finding, x: dict) -> Words:
    peak, kept = x["program_peak_bytes"], x["kept_bytes"]
    return Words(
        brief=f"{_b(kept)} of {x['function']}'s peak are activations kept for the backward pass.",
        brief_fix=f"wrap the layer or block at {f.site or 'the lines above'} in jax.checkpoint",
        message=(f"At {x['function']}'s peak, {_b(kept)} ({kept / peak:.0%} of it) are activations its forward pass "
                 f"keeps for the backward pass: {_by_line(x)}."),
        fix=(f"Recompute them in the backward pass instead: wrap the layer or block at {f.site or 'those lines'} in jax.checkpoint "
             "(jax.remat; nnx.remat, eqx.filter_checkpoint), trading compute for memory; a policy such as "
             "jax.checkpoint_policies.dots_saveable keeps the matmuls only."),
        evidence=(f"XLA's buffers live at the program's peak ({_b(peak)}): {x['buffers']} made by forward-pass (jvp) "
                  f"ops and still live there"))


def _narrow(f: Finding, x: dict) -> Words:
    peak, wide = x["program_peak_bytes"], x["float32_bytes"]
    return Words(
        brief=f"float32 temporaries hold {_b(wide)} ({wide / peak:.0%}) of {x['function']}'s peak.",
        brief_fix="compute in bfloat16 where precision allows (x.astype(jnp.bfloat16))",
        message=(f"At {x['function']}'s peak, float32 temporaries hold {_b(wide)} ({wide / peak:.0%} of it)"
                 + (f", the most of your lines' at {f.site}." if f.site else ".")),
        fix=("Compute in bfloat16 where precision allows (the activations or the matmuls: x.astype(jnp.bfloat16), "
             "or a model dtype of bfloat16 with float32 parameters): it halves these buffers."),
        evidence=f"XLA's buffers live at the program's peak ({_b(peak)}), float32 temporaries")


# -- a notebook's output history ---------------------------------------------------------


def _entry(e: dict) -> str:
    arrays = "1 array" if e["freed_arrays"] == 1 else f"{e['freed_arrays']} arrays"
    made = f", made at {e['made_at']}" if e.get("made_at") else ""
    return f"{e['holder']} {_b(e['freed_bytes'])} ({arrays}{made})"


def _xdel(entries) -> str:
    """``%xdel _4; %xdel _7``: each entry's value dropped from everywhere
    IPython keeps it (Out, _N, _, __, ___, the hidden copy of _N)."""
    return "; ".join(f"%xdel _{e['holder'][4:-1]}" for e in entries)


def _output_history(f: Finding, x: dict) -> Words:
    freeing = [e for e in x["entries"] if e["freed_bytes"]]
    shown = freeing[:3]
    more = len(freeing) - len(shown) + max(0, x["entries_holding"] - len(x["entries"]))
    names = _list(e["holder"] for e in shown) + (f" and {more} more" if more > 0 else "")
    reset = x.get("reset_frees")
    version = x.get("ipython_version") or "this IPython"
    if reset:
        brief_fix = f"{_xdel(shown)} (or %reset -f out: the whole history); end a cell with ; to keep its value out"
        reset_words = "%reset -f out drops the whole history."
    else:
        brief_fix = (f"{_xdel(shown)} (%reset -f out keeps the hidden _N in IPython {version})"
                     if reset is False else f"{_xdel(shown)}") + "; end a cell with ; to keep its value out"
        reset_words = ("%reset -f out drops the whole history only from IPython 8.15 on: before, it keeps the "
                       "hidden copy of each _N" + (f" (this run's IPython is {version})." if reset is False else "."))
    return Words(
        brief=f"IPython's output history keeps {_b(x['freed_bytes'])} alive that nothing else holds: {names}.",
        brief_fix=brief_fix,
        message=(f"IPython's output history holds {_b(x['held_bytes'])} of live arrays, {_b(x['freed_bytes'])} of "
                 f"them held by nothing else: {_list(_entry(e) for e in freeing)}. A cell's value (its last "
                 "expression) stays in Out[N] and under _N, _, __ and ___ (and a hidden copy of _N), so neither "
                 "del of a variable nor del Out[N] frees it."),
        fix=(f"{_xdel(freeing)} drops every reference IPython keeps to each value (Out, _N, _, the hidden copy, the "
             f"displayhook's). {reset_words} Ending a cell with ; keeps its value out of the history; "
             "c.InteractiveShell.cache_size = 0 keeps no output history at all."),
        evidence=(f"At snapshot {x['snapshot']}, {x['entries_holding']} entries of Out held {x['arrays']} live "
                  f"arrays ({_b(x['held_bytes'])}); every reference to those of {_b(x['freed_bytes'])}, and to the "
                  "containers on the way to them, was one of IPython's history or of such a container (each "
                  "object's references counted against sys.getrefcount)."))


# -- arrays a mesh could shard -----------------------------------------------------------


def _put(a: dict) -> str:
    return f"jax.device_put({a['owner']}, NamedSharding(mesh, {a['spec']}))"


def _replicated(f: Finding, x: dict) -> Words:
    arrays = x["arrays"]
    first = arrays[0]
    more = x["array_count"] - len(arrays)

    def one(a):
        shape = ",".join(str(n) for n in a["shape"])
        return (f"{a['owner']} ({a['dtype']}[{shape}], {_b(a['bytes'])}) whole on each of {a['devices']} devices: "
                f"over mesh axis {a['axis']!r} ({a['axis_size']}) it would take {_b(a['bytes'] - a['saving_bytes'])} "
                f"each")
    return Words(
        brief=(f"{first['owner']} ({_b(first['bytes'])}) is whole on each of {first['devices']} devices"
               + (f", and {x['array_count'] - 1} more arrays of {x['function']}'s" if x["array_count"] > 1 else "")
               + f"; a mesh axis could shard {'it' if x['array_count'] == 1 else 'them'}."),
        brief_fix=_put(first),
        message=(f"Inputs of {x['function']} are replicated where the program's mesh could shard them: "
                 + "; ".join(one(a) for a in arrays) + (f"; and {more} more" if more > 0 else "") + "."),
        fix=("Shard each over the mesh axis: " + "; ".join(_put(a) for a in arrays)
             + " (or name the sharding in the jit's in_shardings and out_shardings; with flax.nnx, "
               "nnx.with_partitioning on the parameter's initializer). Trade-off: XLA gathers an array whole "
               "where a computation needs it whole (an all-gather, and a temporary of its full size inside that "
               "call); elementwise updates and matmuls over the sharded dimension stay sharded."),
        evidence=(f"The latest sampled call of {x['function']}: {_b(x['replicated_bytes'])} per device in "
                  f"{x['array_count']} replicated arrays of 1 MiB or more; saving bytes × (1 − 1/axis size) per "
                  f"device; meshes seen: " + ", ".join(str(m) for m in x["meshes"])))


_TEMPLATES = {
    ("replicated", ""): _replicated,
    ("leak", ""): _leak,
    ("recompile", "executables"): _recompile,
    ("recompile", "rejit"): _rejit,
    ("donate", ""): _donate,
    ("donation-unusable", ""): _unusable,
    ("donated-then-used", ""): _donated_then_used,
    ("allocator-platform", ""): _platform,
    ("allocator-fraction", "raise"): _fraction_raise,
    ("allocator-fraction", "cannot"): _fraction_cannot,
    ("allocator-preallocate", "shared"): _preallocate_shared,
    ("allocator-preallocate", "underused"): _preallocate_underused,
    ("allocator-fragmentation", ""): _fragmentation,
    ("allocator-env", "both-refused"): _env_both_refused,
    ("allocator-env", "both-old-jaxlib"): _env_both_old,
    ("allocator-env", "new-name-ignored"): _env_ignored,
    ("allocator-env", "preallocate-spelling"): _env_spelling,
    ("fit", "fits"): _fit,
    ("fit", "fits-with"): _fit,
    ("fit", "cannot"): _fit,
    ("fit", "shared-fits"): _fit,
    ("fit", "shared-cannot"): _fit,
    ("remat", ""): _remat,
    ("narrow-dtype", ""): _narrow,
    ("output-history", ""): _output_history,
}

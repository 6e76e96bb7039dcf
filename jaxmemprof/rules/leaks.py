"""Leaks and recompiles: ``leak`` and ``recompile`` (made by analysis/leaks.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jaxmemprof.rules.base import Rule, Words, fmt
from jaxmemprof.units import counted, format_bytes

if TYPE_CHECKING:
    from jaxmemprof.analysis.findings import Finding


def _leak(f: Finding, x: dict) -> Words:
    per_s = fmt(x["growth_bytes_per_s"]) if x.get("growth_bytes_per_s") is not None else "?"
    if x.get("growth_bytes_per_step") is not None:
        rate = f"{format_bytes(x['growth_bytes_per_step'])} per step ({per_s}/s)"
        horizon = f"{counted(x['projected_steps'], 'more step')}"
    else:
        rate = f"{per_s}/s"
        horizon = f"another {float(x.get('projected_seconds') or 0):.1f} s"
    share = x.get("projected_share_of_peak") or 0.0
    evidence = (f"{fmt(x['live_bytes_first'])} -> {fmt(x['live_bytes_last'])} over {x['snapshots_used']} snapshots "
                f"({x['arrays_last']} arrays alive at the last); Mann-Kendall tau {x['tau']:.2f}, "
                f"p = {x['p_value']:.2g}; projected {fmt(x['projected_bytes_after'])} after {horizon} "
                f"(+{fmt(x['projected_growth_bytes'])}" + (f", {share:.0%} of the run's peak)" if share else ")"))
    fix = (f"Find what keeps the arrays made at {f.site} alive: an array appended to a list or stored "
           "in a dict each step (e.g. losses kept for logging: keep a Python float via float() or "
           "jax.device_get, or only the last few), a cache that is never evicted, or a closure or "
           "global holding them.")
    return Words(
        brief=f"Live memory made here grows {rate}, steadily across the run.",
        saves=f"saves {fmt(x['projected_growth_bytes'])} over {horizon}",
        brief_fix="keep a Python float (float(x)) or the last few arrays, not every step's; evict caches",
        message=f"Live memory at {f.site} keeps growing: {rate}.", fix=fix, evidence=evidence)


def _recompile(f: Finding, x: dict) -> Words:
    what = x.get("name") or "executables"
    count = x["executables"]
    evidence = (f"{counted(count, 'executable')} loaded at most; {x['first_count']} when first seen (snapshot "
                f"{x['first_snapshot']}), {x['last_count']} at the last snapshot; generated code "
                f"{fmt(x['generated_code_bytes'])}")
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


LEAK = Rule(
    "leak", made_by="analysis/leaks.py",
    summary="A site whose live bytes grow steadily over the run (Mann-Kendall, Theil-Sen; analysis/leaks.py).",
    facts={"": ("growth_bytes_per_step", "growth_bytes_per_s", "live_bytes_first", "live_bytes_last",
                "snapshots_used", "arrays_last", "tau", "p_value", "projected_bytes_after", "projected_growth_bytes",
                "projected_steps", "projected_seconds", "projected_share_of_peak")},
    words={"": _leak},
)


RECOMPILE = Rule(
    "recompile", made_by="analysis/leaks.py",
    summary=("A function compiled again and again: executables that keep coming (case `executables`), or a "
             "function jitted anew at one line (case `rejit`) (analysis/leaks.py)."),
    facts={"executables": ("name", "executables", "first_count", "first_snapshot", "last_count",
                           "generated_code_bytes"),
           "rejit": ("function", "functions", "after_setup")},
    meanings={"name": ("Case `executables`: the HLO module name (`jit_train_step`, empty for a directory of "
                       "profiles), as in recompiles.csv."),
              "function": "Case `rejit`: the jitted functions' name.",
              "executables": "The most executables loaded at any snapshot (`max_count`).",
              "first_snapshot": "The first snapshot its executables were loaded in.",
              "generated_code_bytes": ("Generated code bytes of its executables at the last snapshot (else the "
                                       "first); 0 on CPU.")},
    words={"executables": _recompile, "rejit": _rejit},
)

RULES = (LEAK, RECOMPILE,)

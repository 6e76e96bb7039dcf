"""Leaks and recompiles: ``leak`` and ``recompile``, found here from
analysis/leaks.py's tables (its growth statistics, the executables and
jits per line)."""

from __future__ import annotations

import re
from dataclasses import replace

import pandas as pd

from jaxmemprof.analysis.findings import Finding
from jaxmemprof.analysis.leaks import number, rejits
from jaxmemprof.units import GiB
from jaxmemprof.analysis.py_holders import CUT, of_site
from jaxmemprof.analysis.rules.base import Context, Rule, Words, fmt
from jaxmemprof.facts.libraries import phrases
from jaxmemprof.units import counted, format_bytes


def detect(ctx: Context) -> list[Finding]:
    found = leak_findings(ctx.leaks, ctx.recompiles, rejits(ctx.ar), ctx.holders)
    shapes = shape_findings(ctx.ar, {f.site for f in found if f.rule == "recompile" and f.case == "rejit"})
    # the executables of a function compiled for many shapes (jit_step) are that finding's, which names the shapes,
    # at the line that calls it with them (where the executables were made: where the padding is)
    named = {f"jit_{f.fact('function')}": f for f in shapes}
    calls = {f.fact("name"): f for f in found if f.rule == "recompile" and f.case == "executables"
             and f.fact("name") in named}
    shapes = [replace(f, site=calls[n].site) if n in calls else f for n, f in named.items()]
    return [f for f in found if not (f.rule == "recompile" and f.case == "executables" and f.fact("name") in named)] \
        + shapes


# A jitted function compiled for this many signatures that differ only in their arrays' shapes is compiled
# again and again (a padding to many lengths, a last batch of every size), however early they all came.
SHAPES_AT_LEAST = 8
_LEAF = re.compile(r"^(np:)?([A-Za-z_][\w]*)\[([\d,]*)\](.*)$")


def _leaf(text: str):
    """(dtype and what follows the shape, shape) of an array leaf of a signature (``np:float32[8,4]``), or the
    text itself (a static value, a Python scalar's type) as one that must be equal."""
    m = _LEAF.match(text)
    if m is None:
        return text, None
    return f"{m[1] or ''}{m[2]}{m[4]}", tuple(int(n) for n in m[3].split(",") if n)


def _shapes(signatures: list[str]) -> list[tuple[int, int, list]] | None:
    """[(leaf, axis, its sizes)] of the leaves whose shape differs between ``signatures`` (texts from the
    probe: ``float32[8,4], np:int32[16]``) where nothing else does; None where something else does."""
    parsed = [[_leaf(p) for p in sig.split(", ")] for sig in signatures]
    if len({len(p) for p in parsed}) != 1:
        return None
    varying = []
    for i, column in enumerate(zip(*parsed)):
        if len({kind for kind, _ in column}) != 1 or len({len(shape or ()) for _, shape in column}) != 1:
            return None
        shapes = [shape for _, shape in column]
        if shapes[0] is None:
            continue
        for axis in range(len(shapes[0])):
            sizes = sorted({sh[axis] for sh in shapes if sh is not None})
            if len(sizes) > 1:
                varying.append((i, axis, sizes))
    return varying or None


def _leaf_names(calls: pd.DataFrame, function_id: int) -> list[str]:
    """Each input leaf's name as the first sampled call of the function has it (``tokens``, ``batch['x']``)."""
    from jaxmemprof.analysis.cells import leaves

    mine = calls[calls["function_id"] == function_id] if not calls.empty else calls
    if mine.empty:
        return []
    out = []
    for leaf in leaves(mine.sort_values("call_index").iloc[0]["inputs"]):
        named = isinstance(leaf, dict)
        out.append(str((leaf.get("owner") or f"{leaf.get('name') or ''}{leaf.get('path') or ''}") if named else ""))
    return out


def shape_findings(ar, sites_said: set) -> list[Finding]:
    """One ``recompile`` finding (case ``shapes``) per jitted function compiled for ``SHAPES_AT_LEAST`` or more
    signatures (the probe's: one per compile JAX's cache tells apart) that differ only in their arrays' shapes,
    whenever they came: each shape is a compile of the whole function, and its cache keeps every executable.
    ``sites_said``: sites a recompile finding already names."""
    run = ar.run
    compiles, functions = run.jit.compiles, run.jit.functions
    if compiles.empty or functions.empty or "signature" not in compiles:
        return []
    c = run.jit.counts
    counts = {} if c.empty or "compiles" not in c else c.groupby("function_id")["compiles"].max().to_dict()
    out = []
    for fn in functions.itertuples():
        if ar.files.is_library(str(fn.file)):
            continue
        sigs = list(dict.fromkeys(s for s in compiles.loc[compiles["function_id"] == fn.function_id, "signature"]
                                  if isinstance(s, str) and s))
        if len(sigs) < SHAPES_AT_LEAST:
            continue
        varying = _shapes(sigs)
        if varying is None:
            continue
        site = f"{ar.files.display_path(str(fn.jit_file))}:{int(fn.jit_line)}" if fn.jit_file else ""
        if site in sites_said:
            continue
        names = _leaf_names(run.jit.calls, int(fn.function_id))
        leaf, axis, sizes = max(varying, key=lambda v: len(v[2]))
        named = names[leaf] if leaf < len(names) and names[leaf] else f"input leaf {leaf}"
        compiled = counts.get(fn.function_id)
        out.append(Finding(
            rule="recompile", case="shapes", severity="medium" if len(sigs) >= 10 else "low", site=site,
            facts={"function": str(fn.name), "signatures": len(sigs),
                   "compiles": int(compiled) if compiled is not None and compiled == compiled else len(sigs),
                   "leaf": named, "axis": int(axis), "sizes": [int(n) for n in sizes],
                   "sizes_pow2": len({1 << max(int(n) - 1, 0).bit_length() for n in sizes}),
                   "varying": [[names[i] if i < len(names) and names[i] else f"input leaf {i}", int(a), len(z)]
                               for i, a, z in varying]}))
    return out


def _shapes_words(f: Finding, x: dict) -> Words:
    sizes = x["sizes"]
    shown = ", ".join(str(n) for n in sizes[:8]) + (f" +{len(sizes) - 8} more" if len(sizes) > 8 else "")
    compiles = x["compiles"]
    times = (f"{compiles} times for {x['signatures']} input shapes" if compiles != x["signatures"]
             else f"for {x['signatures']} input shapes")
    return Words(
        brief=(f"{x['function']} was compiled {times}: {x['leaf']}'s axis {x['axis']} took {len(sizes)} sizes "
               f"({sizes[0]} to {sizes[-1]})."),
        brief_fix=(f"pad {x['leaf']}'s axis {x['axis']} to a few sizes (powers of two: {x['sizes_pow2']} "
                   f"compiles instead of {len(sizes)})"),
        message=(f"{x['function']} was compiled {times} at {f.site}: each size of {x['leaf']}'s axis {x['axis']} "
                 f"({shown}) is a compile of the whole function, and JAX's cache keeps every executable."),
        fix=(f"Pad {x['leaf']} along axis {x['axis']} to a few bucket sizes (the next power of two: "
             f"{x['sizes_pow2']} sizes; or one, the largest) and mask the padding, so the function is compiled "
             "once per bucket; or mark what varies static only where it takes few values."),
        evidence=(f"{x['signatures']} signatures recorded by the jit probe that differ only in shapes: "
                  + "; ".join(f"{name} axis {a}: {n} sizes" for name, a, n in x["varying"][:3])
                  + (f" +{len(x['varying']) - 3} more" if len(x["varying"]) > 3 else "")
                  + f"; {compiles} compiles (the compile cache's growth)"))


def _leak(f: Finding, x: dict) -> Words:
    per_s = fmt(x["growth_bytes_per_s"]) if x.get("growth_bytes_per_s") is not None else "?"
    to_limit = x.get("steps_to_limit")
    horizon: str | None
    if x.get("growth_bytes_per_step") is not None:
        rate = f"{format_bytes(x['growth_bytes_per_step'])} per step ({per_s}/s)"
        horizon = f"{counted(x['projected_steps'], 'more step')}"
        if to_limit == 0:
            horizon = None
        elif to_limit is not None and to_limit < x["projected_steps"]:
            horizon = (f"the {counted(to_limit, 'step')} until the device's "
                       f"{fmt(x['device_limit_bytes'])} runs out")
    else:
        rate = f"{per_s}/s"
        horizon = f"another {float(x.get('projected_seconds') or 0):.1f} s"
    share = x.get("projected_share_of_peak") or 0.0
    evidence = (f"{fmt(x['live_bytes_first'])} -> {fmt(x['live_bytes_last'])} over {x['snapshots_used']} snapshots "
                f"({x['arrays_last']} arrays alive at the last); Mann-Kendall tau {x['tau']:.2f}, "
                f"p = {x['p_value']:.2g}; projected {fmt(x['projected_bytes_after'])} after {horizon or 'the run'} "
                f"(+{fmt(x['projected_growth_bytes'])}" + (f", {share:.0%} of the run's peak)" if share else ")"))
    held = x.get("held_by")
    step = format_bytes(x["growth_bytes_per_step"]) + " per step" if x.get("growth_bytes_per_step") is not None else rate
    brief = f"Live memory made here grows {rate}, steadily across the run."
    if held:
        held, _, local = held.partition(" (local of ")  # `losses[…]` (a local of main; list, train.py:60)
        where = ", ".join(p for p in (x.get("held_by_container"), x.get("held_by_created")) if p)
        where = "; ".join(p for p in (f"a local of {local[:-1]}" if local else "", where) if p)
        cut = f" ({CUT}: others may hold them too)" if x.get("held_by_cut") else ""
        kept = (f" Kept alive by `{held}` ({where}): {counted(x.get('held_by_arrays') or 0, 'array')}, "
                f"{fmt(x.get('held_by_bytes') or 0)} at the {x.get('held_at') or 'end'}{cut}.")
        fix, brief_fix = kept_fix(x)
        # It holds few of the site's arrays (a score beside 23 maps): not what keeps the growth.
        few = 2 * int(x.get("held_by_arrays") or 0) < int(x.get("arrays_last") or 0)
        if few:
            fix, brief_fix = _unknown_holder_fix(f.site)
            fix = (f"`{held}` holds {counted(x.get('held_by_arrays') or 0, 'array')} of the "
                   f"{x['arrays_last']} alive at the last snapshot: not what keeps the rest. " + fix)
        brief = (f"Grows {step}; kept alive by `{held}` ({where}): {counted(x.get('held_by_arrays') or 0, 'array')}, "
                 f"{fmt(x.get('held_by_bytes') or 0)}{cut}.")
        if few:
            brief = (f"Grows {step}; `{held}` ({where}) holds {x.get('held_by_arrays') or 0} of its "
                     f"{x['arrays_last']} arrays ({fmt(x.get('held_by_bytes') or 0)}): what keeps the rest was "
                     f"not found{cut}.")
        evidence += (f"; holder found by walking the program's references at the {x.get('held_at') or 'end'} "
                     f"({x.get('held_by_kind')})")
    else:
        kept = ""
        fix, brief_fix = _unknown_holder_fix(f.site)
    return Words(
        brief=brief,
        saves=(f"saves {fmt(x['projected_growth_bytes'])} (what it held when the device ran out, but one step's)"
               if horizon is None else f"saves {fmt(x['projected_growth_bytes'])} over {horizon}"),
        brief_fix=brief_fix,
        message=f"Live memory at {f.site} keeps growing: {rate}." + kept, fix=fix, evidence=evidence)


def _growing(f: Finding, x: dict) -> Words:
    """Case ``growing-arrays``: the site's bytes grow while its arrays do
    not grow in number (one array replaced each step by a larger one): no
    reference keeps old ones alive, and deleting the one the program uses
    changes nothing; its shape is what grows."""
    words = _leak(f, x)
    n = int(x["arrays_last"])
    step = (format_bytes(x["growth_bytes_per_step"]) + " per step" if x.get("growth_bytes_per_step") is not None
            else fmt(x["growth_bytes_per_s"]) + "/s")
    alive = f"{counted(n, 'array')} alive throughout" if n == int(x["arrays_first"]) else \
        f"{int(x['arrays_first'])} -> {n} arrays alive"
    return Words(
        brief=f"The arrays made here grow in size, not in number ({alive}): {fmt(x['live_bytes_first'])} -> "
              f"{fmt(x['live_bytes_last'])}, {step}.",
        saves=words.saves,
        brief_fix="keep its shape fixed: preallocate at the final size, or pad to a few sizes",
        message=(f"Live memory at {f.site} keeps growing, {step}, in arrays that grow in size, not in number "
                 f"({alive}): each replaces the last with a larger one. No reference keeps old arrays alive; "
                 "their shape is what grows."),
        fix=("Keep the shape of what is made here fixed: preallocate the array at its final size and fill it "
             "(`x = x.at[i].set(v)`), or pad to a few bucket sizes. Deleting the reference changes nothing while "
             "the program uses it, and each new shape also compiles the jitted functions that take it again."),
        evidence=words.evidence)


def _unknown_holder_fix(site: str) -> tuple[str, str]:
    return (f"Find what keeps the arrays made at {site} alive: an array appended to a list or stored "
            "in a dict each step (e.g. losses kept for logging: keep a Python float via float() or "
            "jax.device_get, or only the last few), a cache that is never evicted, or a closure or "
            "global holding them.",
            "keep a Python float (float(x)) or the last few arrays, not every step's; evict caches")


def kept_fix(x: dict) -> tuple[str, str]:
    """(fix, brief fix) for arrays kept by the holder ``x['held_by']``, in
    the program's own names."""
    held, kind, container = x["held_by"], x.get("held_by_kind"), x.get("held_by_container") or ""
    name = held.split(" (local of ")[0]
    base = name.rsplit("[", 1)[0] if name.endswith("]") else name
    scalars = str(x.get("held_by_shapes") or "").startswith("()")
    if kind == "output-history":
        return (f"IPython's output history keeps them (`{held}`): end the cell with `;`, `del` the name, or "
                "`%reset -f out` to drop the history's references.", "drop the output history's references")
    if kind in ("jax-internal", "library"):
        return (f"A library keeps them (`{held}`), not the program: find which call stores them there "
                "(for JAX's own caches, jax.clear_caches()).", "find the library call that stores them")
    if kind == "lru_cache":
        fn = base.split(".<lru_cache>")[0]
        return (f"`{fn}`'s functools.lru_cache keeps every result: give it a bound (lru_cache(maxsize=N)), "
                f"call `{fn}.cache_clear()` when done, or cache NumPy arrays (jax.device_get) instead.",
                f"bound {fn}'s lru_cache or clear it")
    if scalars:
        return (f"Keep Python numbers, not arrays, in `{base}`: append `float(x)` (or `jax.device_get(x)`) "
                f"instead of the array; or `{base}.clear()` once logged.",
                f"keep float(x) in {base}, not the array")
    if container == "deque":
        return (f"`{base}` is a deque without maxlen: make it `collections.deque(maxlen=N)`, or clear it.",
                f"give {base} a maxlen")
    if container == "dict":
        return (f"`{base}` keeps an array per key and never evicts: delete old keys (`del {base}[k]`), "
                f"`{base}.clear()`, or keep only the last few.", f"evict old keys of {base}")
    if container in ("list", "set"):
        return (f"`{base}` keeps every step's array: keep only the last few (`collections.deque(maxlen=N)`), "
                f"`{base}.clear()` when done, or store `jax.device_get(x)` (host memory) instead.",
                f"keep only the last few in {base}, or clear it")
    return (f"`{held}` keeps them alive: `del` it, or set it to None, once they are no longer needed.",
            f"drop the reference {held}")


def _recompile(f: Finding, x: dict) -> Words:
    what = x.get("name") or "executables"
    count = x["executables"]
    evidence = (f"{counted(count, 'executable')} loaded at most; {x['first_count']} when first seen (snapshot "
                f"{x['first_snapshot']}), {x['last_count']} at the last snapshot; generated code "
                f"{fmt(x['generated_code_bytes'])}")
    fix = ("Each new input shape, dtype or static-argument value compiles the function again: pad or "
           "bucket shapes to a few sizes, keep changing Python values out of static_argnums"
           + "".join(f" ({p})" for p in phrases("static")) + ", and create jax.jit(f) once, outside loops.")
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
    "leak", made_by="analysis/rules/leaks.py",
    finds=("A site whose live bytes grow steadily over the run (Mann-Kendall, Theil-Sen; analysis/leaks.py): "
           "arrays kept (the default case), or arrays that grow in size, not in number (case `growing-arrays`: "
           "one replaced each step by a larger one)."),
    facts={case: ("growth_bytes_per_step", "growth_bytes_per_s", "live_bytes_first", "live_bytes_last",
                  "snapshots_used", "arrays_first", "arrays_last", "tau", "p_value", "projected_bytes_after",
                  "projected_growth_bytes", "projected_steps", "projected_seconds", "projected_share_of_peak",
                  "held_by", "held_by_kind", "held_by_container", "held_by_created", "held_by_arrays",
                  "held_by_bytes", "held_by_shapes", "held_at", "held_by_cut", "device_limit_bytes", "steps_to_limit")
           for case in ("", "growing-arrays")},
    optional=("device_limit_bytes", "steps_to_limit", "held_by", "held_by_kind", "held_by_container", "held_by_created", "held_by_arrays", "held_by_bytes",
              "held_by_shapes", "held_at", "held_by_cut"),
    meanings={"held_by": ("The Python reference that keeps the site's arrays made over the most snapshots alive "
                          "(what accumulates; then the most bytes), root first (analysis/py_holders.py): at the "
                          "run's end, else at its largest search before."),
              "held_by_kind": "What kind of reference it is (holders.csv's kind).",
              "held_by_container": "The type of the object that refers to the arrays (list, dict, deque).",
              "held_by_created": "The `file:line` of the assignment that made that container, where the source shows it.",
              "held_by_arrays": "Arrays of the site it holds.",
              "held_by_bytes": "Their bytes, on their devices.",
              "held_by_shapes": "Their shapes, most common first.",
              "held_at": "Which search found it: end (the run's last snapshot) or peak.",
              "held_by_cut": ("Present (true) where that search stopped at its budget (holders.csv's complete "
                              "false): the reference holds the arrays, but others may too.")},
    words={"": _leak, "growing-arrays": _growing},
)


RECOMPILE = Rule(
    "recompile", made_by="analysis/rules/leaks.py",
    in_proportion=False,
    finds=("A function compiled again and again: executables that keep coming (case `executables`), a "
             "function jitted anew at one line (case `rejit`), or a jitted function compiled for 8 or more input "
             "shapes, whenever they came (case `shapes`: a padding to many lengths) (analysis/rules/leaks.py)."),
    facts={"executables": ("name", "executables", "first_count", "first_snapshot", "last_count",
                           "generated_code_bytes"),
           "rejit": ("function", "functions", "after_setup"),
           "shapes": ("function", "signatures", "compiles", "leaf", "axis", "sizes", "sizes_pow2", "varying")},
    meanings={"name": ("Case `executables`: the HLO module name (`jit_train_step`, empty for a directory of "
                       "profiles), as in recompiles.csv."),
              "function": "Cases `rejit` and `shapes`: the jitted function's name.",
              "signatures": "Case `shapes`: the function's signatures the jit probe recorded (one per shape).",
              "compiles": "Case `shapes`: its compiles (the compile cache's growth; more than signatures where "
                          "JAX compiles one again for what a signature does not tell apart).",
              "leaf": "Case `shapes`: the input whose shape took the most sizes (as the first sampled call names it).",
              "axis": "Case `shapes`: its axis that took them.",
              "sizes": "Case `shapes`: the sizes that axis took, smallest first.",
              "sizes_pow2": "Case `shapes`: how many compiles padding to the next power of two leaves.",
              "varying": "Case `shapes`: `[leaf, axis, sizes]` of every input axis whose size differed.",
              "executables": "The most executables loaded at any snapshot (`max_count`).",
              "first_snapshot": "The first snapshot its executables were loaded in.",
              "generated_code_bytes": ("Generated code bytes of its executables at the last snapshot (else the "
                                       "first); 0 on CPU.")},
    words={"executables": _recompile, "rejit": _rejit, "shapes": _shapes_words},
)


def leak_findings(leaks_df: pd.DataFrame, recompiles_df: pd.DataFrame,
                  rejits_df: pd.DataFrame | None = None, holders: pd.DataFrame | None = None) -> list[Finding]:
    """One finding per leak (rule ``leak``) and per recompilation suspect
    (rule ``recompile``): executables that keep coming (case
    ``executables``), or a function jitted again and again (case ``rejit``).

    A leak is ``high`` when its projected growth reaches half the run's peak
    or 1 GiB, ``medium`` from a tenth of the peak, else ``low``; its
    ``saving_bytes`` is the projected growth. Where the site's arrays grow in
    size, not in number (as many alive at the last snapshot as at the
    first: case ``growing-arrays``), it is at most ``medium``, and ``low``
    where a recompilation finding is at the same line: that finding names
    the cause (a shape that changes every step), and leads. A recompilation is ``medium``
    from 10 executables, else ``low``; it saves the code of all but one
    executable, where code size is known (not on CPU). ``holders``:
    analysis/py_holders.py's table, which names what keeps a leak's arrays
    alive."""
    out: list[Finding] = []
    recompiled = set(recompiles_df.loc[recompiles_df["suspect"], "site"]) if len(recompiles_df) else set()
    for r in leaks_df.itertuples(index=False):
        growth = int(r.projected_growth_bytes)
        to_limit = None if r.steps_to_limit is pd.NA else int(r.steps_to_limit)
        share = r.projected_share_of_peak
        share = float(share) if share == share and share is not None else 0.0
        severity = "high" if share >= 0.5 or growth >= GiB else "medium" if share >= 0.1 else "low"
        growing = 1 <= int(r.arrays_last) <= int(r.arrays_first)
        if growing:
            severity = "low" if r.site in recompiled else "medium" if severity == "high" else severity
        per_step = number(r.growth_bytes_per_step)
        out.append(Finding(rule="leak", case="growing-arrays" if growing else "", severity=severity,
                           site=str(r.site), saving_bytes=growth, facts={
            "growth_bytes_per_step": per_step,
            "growth_bytes_per_s": number(float(r.growth_bytes_per_s)),
            "live_bytes_first": int(r.live_bytes_first), "live_bytes_last": int(r.live_bytes_last),
            "snapshots_used": int(r.snapshots_used), "arrays_first": int(r.arrays_first),
            "arrays_last": int(r.arrays_last),
            "tau": float(r.tau), "p_value": float(r.p_value),
            "projected_bytes_after": int(r.projected_bytes_after), "projected_growth_bytes": growth,
            "projected_steps": int(r.projected_steps) if per_step is not None else None,
            "projected_seconds": None if per_step is not None else number(float(r.projected_seconds)),
            "projected_share_of_peak": share,
            "device_limit_bytes": None if r.device_limit_bytes is pd.NA else int(r.device_limit_bytes),
            "steps_to_limit": to_limit,
            **_held(holders, str(r.site)),
        }))
    suspects = rejits_df[rejits_df["suspect"]] if rejits_df is not None and len(rejits_df) else None
    rejit_sites = set(suspects["site"]) if suspects is not None and len(suspects) else set()
    for r in recompiles_df[recompiles_df["suspect"]].itertuples(index=False) if len(recompiles_df) else ():
        if r.site in rejit_sites:
            continue  # the same line jits a new function each time: said below, with its cause
        count = int(r.max_count)
        code = int(r.last_code_bytes) or int(r.first_code_bytes)
        saving = int(code * (count - 1) / count) if code and count else None
        out.append(Finding(
            rule="recompile", case="executables", severity="medium" if count >= 10 else "low", site=str(r.site),
            saving_bytes=saving, facts={
                "name": r.name or "", "executables": count, "first_count": int(r.first_count),
                "first_snapshot": int(r.first_snapshot), "last_count": int(r.last_count),
                "generated_code_bytes": code}))
    for r in suspects.itertuples(index=False) if suspects is not None and len(suspects) else ():
        count = int(r.functions)
        out.append(Finding(
            rule="recompile", case="rejit", severity="medium" if count >= 10 else "low", site=str(r.site),
            facts={"function": str(r.name), "functions": count, "after_setup": int(r.after_setup)}))
    return out


def _held(holders, site: str) -> dict:
    h = of_site(holders, site, kept=True)
    if h is None:
        return {}
    return {"held_by": h["holder"], "held_by_kind": h["kind"], "held_by_container": h["container"],
            "held_by_created": h["created"] or None, "held_by_arrays": int(h["arrays"]),
            "held_by_bytes": int(h["bytes"]), "held_by_shapes": h["shapes"], "held_at": h["at"],
            **({"held_by_cut": True} if h.get("complete") is False else {})}


RULES = (LEAK, RECOMPILE,)

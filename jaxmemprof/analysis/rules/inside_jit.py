"""Inside a jitted call: ``remat`` and ``narrow-dtype``, found here from
XLA's buffers at the program's peak (analysis/inside_jit.py)."""

from __future__ import annotations

import re

import pandas as pd

from jaxmemprof.analysis.attributed import Attributed
from jaxmemprof.analysis.findings import Finding
from jaxmemprof.analysis.inside_jit import largest_signature_only
from jaxmemprof.analysis.rules.base import Context, Rule, Words, fmt
from jaxmemprof.analysis.sites import NO_STACK
from jaxmemprof.analysis.cells import json_cell
from jaxmemprof.facts.libraries import LIBRARIES, WRAPPERS, phrases, remat_spelling, remat_words
from jaxmemprof.facts.truepeak import FIGURES

# Forward-pass ops of a gradient (JAX names them jvp(...), and their backward
# pass transpose(jvp(...))): their results live at the peak are the
# activations kept for the backward pass.
_FORWARD = re.compile(r"(?:^|/)jvp\(")
_BACKWARD = re.compile(r"transpose\(")
REMAT_SHARE = 0.25  # of the program's peak, held by kept activations
NARROW_SHARE = 0.5  # of the program's peak, held by float32 temporaries


def detect(ctx: Context) -> list[Finding]:
    return inside_jit_findings(ctx.ar)


def _by_line(x: dict) -> str:
    return ", ".join(f"{fmt(v)} at {s}" for s, v in x["by_line"])


# Each library's own spelling of rematerialisation, as "library: spelling" (JAX's own last).
_REMATS = "; ".join(phrases("remat"))
_NOT_COMPILED = "not compiled: it changes your code, so XLA cannot be asked for it from the recording"


def _wrap_fix(x: dict) -> str:
    """The printed fix, as the compile made it (capture/jit/remat.py)."""
    what, spelling, policy = x["remat_function"], x["remat_spelling"], x["remat_policy"]
    where = f"{x['remat_site']}"
    static = [s for s in str(x.get("remat_static_argnums") or "").split(",") if s]
    options = ([f"static_argnums=({', '.join(static)},)"] if static else []) + \
        ([] if policy == "nothing_saveable" else [f"policy=jax.checkpoint_policies.{policy}"])
    chosen = ", ".join(options)
    if x.get("remat_how") == "module global":
        return f"{what} = {spelling}({what}{', ' + chosen if chosen else ''})  (after its def at {where})"
    own = remat_words(spelling, what, chosen, where)  # a library whose remat is applied where it is called
    if own is not None:
        return own
    # the remats take the function first: options come through functools.partial
    return f"decorate {what} with @{f'functools.partial({spelling}, {chosen})' if chosen else spelling}  (at {where})"


def _remat(f: Finding, x: dict) -> Words:
    peak, kept = x["program_peak_bytes"], x["kept_bytes"]
    # the remat of the library the kept activations' function is of, where the end's compiles named it (flax
    # linen's nn.remat under a step jax.jit jitted), else that of the library whose wrapper jitted the step
    spelling = x.get("remat_spelling") or remat_spelling(x.get("wrapper"))
    head = f"At {x['function']}'s peak, {fmt(kept)} ({kept / peak:.0%} of it) are activations its forward pass " \
           f"keeps for the backward pass: {_by_line(x)}. "
    evidence = (f"XLA's buffers live at the program's peak ({fmt(peak)}): {x['buffers']} made by forward-pass (jvp) "
                f"ops and still live there")
    if x.get("compiled"):
        policy = x["remat_policy"]
        return Words(
            brief=f"{fmt(kept)} of {x['function']}'s peak are activations kept for the backward pass.",
            brief_fix=_wrap_fix(x),
            message=(head + f"Measured: XLA's compile of {x['function']} with {x['remat_function']} wrapped in "
                     f"{x['remat_spelling']} ({policy.replace('_', ' ')}) takes its temporaries "
                     f"{fmt(x['temp_before_bytes'])} -> {fmt(x['temp_after_bytes'])}, so the run's true peak goes "
                     f"{fmt(x['true_peak_before_bytes'])} -> {fmt(x['true_peak_after_bytes'])}."),
            fix=(f"Recompute them in the backward pass: {_wrap_fix(x)}; trading compute for memory (the backward "
                 f"pass runs {x['remat_function']}'s forward again)."),
            evidence=evidence + f"; compiled at the end of the run with each policy tried ({x['remat_tried']})",
            saves=f"saves {fmt(f.saving_bytes)} (compiled)")
    why = x.get("not_compiled") or _NOT_COMPILED
    return Words(
        brief=f"{fmt(kept)} of {x['function']}'s peak are activations kept for the backward pass.",
        brief_fix=f"wrap that block in {spelling}" if f.site else
                  f"wrap the layer or block of those lines in {spelling}",
        message=(head + f"Recomputing them saves up to that much at this peak ({why}; the recomputation's own "
                 "temporaries take some of it back)."),
        fix=(f"Recompute them in the backward pass instead: wrap the layer or block at {f.site or 'those lines'} in "
             f"{spelling} ({_REMATS}), trading compute for memory; a policy such as jax.checkpoint_policies.dots_saveable, "
             "or save_only_these_names with checkpoint_name on the values to keep, keeps the matmuls or those "
             "values only."),
        evidence=evidence,
        # a run recorded without the compiles keeps its words; a function that cannot be wrapped says why
        saves=f"saves up to {fmt(f.saving_bytes)}" + (f" ({why})" if x.get("not_compiled", NO_COMPILE) != NO_COMPILE
                                                       else ""))


def _narrow(f: Finding, x: dict) -> Words:
    peak, wide = x["program_peak_bytes"], x["float32_bytes"]
    return Words(
        brief=f"float32 temporaries hold {fmt(wide)} ({wide / peak:.0%}) of {x['function']}'s peak.",
        brief_fix="use bfloat16 if precision allows",
        message=(f"At {x['function']}'s peak, float32 temporaries hold {fmt(wide)} ({wide / peak:.0%} of it)"
                 + (f", the most of your lines' at {f.site}." if f.site else ".")),
        fix=("Compute in bfloat16 where precision allows (the activations or the matmuls: x.astype(jnp.bfloat16), "
             "or a model dtype of bfloat16 with float32 parameters): it halves these buffers, up to "
             f"{fmt(f.saving_bytes)} at this peak ({_NOT_COMPILED}; run --plan compiles the step with its float32 "
             "arguments as bfloat16)."),
        evidence=f"XLA's buffers live at the program's peak ({fmt(peak)}), float32 temporaries",
        saves=f"saves up to {fmt(f.saving_bytes)}")


REMAT = Rule(
    "remat", made_by="analysis/rules/inside_jit.py",
    about_a_call=True,
    finds=("Activations kept for the backward pass hold a quarter or more of a function's own peak "
             "(analysis/rules/inside_jit.py)."),
    facts={"": ("function", "wrapper", "program_peak_bytes", "kept_bytes", "buffers", "by_line", "compiled",
                "not_compiled", "remat_function", "remat_site", "remat_spelling", "remat_how", "remat_policy",
                "remat_static_argnums",
                "remat_tried", "temp_before_bytes", "temp_after_bytes", "true_peak_before_bytes",
                "true_peak_after_bytes", "peak_elsewhere")},
    optional=("peak_elsewhere", "wrapper", "compiled", "not_compiled", "remat_function", "remat_site",
              "remat_spelling", "remat_how", "remat_policy", "remat_static_argnums", "remat_tried", "temp_before_bytes",
              "temp_after_bytes", "true_peak_before_bytes", "true_peak_after_bytes"),
    meanings={"function": "The jitted function's name.",
              "wrapper": f"What jitted it ({', '.join(f'`{w}`' for w in WRAPPERS)}): the fix is in its terms.",
              "kept_bytes": ("Bytes of the forward-pass (`jvp`) temporaries still live at the function's peak: "
                             "activations kept for the backward pass."),
              "buffers": "How many buffers those are.",
              "by_line": "`[site, bytes]` of the (up to 3) lines that hold most of them.",
              "compiled": ("True when the step was compiled at the end of the run with a function of the program "
                           "wrapped in its library's remat (capture/jit/remat.py) and the run's true peak fell: the "
                           "saving is then that fall, for the wrap and policy printed."),
              "not_compiled": "Why no such compile gives the saving (the function cannot be wrapped from outside).",
              "remat_function": ("The function wrapped (`block`, `Block.__call__`), or that the compiles tried to wrap "
                                 "where none was compiled."),
              "remat_site": "Where it is defined (`file:line`).",
              "remat_spelling": ("Its library's remat, as the words spell it compiled or not ("
                                 + ", ".join(f"`{lib.remat_spelling}`" for lib in LIBRARIES[::-1] if lib.remat_spelling)
                                 + ")."),
              "remat_how": "How the compile wrapped it: `module global` or `class attribute`.",
              "remat_policy": ("The policy that lowered the peak most: `nothing_saveable` (the default), "
                               "`dots_saveable` or `dots_with_no_batch_dims_saveable`."),
              "remat_static_argnums": ("The wrapped method's positional arguments the wrap made static (`self` is 0; "
                                       "comma-separated), as the fix says: a method given a `train` flag it branches "
                                       "on, which a library's remat would trace; empty where none."),
              "remat_tried": "Each policy compiled, with the true peak it gives.",
              "temp_before_bytes": "XLA's temporaries of the step as recorded.",
              "temp_after_bytes": "The same, compiled with the wrap made.",
              "true_peak_before_bytes": "The run's true peak on the busiest device as recorded.",
              "true_peak_after_bytes": "The same with the compile of the wrap in place of the recorded one."},
    words={"": _remat},
)


NARROW_DTYPE = Rule(
    "narrow-dtype", made_by="analysis/rules/inside_jit.py",
    about_a_call=True,
    finds="float32 temporaries hold half or more of a function's own peak (analysis/rules/inside_jit.py).",
    facts={"": ("function", "program_peak_bytes", "float32_bytes", "by_line", "peak_elsewhere")},
    optional=("peak_elsewhere",),
    meanings={"function": "The jitted function's name.",
              "float32_bytes": "Bytes of the float32 temporaries live at the function's peak.",
              "by_line": "`[site, bytes]` of the (up to 3) lines that hold most of them."},
    words={"": _narrow},
)


MEANINGFUL = 0.01  # a fall of the true peak smaller than this share is no finding
NO_COMPILE = ("not compiled at the end of the run (recorded with --verify-seconds 0, or by a jaxmemprof that did "
              "not compile remat)")


def compiled_remat(ar: Attributed, function_id: int) -> dict | None:
    """What the compiles of the step with a function of the program wrapped
    in remat (capture/jit/remat.py, jit_whatif) do to the run's true peak:
    the best wrap and policy's facts (``compiled``, ``saving_bytes``), why
    none was compiled (``not_compiled``), or None where some compiled and
    none lowers the true peak by ``MEANINGFUL`` of it."""
    run = ar.run
    w = run.jit.whatif
    rows = None if w.empty else w[w["function_id"] == function_id]
    changes = [] if rows is None else [json_cell(c, {}) for c in rows["change"]]
    mine = [i for i, c in enumerate(changes) if isinstance(c.get("remat"), dict)]
    if not mine:
        return {"compiled": False, "not_compiled": NO_COMPILE}
    rows = rows.iloc[mine]
    changes = [changes[i]["remat"] for i in mine]
    groups: dict = {}
    errors, unwrappable = [], []
    for c, r in zip(changes, rows.to_dict("records")):
        error = r.get("error")
        if isinstance(error, str) and error:
            if c.get("policy") is None:  # it cannot be wrapped from outside: the row says why
                unwrappable.append(error.replace("not compiled: ", f"not compiled: {c.get('function')}, ", 1))
            else:
                errors.append(error)
            continue
        if pd.isna(r.get("argument_bytes")):
            continue
        key = (c.get("function"), c.get("policy"))
        groups.setdefault(key, (c, {}))[1][(int(function_id), r["signature"])] = {col: int(r[col]) for col in FIGURES}
    # the library's remat of the function the compiles wrapped (flax linen's nn.remat for a Module's method),
    # as the words of a saving no compile measured spell it
    spelled = {(str(c.get("function")), str(c.get("spelling"))) for c in changes if c.get("spelling")}
    spelling = {"remat_function": next(iter(spelled))[0], "remat_spelling": next(iter(spelled))[1]} \
        if len(spelled) == 1 else {}
    if not groups:
        why = (unwrappable + errors or ["XLA gave no figures"])[0]
        return {"compiled": False, "not_compiled": why, **spelling}
    peaks = ar.peaks
    before = peaks.device_bytes
    if before is None:
        return {"compiled": False, "not_compiled": "no true peak to compare with"}
    less = peaks.during(function_id)
    tried, best = [], None
    for (what, policy), (c, replace) in groups.items():
        after = peaks.with_change(replace, less).device_bytes
        if after is None:
            continue
        tried.append(f"{what} {policy}: {fmt(after)}")
        if best is None or after < best[0]:
            best = (after, c, replace)
    if best is None or before - best[0] < MEANINGFUL * before:
        # a function that could not be wrapped may still hold them: say so; else no wrap lowers it
        # (or one past the compile budget)
        reasons = unwrappable + [e for e in errors if "budget" in e]
        return {"compiled": False, "not_compiled": reasons[0], **spelling} if reasons else None
    after, c, replace = best
    compiles = run.jit.compiles
    sig = next(iter(replace))[1]
    recorded = compiles[(compiles["function_id"] == function_id) & (compiles["signature"] == sig)]
    temp_before = int(pd.to_numeric(recorded["temp_bytes"], errors="coerce").fillna(0).max()) if len(recorded) else 0
    site = f"{ar.files.display_path(str(c.get('file')))}:{int(c.get('line') or 0)}"
    return {"compiled": True, "saving_bytes": int(before - after), "remat_function": str(c.get("function")),
            "remat_site": site, "remat_spelling": str(c.get("spelling")), "remat_how": str(c.get("how")),
            "remat_policy": str(c.get("policy")), "remat_tried": "; ".join(tried),
            "remat_static_argnums": ",".join(str(int(i)) for i in c.get("static_argnums") or []),
            "temp_before_bytes": temp_before, "temp_after_bytes": int(replace[(function_id, sig)]["temp_bytes"]),
            "true_peak_before_bytes": int(before), "true_peak_after_bytes": int(after)}


def _first_user_site(by_line: pd.Series) -> str:
    """The line holding the most of them, among those that are the user's
    (XLA makes some buffers with no Python stack); "" when none is."""
    named = [s for s in by_line.index if s != NO_STACK and not str(s).startswith(("(", "argument "))]
    return str(named[0]) if named else ""


def inside_jit_findings(ar: Attributed) -> list[Finding]:
    """Hints from what fills each function's peak."""
    b = largest_signature_only(ar.jit_buffers)
    if b.empty:
        return []
    out: list[Finding] = []
    functions = ar.run.jit.functions
    wrappers = {} if functions.empty or "wrapper" not in functions.columns else {
        fid: w for fid, w in zip(functions["function_id"], functions["wrapper"]) if isinstance(w, str) and w}
    # A program that rematerialises already (jax.checkpoint names its ops).
    remat = set(b.loc[b["op"].astype(str).str.contains(r"checkpoint|remat", regex=True), "function_id"])
    for (fid, name), g in b[b["at_peak"] == 1].groupby(["function_id", "function"], sort=False):
        peak = int(g["program_peak_bytes"].iloc[0])
        if peak <= 0:
            continue
        temps = g[g["kind"] == "temporary"]
        forward = temps["op"].astype(str).map(lambda op: bool(_FORWARD.search(op)) and not _BACKWARD.search(op))
        kept = temps.loc[forward.astype(bool)]
        if fid not in remat and int(kept["bytes"].sum()) >= REMAT_SHARE * peak:
            by_line = kept.groupby("site")["bytes"].sum().sort_values(ascending=False)
            saving = int(kept["bytes"].sum())
            measured = compiled_remat(ar, int(fid))
            severity = "low"
            if measured is not None and measured.get("compiled"):
                saving = measured.pop("saving_bytes")
                severity = "high" if saving >= 256 * 1024**2 else "medium"
            if measured is not None:  # else compiled, and no wrap lowers the run's true peak: nothing to fix
                out.append(Finding(
                    rule="remat", severity=severity, site=_first_user_site(by_line), saving_bytes=saving,
                    facts={"function": str(name), "wrapper": wrappers.get(fid, "jax.jit"), "program_peak_bytes": peak,
                           "kept_bytes": int(kept["bytes"].sum()), "buffers": int(len(kept)),
                           "by_line": [[str(s), int(v)] for s, v in by_line.head(3).items()], **measured}))
        wide = temps.loc[temps["shape"].astype(str).str.startswith("f32[").astype(bool)]
        if int(wide["bytes"].sum()) >= NARROW_SHARE * peak:
            by_line = wide.groupby("site")["bytes"].sum().sort_values(ascending=False)
            half = int(wide["bytes"].sum()) // 2
            out.append(Finding(rule="narrow-dtype", severity="low", site=_first_user_site(by_line), saving_bytes=half,
                               facts={"function": str(name), "program_peak_bytes": peak, "float32_bytes": 2 * half,
                                      "by_line": [[str(s), int(v)] for s, v in by_line.head(3).items()]}))
    return out


RULES = (REMAT, NARROW_DTYPE,)

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


# Each library's own spelling of rematerialisation, by the wrapper that jitted the step.
_REMAT = {"flax.nnx.jit": "nnx.remat", "equinox.filter_jit": "eqx.filter_checkpoint"}
_NOT_COMPILED = "not compiled: it changes your code, so XLA cannot be asked for it from the recording"


def _remat(f: Finding, x: dict) -> Words:
    peak, kept = x["program_peak_bytes"], x["kept_bytes"]
    spelling = _REMAT.get(x.get("wrapper"), "jax.checkpoint")
    return Words(
        brief=f"{fmt(kept)} of {x['function']}'s peak are activations kept for the backward pass.",
        brief_fix=f"wrap that block in {spelling}" if f.site else
                  f"wrap the layer or block of those lines in {spelling}",
        message=(f"At {x['function']}'s peak, {fmt(kept)} ({kept / peak:.0%} of it) are activations its forward pass "
                 f"keeps for the backward pass: {_by_line(x)}. Recomputing them saves up to that much at this "
                 f"peak ({_NOT_COMPILED}; the recomputation's own temporaries take some of it back)."),
        fix=(f"Recompute them in the backward pass instead: wrap the layer or block at {f.site or 'those lines'} in "
             f"{spelling} (flax linen: nn.remat; flax nnx: nnx.remat; equinox: eqx.filter_checkpoint; plain JAX: "
             "jax.checkpoint), trading compute for memory; a policy such as jax.checkpoint_policies.dots_saveable, "
             "or save_only_these_names with checkpoint_name on the values to keep, keeps the matmuls or those "
             "values only."),
        evidence=(f"XLA's buffers live at the program's peak ({fmt(peak)}): {x['buffers']} made by forward-pass (jvp) "
                  f"ops and still live there"),
        saves=f"saves up to {fmt(f.saving_bytes)}")


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
    summary=("Activations kept for the backward pass hold a quarter or more of a function's own peak "
             "(analysis/rules/inside_jit.py)."),
    facts={"": ("function", "wrapper", "program_peak_bytes", "kept_bytes", "buffers", "by_line", "peak_elsewhere")},
    optional=("peak_elsewhere", "wrapper"),
    meanings={"function": "The jitted function's name.",
              "wrapper": "What jitted it (`jax.jit`, `flax.nnx.jit`, `equinox.filter_jit`): the fix is in its terms.",
              "kept_bytes": ("Bytes of the forward-pass (`jvp`) temporaries still live at the function's peak: "
                             "activations kept for the backward pass."),
              "buffers": "How many buffers those are.",
              "by_line": "`[site, bytes]` of the (up to 3) lines that hold most of them."},
    words={"": _remat},
)


NARROW_DTYPE = Rule(
    "narrow-dtype", made_by="analysis/rules/inside_jit.py",
    about_a_call=True,
    summary="float32 temporaries hold half or more of a function's own peak (analysis/rules/inside_jit.py).",
    facts={"": ("function", "program_peak_bytes", "float32_bytes", "by_line", "peak_elsewhere")},
    optional=("peak_elsewhere",),
    meanings={"function": "The jitted function's name.",
              "float32_bytes": "Bytes of the float32 temporaries live at the function's peak.",
              "by_line": "`[site, bytes]` of the (up to 3) lines that hold most of them."},
    words={"": _narrow},
)


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
    functions = ar.run.jit.get("functions")
    wrappers = {} if functions is None or functions.empty or "wrapper" not in functions.columns else {
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
            out.append(Finding(rule="remat", severity="low", site=_first_user_site(by_line), saving_bytes=saving, facts={
                "function": str(name), "wrapper": wrappers.get(fid, "jax.jit"), "program_peak_bytes": peak,
                "kept_bytes": saving, "buffers": int(len(kept)),
                "by_line": [[str(s), int(v)] for s, v in by_line.head(3).items()]}))
        wide = temps.loc[temps["shape"].astype(str).str.startswith("f32[").astype(bool)]
        if int(wide["bytes"].sum()) >= NARROW_SHARE * peak:
            by_line = wide.groupby("site")["bytes"].sum().sort_values(ascending=False)
            half = int(wide["bytes"].sum()) // 2
            out.append(Finding(rule="narrow-dtype", severity="low", site=_first_user_site(by_line), saving_bytes=half,
                               facts={"function": str(name), "program_peak_bytes": peak, "float32_bytes": 2 * half,
                                      "by_line": [[str(s), int(v)] for s, v in by_line.head(3).items()]}))
    return out


RULES = (REMAT, NARROW_DTYPE,)

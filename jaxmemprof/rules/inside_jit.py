"""Inside a jitted call: ``remat`` and ``narrow-dtype`` (made by analysis/inside_jit.py
from XLA's buffers at the program's peak)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jaxmemprof.rules.base import Rule, Words, fmt

if TYPE_CHECKING:
    from jaxmemprof.analysis.findings import Finding


def _by_line(x: dict) -> str:
    return ", ".join(f"{fmt(v)} at {s}" for s, v in x["by_line"])


def _remat(f: Finding, x: dict) -> Words:
    peak, kept = x["program_peak_bytes"], x["kept_bytes"]
    return Words(
        brief=f"{fmt(kept)} of {x['function']}'s peak are activations kept for the backward pass.",
        brief_fix="wrap the layer or block there in jax.checkpoint" if f.site else
                  "wrap the layer or block of those lines in jax.checkpoint",
        message=(f"At {x['function']}'s peak, {fmt(kept)} ({kept / peak:.0%} of it) are activations its forward pass "
                 f"keeps for the backward pass: {_by_line(x)}."),
        fix=(f"Recompute them in the backward pass instead: wrap the layer or block at {f.site or 'those lines'} in jax.checkpoint "
             "(jax.remat; nnx.remat, eqx.filter_checkpoint), trading compute for memory; a policy such as "
             "jax.checkpoint_policies.dots_saveable keeps the matmuls only."),
        evidence=(f"XLA's buffers live at the program's peak ({fmt(peak)}): {x['buffers']} made by forward-pass (jvp) "
                  f"ops and still live there"))


def _narrow(f: Finding, x: dict) -> Words:
    peak, wide = x["program_peak_bytes"], x["float32_bytes"]
    return Words(
        brief=f"float32 temporaries hold {fmt(wide)} ({wide / peak:.0%}) of {x['function']}'s peak.",
        brief_fix="use bfloat16 where precision allows",
        message=(f"At {x['function']}'s peak, float32 temporaries hold {fmt(wide)} ({wide / peak:.0%} of it)"
                 + (f", the most of your lines' at {f.site}." if f.site else ".")),
        fix=("Compute in bfloat16 where precision allows (the activations or the matmuls: x.astype(jnp.bfloat16), "
             "or a model dtype of bfloat16 with float32 parameters): it halves these buffers."),
        evidence=f"XLA's buffers live at the program's peak ({fmt(peak)}), float32 temporaries")


REMAT = Rule(
    "remat", made_by="analysis/inside_jit.py",
    summary=("Activations kept for the backward pass hold a quarter or more of a function's own peak "
             "(analysis/inside_jit.py)."),
    facts={"": ("function", "program_peak_bytes", "kept_bytes", "buffers", "by_line", "peak_elsewhere")},
    optional=("peak_elsewhere",),
    meanings={"function": "The jitted function's name.",
              "kept_bytes": ("Bytes of the forward-pass (`jvp`) temporaries still live at the function's peak: "
                             "activations kept for the backward pass."),
              "buffers": "How many buffers those are.",
              "by_line": "`[site, bytes]` of the (up to 3) lines that hold most of them."},
    words={"": _remat},
)


NARROW_DTYPE = Rule(
    "narrow-dtype", made_by="analysis/inside_jit.py",
    summary="float32 temporaries hold half or more of a function's own peak (analysis/inside_jit.py).",
    facts={"": ("function", "program_peak_bytes", "float32_bytes", "by_line", "peak_elsewhere")},
    optional=("peak_elsewhere",),
    meanings={"function": "The jitted function's name.",
              "float32_bytes": "Bytes of the float32 temporaries live at the function's peak.",
              "by_line": "`[site, bytes]` of the (up to 3) lines that hold most of them."},
    words={"": _narrow},
)

RULES = (REMAT, NARROW_DTYPE,)

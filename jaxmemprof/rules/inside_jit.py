"""Inside a jitted call: ``remat`` and ``narrow-dtype`` (made by analysis/inside_jit.py
from XLA's buffers at the program's peak)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jaxmemprof.rules.base import Rule, Words, fmt

if TYPE_CHECKING:
    from jaxmemprof.analysis.findings import Finding


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
    "remat", made_by="analysis/inside_jit.py",
    summary=("Activations kept for the backward pass hold a quarter or more of a function's own peak "
             "(analysis/inside_jit.py)."),
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

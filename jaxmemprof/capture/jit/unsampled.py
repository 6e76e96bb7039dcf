"""The signatures a function compiled that no kept sampled call ran, given
arguments for the end's compiles. The leftover batch at each epoch's end
(jax's examples' ``data_stream``) is compiled in a call the probe did not
sample: the compile table has its signature and XLA's figures, but no
abstract arguments were kept for it (plan.Planner.abstract runs at sampled
calls only), so the donation's verifying compile (whatif.py) had nothing to
compile it from, and the saving left it undonated.

- **From a kept signature's arguments.** A kept signature's abstract
  arguments (plan.Abstract: its pytree, its static arguments, its leaves'
  shardings) with the leaves' shapes and dtypes the unsampled signature's
  text names (programs.Programs._signature: ``float32[40,1024]``,
  ``np:float32[40]``, ``float32[64,8]@[16,8]x4``), where the two texts
  differ in those alone: the same leaves in the same order, each an array of
  the same kind (a device array or numpy's), the same Python scalars and
  static values. A leaf on several devices keeps the kept leaf's sharding
  where that sharding gives the signature's shard shape on as many devices.
  Anything else (another number of leaves, another static value, a
  signature stored cut short) is not guessed: ``derive`` says why not.
- **Checked.** Where the run's own trace of the signature is kept
  (retrace.Trace: the probe traced it when it analysed the compile), its
  arguments must be the derived leaves' shapes and dtypes, and the end's
  compile replays it (no Python of the program's run); else the program's
  Python is re-traced (rerun.py), as ``run --plan`` does at other
  batches. The compile's argument and output bytes must then be those XLA
  gave the program's own compile of the signature (whatif.py): a derivation
  that missed would not pass.
- **Kept traces.** A trace of a signature no kept call ran is kept for the
  function's ``MOST`` largest such signatures (``prune_traces``), while the
  function keeps any signature's arguments at all.
"""

from __future__ import annotations

import re

MOST = 4  # traces of signatures no kept call ran, kept per function (the largest call peaks)

# The reasons a signature no kept call ran is not compiled from another's arguments; the analysis
# (analysis/advice/donation.py) reads "not sampled" at the start of an error's reason.
NOT_SAMPLED = "not verified: not sampled"
CUT_SHORT = f"{NOT_SAMPLED}: its signature was stored cut short (its shapes are not all known)"
DIFFERS = (f"{NOT_SAMPLED}: its arguments differ from every kept signature's in more than their shapes and "
           f"dtypes (another number of leaves, another kind of leaf or static value)")
SHARDED = f"{NOT_SAMPLED}: its leaves' layout on the devices is not a kept leaf's sharding at its shape"
TRACE_DIFFERS = f"{NOT_SAMPLED}: the run's trace of it takes other arguments than its signature names"
SIZES_DIFFER = (f"{NOT_SAMPLED}: compiled from its signature's shapes, XLA's argument and output bytes are not "
                f"those of the program's own compile of it")

# One array leaf of a signature's text: [np:]dtype[dims][@[shard dims]xN], between ", " separators.
_LEAF = re.compile(r"(?:^|(?<=, ))(np:)?([A-Za-z0-9_<>]+)\[([0-9,]*)\](@\[([0-9,]*)\]x([0-9]+))?(?=, |$)")
_CUT = re.compile(r" \.\.\. \(\d+ characters, sha256 [0-9a-f]+\)$")


def leaves(signature: str):
    """(skeleton, [(numpy's, dtype text, shape, shard shape or None,
    devices)]) of a signature's text: its array leaves in order, and the text
    with each one's dtype and shapes taken out (what two signatures that
    differ in shapes and dtypes alone share); None where the text was stored
    cut short."""
    if _CUT.search(signature):
        return None
    found, parts, at = [], [], 0
    for m in _LEAF.finditer(signature):
        parts.append(signature[at:m.start()] + ("np:" if m.group(1) else "") + "\0")
        at = m.end()
        shard = tuple(int(d) for d in m.group(5).split(",") if d) if m.group(4) else None
        found.append((bool(m.group(1)), m.group(2), tuple(int(d) for d in m.group(3).split(",") if d), shard,
                      int(m.group(6)) if m.group(4) else 1))
    parts.append(signature[at:])
    return "".join(parts), found


def derive(jax, ab, template: str, signature: str, trace=None):
    """Abstract arguments for ``signature`` from ``ab`` (plan.Abstract, kept
    for the signature ``template``): its pytree, static arguments and
    shardings, with ``signature``'s leaves' shapes and dtypes; or why not (a
    string). ``trace`` (the run's trace of ``signature``, if kept): its
    arguments must be those leaves."""
    import numpy as np

    mine, theirs = leaves(signature), leaves(template)
    if mine is None or theirs is None:
        return CUT_SHORT
    if mine[0] != theirs[0] or len(mine[1]) != len(theirs[1]):
        return DIFFERS
    at = [j for j, x in enumerate(ab.flat) if isinstance(x, jax.ShapeDtypeStruct)]
    if len(at) != len(mine[1]):
        return DIFFERS
    flat = list(ab.flat)
    for j, (numpy_leaf, dtype_text, shape, shard, devices) in zip(at, mine[1]):
        x = flat[j]
        try:
            dtype = x.dtype if str(x.dtype) == dtype_text else np.dtype(dtype_text)
        except TypeError:  # a dtype numpy does not name (a PRNG key's) that changed: not guessed
            return DIFFERS
        sharding = getattr(x, "sharding", None)
        if numpy_leaf != (sharding is None):
            return DIFFERS
        if sharding is None and shard is not None:  # numpy's leaf is on no device
            return SHARDED
        if sharding is not None:
            try:
                same = (len(sharding.device_set) == devices
                        and (shard is None or tuple(sharding.shard_shape(shape)) == shard))
            except Exception:  # the sharding does not divide the shape
                same = False
            if not same:
                return SHARDED
        flat[j] = jax.ShapeDtypeStruct(shape, dtype, sharding=sharding, weak_type=x.weak_type)
    if trace is not None and not _takes(trace, flat):
        return TRACE_DIFFERS
    out = type(ab)(ab.treedef, flat, list(ab.keys), dict(ab.static), dict(ab.static_kw), list(ab.devices),
                   ab.platform, signature)
    out.batch_static = ab.batch_static
    return out


def _takes(trace, flat: list) -> bool:
    """Whether the trace's arguments are ``flat``'s arrays (shape and dtype), in order."""
    try:
        avals = list(trace.jaxpr.in_avals)
    except Exception:
        return False
    if len(avals) != len(flat):
        return False
    for aval, x in zip(avals, flat):
        if hasattr(x, "shape") and hasattr(x, "dtype"):
            dtype = str(x.dtype)
            # with x64 off, a 64-bit leaf is traced at 32 bits
            if tuple(aval.shape) != tuple(x.shape) or str(aval.dtype) not in (dtype, _NARROWED.get(dtype)):
                return False
    return True


_NARROWED = {"float64": "float32", "int64": "int32", "uint64": "uint32", "complex128": "complex64"}


def template_for(jax, slot, signature: str, trace=None):
    """(the kept signature whose arguments ``signature`` is derived from, its
    derived plan.Abstract), the kept signatures tried largest call peak
    first; or why none serves (a string)."""
    why = DIFFERS
    for sig in sorted(slot.abstract, key=lambda s: -(slot.peaks.get(s) or 0)):
        out = derive(jax, slot.abstract[sig], sig, signature, trace)
        if not isinstance(out, str):
            return sig, out
        if why == DIFFERS:
            why = out
    return why


def prune_traces(slot) -> None:
    """The traces a function keeps: those of its kept signatures, and of the
    ``MOST`` signatures with the largest call peaks that no kept call ran
    (none where it keeps no signature's arguments)."""
    if not slot.abstract:
        slot.traces.clear()
        return
    others = sorted((s for s in slot.traces if s not in slot.abstract),
                    key=lambda s: -(getattr(slot.traces[s], "peak", None) or 0))
    for gone in others[MOST:]:
        del slot.traces[gone]

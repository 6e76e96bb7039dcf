"""How each argument of a jitted function flows from call to call, from the
facts the jit probe records on sampled calls' input leaves (``from``: the
previous call's output leaf, the same array as its input, or new; only
where the previous call was sampled too). One rule, for the recorder (a
plan of the step at other batch sizes, at the end of a run) and for the
analyses (the roles of the bytes); plain Python, no jax, no pandas.

- ``carried``: some call got it from the previous call's outputs (state the
  step replaces: parameters, optimizer state, batch statistics, RNG keys);
- ``held``: the same array at every call seen (an input the step reads and
  keeps: frozen weights, a dataset on device);
- ``per-step``: a new array at every call, not an output (the batch);
- ``unknown``: no two consecutive calls were sampled.

``batch_keys`` says which inputs hold the batch: the per-step ones, else
(a step fed the same batch at every call: a benchmark, the bundled MLP)
the held ones.
"""

from __future__ import annotations

from dataclasses import dataclass

from jaxmemprof.facts.donors import match
from jaxmemprof.facts.truepeak import as_passed, written

CARRIED, HELD, PER_STEP, UNKNOWN = "carried", "held", "per-step", "unknown"


def leaf_key(leaf: dict) -> tuple:
    """What identifies an input leaf from call to call: its argument (position
    or name) and its path there."""
    return (leaf.get("arg"), leaf.get("name"), leaf.get("path"))


def flows(calls) -> dict:
    """``leaf_key`` -> how it flows, over the sampled calls of one function
    (each a list of input leaf dicts, in call order)."""
    seen: dict = {}
    for leaves in calls:
        for leaf in leaves:
            if not isinstance(leaf, dict):
                continue
            origin = leaf.get("from")
            kinds = seen.setdefault(leaf_key(leaf), set())
            if isinstance(origin, list) and origin:
                kinds.add(origin[0])
    out = {}
    for key, kinds in seen.items():
        if "out" in kinds:
            out[key] = CARRIED
        elif kinds == {"in"}:
            out[key] = HELD
        elif "new" in kinds:
            out[key] = PER_STEP
        else:
            out[key] = UNKNOWN
    return out


def batch_keys(flow: dict, usable=None) -> tuple[set, str | None]:
    """The input leaf keys that hold the batch, and how they flow: the
    per-step ones; where there are none (or none that ``usable(key)``
    accepts: none with a batch dimension), the held ones (the same batch
    passed at every call); (empty, None) where neither is known."""
    for kind in (PER_STEP, HELD):
        keys = {k for k, v in flow.items() if v == kind and (usable is None or usable(k))}
        if keys:
            return keys, kind
    return set(), None


def fed_back(inputs) -> dict:
    """Output index -> the first input leaf that came from it (``from``:
    ``["out", j]``), over input leaf lists (a call's next call's; each a
    list of leaf dicts, in call order): the outputs a step hands back to
    itself, each with the input it became."""
    out: dict = {}
    for leaves in inputs:
        for leaf in leaves:
            origin = leaf.get("from")
            if isinstance(origin, list) and len(origin) == 2 and origin[0] == "out" and isinstance(origin[1], int):
                out.setdefault(origin[1], leaf)
    return out


@dataclass(frozen=True)
class PassedCall:
    """One sampled call as XLA ran it, read once for the roles of its bytes:
    ``inputs``, its input leaves as JAX passed them (truepeak.as_passed: a
    numpy argument at the dtype and bytes XLA holds); ``outputs``, its
    output leaves; ``flows``, each input's flow over the function's sampled
    calls (``flows``; None: not seen); ``fed``, output index -> the input
    of the next call it became (``fed_back``); ``aliased``, the outputs XLA
    writes into donated inputs' buffers (JAX's matching, donors.match);
    ``written``, XLA's outputs into new buffers (truepeak.written)."""

    inputs: list
    outputs: list
    flows: list
    fed: dict
    aliased: frozenset
    written: int


def passed_call(history, inputs: list, outputs: list, figures: dict, taken) -> PassedCall:
    """The call whose input and output leaves are ``inputs`` and
    ``outputs`` (lists of leaf dicts), with XLA's ``figures`` of its
    signature; ``history``: the function's sampled calls' input leaf lists,
    in call order (their flows); ``taken``: the input leaf lists to read
    its fed-back outputs from (``fed_back``)."""
    flow = flows(history)
    passed = as_passed(inputs, outputs, figures.get("argument_bytes"))
    donated = [i for i, leaf in enumerate(passed) if leaf.get("donated")]
    return PassedCall(passed, outputs, [flow.get(leaf_key(leaf)) for leaf in passed], fed_back(taken),
                      frozenset(match(passed, outputs, donated).values()), written(figures))

"""Which arguments of a jitted function to donate, from its sampled calls:
one rule, read by the report's advice (analysis/advice/donation.py) and by
the jit probe at the end of a run, which compiles the function with those
arguments donated to measure what that changes (capture/jit/whatif.py).
Plain Python on the journal's leaf lists: no pandas, no JAX.

JAX's rule (docs/jax-facts.md, donation): donated input leaves are matched to
output leaves of equal (shape, dtype, memory kind), each output taking the
first unused donor; a donor with no match stays alive and JAX warns that it
was "not usable".

An argument is a donor only when, in every sampled call, each of its array
leaves was freed by the very statement that made the call (``state =
step(state, batch)``: the jit probe notes where each input leaf dies), so
the caller cannot have used it after the call, and every one of its leaves
finds an output left over by the arguments already donated.
"""

from __future__ import annotations

from dataclasses import dataclass

from jaxmemprof.facts.truepeak import as_passed


@dataclass(frozen=True)
class Call:
    """One sampled call: its input and output leaves (the journal's dicts),
    what became of each input (``inputs_alive``: "dropped", "kept", ...;
    None where not known) and whether it was the function's first."""

    inputs: list
    outputs: list
    fates: list | None
    first: bool = False


@dataclass(frozen=True)
class Donor:
    """One argument worth donating, with what backs it."""

    argument: str  # "params" or "0"
    position: int | None  # for donate_argnums
    keyword: bool  # passed by keyword: donate_argnames
    leaves: int
    donated_bytes: int  # the bytes of its leaves XLA can write outputs into (per call, all devices)
    matches: tuple  # (input leaf, output leaf) descriptions
    first_kept: bool = False  # the first call's value was still referenced after it (set up before a loop?)
    devices: int = 1  # devices its leaves lie on (XLA's figures are per device)


def key(leaf: dict) -> tuple:
    return (tuple(leaf.get("shape") or ()), leaf.get("dtype"), leaf.get("memory_kind"))


def describe(leaf: dict) -> str:
    return f"{leaf.get('dtype')}[{','.join(map(str, leaf.get('shape') or []))}]"


def label(leaf: dict) -> str:
    return leaf.get("name") or str(leaf.get("arg"))


def match(inputs: list[dict], outputs: list[dict], donors: list[int]) -> dict[int, int]:
    """JAX's matching: each output takes the first unused donor (input leaf
    index, in ``donors`` order) of equal key. Returns donor -> output."""
    free: dict[tuple, list[int]] = {}
    for i in donors:
        free.setdefault(key(inputs[i]), []).append(i)
    taken: dict[int, int] = {}
    for o, out in enumerate(outputs):
        queue = free.get(key(out))
        if queue:
            taken[queue.pop(0)] = o
    return taken


def donors(calls: list[Call]) -> list[Donor]:
    """The arguments every sampled call (whose fates are known) lets donate."""
    calls = [c for c in calls if c.fates is not None]
    ok: dict[str, bool] = {}
    # argument -> (its position, given by keyword, leaves, donated bytes, matches, devices)
    info: dict[str, tuple[int | None, bool, int, int, tuple, int]] = {}
    first_kept: set[str] = set()
    for call in calls:
        # numpy leaves at the dtype JAX passes them (float64 as float32 with x64 off): the one XLA matches
        inputs, outputs, fates = as_passed(call.inputs, call.outputs), call.outputs, call.fates
        if fates is None or len(fates) != len(inputs):
            continue
        args: dict[str, list[int]] = {}
        for i, leaf in enumerate(inputs):
            args.setdefault(label(leaf), []).append(i)
        donated = [i for i, leaf in enumerate(inputs) if leaf.get("donated")]
        # An array passed in two places (ema = params; step(params, ema))
        # cannot be donated twice, nor donated in one and kept in another.
        shared = {i for i, leaf in enumerate(inputs) if leaf.get("same_as") not in (None, i)}
        shared |= {inputs[i]["same_as"] for i in shared}
        # A numpy argument (``host``) is copied to the device for the call:
        # donating it donates that copy, never the caller's array, so its
        # leaves neither stop nor back a donation. An argument all numpy in
        # this call (parameters made with numpy before the loop, at its
        # first call) says nothing here: the calls that pass device arrays
        # decide. In an argument with device leaves too, its numpy leaves'
        # copies are donated with them: they need an output as well (JAX
        # warns of a donated buffer no output takes).
        devs = {a: [i for i in idx if not inputs[i].get("host")] for a, idx in args.items()}
        # Arguments whose every device leaf the caller dropped with nothing
        # run after the call (state = step(state)): nothing used them after.
        free_args = [a for a, idx in devs.items()
                     if idx and not any(inputs[i].get("donated") for i in idx)
                     and all(fates[i] == "dropped" and i not in shared for i in idx)]
        if call.first and len(calls) > 1:
            # The first call's inputs are often what the program set up
            # before its loop, and still named there: not a reason to
            # keep state that every later call replaces, but worth saying.
            kept = [a for a, idx in devs.items() if idx and a not in free_args
                    and not any(inputs[i].get("donated") or i in shared for i in idx)]
            first_kept.update(kept)
            free_args += kept
        for a, idx in devs.items():
            if idx and a not in free_args:
                ok[a] = False
        chosen = list(donated)
        for a in free_args:
            # The leaves jit prunes (its program never reads them) take no
            # output and save nothing: XLA aliases the others.
            read = [i for i in args[a] if not inputs[i].get("pruned")]
            trial = match(inputs, outputs, chosen + read)
            if read and all(i in trial for i in read):
                chosen += read
                matches = tuple((f"{a}{inputs[i]['path']} {describe(inputs[i])}",
                                 f"output{outputs[trial[i]]['path']}") for i in read)
                donated_bytes = sum(int(inputs[i].get("bytes") or 0) for i in read)
                first = inputs[args[a][0]]
                devices = max(int(inputs[i].get("devices") or 1) for i in read)
                info[a] = (first.get("arg"), bool(first.get("kw")), len(args[a]), donated_bytes, matches, devices)
                ok.setdefault(a, True)
            else:
                ok[a] = False
    return [Donor(a, *info[a][:5], first_kept=a in first_kept, devices=info[a][5])
            for a, good in ok.items() if good and a in info]


def arguments(calls: list[Call]) -> list[tuple]:
    """(label, position, bytes, dropped) of each argument with array leaves
    in the sampled ``calls``, in the call's order: what a wrapper's own
    donation option (libraries' ``donation``) decides from, for the advice
    and for the compile of its fix at the end of the run alike. ``dropped``:
    in every call whose fates are known, each of its leaves was dropped with
    nothing run after the call (donating it would break nothing); the first
    call counts only when it is the only one, as for the donors."""
    out: dict[str, list] = {}
    for call in calls:
        inputs, fates = call.inputs, call.fates or []
        known = len(fates) == len(inputs) and not (call.first and len(calls) > 1)
        sizes: dict[str, int] = {}
        for i, leaf in enumerate(inputs):
            name = label(leaf)
            entry = out.setdefault(name, [leaf.get("arg"), 0, True])
            sizes[name] = sizes.get(name, 0) + int(leaf.get("bytes") or 0)
            if known and fates[i] != "dropped":
                entry[2] = False
        for name, size in sizes.items():
            out[name][1] = size
    return [(name, pos, size, dropped) for name, (pos, size, dropped) in out.items()]

"""The true peak's arithmetic, in one place: XLA's call peak from its figures,
and, for each jitted call, the bytes on its devices at that call's peak (the
bytes live just before it, less its arguments that were already on its
devices, which XLA counts, plus XLA's call peak: a numpy argument, or an
array on fewer devices than the call, is copied there for the call, and was
not among the bytes live before it: ``placement``). Plain Python on plain rows, no pandas: the report's model of the
run's peaks (analysis/peaks.py), the pytest plugin's in-memory totals
(analysis/check.py) and the plan's figures (capture/jit/plan.py) all
compute it here.
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass

FIGURES = ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "generated_code_bytes")


def call_peak(fig):
    """XLA's call peak from its figures (a mapping of ``FIGURES`` to numbers,
    or to arrays of them): ``argument + output - alias + temp + code``."""
    return (fig["argument_bytes"] + fig["output_bytes"] - fig["alias_bytes"] + fig["temp_bytes"]
            + fig["generated_code_bytes"])


def peak_of(figures) -> int | None:
    """``call_peak`` of a tuple of the five figures in ``FIGURES`` order (None: no figures)."""
    if figures is None:
        return None
    return call_peak(dict(zip(FIGURES, (int(v or 0) for v in figures))))


def temporaries(fig) -> int:
    """XLA's bytes of a call that are no array of the program: its
    temporaries and its generated code (a mapping of ``FIGURES``, 0 where missing)."""
    return _int(fig.get("temp_bytes")) + _int(fig.get("generated_code_bytes"))


def written(fig) -> int:
    """The outputs XLA writes into new buffers: its output bytes less those
    aliased to (donated) arguments (a mapping of ``FIGURES``, 0 where missing)."""
    return _int(fig.get("output_bytes")) - _int(fig.get("alias_bytes"))


def live_outside(live_before: dict, argument_bytes, share: float = 1.0, devices=None) -> dict:
    """{device: bytes live outside a call}: those live just before it, less
    its arguments that XLA counts (``share`` of its ``argument_bytes``:
    those already on its devices, ``placement``) on each of the call's
    ``devices`` (all, where None); never below 0."""
    args = round(_int(argument_bytes) * share)
    return {d: max(int(v) - (args if devices is None or d in devices else 0), 0)
            for d, v in sorted(live_before.items())}


def peak_on_device(outside: int | None, figures) -> int:
    """A device's peak during a call: the bytes live outside it (None: 0) plus
    XLA's call peak (``figures``: the five in ``FIGURES`` order, never None)."""
    peak = peak_of(figures)
    assert peak is not None, "a call peak needs the call's figures"
    return int(outside or 0) + peak


@dataclass(frozen=True)
class Moment:
    """One jitted call's peak: ``compile`` is the index of the signature's
    row in the compiles given, ``call_index`` the sampled call's (None: a
    compile no sampled call ran), ``live_before`` {device: bytes} where the
    recorder counted them."""

    compile: int
    call_index: int | None
    t_wall: float
    live_before: dict | None
    device_bytes: int  # on the busiest device
    bytes: int  # on all the call's devices, summed
    devices: int
    call_number: int | None = None  # a counted call (not sampled): the function's n-th call (calllive.py)
    bound: str = ""  # "at most": a counted call whose signature is not known, its largest taken


def _int(v) -> int:
    """A figure of a row: 0 where missing or not a number (a damaged journal's cell)."""
    try:
        return int(v) if v is not None and v == v else 0
    except (TypeError, ValueError):
        return 0


def figures_of(row: dict) -> dict:
    """XLA's five figures of a row, 0 where missing."""
    return {col: _int(row.get(col)) for col in FIGURES}


def device_bytes(text) -> dict | None:
    """A ``live_before`` cell: {device: bytes}, or None where it is missing or damaged."""
    try:
        v = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    if not isinstance(v, dict):
        return None
    ok = all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b < 2**63 for b in v.values())
    return v if ok else None


def _leaves(text) -> list[dict]:
    """A leaf list's dicts: from its journal cell (JSON text), or the list itself."""
    try:
        leaves = json.loads(text) if isinstance(text, str) else text if isinstance(text, list) else []
    except ValueError:
        return []
    return [leaf for leaf in leaves if isinstance(leaf, dict)] if isinstance(leaves, list) else []


def _count(leaf) -> int:
    try:
        return max(int(leaf.get("devices") or 1), 1)
    except (TypeError, ValueError):
        return 1


def _size(leaf) -> int:
    b = leaf.get("bytes")
    return b if isinstance(b, int) and not isinstance(b, bool) and b > 0 else 0


# What JAX makes of a 64-bit numpy argument with x64 off (its default): the
# dtype it canonicalises to before the call, the one XLA holds on the device.
NARROWER = {"float64": "float32", "int64": "int32", "uint64": "uint32", "complex128": "complex64"}


def x64(inputs, outputs=None, argument_bytes=None) -> bool:
    """Whether JAX kept 64-bit dtypes in a call (jax_enable_x64), from its
    input and output leaves (journal cells or lists): a device
    array of a 64-bit dtype among its leaves says so (JAX makes none with
    x64 off); else, where the call has 64-bit numpy arguments and XLA's
    ``argument_bytes`` for its signature is known, whichever reading of
    those arguments (kept, or narrowed to 32 bits) comes nearer XLA's
    figure; else JAX's default, off."""
    ins, outs = _leaves(inputs), _leaves(outputs)
    if any(not leaf.get("host") and leaf.get("dtype") in NARROWER for leaf in ins + outs):
        return True
    wide = [leaf for leaf in ins if leaf.get("host") and leaf.get("dtype") in NARROWER and not leaf.get("pruned")]
    if not wide or not argument_bytes:
        return False
    read = [leaf for leaf in ins if not leaf.get("pruned")]
    kept = sum(_size(leaf) // (1 if leaf.get("host") else _count(leaf)) for leaf in read)
    narrowed = kept - sum(_size(leaf) // 2 for leaf in wide)
    return abs(int(argument_bytes) - kept) < abs(int(argument_bytes) - narrowed)


def device_dtype(leaf: dict, wide: bool = False) -> str | None:
    """The dtype a leaf has on the device: a numpy argument's as JAX
    canonicalises it (64-bit to 32-bit unless ``wide``: x64 on), a device
    array's its own."""
    dtype = leaf.get("dtype")
    if leaf.get("host") and not wide and isinstance(dtype, str):
        return NARROWER.get(dtype, dtype)
    return dtype


def device_size(leaf: dict, wide: bool = False) -> int:
    """A leaf's bytes on the device: a numpy argument's once JAX has
    canonicalised its dtype (half its host bytes for a 64-bit one with x64
    off), a device array's as recorded."""
    b = _size(leaf)
    return b // 2 if leaf.get("host") and device_dtype(leaf, wide) != leaf.get("dtype") else b


def as_passed(inputs, outputs=None, argument_bytes=None) -> list[dict]:
    """A call's input leaves (a journal cell or a list) as JAX passed them to
    XLA: a numpy argument at the dtype JAX canonicalised it to (float64 to
    float32 with x64 off: ``x64``, from XLA's ``argument_bytes`` for the
    signature where known) and its bytes there; device arrays as they are."""
    ins = _leaves(inputs)
    wide = x64(ins, outputs, argument_bytes)
    return [dict(leaf, dtype=device_dtype(leaf, wide), bytes=device_size(leaf, wide)) if leaf.get("host") else leaf
            for leaf in ins]


def placement(inputs, outputs=None, argument_bytes=None) -> tuple[int, float]:
    """(the devices a call ran on: the most that any of its input or output
    arrays is on; the share of its input arrays' bytes already on that
    many). An input on fewer devices than the call (an array on one device
    passed to a pmap, or to a jit over a mesh) is copied onto the call's
    devices as it runs, and the caller's array stays alive beside the
    copy: it is not among the argument buffers that XLA counts. A numpy
    argument (``host``) was on no device before the call: JAX copies it
    there for the call, so none of it is among the bytes live before it;
    it counts at its size there (``device_size``: XLA's ``argument_bytes``
    of the signature tells whether JAX narrowed a 64-bit one)."""
    return _placement(inputs, outputs, argument_bytes)


def _placement(inputs, outputs=None, argument_bytes=None, host_placed=False) -> tuple[int, float]:
    """``placement``; ``host_placed``: numpy arguments counted as already on
    the call's one device (the estimate for a call whose live bytes come
    from a snapshot of unknown moment: ``moments``)."""
    ins, outs = _leaves(inputs), _leaves(outputs)
    n = max((_count(leaf) for leaf in ins + outs), default=1)
    wide = x64(ins, outs, argument_bytes)
    total = sum(device_size(leaf, wide) for leaf in ins)
    placed = sum(device_size(leaf, wide) for leaf in ins if _count(leaf) >= n
                 and (host_placed or not leaf.get("host")))
    return n, (placed / total if total else 1.0)


def moments(compiles: list[dict], calls: list[dict], snapshots: list[tuple], *, replace: dict | None = None,
            gone: list | None = None, since: float = -math.inf, counted: list[dict] | None = None) -> list[Moment]:
    """Each sampled call (with the signature it ran) and each compiled
    signature no sampled call ran, at ``since`` or later, as a ``Moment``.

    ``compiles``: rows with ``function_id, signature, call_index, t_wall``
    and ``FIGURES``; ``calls``: sampled calls' ``function_id, call_index,
    t_wall, signature, inputs, live_before`` (and ``outputs``, where
    recorded: ``placement``); ``snapshots``: (t_wall, bytes
    on the busiest device, bytes on all) in any order, read where a call's
    ``live_before`` is missing (runs recorded before the recorder counted
    it: the last snapshot before the call). ``replace``: (function_id,
    signature) -> figures of that signature compiled with a change made,
    whose peak stands in place of the recorded one (the arguments live
    before the call stay the recorded ones: a change to them is in the new
    peak). ``gone``: (from, until, {device: bytes}[, function ids]) taken
    off ``live_before`` of the calls between those times, but those of the
    functions named (they take those arrays as arguments). ``counted``:
    calls whose live bytes were counted, sampled or not (``function_id,
    call, t_wall, live_before, signature``: the journal's jit_call_live
    "max" rows), each a Moment with its ``call_number``: of the signature
    it ran, or, where not known, of each of its function's signatures, the
    largest taken and said to be "at most"; its devices and the share of
    its arguments on them are those of a sampled call of the same
    signature (or function)."""
    if not compiles:
        return []
    figures = [figures_of(c) for c in compiles]
    args = [f["argument_bytes"] for f in figures]  # the recorded arguments: those live before the call
    i: int | None
    for i, c in enumerate(compiles):
        changed = (replace or {}).get((int(c["function_id"]), c["signature"]))
        if changed is not None:
            figures[i] = {col: int(changed[col]) for col in FIGURES}
    peak = [call_peak(f) for f in figures]
    by_signature = {(int(c["function_id"]), c["signature"]): i for i, c in enumerate(compiles)}
    devices: dict = {}
    placed = []
    for call in calls:
        fid, sig = int(call["function_id"]), call["signature"]
        i = by_signature.get((fid, sig)) if isinstance(sig, str) else None
        # Counted just before the call, its numpy arguments were on no device; a snapshot read in its
        # place (no ``live_before``) may be one taken during the call, which holds what the call made
        # of them (its outputs, as JAX made them): that estimate takes them off as before.
        has_live = device_bytes(call.get("live_before")) is not None
        n, share = _placement(call.get("inputs"), call.get("outputs"), None if i is None else args[i],
                              host_placed=not has_live)
        placed.append(share)
        for key in ((int(call["function_id"]), call["signature"]), (int(call["function_id"]), None)):
            devices[key] = max(devices.get(key, 1), n)
    events: list = []
    ran: set = set()
    for call, share in zip(calls, placed):
        fid, sig = int(call["function_id"]), call["signature"]
        i = by_signature.get((fid, sig)) if isinstance(sig, str) else None
        if i is None:  # recorded before calls named their signature: the last compiled at or before it
            idx = call.get("call_index")
            earlier = [j for j, c in enumerate(compiles) if int(c["function_id"]) == fid
                       and idx is not None and idx == idx and _int(c.get("call_index")) <= int(idx)]
            if not earlier:
                continue
            i = earlier[-1]
        ran.add(i)
        idx = call.get("call_index")
        events.append((device_bytes(call.get("live_before")), float(call["t_wall"]), i,
                       int(idx) if idx is not None and idx == idx else None, share, ran_on(call)))
    events += [(None, float(c["t_wall"]), i, None, 1.0, None) for i, c in enumerate(compiles) if i not in ran]
    placed_as: dict = {}  # (function_id, signature) and (function_id, None) -> (share, devices) of a sampled call
    for call, share in zip(calls, placed):
        for key in ((int(call["function_id"]), call["signature"]), (int(call["function_id"]), None)):
            placed_as.setdefault(key, (share, ran_on(call)))
    extra = _counted_events(compiles, counted or (), placed_as)
    events = [(*e, None, "") for e in events] + extra
    snaps = sorted((float(t), int(b), int(s)) for t, b, s in snapshots)
    times = [t for t, _, _ in snaps]
    out = []
    best: dict[tuple, Moment] = {}  # a counted call whose signature is not known: its largest Moment
    for before, t, k, idx, share, on, number, bound in events:
        if t < since:
            continue
        i = int(k)
        fid = int(compiles[i]["function_id"])
        n = devices.get((fid, compiles[i]["signature"]), devices.get((fid, None), 1))
        # The arguments live before the call that are XLA's argument buffers: those already on its devices.
        mine = round(args[i] * share)
        if before is not None:
            for t_from, t_to, off, *exempt in gone or ():
                if t_from < t < t_to and not (exempt and fid in exempt[0]):
                    before = {d: max(b - off.get(d, 0), 0) for d, b in before.items()}
            total = sum(before.values())
            # Each device at the call's peak: a device the call runs on holds XLA's call peak beside what
            # lives there outside the call; one it does not run on, what lives there (a call on cpu:1 adds
            # nothing to cpu:0). Where the leaves do not say the call's devices, every device runs it.
            mine_on = [max(b - mine, 0) + peak[i] for d, b in before.items() if on is None or d in on]
            others = [b for d, b in before.items() if on is not None and d not in on]
            if on is not None and len(mine_on) < len(on):  # a device of the call with nothing live before it
                mine_on.append(peak[i])
            top = max(mine_on + others, default=peak[i])
        else:
            j = bisect.bisect_right(times, t) - 1
            busiest, total = (snaps[j][1], snaps[j][2]) if j >= 0 else (0, 0)
            top = max(busiest - mine, 0) + peak[i]
        m = Moment(i, idx, t, before, top, max(total - n * mine, 0) + n * peak[i], n, number, bound)
        if bound:
            once = (fid, number, t)
            if once not in best or (m.device_bytes, m.bytes) > (best[once].device_bytes, best[once].bytes):
                best[once] = m
            continue
        out.append(m)
    return out + list(best.values())


def _counted_events(compiles: list[dict], counted, placed_as: dict) -> list[tuple]:
    """``moments``' events of the counted calls: (live before, t, compile
    index, None, share, devices, call number, bound)."""
    out = []
    signatures: dict = {}
    for i, c in enumerate(compiles):
        signatures.setdefault(int(c["function_id"]), []).append(i)
    for row in counted:
        live = device_bytes(row.get("live_before"))
        fid = _int(row.get("function_id"))
        mine = signatures.get(fid, [])
        if live is None or not mine:
            continue
        sig = row.get("signature")
        known = [i for i in mine if isinstance(sig, str) and compiles[i]["signature"] == sig]
        for i in known or mine:
            share, on = placed_as.get((fid, compiles[i]["signature"]), placed_as.get((fid, None), (1.0, None)))
            bound = "" if known or len(mine) == 1 else "at most"
            out.append((live, float(row["t_wall"]), i, None, share, on, _int(row.get("call")), bound))
    return out


def ran_on(call: dict) -> set | None:
    """The devices a sampled call ran on (``str(device)``, as ``live_before``
    names them): those of its input and output arrays (a numpy argument is
    on none before the call); None where its leaves do not say (recorded
    before leaves named their devices)."""
    out: set = set()
    for leaf in _leaves(call.get("inputs")) + _leaves(call.get("outputs")):
        on = leaf.get("on")
        if isinstance(on, list):
            out.update(str(d) for d in on)
    return out or None


def largest(items, key=lambda m: (m.device_bytes, m.bytes)):
    """The first of the largest (busiest device, then all devices), or None."""
    best = None
    for m in items:
        if best is None or key(m) > key(best):
            best = m
    return best

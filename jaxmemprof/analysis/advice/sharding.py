"""Arrays held whole on every device where a mesh the program uses could
shard them, and what sharding them does to the run's true peak: what the
``replicated`` finding (analysis/rules/sharding.py) reads, made only where
sharding them lowers the run's true peak.

The rule (replicas.py) names an input of a user's jitted function (its
latest sampled call) of at least 1 MiB on a device, held whole on each of
N > 1 devices, while a mesh the call uses has an axis whose size k > 1
divides one of its dimensions. At the end of the run the jit probe compiled
the function with those inputs sharded so (capture/jit/whatif.py,
jit_whatif): the finding's saving is the fall of the run's true peak on the
busiest device with that compile in place of the recorded one and the
arrays held between calls at ``1/k`` of their bytes; where the compile
shows the step gathering them back whole (its outputs replicated: a
``with_sharding_constraint`` or ``filter_shard`` inside it), where XLA
refuses the sharding, or where the true peak falls by less than 1 %
(``MEANINGFUL``: XLA gathers the weight whole inside the call that holds
the peak), there is no finding. Without that compile (over the budget, a run recorded without it),
the saving is ``bytes × (1 − 1/k)`` per device, said as an upper bound; so too
where a signature compiled sharded leaves the true peak at another whose
compile was over the budget (counted whole, as recorded).

An array several functions take is one array (``same_arrays``): its
finding is the first function's (the largest call peak), and it is named as
the caller names it (``model.*``, not a method's ``self.*``)."""

from __future__ import annotations

import pandas as pd

from jaxmemprof.facts.truepeak import FIGURES
from jaxmemprof.facts.replicas import candidate, meshes_of, saving, shard_on, spec
from jaxmemprof.analysis.advice.donation import NOT_COMPILED
from jaxmemprof.analysis.attributed import Attributed
from jaxmemprof.analysis.cells import json_cell as _json
from jaxmemprof.analysis.cells import leaves as _leaves
from jaxmemprof.facts.flow import leaf_key

MEANINGFUL = 0.01  # a fall of the true peak smaller than this share is not worth an all-gather a step


def call_meshes(leaves: list) -> list[dict]:
    """Every mesh ({axis: size}) a call's leaves are sharded on, in order."""
    out: list[dict] = []
    for leaf in leaves:
        mesh = leaf.get("mesh")
        if isinstance(mesh, dict) and mesh and mesh not in out:
            out.append(mesh)
    return out


def _owner(leaf: dict) -> str:
    return str(leaf.get("owner") or f"{leaf.get('name') or ''}{leaf.get('path') or ''}")


def _array(leaf: dict, axis: str, size: int, dim: int) -> dict:
    shape = [int(n) for n in leaf.get("shape") or []]
    per_device = int(leaf.get("bytes") or 0) // max(int(leaf.get("devices") or 1), 1)
    return {"owner": _owner(leaf), "shape": shape, "dtype": str(leaf.get("dtype") or ""),
            "bytes": per_device, "devices": int(leaf.get("devices") or 1), "axis": str(axis), "axis_size": int(size),
            "dim": int(dim), "spec": spec(len(shape), dim, str(axis)),
            "saving_bytes": saving(per_device, size)}


def by_rule(leaves: list, claimed: set, named: dict | None = None) -> list[dict]:
    """The call's inputs the rule (replicas.py) would shard, each once, and
    none ``claimed`` (identities: ``identity``), each named as ``named``
    says (``same_arrays``)."""
    meshes = call_meshes(leaves)
    arrays, seen = [], set()
    for leaf in leaves:
        owner = _owner(leaf)
        devices = max(int(leaf.get("devices") or 1), 1)
        shape = [int(n) for n in leaf.get("shape") or []]
        if owner in seen or identity(leaf, named) in claimed:
            continue
        if not candidate(shape, int(leaf.get("bytes") or 0) // devices, devices, leaf.get("replicated")):
            continue
        where = shard_on(shape, meshes_of(leaf.get("mesh"), meshes))
        if where is None:
            continue
        seen.add(owner)
        arrays.append(dict(_array(leaf, *where[1:]), owner=identity(leaf, named)[0]))
    return arrays


def identity(leaf: dict, named: dict | None = None) -> tuple:
    """What an array is, whichever function takes it: (owner, shape, dtype),
    the owner the one ``named`` (``same_arrays``) gives it."""
    key = _owner(leaf), tuple(leaf.get("shape") or ()), str(leaf.get("dtype"))
    return (named or {}).get(key, key)


def same_arrays(run, function_ids: list) -> dict:
    """One name for each array that several functions take, however each
    names it (``model.embed.embedding`` as a train step's argument,
    ``self.embed.embedding`` as a method's of the model): function_id ->
    {(owner, shape, dtype) as that function names it: (owner, shape, dtype)
    as the finding names it}, for the functions ``function_ids`` (largest
    call peak first: the order the findings claim arrays in).

    Two functions' input leaves are the same array where their owners'
    paths below the argument agree (``.embed.embedding``), with shape and
    dtype, and the calls pass it from one to the other: an array of that
    shape and dtype that one function's sampled call took is an input or an
    output of a sampled call of the other (an array is its Python object
    while it lives: the leaf's ``id``). A leaf that is the whole argument
    (no path below it) is the same as another only where the two took the
    very same array. The name is the first such function's, but a method's
    receiver (``self``): the caller's variable names it better."""
    calls, functions = run.jit.calls, run.jit.functions
    if calls.empty or functions.empty:
        return {}
    receiver = {int(fn.function_id): _receiver(fn) for fn in functions.itertuples()}
    seen = {}  # function_id -> ({owner: (below, shape, dtype, ids, via a receiver)}, {(id, shape, dtype)}, index)
    for fid in function_ids:
        mine = calls[calls["function_id"] == fid]
        owners: dict = {}
        ids: set = set()
        for inputs, outputs in zip(mine["inputs"], mine["outputs"]):
            for leaf in _leaves(outputs):
                if isinstance(leaf, dict) and leaf.get("id") is not None:
                    ids.add((int(leaf["id"]), *identity(leaf)[1:]))
            for leaf in _leaves(inputs):
                if not isinstance(leaf, dict):
                    continue
                owner, shape, dtype = identity(leaf)
                name = str(leaf.get("name") or "")
                below = owner[len(name):] if name and owner.startswith(name) else owner
                entry = owners.setdefault(owner, (below, shape, dtype, set(), name in ("self", receiver.get(fid))))
                if leaf.get("id") is not None:
                    entry[3].add(int(leaf["id"]))
                    ids.add((int(leaf["id"]), shape, dtype))
        index: dict = {}  # (below, shape, dtype) -> owners
        for owner, (below, shape, dtype, _, _) in owners.items():
            index.setdefault((below, shape, dtype), []).append(owner)
        seen[fid] = owners, ids, index

    def passed(below, shape, dtype, mine, ids, g, theirs) -> bool:
        if not below:  # the whole argument: the very same array
            return bool(mine & theirs)
        return any((i, shape, dtype) in seen[g][1] for i in mine) or any((i, shape, dtype) in ids for i in theirs)

    group: dict = {}  # (function_id, owner) -> the first (function_id, owner) of its array
    names: dict = {}  # that first -> [(owner, via a receiver)]
    for n, fid in enumerate(function_ids):
        owners, ids, _ = seen[fid]
        for owner, (below, shape, dtype, mine, via) in owners.items():
            first = next(((g, o) for g in function_ids[:n] for o in seen[g][2].get((below, shape, dtype), ())
                          if passed(below, shape, dtype, mine, ids, g, seen[g][0][o][3])), None)
            first = group.get(first, first) if first is not None else (fid, owner)
            group[(fid, owner)] = first
            names.setdefault(first, []).append((owner, via))
    best = {first: next((o for o, via in alike if not via), alike[0][0]) for first, alike in names.items()}
    out: dict = {}
    for (fid, owner), first in group.items():
        _, shape, dtype, _, _ = seen[fid][0][owner]
        out.setdefault(fid, {})[(owner, shape, dtype)] = (best[first], shape, dtype)
    return out


def _receiver(fn) -> str | None:
    """A method's first parameter (``Class.method``'s), else None."""
    parts = str(getattr(fn, "qualname", "") or "").split(".")
    params = _json(getattr(fn, "params", None), [])
    return str(params[0]) if len(parts) > 1 and parts[-2] != "<locals>" and params else None


def _compiled(run, function_id: int | None = None):
    """The jit_whatif rows that compiled a function (any, or the one named)
    with inputs sharded, or None."""
    w = run.jit.whatif
    if w.empty:
        return None
    rows = w if function_id is None else w[w["function_id"] == function_id]
    rows = rows[["shard" in _json(c, {}) for c in rows["change"]]]
    return None if rows.empty else rows


def _keys(change: dict) -> set:
    return {(tuple(a["shape"]), a["dtype"]) for a in change.get("shard") or [] if isinstance(a, dict)}


def _others(run, function_id: int, keys: set) -> dict:
    """XLA's figures of the other functions compiled with arrays of these
    (shape, dtype) sharded too, where their outputs stayed sharded: the
    same arrays given to an evaluation step ((function_id, signature) ->
    figures)."""
    rows = _compiled(run)
    out = {}
    for fid, sig, change, r in zip(rows["function_id"], rows["signature"], rows["change"], rows.to_dict("records")):
        c = _json(change, {})
        if int(fid) == function_id or r.get("error") is not None and pd.notna(r.get("error")) \
                or pd.isna(r["argument_bytes"]) or c.get("gathered") or not (_keys(c) & keys):
            continue
        out[(int(fid), sig)] = {col: int(r[col]) for col in FIGURES}
    return out


def _held_between(run, shard: list[dict]) -> tuple[dict, list]:
    """What sharding takes off the moments between calls: the arrays of a
    sharded input's shape and dtype held whole on several devices, each
    device then holding ``1/k`` of them. ({snapshot: {device: bytes}} off
    the snapshots that saw them, ``gone`` entries (peaks.call_peaks) off the
    calls between their first and last snapshot, but the calls of functions
    that take such arrays: their peak counts them.)"""
    if not getattr(run, "has_arrays", False) or run.arrays.empty:
        return {}, []
    k_of = {(tuple(a["shape"]), a["dtype"]): int(a["axis_size"]) for a in shard}
    calls = run.jit.calls
    takers = {int(fid) for fid, inputs in zip(calls["function_id"], calls["inputs"])
              if any((tuple(leaf.get("shape") or ()), str(leaf.get("dtype"))) in k_of
                     for leaf in _leaves(inputs) if isinstance(leaf, dict))}
    t_of = dict(zip(run.snapshots["snapshot"], run.snapshots["t_wall"]))
    less: dict = {}
    gone = []
    for row in run.arrays.itertuples(index=False):
        key = (tuple(int(x) for x in row.shape), str(row.dtype)) if isinstance(row.shape, tuple) else None
        k = k_of.get(key)
        devices = [str(d) for d in row.devices] if isinstance(row.devices, (list, tuple)) else []
        if k is None or len(devices) < 2 or any(int(b) != int(row.nbytes) for b in row.shard_bytes):
            continue
        off = int(row.nbytes) - int(row.nbytes) // k
        for snap in range(int(row.first_snapshot), int(row.last_snapshot) + 1):
            d = less.setdefault(snap, {})
            for device in devices:
                d[device] = d.get(device, 0) + off
        first, last = t_of.get(int(row.first_snapshot)), t_of.get(int(row.last_snapshot))
        if first is not None and last is not None:
            gone.append((float(first), float(last), dict.fromkeys(devices, off), takers))
    return less, gone


def _made_by(run, function_id: int, replace: dict) -> list[dict]:
    """The functions that made the step's replicated inputs, compiled with
    those outputs sharded (jit_whatif rows ``shard_out``, whatif._makers):
    their figures put into ``replace``; [{function, site, wrapper,
    outputs}] for the fix (``jax.jit(init, out_shardings=...)``)."""
    w = run.jit.whatif
    if w.empty:
        return []
    functions = run.jit.functions
    named = {} if functions is None else {int(r.function_id): r for r in functions.itertuples()}
    out = []
    for fid, sig, change, r in zip(w["function_id"], w["signature"], w["change"], w.to_dict("records")):
        c = _json(change, {})
        if c.get("for") != function_id or "shard_out" not in c or pd.notna(r.get("error")) \
                or pd.isna(r.get("argument_bytes")):
            continue
        replace[(int(fid), sig)] = {col: int(r[col]) for col in FIGURES}
        fn = named.get(int(fid))
        out.append({"function": str(getattr(fn, "name", fid)),
                    "site": f"{getattr(fn, 'jit_file', '')}:{int(getattr(fn, 'jit_line', 0) or 0)}",
                    "outputs": [{"output": a.get("output"), "spec": a.get("spec")} for a in c["shard_out"]]})
    return out


def _over_budget(rows: pd.DataFrame, function_id: int, changed) -> dict | None:
    """Where the true peak with the change is a call of the function at a
    signature whose sharded compile was over the compile budget (counted as
    recorded, whole): not verified (the fall is not known), else None (no
    finding: the peak does not fall)."""
    held = changed.call
    over = {sig: str(e) for sig, e in zip(rows["signature"], rows["error"])
            if isinstance(e, str) and "over the compile budget" in e}
    if held is None or int(held.function_id) != int(function_id) or held.signature not in over \
            or held.device_bytes != changed.device_bytes:
        return None
    return {"verified": False, "not_verified": over[held.signature]}


def verified_sharding(ar: Attributed, function_id: int, leaves: list) -> dict | None:
    """What sharding the inputs as the rule says does to the run's true peak
    (facts), from the compiles of the function with them sharded; None where
    there is no finding to make (the step gathers them back, XLA refuses
    the sharding, or the true peak does not fall)."""
    run = ar.run
    rows = _compiled(run, function_id)
    if rows is None:
        return {"verified": False, "not_verified": NOT_COMPILED}
    ok = rows[rows["error"].isna() & rows["argument_bytes"].notna()]
    if ok.empty:
        why = str(rows["error"].dropna().iloc[0]) if rows["error"].notna().any() else "XLA gave no figures"
        return None if "compile failed" in why else {"verified": False, "not_verified": why}
    changes = [_json(c, {}) for c in ok["change"]]
    if any(c.get("gathered") for c in changes):
        return None
    replace = {(int(function_id), sig): {col: int(r[col]) for col in FIGURES}
               for sig, r in zip(ok["signature"], ok.to_dict("records"))}
    shard = [a for c in changes for a in c.get("shard") or [] if isinstance(a, dict)]
    signatures = len(replace)
    replace.update(_others(run, function_id, {k for c in changes for k in _keys(c)}))
    less, gone = _held_between(run, shard)
    peaks = ar.peaks
    for snap, devices in peaks.during(function_id).items():
        less.setdefault(snap, {}).update(devices)
    made_by = _made_by(run, function_id, replace)
    before = peaks.device_bytes
    changed = peaks.with_change(replace, less, gone)
    after = changed.device_bytes
    if before is None or after is None:
        return None
    if before - after < MEANINGFUL * before:
        return _over_budget(rows, function_id, changed)
    by_key = {leaf_key(leaf): leaf for leaf in leaves}
    arrays, seen = [], set()
    for a in changes[0].get("shard") or []:  # the largest signature's (whatif writes it first)
        leaf = by_key.get(tuple(a["leaf"])) if isinstance(a.get("leaf"), list) else None
        if leaf is not None and identity(leaf) not in seen:  # else a leaf of another signature than the latest
            seen.add(identity(leaf))
            arrays.append(_array(leaf, a["axis"], a["axis_size"], a["dim"]))
    sig = ok["signature"].iloc[0]  # the largest signature (whatif writes it first): its temporaries
    compiles = run.jit.compiles
    recorded = compiles[(compiles["function_id"] == function_id) & (compiles["signature"] == sig)]
    temp_before = int(pd.to_numeric(recorded["temp_bytes"], errors="coerce").fillna(0).max()) if len(recorded) else 0
    return {"verified": True, "arrays": arrays, "signatures_verified": signatures, "made_by": made_by,
            "temp_before_bytes": temp_before, "temp_after_bytes": int(ok["temp_bytes"].iloc[0]),
            "true_peak_before_bytes": int(before), "true_peak_after_bytes": int(after),
            "saving_bytes_per_device": int(before - after)}



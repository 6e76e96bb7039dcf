"""What the memory is: the bytes at the run's largest jitted call, by role
(parameters, optimizer state, the batch, the call's outputs and its
temporaries, everything else) and by owner (the array's path in the user's
own tree), per device.

Roles come from data flow, not names (``jaxmemprof.facts.flow``): an input the
previous call returned is state carried across steps, one that is new at
every call is a per-step input (the batch), one that is the same array at
every call is held. Carried and held state is split into parameters and
optimizer state where the library says so (its state types, its variable
types: the leaf's ``tag``, read by ``jaxmemprof.facts.libraries``), else by the
argument's name. The call
is the one ``Peaks.largest_sampled`` names (the true peak, when a sampled call
holds it): its inputs are known leaf by leaf, XLA's figures give its outputs
and temporaries, and the bytes live before it that are not its inputs are
"other arrays". The roles of one device add up to that call's peak there.
"""

from __future__ import annotations


import pandas as pd

from jaxmemprof.analysis.attributed import Attributed
from jaxmemprof.analysis.cells import json_cell, leaves as _leaves
from jaxmemprof.analysis.py_holders import chosen_searches, describe
from jaxmemprof.facts.flow import CARRIED, HELD, PER_STEP, UNKNOWN, fed_back, flows, leaf_key, passed_call
from jaxmemprof.facts.libraries import OPTIMIZER, PARAMETERS, STATE, role_of_tag

# PARAMETERS, OPTIMIZER and STATE are also what a library's tag can say (jaxmemprof.facts.libraries).
BATCH, HELD_INPUTS, INPUTS = ("batch", "held inputs", "other inputs")
NEW_STATE, RESULTS, INSIDE, CODE, OTHER = ("new state", "results", "inside the call", "executable code",
                                           "other arrays")
UNNAMED = "(no array names it)"  # an owner row for the rest of a role's bytes
# The order a report lists them in.
ROLES = (PARAMETERS, OPTIMIZER, STATE, BATCH, HELD_INPUTS, INPUTS, NEW_STATE, RESULTS, INSIDE, CODE, OTHER)

ROLE_COLUMNS = ["device", "role", "bytes", "share", "arrays", "largest_owner", "largest_owner_bytes"]
OWNER_COLUMNS = ["device", "role", "owner", "bytes", "shape", "dtype", "function", "sharding"]

_PARAMETER_WORDS = ("param", "weight", "model", "kernel")


def role_of(leaf: dict, flow: str | None) -> str:
    """An input leaf's role, from how it flows and what its library calls it:
    a library's tag first, then the argument's name where it says
    parameters (an evaluation step gets new parameters at every call, yet
    they are not its batch), then the flow."""
    tag = str(leaf.get("tag") or "")
    name = str(leaf.get("name") or "").lower()
    if flow == PER_STEP and not tag and not any(w in name for w in _PARAMETER_WORDS):
        return BATCH
    tagged = role_of_tag(tag) if tag else None
    if tagged is not None:
        return tagged
    words = f"{leaf.get('name') or ''}{leaf.get('owner') or leaf.get('path') or ''}".lower()
    if any(w in words for w in ("opt_state", "optimizer", "momentum")) or words.startswith("opt"):
        return OPTIMIZER
    if any(w in words for w in _PARAMETER_WORDS):
        return PARAMETERS if flow in (CARRIED, HELD, UNKNOWN, None, PER_STEP) else INPUTS
    if flow == PER_STEP:
        return BATCH
    if flow == CARRIED:
        return STATE
    if flow == HELD:
        return HELD_INPUTS
    return INPUTS


def _by_structure(inputs: list, role: list) -> list:
    """The roles, with an argument named like nothing (``p``, ``theta``) that
    the optimizer state mirrors as parameters: what the gradient is taken
    of. Mirrors: each of its leaves has an optimizer-state leaf of the same
    shape and dtype whose path ends with its own (an optimizer's
    ``opt_state[0].mu['w1']`` for ``theta['w1']``; a bare array, whose path
    is empty, is never told so)."""
    mirror = [(str(leaf.get("path") or ""), tuple(leaf.get("shape") or ()), str(leaf.get("dtype")))
              for leaf, r in zip(inputs, role) if r == OPTIMIZER]
    if not mirror:
        return role
    args: dict = {}
    for i, leaf in enumerate(inputs):
        args.setdefault((leaf.get("arg"), leaf.get("name")), []).append(i)
    out = list(role)
    for idx in args.values():
        if not all(role[i] in (STATE, HELD_INPUTS, INPUTS) for i in idx):
            continue
        mine = [(str(inputs[i].get("path") or ""), tuple(inputs[i].get("shape") or ()), str(inputs[i].get("dtype")))
                for i in idx]
        if all(path and any(p.endswith(path) and (s, d) == (shape, dtype) for p, s, d in mirror)
               for path, shape, dtype in mine):
            for i in idx:
                out[i] = PARAMETERS
    return out


class Roles:
    """``by_role``: one row per device and role (ROLE_COLUMNS); ``owners``:
    one per device and array (OWNER_COLUMNS); ``where``: the call they
    describe, e.g. "during a call of step" (empty: no sampled call), "during
    the largest sampled call of step" where the true peak is a call that no
    sampled call ran (``unsampled``: a signature met once, as a growing
    shape's: its inputs were not seen, so its roles cannot be told);
    ``call``: (function id, signature, sampled call, counted call number) of the call described (a counted
    call no sample saw: its live bytes, the leaves of a sampled call of its signature)."""

    def __init__(self, by_role: pd.DataFrame, owners: pd.DataFrame, where: str, function: str,
                 peak_bytes: int | None, call: tuple | None = None):
        self.by_role, self.owners, self.where, self.function = by_role, owners, where, function
        self.peak_bytes, self.call = peak_bytes, call
        self.unsampled = False  # the true peak is a call no sampled call ran: these roles are another call's


def empty_roles() -> Roles:
    return Roles(pd.DataFrame({c: pd.Series(dtype=object) for c in ROLE_COLUMNS}),
                 pd.DataFrame({c: pd.Series(dtype=object) for c in OWNER_COLUMNS}), "", "", None)


def roles(ar: Attributed) -> Roles:
    """The roles and owners at the run's largest sampled jitted call (``Peaks.largest_sampled``)."""
    run = ar.run
    call = ar.peaks.largest_sampled
    true = ar.peaks.call
    # The true peak at a counted call no sample saw (jit_call_live): its leaves are those of a sampled call of
    # the same signature (the same arrays' shapes), beside what was live before that call itself.
    counted = _sampled_like(ar.peaks, true) if ar.peaks.in_call and true is not None \
        and true.call_number is not None and true.call_index is None else None
    if counted is not None:
        call = counted
    calls = run.jit.calls
    if call is None or calls is None or calls.empty:
        return empty_roles()
    mine = calls[calls["function_id"] == call.function_id].sort_values("call_index")
    row = mine[mine["call_index"] == call.call_index]
    if row.empty:
        return empty_roles()
    # The call's leaves read once (facts/flow.py): numpy arguments at what XLA holds of them (a float64 one
    # as JAX passed it: float32 with x64 off), each input's flow, the outputs the next call took, those
    # written into donated buffers, XLA's outputs into new buffers.
    passed = passed_call([_leaves(text) for text in mine["inputs"]], _leaves(row["inputs"].iloc[0]),
                         _leaves(row["outputs"].iloc[0]), call.figures, _taken(mine, call.call_index))
    inputs, outputs, fed = passed.inputs, passed.outputs, passed.fed
    live = (true.live_before if counted is not None and true is not None else call.live_before) or {}
    device_names = sorted(live) or ["all"]
    # the devices the call runs on: its inputs' (XLA's figures are theirs; another device
    # holds only what lives there)
    ran_on = {d for leaf in inputs if isinstance(leaf.get("on"), list) for d in leaf["on"]} or set(device_names)
    owners = []
    leaf_roles = _by_structure(inputs, [role_of(leaf, flow) for leaf, flow in zip(inputs, passed.flows)])
    host: dict = {}  # device -> bytes of numpy arguments copied there for the call (not live before it)
    aliased = passed.aliased  # outputs XLA writes into donated inputs' buffers: no bytes of their own
    host_leaves = [i for i, leaf in enumerate(inputs) if leaf.get("host") and leaf.get("same_as") in (None, i)]
    for d in device_names:
        on_device = 0
        for i, leaf in enumerate(inputs):
            if leaf.get("same_as") not in (None, i) or leaf.get("host"):
                continue  # one array passed twice is held once; numpy arguments below
            if _on(leaf, d, live):
                owners.append(_owner(d, leaf_roles[i], leaf, call.function))
                on_device += owners[-1]["bytes"]
        if d in ran_on and host_leaves:
            # A numpy argument is copied to the call's devices: whole on its one device; on several, XLA's
            # arguments there beyond the device arrays' (replicated or sharded as the call places it),
            # shared by the numpy arguments in proportion to their bytes, each at most its own.
            room = None if len(ran_on) == 1 else max(int(call.figures.get("argument_bytes", 0)) - on_device, 0)
            whole = sum(int(inputs[i].get("bytes") or 0) for i in host_leaves)
            for i in host_leaves:
                b = int(inputs[i].get("bytes") or 0)
                share = b if room is None else min(b, room * b // max(whole, 1))
                owners.append(_owner(d, leaf_roles[i], dict(inputs[i], bytes=share, devices=1), call.function))
                host[d] = host.get(d, 0) + share
        for j, leaf in enumerate(outputs):
            if j not in aliased and _on(leaf, d, live):
                # a new state's output is named by the input it replaces
                named = dict(leaf, owner=_owner_name(fed[j])) if j in fed else dict(
                    leaf, owner=f"out{leaf.get('path') or ''}")
                owners.append(_owner(d, NEW_STATE if j in fed else RESULTS, named, call.function))
    others = _other_owners(ar, row.iloc[0], inputs, call.function)
    o = pd.DataFrame(owners, columns=OWNER_COLUMNS)
    f = call.figures
    rows = []
    for d in device_names:
        od = o[o["device"] == d]
        ins = od[~od["role"].isin((NEW_STATE, RESULTS))]
        inputs_bytes = int(ins["bytes"].sum())
        # Outputs: XLA's, less what it writes into donated buffers; of them,
        # the next call takes first.
        # the ones the next call takes (donated buffers: aliased first) are new state.
        written = max(passed.written, 0)
        fed_bytes = int(od.loc[od["role"] == NEW_STATE, "bytes"].sum())
        if aliased or not f.get("alias_bytes", 0):  # the aliased outputs are left out of the owners already
            new_state = min(fed_bytes, written)
        else:  # donated by a wrapper whose leaves do not say which (JAX's matching unknown): XLA's alias bytes
            new_state = min(max(fed_bytes - f.get("alias_bytes", 0), 0), written)
            if fed_bytes and not new_state:  # all written into the donated buffers: no bytes of their own
                o = o[~((o["device"] == d) & (o["role"] == NEW_STATE))]
                od = o[o["device"] == d]
        extra = {NEW_STATE: new_state, RESULTS: written - new_state, INSIDE: f.get("temp_bytes", 0),
                 CODE: f.get("generated_code_bytes", 0)} if d in ran_on else {}
        extra[OTHER] = max(int(live.get(d, 0)) - (inputs_bytes - host.get(d, 0)), 0) if live else 0
        # the other arrays by the names that held them, largest first, as many as their bytes hold
        room = extra[OTHER]
        for other in others.get(d, ()):
            if other["bytes"] <= room:
                o = pd.concat([o, pd.DataFrame([other], columns=OWNER_COLUMNS)], ignore_index=True)
                room -= other["bytes"]
        od = o[o["device"] == d]
        total = inputs_bytes + sum(extra.values())
        for role in ROLES:
            part = ins[ins["role"] == role] if role not in extra else od[od["role"] == role]
            b = int(part["bytes"].sum()) if role not in extra else int(extra[role])
            if b <= 0:
                continue
            top = part.sort_values("bytes", ascending=False, kind="stable").head(1)
            rows.append({"device": d, "role": role, "bytes": b, "share": b / total if total else 0.0,
                         "arrays": int(len(part)),
                         "largest_owner": str(top["owner"].iloc[0]) if len(top) else "",
                         "largest_owner_bytes": int(top["bytes"].iloc[0]) if len(top) else 0})
    inside = _temporaries(ar, call)
    if not inside.empty:
        o = pd.concat([o, pd.DataFrame([{"device": d, **r} for d in device_names for r in inside.to_dict("records")],
                                       columns=OWNER_COLUMNS)], ignore_index=True)
        for r in rows:
            if r["role"] == INSIDE:
                r["arrays"] = int(len(inside))
                r["largest_owner"], r["largest_owner_bytes"] = inside["owner"].iloc[0], int(inside["bytes"].iloc[0])
    # Each role's bytes that no array names (XLA's outputs beyond the leaves, its temporaries beyond
    # the lines, the code, the arrays live outside the call): a row of their own, so that the owners of
    # a device add up to its roles, and the roles to the call's peak.
    named = o.groupby(["device", "role"])["bytes"].sum() if len(o) else pd.Series(dtype="int64")
    rest = [{"device": r["device"], "role": r["role"], "owner": UNNAMED, "bytes": r["bytes"] - int(named.get(
             (r["device"], r["role"]), 0)), "shape": "", "dtype": "", "function": call.function, "sharding": ""}
            for r in rows if r["bytes"] > int(named.get((r["device"], r["role"]), 0))]
    if rest:
        o = pd.concat([o, pd.DataFrame(rest, columns=OWNER_COLUMNS)], ignore_index=True)
    by_role = pd.DataFrame(rows, columns=ROLE_COLUMNS)
    unsampled = bool(ar.peaks.in_call and true is not None and true.call_index is None and counted is None)
    shown = true if counted is not None and true is not None else call
    out = Roles(by_role, o.sort_values(["device", "bytes"], ascending=[True, False], kind="stable")
                .reset_index(drop=True),
                f"during the largest sampled call of {call.function}" if unsampled else shown.where, call.function,
                shown.device_bytes, (shown.function_id, shown.signature, shown.call_index, shown.call_number))
    out.unsampled = unsampled
    return out


def _other_owners(ar: Attributed, row, inputs: list, function: str) -> dict:
    """{device: [owner rows]} of the arrays live before the call that are
    not its inputs ("other arrays"), each named by what held it where a
    holder search named it (py_holders: the run's chosen searches, the
    peak's first; ``params['w']`` of the program's own ``params`` kept
    beside the state made from it), largest first; arrays no search named
    are left to the role's unnamed rest. As the snapshot before the call
    saw them."""
    run = ar.run
    tabs = getattr(run, "py_holders", None) or {}
    rows, chains = tabs.get("holders"), tabs.get("chains")
    chosen = chosen_searches(run)
    snaps = run.snapshots
    if not chosen or rows is None or rows.empty or chains is None or chains.empty or snaps.empty \
            or not getattr(run, "has_arrays", False):
        return {}
    t = pd.to_numeric(pd.Series([row.get("t_wall")]), errors="coerce").iloc[0]
    before = snaps[snaps["t_wall"] <= t] if pd.notna(t) else snaps.iloc[0:0]
    at = int((before if not before.empty else snaps)["snapshot"].iloc[-1 if not before.empty else 0])
    a = run.arrays
    a = a[(a["first_snapshot"] <= at) & (a["last_snapshot"] >= at)]
    ids = {leaf.get("id") for leaf in inputs if isinstance(leaf.get("id"), int)}
    a = a[~a["py_id"].isin(ids)]
    if a.empty:
        return {}
    # each array's first chain in the search nearest the peak, then the end's
    order = [chosen[k] for k in ("peak", "end") if k in chosen]
    named = rows[rows["snapshot"].isin(order) & rows["array_id"].isin(set(a["array_id"]))].copy()
    if named.empty:
        return {}
    named["_o"] = named["snapshot"].map({snap: i for i, snap in enumerate(order)})
    first = named.sort_values("_o", kind="stable").drop_duplicates("array_id").set_index("array_id")["chain_id"]
    chain_rows = chains.set_index("chain_id")
    text: dict = {}
    out: dict = {}
    for r in a[a["array_id"].isin(first.index)].itertuples(index=False):
        cid = int(first[r.array_id])
        if cid not in text and cid in chain_rows.index:
            text[cid] = describe({"chain_id": cid, **chain_rows.loc[cid].to_dict()}, run, ar.files)["holder"]
        holder = text.get(cid)
        if not holder:
            continue
        shape = "[" + ",".join(str(x) for x in (r.shape if isinstance(r.shape, (tuple, list)) else ())) + "]"
        for device, b in zip(r.devices or (), r.shard_bytes or ()):
            out.setdefault(str(device), []).append({"device": str(device), "role": OTHER, "owner": holder,
                                                    "bytes": int(b), "shape": shape, "dtype": str(r.dtype),
                                                    "function": function, "sharding": str(r.sharding or "")})
    return {d: sorted(v, key=lambda x: -x["bytes"]) for d, v in out.items()}


def _sampled_like(peaks, true):
    """The largest sampled call of the same function and signature as ``true`` (a counted call), or None."""
    same = [p for p in peaks.calls if p.call_index is not None and p.call_number is None
            and p.function_id == true.function_id and p.signature == true.signature]
    return max(same, key=lambda p: (p.device_bytes, p.bytes)) if same else None


def _on(leaf: dict, device: str, live: dict) -> bool:
    """Whether the leaf has a shard on ``device`` (runs recorded before leaves
    named their devices, or without live_before: every leaf, everywhere)."""
    on = leaf.get("on")
    return not live or not isinstance(on, list) or device in on


def _owner(device: str, role: str, leaf: dict, function: str) -> dict:
    devices = max(1, int(leaf.get("devices") or 1))
    per_device = int(leaf.get("bytes") or 0) // devices
    shape = leaf.get("shape") or []
    # runs recorded before leaves named their owner: the argument's name and the path in it
    owner = leaf.get("owner") or f"{leaf.get('name') or ''}{leaf.get('path') or ''}"
    return {"device": device, "role": role, "owner": str(owner),
            "bytes": per_device, "shape": "[" + ",".join(str(x) for x in shape) + "]",
            "dtype": str(leaf.get("dtype") or ""), "function": function, "sharding": str(leaf.get("sharding") or "")}


def _taken(calls: pd.DataFrame, index: int) -> list:
    """The input leaf lists that say which outputs of call ``index`` the
    next call took: the next call's (that call sampled), else every sampled
    call's (what any took from the one before it)."""
    nxt = calls[calls["call_index"] == index + 1]
    return [_leaves(text) for text in (nxt["inputs"] if not nxt.empty else calls["inputs"])]


def _fed_back(calls: pd.DataFrame, index: int) -> dict:
    """The output leaves of call ``index`` that the next call took as inputs
    (that call sampled; else those any sampled call took from the one before
    it), each -> the input leaf it became."""
    return fed_back(_taken(calls, index))


def _temporaries(ar: Attributed, call) -> pd.DataFrame:
    """XLA's temporaries live at the program's peak, by the user's line that
    made them (the owners of "inside the call")."""
    b = ar.jit_buffers
    if b.empty:
        return pd.DataFrame()
    b = b[(b["function_id"] == call.function_id) & (b["at_peak"] == 1) & (b["kind"] == "temporary")]
    if call.signature is not None and (b["signature"] == call.signature).any():
        b = b[b["signature"] == call.signature]
    else:  # the call's own signature not analysed: its function's largest stands for it
        b = b[b["largest_signature"].astype(bool)]
    if b.empty:
        return pd.DataFrame()
    g = b.groupby("site", sort=False).agg(bytes=("bytes", "sum"), shape=("shape", "first")).reset_index()
    g = g.sort_values("bytes", ascending=False, kind="stable")
    return pd.DataFrame({"role": INSIDE, "owner": g["site"], "bytes": g["bytes"].astype(int), "shape": g["shape"],
                         "dtype": "", "function": call.function, "sharding": ""})


# -- owners at any snapshot: show RUN@SEL --by owner ----------------------------------


OWNER_KEYS = ("owner", "role")


def _named_leaves(calls: pd.DataFrame, until: float) -> dict:
    """(id, shape, dtype) -> [(t, owner, role, function)] of the sampled
    calls' input and output leaves up to time ``until`` that can still be
    alive then, latest last; an output the next call took is named by the
    input it became. An input the program dropped or donated (the liveness
    the probe recorded) is gone by the function's next call, once a later
    sampled call ran; an output, once the input it became is."""
    out: dict = {}
    for fid, mine in calls[calls["t_wall"] <= until].groupby("function_id", sort=False):
        mine = mine.sort_values("call_index")
        flow = flows(_leaves(text) for text in mine["inputs"])
        rows = list(zip(mine["t_wall"], mine["call_index"], mine["inputs"], mine["outputs"], mine["inputs_alive"]))
        by_index = {int(r[1]): r for r in rows}
        for t, index, ins, outs, alive in rows:
            fates = _fates(alive)
            later = int(index) != int(rows[-1][1])  # a later sampled call ran by then
            for i, leaf in enumerate(_leaves(ins)):
                fate = fates[i] if i < len(fates) else None
                if fate in _GONE and later:
                    continue
                _note(out, leaf, float(t), _owner_name(leaf), role_of(leaf, flow.get(leaf_key(leaf))), (fid, "in"))
            nxt = by_index.get(int(index) + 1)
            next_fates = _fates(nxt[4]) if nxt is not None else []
            taken = {}  # output j -> the fate of the next call's input it became
            for i, leaf in enumerate(_leaves(nxt[2]) if nxt is not None else ()):
                origin = leaf.get("from")
                if isinstance(origin, list) and len(origin) == 2 and origin[0] == "out":
                    taken[origin[1]] = next_fates[i] if i < len(next_fates) else None
            fed = _fed_back(calls[calls["function_id"] == fid], int(index))
            after_next = nxt is not None and int(index) + 1 != int(rows[-1][1])
            for j, leaf in enumerate(_leaves(outs)):
                if taken.get(j) in _GONE and after_next:
                    continue  # it became the next call's input, and went with it
                _note(out, leaf, float(t), *_as_input(fed.get(j), leaf, flow), (fid, "out"))
    return out


_GONE = ("dropped", "dropped-later", "deleted")


def _fates(text) -> list:
    return json_cell(text, [])


def _owner_name(leaf: dict) -> str:
    return str(leaf.get("owner") or f"{leaf.get('name') or ''}{leaf.get('path') or ''}")


def _note(out: dict, leaf: dict, t: float, owner: str, role: str, function) -> None:
    if not isinstance(leaf.get("id"), int):
        return  # recorded before leaves kept their id
    key = (leaf["id"], tuple(int(n) for n in leaf.get("shape") or ()), str(leaf.get("dtype") or ""))
    out.setdefault(key, []).append((t, owner, role, function))


def _latest_outputs(calls: pd.DataFrame, until: float, files) -> dict:
    """(caller's file as shown, line, shape, dtype) -> [(owner, role)]: the
    output leaves of each function's latest sampled call up to ``until``, by
    the user's line that called it (where the arrays it returns are made)."""
    out: dict = {}
    for fid, mine in calls[calls["t_wall"] <= until].groupby("function_id", sort=False):
        last = mine.sort_values("call_index").iloc[-1]
        fed = _fed_back(calls[calls["function_id"] == fid], int(last["call_index"]))
        where = (files.display_path(str(last["caller_file"])), int(last["caller_line"]))
        flow = flows(_leaves(text) for text in mine["inputs"])
        for j, leaf in enumerate(_leaves(last["outputs"])):
            key = (*where, tuple(int(n) for n in leaf.get("shape") or ()), str(leaf.get("dtype") or ""))
            out.setdefault(key, []).append(_as_input(fed.get(j), leaf, flow))
    return out


def _as_input(becomes: dict | None, leaf: dict, flow: dict) -> tuple[str, str]:
    """(owner, role) of an output leaf between calls: those of the input it
    becomes at the next call (the parameters the step returns are the
    parameters), else a result."""
    if becomes is None:
        return f"out{leaf.get('path') or ''}", RESULTS
    return _owner_name(becomes), role_of(becomes, flow.get(leaf_key(becomes)))


def owners_at(ar: Attributed, snapshot: int, profile=None):
    """The snapshot's bytes by owner (``show RUN@SEL --by owner``). A live
    array that was an input or output of a sampled jitted call it was alive
    for (the same object: id, shape and dtype) is named as that call's leaf;
    else, one made at the line that calls a jitted function, with the shape
    and dtype of an output of its latest sampled call, is named as that
    output (each output once: arrays of one shape and dtype have the same
    bytes, so which is which does not change the figures; more such arrays
    than outputs, as a leak keeps them, stay with the line). What nothing
    names stays with its line (role ``by line``). The totals are the
    profile's (``profile``: the snapshot's, if already read)."""
    from jaxmemprof.analysis.groups import Breakdown, Table, summarize, table_of

    run = ar.run
    by_site = summarize((profile if profile is not None else run.profile(snapshot)).without_kind("executable"), "site",
                        ar.attribution)
    site_rows = table_of(by_site)
    sites = {r[0]: [r[-4], r[-3]] for r in site_rows.rows}  # site -> [bytes, count] not yet named
    snaps = run.snapshots.sort_values("snapshot")
    times = dict(zip(snaps["snapshot"], snaps["t_wall"]))
    calls = run.jit.calls
    named: dict = {}

    def name(site, key, shards):
        b, c = int(sum(shards)), len(shards)
        acc = named.setdefault(key, [0, 0])
        acc[0] += b
        acc[1] += c
        sites[site][0] -= b
        sites[site][1] -= c

    if calls is not None and not calls.empty and snapshot in times and run.has_arrays:
        until = float(times[snapshot])
        leaves = _named_leaves(calls, until)
        arrays = run.arrays
        ended = arrays["end_snapshot"]
        live = arrays[(arrays["first_snapshot"] <= snapshot) & (ended.isna() | (ended > snapshot))]
        # each array's line, from its creation stack (the live arrays only: no lifetimes table)
        per_stack = ar.stack_sites
        lines = dict(zip(per_stack.index, zip(per_stack["site"], per_stack["file"], per_stack["line"])))
        before = {n: times.get(n - 1, float("-inf")) for n in set(live["first_snapshot"])}
        unnamed: dict = {}
        used: set = set()
        for stack, pid, shape, dtype, shards, first in zip(live["stack_id"], live["py_id"], live["shape"],
                                                          live["dtype"], live["shard_bytes"], live["first_snapshot"]):
            where = lines.get(stack)
            if where is None or where[0] not in sites:
                continue
            site = where[0]
            shape = tuple(int(n) for n in shape)
            hits = leaves.get((int(pid), shape, str(dtype)))
            # the latest call the array was alive for (it may have been born after the snapshot before it),
            # each function's owner naming one array as an input and one as an output (old and new state
            # both live between a call's return and the program's letting go of the old)
            hit = next((h for h in reversed(hits or ()) if h[0] >= before[first] and (h[3], h[1]) not in used),
                       None)
            if hit is not None:
                used.add((hit[3], hit[1]))
                name(site, hit[1:3], shards)
            else:
                key = (str(where[1]), int(where[2]), shape, str(dtype))
                unnamed.setdefault(key, []).append((site, shards))
        for key, cands in _latest_outputs(calls, until, ar.files).items():
            cands = [c for c in cands if c not in named]  # each owner once
            for (site, shards), owner in zip(unnamed.get(key, ()), cands):
                name(site, owner, shards)
    sums = dict(named)
    for site, (b, c) in sites.items():
        if b or c:
            acc = sums.setdefault((site, "by line"), [0, 0])
            acc[0] += b
            acc[1] += c
    items = sorted(sums.items(), key=lambda kv: (-kv[1][0], -kv[1][1], *kv[0]))
    total = sum(b for b, _ in sums.values())
    rows, cum = [], 0.0
    for key, (b, c) in items:
        share = float(b) / float(total) if total else 0.0
        cum += share
        rows.append((*key, b, c, share, cum))
    return Breakdown(by="owner", key_columns=OWNER_KEYS,
                   rows=Table(list(OWNER_KEYS) + ["bytes", "count", "share", "cum_share"], rows, bool(sums)),
                   total_bytes=by_site.total_bytes, total_count=by_site.total_count,
                   devices=table_of(by_site, "devices"), kinds=table_of(by_site, "kinds"))

"""What the memory is: the bytes at the run's largest jitted call, by role
(parameters, optimizer state, the batch, the call's outputs and its
temporaries, everything else) and by owner (the array's path in the user's
own tree), per device.

Roles come from data flow, not names (``jaxmemprof.flow``): an input the
previous call returned is state carried across steps, one that is new at
every call is a per-step input (the batch), one that is the same array at
every call is held. Carried and held state is split into parameters and
optimizer state where the library says so (optax's state types, nnx's
variable types: the leaf's ``tag``), else by the argument's name. The call
is the one ``largest_sampled_call`` finds (the true peak, when a sampled call
holds it): its inputs are known leaf by leaf, XLA's figures give its outputs
and temporaries, and the bytes live before it that are not its inputs are
"other arrays". The roles of one device add up to that call's peak there.
"""

from __future__ import annotations

import json

import pandas as pd

from jaxmemprof.analysis.advice.donation import largest_sampled_call
from jaxmemprof.analysis.attributed import Attributed
from jaxmemprof.flow import CARRIED, HELD, PER_STEP, flows, leaf_key

PARAMETERS, OPTIMIZER, STATE, BATCH, HELD_INPUTS, INPUTS = (
    "parameters", "optimizer state", "other state", "batch", "held inputs", "other inputs")
NEW_STATE, RESULTS, INSIDE, CODE, OTHER = ("new state", "results", "inside the call", "executable code",
                                           "other arrays")
# The order a report lists them in.
ROLES = (PARAMETERS, OPTIMIZER, STATE, BATCH, HELD_INPUTS, INPUTS, NEW_STATE, RESULTS, INSIDE, CODE, OTHER)

ROLE_COLUMNS = ["device", "role", "bytes", "share", "arrays", "largest_owner", "largest_owner_bytes"]
OWNER_COLUMNS = ["device", "role", "owner", "bytes", "shape", "dtype", "function", "sharding"]

_OPTIMIZER_TAGS = ("nnx.OptState", "nnx.OptArray", "nnx.OptVariable")


def _leaves(text) -> list:
    try:
        v = json.loads(text) if isinstance(text, str) else []
    except ValueError:
        return []
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


def role_of(leaf: dict, flow: str | None) -> str:
    """An input leaf's role, from how it flows and what its library calls it."""
    tag = str(leaf.get("tag") or "")
    if flow == PER_STEP:
        return BATCH
    if tag.startswith("optax.") or tag in _OPTIMIZER_TAGS:
        return OPTIMIZER
    if tag == "nnx.Param":
        return PARAMETERS
    if tag.startswith("nnx."):
        return STATE
    words = f"{leaf.get('name') or ''}{leaf.get('owner') or leaf.get('path') or ''}".lower()
    if any(w in words for w in ("opt_state", "optimizer", "momentum")) or words.startswith("opt"):
        return OPTIMIZER
    if any(w in words for w in ("param", "weight", "model", "kernel")):
        return PARAMETERS if flow in (CARRIED, HELD, None) else INPUTS
    if flow == CARRIED:
        return STATE
    if flow == HELD:
        return HELD_INPUTS
    return INPUTS


class Roles:
    """``by_role``: one row per device and role (ROLE_COLUMNS); ``owners``:
    one per device and array (OWNER_COLUMNS); ``where``: the call they
    describe, e.g. "during a call of step" (empty: no sampled call)."""

    def __init__(self, by_role: pd.DataFrame, owners: pd.DataFrame, where: str, function: str,
                 peak_bytes: int | None):
        self.by_role, self.owners, self.where, self.function = by_role, owners, where, function
        self.peak_bytes = peak_bytes


def empty_roles() -> Roles:
    return Roles(pd.DataFrame({c: pd.Series(dtype=object) for c in ROLE_COLUMNS}),
                 pd.DataFrame({c: pd.Series(dtype=object) for c in OWNER_COLUMNS}), "", "", None)


def roles(ar: Attributed, devices: pd.DataFrame | None = None) -> Roles:
    """The roles and owners at the run's largest sampled jitted call."""
    run = ar.run
    call = largest_sampled_call(run, devices)
    calls = run.jit.get("calls")
    if call is None or calls is None or calls.empty:
        return empty_roles()
    mine = calls[calls["function_id"] == call.function_id].sort_values("call_index")
    flow = flows(_leaves(text) for text in mine["inputs"])
    row = mine[mine["call_index"] == call.call_index]
    if row.empty:
        return empty_roles()
    inputs = _leaves(row["inputs"].iloc[0])
    outputs = _leaves(row["outputs"].iloc[0])
    fed = _fed_back(mine, call.call_index)
    live = call.live_before or {}
    device_names = sorted(live) or ["all"]
    owners = []
    for d in device_names:
        for i, leaf in enumerate(inputs):
            if leaf.get("same_as") not in (None, i) or not _on(leaf, d, live):
                continue  # one array passed twice is held once
            owners.append(_owner(d, role_of(leaf, flow.get(leaf_key(leaf))), leaf, call.function))
        for j, leaf in enumerate(outputs):
            if _on(leaf, d, live):
                # a new state's output is named by the input it replaces
                named = dict(leaf, owner=fed[j]) if j in fed else dict(leaf, owner=f"out{leaf.get('path') or ''}")
                owners.append(_owner(d, NEW_STATE if j in fed else RESULTS, named, call.function))
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
        written = max(f.get("output_bytes", 0) - f.get("alias_bytes", 0), 0)
        fed_bytes = int(od.loc[od["role"] == NEW_STATE, "bytes"].sum())
        new_state = min(max(fed_bytes - f.get("alias_bytes", 0), 0), written)
        if fed_bytes and not new_state:  # all written into the donated buffers: no bytes of their own
            o = o[~((o["device"] == d) & (o["role"] == NEW_STATE))]
            od = o[o["device"] == d]
        extra = {NEW_STATE: new_state, RESULTS: written - new_state, INSIDE: f.get("temp_bytes", 0),
                 CODE: f.get("generated_code_bytes", 0),
                 OTHER: max(int(live.get(d, 0)) - inputs_bytes, 0) if live else 0}
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
    by_role = pd.DataFrame(rows, columns=ROLE_COLUMNS)
    return Roles(by_role, o.sort_values(["device", "bytes"], ascending=[True, False], kind="stable")
                 .reset_index(drop=True), call.where, call.function, call.device_bytes)


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


def _fed_back(calls: pd.DataFrame, index: int) -> dict:
    """The output leaves of call ``index`` that the next call took as inputs
    (that call sampled; else those any sampled call took from the one before
    it), each -> the owner of the input it became."""
    nxt = calls[calls["call_index"] == index + 1]
    texts = nxt["inputs"] if not nxt.empty else calls["inputs"]
    out: dict = {}
    for text in texts:
        for leaf in _leaves(text):
            origin = leaf.get("from")
            if isinstance(origin, list) and len(origin) == 2 and origin[0] == "out" and isinstance(origin[1], int):
                out.setdefault(origin[1], str(leaf.get("owner") or ""))
    return out


def _temporaries(ar: Attributed, call) -> pd.DataFrame:
    """XLA's temporaries live at the program's peak, by the user's line that
    made them (the owners of "inside the call")."""
    b = ar.jit_buffers
    if b.empty:
        return pd.DataFrame()
    b = b[(b["function_id"] == call.function_id) & (b["at_peak"] == 1) & (b["kind"] == "temporary")]
    if "signature" in b.columns and call.signature is not None and (b["signature"] == call.signature).any():
        b = b[b["signature"] == call.signature]
    if b.empty:
        return pd.DataFrame()
    g = b.groupby("site", sort=False).agg(bytes=("bytes", "sum"), shape=("shape", "first")).reset_index()
    g = g.sort_values("bytes", ascending=False, kind="stable")
    return pd.DataFrame({"role": INSIDE, "owner": g["site"], "bytes": g["bytes"].astype(int), "shape": g["shape"],
                         "dtype": "", "function": call.function, "sharding": ""})

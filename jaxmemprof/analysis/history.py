"""Arrays that IPython's output history keeps alive (rule ``output-history``).

A cell whose last expression is an array (or a tree of them) puts its value
in ``Out[N]``, and under the names ``_N``, ``_``, ``__``, ``___`` (the last
three results) and a hidden copy of ``_N``: ``del x`` of the variable then
frees nothing, nor does ``del Out[N]``. The notebook extension records, at a
run's last snapshot, which live arrays each entry holds and whether anything
else referred to them (``Run.held_by``: capture in the kernel,
jaxmemprof/notebook/history.py); the arrays nothing else holds are what
letting the entry go frees. docs/notebooks.md has the measured facts.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from typing import TYPE_CHECKING, Any


if TYPE_CHECKING:
    from jaxmemprof.analysis.attributed import Attributed

KIND = "output-history"  # held_by.kind of IPython's output history
ENTRIES_NAMED = 5  # entries a finding lists, largest first


def history_holders(ar: Attributed) -> dict | None:
    """What the run's last recorded look at IPython's output history found
    holding live arrays (the facts of the ``output-history`` finding,
    analysis/rules/history.py): the entries holding them, the bytes each
    holds, and what letting each go frees (its arrays that nothing else
    held); None where nothing there would be freed."""
    run = ar.run
    held = getattr(run, "held_by", None)
    if held is None or held.empty or not run.has_arrays or run.arrays.empty:
        return None
    held = held[held["kind"] == KIND]
    if held.empty:
        return None
    snapshot = int(held["snapshot"].max())
    held = held[held["snapshot"] == snapshot]
    ids = _array_ids(run, held, snapshot)
    held = held.assign(array_id=held["py_id"].map(ids)).dropna(subset=["array_id"])
    if held.empty:
        return None
    table = ar.arrays.set_index("array_id")
    held = held.assign(array_id=held["array_id"].astype(np.int64))
    rows = table.loc[held["array_id"].to_numpy()]
    held = held.assign(bytes=np.where(rows["shared"].to_numpy(dtype=bool), 0, rows["bytes"].to_numpy(dtype=np.int64)),
                       site=rows["site"].to_numpy(), only=held["only"].astype(bool))
    entries: list[dict[str, Any]] = []
    for holder, group in held.groupby("holder", sort=False):
        group = group.drop_duplicates("array_id")
        freed = group[group["only"]]
        made = group.groupby("site", sort=False)["bytes"].sum().sort_values(ascending=False, kind="stable")
        entries.append({
            "holder": str(holder),
            "names": _names(group["names"].iloc[0], holder),
            "arrays": int(len(group)),
            "bytes": int(group["bytes"].sum()),
            "freed_bytes": int(freed["bytes"].sum()),
            "freed_arrays": int(len(freed)),
            "made_at": str(made.index[0]) if len(made) else "",
        })
    entries.sort(key=lambda e: (-e["freed_bytes"], -e["bytes"], e["holder"]))
    freed_total = sum(e["freed_bytes"] for e in entries)
    if not freed_total:  # what the history holds, other names hold too: letting it go frees nothing
        return None
    # The fix depends on the IPython that ran (recorded with the run).
    ipython = str((run.manifest.get("notebook") or {}).get("ipython_version") or "")
    return {
        "snapshot": snapshot,
        "entries": entries[:ENTRIES_NAMED],
        "entries_holding": len(entries),
        "held_bytes": int(sum(e["bytes"] for e in entries)),
        "freed_bytes": int(freed_total),
        "arrays": int(sum(e["arrays"] for e in entries)),
        "ipython_version": ipython,
        "reset_frees": _reset_frees(ipython),
    }


def _array_ids(run, held: pd.DataFrame, snapshot: int) -> dict:
    """py_id -> array_id of the arrays alive at ``snapshot`` that the held
    objects are: the array of that id(); else, for a view JAX made of an
    array (a second jax.Array over its buffer, which the run records as one
    array), an array made by the same traceback, of the same shape and
    dtype, not matched yet (what the sampler matches views by: any such
    array has the same bytes and site)."""
    arrays = run.arrays
    alive = arrays[(arrays["first_snapshot"] <= snapshot) & (arrays["last_snapshot"] >= snapshot)]
    by_py: dict = {}
    for py, aid in zip(alive["py_id"].to_numpy(dtype=np.int64), alive["array_id"].to_numpy(dtype=np.int64)):
        by_py.setdefault(int(py), []).append(int(aid))
    frames_of = {sid: tuple(tuple(f) for f in frames) for sid, frames in run.stacks.items()}
    free: dict = {}  # (frames, shape, dtype) -> array_ids not matched yet
    for aid, sid, shape, dtype in zip(alive["array_id"], alive["stack_id"], alive["shape"], alive["dtype"]):
        key = (frames_of.get(None if pd.isna(sid) else int(sid)), _shape(shape), str(dtype))
        free.setdefault(key, []).append(int(aid))
    out: dict = {}
    firsts = held.drop_duplicates("py_id")
    exact = {int(py): by_py[int(py)][0] for py in firsts["py_id"] if len(by_py.get(int(py), ())) == 1}
    taken = set(exact.values())
    for py, frames, shape, dtype in zip(firsts["py_id"], firsts["frames"], firsts["shape"], firsts["dtype"]):
        py = int(py)
        if py in exact:
            out[py] = exact[py]
            continue
        key = (_frames(frames), _shape(shape), str(dtype))
        for aid in free.get(key, ()):
            if aid not in taken:
                out[py] = aid
                taken.add(aid)
                break
    return out


def _frames(text) -> tuple | None:
    try:
        return tuple((str(f), int(ln), str(fn)) for f, ln, fn in json.loads(text))
    except (TypeError, ValueError):
        return None


def _shape(value) -> tuple | None:
    try:
        value = json.loads(value) if isinstance(value, str) else value
        return tuple(int(d) for d in value)
    except (TypeError, ValueError):
        return None


def _names(text, holder) -> list[str]:
    try:
        names = json.loads(text) if isinstance(text, str) else list(text)
    except (TypeError, ValueError):
        names = []
    names = [str(n) for n in names if isinstance(n, (str, int))]
    return names if names else [str(holder)]


def _reset_frees(version: str) -> bool | None:
    """Whether ``%reset -f out`` frees what the history holds in this
    IPython: from 8.15 (before, the hidden copy of ``_N`` stays); None when
    the version is not known."""
    parts = version.split(".")
    try:
        major, minor = int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except (ValueError, IndexError):
        return None
    return (major, minor) >= (8, 15)

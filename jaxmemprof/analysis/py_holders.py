"""Who keeps the arrays alive: the Python references a run found holding
its live arrays (capture/py_holders.py), by the site that made the arrays
and the chain that holds them, with the line that made the holding
container where the source says it.

A run searches after some snapshots: those at which its live bytes rose by a
quarter since the last search (within a share of the run's time), and its
last. Two of them are read: the one at the largest live bytes before the
end (``at`` = ``peak``), and the last (``end``). A chain is shown as the
program would write it, root first (``trainer.history['loss'][…]``, ``…``
for any one of many items); its ``kind`` says what kind of reference it
is, the most telling first: ``output-history`` (IPython's ``Out`` and
``_N``), ``jax-internal`` and ``library`` (a library module's global or a
library frame's local), ``lru_cache``, ``closure``, ``generator``,
``attribute``, ``local`` (a live frame's), ``global`` (a module's).
"""

from __future__ import annotations

import ast
import json
import os
import re
from functools import lru_cache

import numpy as np
import pandas as pd

from jaxmemprof.units import format_bytes

HOLDER_COLUMNS = ["at", "snapshot", "site", "holder", "kind", "container", "created", "arrays", "bytes",
                  "generations", "shapes", "chain_id", "complete", "site_arrays"]
# What a holder found by a search that stopped at its budget (py_holder_searches.complete 0) adds to its name:
# what it names holds the arrays, but other references may too, and some arrays are not named at all.
CUT = "search cut short at its budget"
# The search triggers of a run's last snapshot (capture/py_holders.py END_TRIGGERS).
_END = ("exit", "exception", "oom", "signal")
# The event a search writes when it could not read some of the program's frames (capture/py_holders.py).
UNREAD_EVENT = "holders-unread"
_HISTORY = re.compile(r"^(?:Out|_{1,3}|_\d+)$")  # IPython's output history
ANY = "\u2026"


def empty_holders() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object) for c in HOLDER_COLUMNS})


def searches(run) -> pd.DataFrame:
    """The run's searches for holders (snapshot, trigger, cost_s, arrays,
    found, complete, visited), with the live bytes of their snapshots."""
    tabs = getattr(run, "py_holders", None) or {}
    s = tabs.get("searches")
    if s is None or s.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in
                             ("snapshot", "trigger", "cost_s", "arrays", "found", "complete", "visited", "superseded",
                              "live_bytes")})
    live = run.snapshots.set_index("snapshot")["live_bytes"] if not run.snapshots.empty else pd.Series(dtype=float)
    out = s.copy()
    out["live_bytes"] = out["snapshot"].map(live)
    return out.sort_values("snapshot").reset_index(drop=True)


def chosen_searches(run) -> dict:
    """``peak`` -> the search at the largest live bytes before the run's
    end, ``end`` -> the search at its last snapshot (when there is one)."""
    s = searches(run)
    out = {}
    if s.empty:
        return out
    ends = s[s["trigger"].isin(_END)]
    if not ends.empty:
        out["end"] = int(ends["snapshot"].iloc[-1])
    kept = s["superseded"].astype(float) == 0 if "superseded" in s.columns else True
    during = s[~s["trigger"].isin(_END) & s["live_bytes"].notna() & kept]
    if not during.empty:
        out["peak"] = int(during.loc[during["live_bytes"].astype(float).idxmax(), "snapshot"])
    return out


def holders(ar) -> pd.DataFrame:
    """Per search read (``at``: peak, end) x site x chain: ``holder`` (the
    chain as text), ``kind``, ``container`` (the type holding the arrays
    themselves), ``created`` (file:line of the assignment that made the
    container, where the source shows one; else ''), ``arrays``, ``bytes``
    (on their devices), ``generations`` (how many different snapshots first
    saw its arrays: one for state replaced each step, many for arrays kept
    step after step), ``shapes`` (the arrays' shapes, most common first),
    ``complete`` (False: the search stopped at its budget, CUT); largest
    first within each search."""
    run = ar.run
    tabs = getattr(run, "py_holders", None) or {}
    rows, chains = tabs.get("holders"), tabs.get("chains")
    chosen = chosen_searches(run)
    if not chosen or rows is None or rows.empty or chains is None or chains.empty or ar.arrays.empty:
        return empty_holders()
    at_of = {snap: at for at, snap in chosen.items()}
    rows = rows[rows["snapshot"].isin(list(at_of))].copy()
    # An array's chains were written shortest first, in the order the search met them.
    rows["_rank"] = rows.groupby(["snapshot", "array_id"], sort=False).cumcount()
    arrays = ar.arrays.set_index("array_id")[["site", "bytes", "shape", "first_snapshot"]]
    rows = rows.join(arrays, on="array_id", how="inner")
    if rows.empty:
        return empty_holders()
    s = searches(run)
    whole = {int(n): bool(c != 0) for n, c in zip(s["snapshot"], s["complete"])}
    # The site's arrays alive at each search's snapshot: what a holder's count is out of, at the same moment.
    alive = {}
    for snap in at_of:
        a = ar.arrays
        at = a[(a["first_snapshot"] <= snap) & (a["last_snapshot"] >= snap)] if "last_snapshot" in a else a.iloc[0:0]
        alive[snap] = at.groupby("site").size().to_dict()
    described = {int(c["chain_id"]): describe(c, run, ar.files) for c in chains.to_dict("records")}
    rows = rows[rows["chain_id"].isin(list(described))]
    out = []
    for (snap, site, cid), g in rows.groupby(["snapshot", "site", "chain_id"], sort=False):
        d = described[int(cid)]
        shapes = g["shape"].astype(str).value_counts()
        out.append({"at": at_of[int(snap)], "snapshot": int(snap), "site": site, "holder": d["holder"],
                    "kind": d["kind"], "container": d["container"], "created": d["created"],
                    "arrays": int(len(g)), "bytes": int(g["bytes"].sum()),
                    "generations": int(g["first_snapshot"].nunique()), "_rank": float(g["_rank"].mean()),
                    "shapes": ", ".join(s if s.startswith("(") else f"({s})" for s in shapes.index[:3]), "chain_id": int(cid),
                    "complete": whole.get(int(snap), True), "site_arrays": alive[int(snap)].get(site)})
    if not out:
        return empty_holders()
    table = pd.DataFrame(out, columns=[*HOLDER_COLUMNS, "_rank"])
    order = {"peak": 0, "end": 1}
    table["_o"] = table["at"].map(order)
    # Ties: the chain the search met first (shorter; the program's names before IPython's history's).
    table = table.sort_values(["_o", "bytes", "arrays", "site", "_rank", "chain_id"],
                              ascending=[True, False, False, True, True, True], kind="stable")
    return table.drop(columns=["_o", "_rank"]).reset_index(drop=True)


def of_site(table: pd.DataFrame, site: str, at: str | None = None, kept: bool = False) -> dict | None:
    """The chain holding most of ``site``'s bytes: at the end's search when
    it holds some there (a leak is what stays), else at the peak's. With
    ``kept``, the chain whose arrays were made over the most snapshots
    first (what accumulates, not the state a step replaces), then bytes."""
    if table is None or table.empty:
        return None
    mine = table[table["site"] == site]
    for when in ((at,) if at else ("end", "peak")):
        rows = mine[mine["at"] == when]
        if kept and not rows.empty:
            rows = rows.sort_values(["generations", "bytes"], ascending=False, kind="stable")
        if not rows.empty:
            return rows.iloc[0].to_dict()
    return None


def holders_searched_at(table: pd.DataFrame, snapshot: int | None) -> int | None:
    """The snapshot whose search ``site_holders`` shows beside ``snapshot``
    where that is another (a peak between the program's steps: the search at
    the largest live bytes before it); None where it is the peak's own, or
    there is none."""
    if table is None or table.empty or snapshot is None or (table["snapshot"] == snapshot).any():
        return None
    peak = table[(table["at"] == "peak") & (table["snapshot"] < snapshot)]
    return None if peak.empty else int(peak["snapshot"].iloc[0])


def site_holders(table: pd.DataFrame, snapshot: int | None, sites: pd.DataFrame | None = None) -> dict:
    """Site -> what holds most of its bytes at ``snapshot`` (the live peak),
    ``holder`` with ``+N more`` when more chains hold some, what they hold
    of the site where they cannot hold all of its arrays (``sites``: the
    snapshot's rows by site, with their ``count`` of arrays): ``score (1 of
    24 arrays, 4 B)``, ``x +1 more (at most 3 of 24 arrays)`` (an array may
    have several chains), and that the search was cut short (CUT) where it
    stopped at its budget: from the search that followed that snapshot.
    Where none did (a peak between the program's steps, whose search could
    not read its locals), from the search at the largest live bytes before
    it (``holders_searched_at`` says which), its counts out of the site's
    arrays at that snapshot: one moment's. {} without either."""
    if table is None or table.empty or snapshot is None:
        return {}
    rows = table[table["snapshot"] == snapshot]
    counts = dict(zip(sites["site"], sites["count"])) if sites is not None and "count" in sites else {}
    if rows.empty:  # the search before it (holders_searched_at), its counts at its own snapshot
        peak = table[(table["at"] == "peak") & (table["snapshot"] < snapshot)]
        if peak.empty:
            return {}
        rows = peak
        counts = {} if "site_arrays" not in rows else {
            site: n for site, n in zip(rows["site"], rows["site_arrays"]) if pd.notna(n)}
    out = {}
    for site, g in rows.groupby("site", sort=False):
        more = len(g) - 1
        cut = "complete" in g.columns and not bool(g["complete"].astype(bool).all())
        first, of, named = g.iloc[0], counts.get(site), int(g["arrays"].sum())
        share = ""
        if of is not None and named < int(of):  # the other arrays are held by what the search cannot see
            share = (f" ({named} of {int(of)} arrays, {format_bytes(int(first['bytes']))})" if not more else
                     f" (at most {named} of {int(of)} arrays)")
        out[site] = (first["holder"] + (f" +{more} more" if more else "") + share
                     + (f" ({CUT})" if cut else ""))
    return out


# -- a chain as the program would write it -----------------------------------------------

def describe(chain: dict, run, files) -> dict:
    """``holder`` text, ``kind``, ``container`` and ``created`` of one
    py_chains row."""
    try:
        steps = [(str(k), str(label)) for k, label in json.loads(chain["steps"])]
    except (TypeError, ValueError):
        steps = []
    root_kind, root, file = chain["root_kind"], str(chain["root"]), str(chain["file"] or "")
    if not file and root == "__main__":  # python removes __main__.__file__ once the script is done
        argv = run.manifest.get("argv") or []
        file = str(argv[0]) if argv and str(argv[0]).endswith(".py") else ""
    if file and not os.path.isabs(file):
        file = os.path.join(str(run.manifest.get("cwd") or ""), file)
    text = ""
    for i, (kind, label) in enumerate(steps):
        if i == 0:
            text = label
        elif kind == "attr":
            text += "." + label if label else ""  # "": the program indexes the object itself (a library's)
        elif kind == "key":
            text += f"[{label}]"
        elif kind == "item":
            text += f"[{label}]"
        elif kind == "member":
            text += "{" + ANY + "}"
        elif kind == "closure":
            text += f".<closure {label}>"
        elif kind == "local":
            text += f".<local {label}>"
        elif kind == "cache":
            text += f".<lru_cache>[{label}]"
        else:
            text += f".<{label}>"
    kinds = {k for k, _ in steps[1:]}
    library = bool(file) and files.view(file).library_by_rule and root != "__main__"  # the run's rule, patterns aside
    first = steps[0][1] if steps else ""
    if root_kind == "global" and root == "__main__" and _HISTORY.match(first) and run.manifest.get("notebook"):
        kind = "output-history"
    elif library or (root_kind == "global" and root.split(".")[0] in ("jax", "jaxlib")):
        kind = "jax-internal" if root.split(".")[0] in ("jax", "jaxlib") or "/jax/" in file.replace("\\", "/") \
            else "library"
    elif "cache" in kinds:
        kind = "lru_cache"
    elif "closure" in kinds:
        kind = "closure"
    elif "local" in kinds:
        kind = "generator"
    elif "attr" in kinds:
        kind = "attribute"
    else:
        kind = "local" if root_kind == "local" else "global"
    if root_kind == "local":
        holder = f"{text} (local of {root})"
    elif root != "__main__" and kind in ("global", "attribute", "closure", "lru_cache", "generator"):
        holder = f"{root}.{text}"
    elif kind in ("jax-internal", "library"):
        holder = f"{root}.{text}"
    else:
        holder = text
    created = ""
    if file and kind not in ("jax-internal", "library", "output-history"):
        line = _created_line(file, steps, int(chain.get("line") or 0))
        if line:
            created = f"{files.display_path(file)}:{line}"
    return {"holder": holder, "kind": kind, "container": str(chain["container"]), "created": created}


def _created_line(file: str, steps: list, function_line: int) -> int | None:
    """The line of the assignment that made the chain's container: to the
    last name on the chain before its items (``losses = []``,
    ``self.history = ...``), in the root's function when the root is a
    frame's local; the ``def`` of an lru_cache's function."""
    names = [(k, label) for i, (k, label) in enumerate(steps)
             if (i == 0 or k in ("attr", "local", "closure")) and label and label != ANY]
    if not names:
        return None
    tree = _parse(file)
    if tree is None:
        return None
    if any(k == "cache" for k, _ in steps):
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in {n for _, n in names}:
                return node.lineno
        return None
    name = names[-1][1]
    scope = tree
    if function_line and len(names) == 1:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                    node.lineno == function_line or any(d.lineno == function_line for d in node.decorator_list)):
                scope = node
                break
    best = None
    for node in ast.walk(scope):
        targets = ()
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = (node.target,)
        for t in targets:
            for leaf in ast.walk(t):
                if (isinstance(leaf, ast.Name) and leaf.id == name) or (
                        isinstance(leaf, ast.Attribute) and leaf.attr == name):
                    if best is None or node.lineno < best:
                        best = node.lineno
    return best


@lru_cache(maxsize=64)
def _parse(file: str):
    try:
        with open(file, "rb") as f:
            source = f.read(4 << 20)
        return ast.parse(source, filename=file)
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def unread(run) -> str:
    """What the searches whose holders are shown (the peak's, the end's)
    said of the program's frames they could not read while some arrays had
    no holder ("locals not read: main (...)"), else ''."""
    ev = getattr(run, "events", None)
    chosen = set(chosen_searches(run).values())
    if ev is None or ev.empty or not chosen or not {"kind", "message", "snapshot"} <= set(ev.columns):
        return ""
    mine = ev[ev["kind"] == UNREAD_EVENT]
    said = [m for m, snap in zip(mine["message"], mine["snapshot"])
            if isinstance(m, str) and m and pd.notna(snap) and int(snap) in chosen]
    return said[-1][:400] if said else ""


def search_cost(run) -> tuple[int, float]:
    """(searches, CPU seconds) of the run's searches for holders."""
    s = searches(run)
    if s.empty:
        return 0, 0.0
    return int(len(s)), float(np.nansum(s["cost_s"].astype(float)))

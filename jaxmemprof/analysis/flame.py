"""What the HTML pages draw: live bytes per stack over time, as compact cells.

A *cell key* is one creation stack x one array type (``float32[32,32]``, or
``executable`` for a profile's executables, "" when a profile says no more)
x one device x one process. Its *changes* are the (position, bytes, buffers)
at which its live bytes or buffer count changed, over the kept snapshot
positions ``positions`` (indices into the run's snapshots): a key's value at
any kept position is the last change at or before it. A timeline stacked by
site, a flame graph of any snapshot and a differential flame graph of any two
are all sums of cells, so the three views always agree, and a long run's data
grows with what changed, not with snapshots x stacks.

Long runs are downsampled to at most ``max_points`` positions, keeping the
first, last, peak and final snapshots, labelled and triggered ones (oom,
exception, signal, exit), and the highest and lowest snapshot of each time
bucket: every peak stays visible.

Stacks are interned once (``frames``: ``function, file, line, user``;
``stacks``: frame indices innermost first), as the HTML's string tables.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import dataclass

import numpy as np
import pandas as pd

from jaxmemprof.analysis.sites import NO_STACK, Attribution, frame_labels
from jaxmemprof.analysis.timeline import array_positions, shards

if TYPE_CHECKING:
    from jaxmemprof.analysis.attributed import Attributed

MAX_POINTS = 2000
# Changes of all keys together; a run with more is downsampled further.
MAX_CHANGES = 150_000
ALWAYS_TRIGGERS = ("oom", "exception", "signal", "exit")


@dataclass
class Cells:
    """Live bytes per cell key at the kept positions (see the module)."""

    frames: list  # (function, file, line, user)
    stacks: list  # tuples of frame indices, innermost first
    keys: pd.DataFrame  # stack, type, device, process
    changes: list  # per key: np.ndarray of shape (m, 3): position index, bytes, buffers
    positions: np.ndarray  # kept positions (indices into the run's snapshots)

    def values_at(self, j: int) -> pd.DataFrame:
        """Per key alive at kept position ``j``: ``key, bytes, buffers``."""
        rows = []
        for k, ch in enumerate(self.changes):
            i = np.searchsorted(ch[:, 0], j, side="right") - 1
            if i >= 0 and (ch[i, 1] or ch[i, 2]):
                rows.append((k, int(ch[i, 1]), int(ch[i, 2])))
        return pd.DataFrame(rows, columns=["key", "bytes", "buffers"])


class _Interner:
    """Frames and stacks, each stored once."""

    def __init__(self):
        self.frames: list = []
        self.frame_ids: dict = {}
        self.stacks: list = []
        self.stack_ids: dict = {}

    def frame(self, function, file, line, user) -> int:
        key = (str(function), str(file), int(line), bool(user))
        i = self.frame_ids.get(key)
        if i is None:
            i = self.frame_ids[key] = len(self.frames)
            self.frames.append(key)
        return i

    def stack(self, frame_ids) -> int:
        key = tuple(frame_ids)
        i = self.stack_ids.get(key)
        if i is None:
            i = self.stack_ids[key] = len(self.stacks)
            self.stacks.append(key)
        return i


def site_of(frames: list, stack: tuple) -> str:
    """The site text of an interned stack: its innermost user frame (its
    innermost frame when none is the user's), as ``path:line (function)``."""
    if not stack:
        return NO_STACK
    chosen = next((f for f in stack if frames[f][3]), stack[0])
    fn, file, line, _ = frames[chosen]
    return f"{file}:{line} ({fn})"


# -- which snapshots are kept --------------------------------------------------------


def keep_positions(snapshots: pd.DataFrame, max_points: int = MAX_POINTS) -> np.ndarray:
    """Positions (0..n-1) of the snapshots to draw: all of them when there
    are at most ``max_points``, else the ones that must stay (see the module)
    and each time bucket's highest and lowest."""
    n = len(snapshots)
    if n <= max_points:
        return np.arange(n, dtype=np.int64)
    live = snapshots["live_bytes"].to_numpy(dtype=np.int64)
    must = {0, n - 1, int(np.argmax(live))}
    trig = snapshots["trigger"].astype(object).to_numpy()
    running = np.flatnonzero(trig != "exit")
    if len(running):
        must.add(int(running[-1]))
    special = np.flatnonzero(snapshots["label"].notna().to_numpy() | np.isin(trig, ALWAYS_TRIGGERS))
    if len(special) > max_points // 4:  # many labels: an even share of them
        special = special[np.linspace(0, len(special) - 1, max_points // 4).astype(np.int64)]
    must.update(int(p) for p in special)
    buckets = max(1, (max_points - len(must)) // 2)
    edges = np.linspace(0, n, buckets + 1).astype(np.int64)
    for lo, hi in zip(edges[:-1], edges[1:]):
        if hi > lo:
            seg = live[lo:hi]
            must.add(int(lo + np.argmax(seg)))
            must.add(int(lo + np.argmin(seg)))
    return np.array(sorted(must), dtype=np.int64)


# -- cells of a run with per-array records ---------------------------------------------


def _type_text(shape, dtype) -> str:
    dims = ",".join(str(d) for d in shape) if isinstance(shape, (tuple, list)) else ""
    return f"{dtype or '?'}[{dims}]"


def run_cells(ar: Attributed, max_points: int = MAX_POINTS) -> Cells:
    """Cells of the attributed run: from its per-array records, or from its
    snapshots' profiles for a directory of .prof files."""
    run, attribution = ar.run, ar.attribution
    events = _array_events(run, attribution) if run.has_arrays else None
    profiles: dict = {}  # path -> Profile, read once however often the positions change
    while True:
        positions = keep_positions(run.snapshots, max_points)
        cells = (_array_cells(events, positions) if events is not None
                 else _run_profile_cells(run, attribution, positions, profiles))
        total = sum(len(c) for c in cells.changes)
        if total <= MAX_CHANGES or max_points <= 50:
            return cells
        max_points = max(50, int(max_points * MAX_CHANGES / total / 1.2))


def _stack_table(run, attribution: Attribution, interner: _Interner) -> dict:
    """run.stacks (stack_id -> [(file, line, function)]) as interned stacks."""
    views = attribution.views(f for frames in run.stacks.values() for f, _, _ in frames)
    out = {}
    for sid, frames in run.stacks.items():
        ids = [interner.frame(fn, views[f].shown, ln, not views[f].library) for f, ln, fn in frames]
        out[int(sid)] = interner.stack(ids)
    return out


@dataclass
class _Events:
    """A run's arrays, one row per shard, keyed once: ``kcode`` (the cell
    key of each shard), its live range ``pf <= position < pe`` among all
    snapshots, and its bytes."""

    interner: _Interner
    keys: pd.DataFrame
    kcode: np.ndarray
    pf: np.ndarray
    pe: np.ndarray
    sbytes: np.ndarray


def _array_cells(ev: _Events, positions: np.ndarray) -> Cells:
    """The cells at kept ``positions``."""
    P = len(positions)
    # Events: +bytes at the first position alive, -bytes at the first gone;
    # each moved to the first kept position at or after it.
    start = np.searchsorted(positions, ev.pf, side="left")
    end = np.searchsorted(positions, ev.pe, side="left")
    alive = end > start  # seen at some kept position
    k = np.concatenate([ev.kcode[alive], ev.kcode[alive]])
    j = np.concatenate([start[alive], end[alive]])
    b = np.concatenate([ev.sbytes[alive], -ev.sbytes[alive]])
    c = np.concatenate([np.ones(alive.sum(), np.int64), -np.ones(alive.sum(), np.int64)])
    inside = j < P
    used, changes = _changes(k[inside], j[inside], b[inside], c[inside], P + 1)
    return Cells(ev.interner.frames, ev.interner.stacks, ev.keys.iloc[used].reset_index(drop=True), changes,
                 positions)


def _array_events(run, attribution: Attribution) -> _Events:
    interner = _Interner()
    stack_of = _stack_table(run, attribution, interner)
    arrays = run.arrays
    snaps = run.snapshots["snapshot"].to_numpy(dtype=np.int64)
    keys_cols = ["stack", "type", "device", "process"]
    if arrays.empty or not len(snaps):
        none = np.zeros(0, dtype=np.int64)
        return _Events(interner, pd.DataFrame(columns=keys_cols), none, none, none, none)
    pf, pe = array_positions(snaps, arrays)
    flat = shards(arrays)
    n = len(arrays)
    sid = pd.to_numeric(arrays["stack_id"], errors="coerce").fillna(-1).to_numpy(dtype=np.int64)
    codes = pd.Series(stack_of, dtype=np.int64).reindex(sid).to_numpy(dtype=float)
    if np.isnan(codes).any():  # arrays without a (known) stack
        codes[np.isnan(codes)] = interner.stack([])
    stack_code = codes.astype(np.int64)
    scode, sun = pd.factorize(arrays["shape"].to_numpy(dtype=object))
    dcode_, dun = pd.factorize(arrays["dtype"].to_numpy(dtype=object))
    pairs, tcode = np.unique((scode.astype(np.int64) + 1) * (len(dun) + 1) + (dcode_ + 1), return_inverse=True)
    tnames = [_type_text(sun[a - 1] if a > 0 else None, dun[d - 1] if d > 0 else None)
              for a, d in zip((pairs // (len(dun) + 1)).tolist(), (pairs % (len(dun) + 1)).tolist())]
    proc = (pd.to_numeric(arrays["process"], errors="coerce").fillna(0).to_numpy(dtype=np.int64)
            if "process" in arrays else np.zeros(n, dtype=np.int64))
    # One row per shard: its array's row, bytes and device (an array with no
    # shard information: one row of its logical size, no device).
    owner, sbytes, dcode = flat.owner, flat.shard_bytes, flat.device_codes
    dnames = list(flat.device_names)
    have = np.zeros(n, dtype=bool)
    have[owner] = True
    if (~have).any():
        missing = np.flatnonzero(~have)
        owner = np.concatenate([owner, missing])
        sbytes = np.concatenate([sbytes, flat.array_bytes[missing]])
        dnames.append("")
        dcode = np.concatenate([dcode, np.full(len(missing), len(dnames) - 1, dtype=np.int64)])
    # One integer per (stack, type, device, process), then the distinct ones.
    dims = np.array([max(len(interner.stacks), 1), max(len(tnames), 1), max(len(dnames), 1)], dtype=np.int64)
    proc_codes, proc_of = np.unique(proc, return_inverse=True)
    combined = ((stack_code[owner] * dims[1] + tcode[owner]) * dims[2] + dcode) * len(proc_codes) + proc_of[owner]
    kvals, kcode = np.unique(combined, return_inverse=True)
    kcode = kcode.reshape(-1)
    rest, pr = np.divmod(kvals, len(proc_codes))
    rest, dv = np.divmod(rest, dims[2])
    st, ty = np.divmod(rest, dims[1])
    keys = pd.DataFrame({
        "stack": st.astype(np.int64),
        "type": np.asarray(tnames, dtype=object)[ty] if len(tnames) else np.full(len(st), "", dtype=object),
        "device": np.asarray(dnames, dtype=object)[dv],
        "process": proc_codes[pr].astype(np.int64),
    })
    return _Events(interner, keys, kcode, pf[owner], pe[owner], sbytes)


def _changes(k, j, b, c, width: int) -> tuple[np.ndarray, list]:
    """The keys that change, and per key the (position, bytes, buffers) rows
    where its running sums change, from its events (key, position < width,
    delta bytes, delta buffers)."""
    if not len(k):
        return np.zeros(0, dtype=np.int64), []
    code = k.astype(np.int64) * width + j
    uniq, inv = np.unique(code, return_inverse=True)
    # Float bincount is exact below 2**53 bytes.
    db = np.rint(np.bincount(inv.reshape(-1), weights=b)).astype(np.int64)
    dc = np.rint(np.bincount(inv.reshape(-1), weights=c)).astype(np.int64)
    kk, jj = np.divmod(uniq, width)
    first = np.r_[True, kk[1:] != kk[:-1]]
    cb, cc = np.cumsum(db), np.cumsum(dc)
    starts = np.flatnonzero(first)
    idx = np.repeat(starts, np.diff(np.r_[starts, len(kk)]))
    vb = cb - np.where(idx > 0, cb[np.maximum(idx - 1, 0)], 0)
    vc = cc - np.where(idx > 0, cc[np.maximum(idx - 1, 0)], 0)
    # Keep a row only when the value differs from the key's previous one.
    prev_b, prev_c = np.r_[0, vb[:-1]], np.r_[0, vc[:-1]]
    prev_b[first], prev_c[first] = 0, 0
    keep = (vb != prev_b) | (vc != prev_c)
    rows = np.column_stack([jj, vb, vc]).astype(np.int64)[keep]
    owners = kk[keep]
    if not len(owners):
        return np.zeros(0, dtype=np.int64), []
    cuts = np.flatnonzero(np.r_[True, owners[1:] != owners[:-1]])
    return owners[cuts], np.split(rows, cuts[1:])


# -- cells of profiles -----------------------------------------------------------------


def profile_cells(profiles: list, attribution: Attribution, interner: _Interner | None = None,
                  positions=None) -> Cells:
    """Cells of pprof profiles, one kept position each (``show``: one,
    ``diff``: base and new). Profiles carry no shapes: buffers get type "",
    executables ``executable``."""
    interner = interner or _Interner()
    rows = []
    for j, prof in enumerate(profiles):
        labels = frame_labels(prof, attribution)
        fid = [interner.frame(fn, f, ln, u) for fn, f, ln, u in
               zip(labels["function"], labels["file"], labels["line"].tolist(), labels["user"].tolist())]
        stack_code = np.array([interner.stack([fid[f] for f in st]) for st in prof.stacks], dtype=np.int64)
        s = prof.samples
        if s.empty:
            continue
        rows.append(pd.DataFrame({
            "stack": stack_code[s["stack_id"].to_numpy(dtype=np.int64)],
            "type": np.where(s["kind"].to_numpy() == "executable", "executable", ""),
            "device": s["device"].astype(object).to_numpy(),
            "process": 0, "j": j,
            "bytes": s["bytes"].to_numpy(dtype=np.int64), "buffers": s["count"].to_numpy(dtype=np.int64),
        }))
    cols = ["stack", "type", "device", "process"]
    pos = np.arange(len(profiles), dtype=np.int64) if positions is None else np.asarray(positions, dtype=np.int64)
    if not rows:
        return Cells(interner.frames, interner.stacks, pd.DataFrame(columns=cols), [], pos)
    allrows = pd.concat(rows, ignore_index=True)
    g = allrows.groupby(cols + ["j"], sort=True)[["bytes", "buffers"]].sum().reset_index()
    keys = g[cols].drop_duplicates().reset_index(drop=True)
    kcode = pd.MultiIndex.from_frame(g[cols]).map(
        {k: i for i, k in enumerate(pd.MultiIndex.from_frame(keys))}).to_numpy(dtype=np.int64)
    # Per key: its value at each profile, and 0 at the next position where it is absent.
    changes = []
    for i in range(len(keys)):
        sel = g[kcode == i]
        js = sel["j"].to_numpy(dtype=np.int64)
        out, last_j = [], None
        for jj, bb, cc in zip(js.tolist(), sel["bytes"].tolist(), sel["buffers"].tolist()):
            if last_j is not None and jj > last_j + 1:
                out.append((last_j + 1, 0, 0))
            out.append((jj, bb, cc))
            last_j = jj
        if last_j is not None and last_j + 1 < len(profiles):
            out.append((last_j + 1, 0, 0))
        changes.append(np.array(out, dtype=np.int64).reshape(-1, 3))
    return Cells(interner.frames, interner.stacks, keys.astype({"stack": np.int64, "process": np.int64}),
                 changes, pos)


def _run_profile_cells(run, attribution: Attribution, positions: np.ndarray, cache: dict) -> Cells:
    """A directory of .prof files (no per-array records): each kept
    snapshot's profile, read once per file (``cache``: path -> Profile)."""
    snaps = run.snapshots["snapshot"].to_numpy(dtype=np.int64)
    profs = []
    for p in positions.tolist():
        path = run.profile_path(int(snaps[p]))
        if path not in cache:
            cache[path] = run.profile(int(snaps[p]))
        profs.append(cache[path])
    return profile_cells(profs, attribution, positions=positions)


# -- what grew -------------------------------------------------------------------------


def site_values(cells: Cells, j: int) -> pd.Series:
    """Live bytes per site at kept position ``j``."""
    v = cells.values_at(j)
    if v.empty:
        return pd.Series(dtype=np.int64)
    sites = [site_of(cells.frames, cells.stacks[s]) for s in cells.keys["stack"].to_numpy()[v["key"].to_numpy()]]
    return v.assign(site=sites).groupby("site")["bytes"].sum()


def site_growth(cells: Cells, base_j: int, new_j: int) -> pd.DataFrame:
    """Per site that changed: ``site, base_bytes, new_bytes, delta_bytes``,
    the largest growth first."""
    a, b = site_values(cells, base_j), site_values(cells, new_j)
    idx = a.index.union(b.index)
    out = pd.DataFrame({"base_bytes": a.reindex(idx, fill_value=0), "new_bytes": b.reindex(idx, fill_value=0)})
    out["delta_bytes"] = out["new_bytes"] - out["base_bytes"]
    out = out[out["delta_bytes"] != 0].rename_axis("site").reset_index()
    return out.sort_values(["delta_bytes", "site"], ascending=[False, True]).reset_index(drop=True)


# -- what the memory is: role -> owner path --------------------------------------------


@dataclass
class RoleCells:
    """The cells of "what the memory is" at the largest sampled jitted call
    (``analysis/roles.py``): one position (0), a stack per owner, outermost
    first its role, then the parts of its path (``opt_state``, ``[0]``,
    ``.mu``, ``['w1']``); "inside the call"'s owners are lines, one part
    each. A frame is ``(label, path, 0, True)``: the part as shown
    (``mu``, ``'w1'``, ``[0]``) and the owner's path up to it; a role's
    frame is ``(role, "", 0, True)``. A role's bytes that no owner row accounts for (the
    output tuple's table, other arrays) sit on the role's own stack, so a
    role's cell is exactly its bytes. ``groups``: per group of devices whose
    cells are the same (as the terminal report groups its tables), its
    devices and their bytes each; ``cells``' keys name each group's first
    device."""

    cells: Cells
    groups: list  # (devices, bytes on each)


def owner_parts(owner: str) -> list[str]:
    """An owner path cut at ``.name`` and ``[...]``, each part as written:
    ``opt_state[0].mu['w1']`` -> ``opt_state``, ``[0]``, ``.mu``, ``['w1']``.
    A bracket's quoted key stays whole whatever it holds (``['a.b]']``); an
    unbalanced bracket makes the rest one part. The parts joined are the path."""
    parts, i, n = [], 0, len(owner)
    while i < n:
        if owner[i] == "[":
            j = _bracket_end(owner, i)
            if j < 0:
                parts.append(owner[i:])
                break
        else:
            j = i + 1
            while j < n and owner[j] not in ".[":
                j += 1
        parts.append(owner[i:j])
        i = j
    return parts


def _bracket_end(s: str, i: int) -> int:
    """The index after the ``]`` that closes the ``[`` at ``i`` (quoted
    strings and nested brackets skipped), or -1."""
    depth, k, n = 0, i, len(s)
    while k < n:
        c = s[k]
        if c in "'\"":
            k += 1
            while k < n and s[k] != c:
                k += 2 if s[k] == "\\" else 1
            if k >= n:
                return -1
        elif c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
            if depth == 0:
                return k + 1
        k += 1
    return -1


def part_label(part: str) -> str:
    """A path part as the icicle shows it: ``.mu`` -> ``mu``, ``['w1']`` ->
    ``'w1'``, ``[0]`` stays ``[0]``."""
    if part.startswith(".") and len(part) > 1:
        return part[1:]
    inner = part[1:-1]
    if part.startswith("[") and part.endswith("]") and len(inner) >= 2 and inner[0] in "'\"" and inner[-1] == inner[0]:
        return inner
    return part


def role_cells(what) -> RoleCells:
    """The role -> owner path cells of ``what`` (a ``Roles``) per device,
    devices with the same cells grouped. A role's owners are drawn under it
    when their bytes add up to at most the role's (a new state XLA wrote
    partly into donated buffers holds less than its arrays: one cell)."""
    from jaxmemprof.analysis.roles import INSIDE

    interner = _Interner()
    by_role, owners = what.by_role, what.owners
    per_device: dict = {}
    for device, rows in by_role.groupby("device", sort=False):
        mine = owners[owners["device"] == device] if len(owners) else owners
        found: dict = {}  # (stack, type) -> [bytes, arrays]

        def put(stack, ty, b, count, found=found):
            v = found.setdefault((stack, ty), [0, 0])
            v[0] += b
            v[1] += count

        for role, total in zip(rows["role"].tolist(), rows["bytes"].tolist()):
            total = int(total)
            if total <= 0:
                continue
            top = interner.frame(role, "", 0, True)
            o = mine[mine["role"] == role] if len(mine) else mine
            drawn = int(o["bytes"].sum()) if len(o) else 0
            if not len(o) or drawn > total:
                put(interner.stack([top]), "", total, 0)
                continue
            for owner, b, shape, dtype in zip(o["owner"].astype(str), o["bytes"].tolist(), o["shape"], o["dtype"]):
                ids, path = [top], ""
                for part in ([owner] if role == INSIDE else owner_parts(owner)):
                    path += part
                    ids.append(interner.frame(part if role == INSIDE else part_label(part), path, 0, True))
                inside = role == INSIDE  # a line's temporaries: their count and types are not known
                put(interner.stack(ids[::-1]), "" if inside else f"{dtype or '?'}{shape or '[]'}", int(b),
                    0 if inside else 1)
            if total > drawn:
                put(interner.stack([top]), "", total - drawn, 0)
        per_device[str(device)] = sorted((s, t, v[0], v[1]) for (s, t), v in found.items())
    groups: dict = {}
    for device, cells in per_device.items():
        groups.setdefault(tuple(cells), []).append(device)
    keys, changes, out = [], [], []
    for cells, devices in groups.items():
        out.append((devices, sum(c[2] for c in cells)))
        for s, t, b, count in cells:
            keys.append((s, t, devices[0], 0))
            changes.append(np.array([[0, b, count]], dtype=np.int64))
    kf = pd.DataFrame(keys, columns=["stack", "type", "device", "process"]).astype({"stack": np.int64, "process": np.int64})
    return RoleCells(Cells(interner.frames, interner.stacks, kf, changes, np.zeros(1, dtype=np.int64)), out)

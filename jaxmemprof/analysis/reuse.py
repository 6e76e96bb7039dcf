"""Buffer reuse: which new buffers took the device address of an earlier one,
and which took it by donation.

Each array has one buffer per addressable shard, with its device address
(``Run.arrays.addresses``). The holders of one address on one device are
ordered by the snapshot they were first seen in; a holder *reuses* the address
when every earlier holder had ended by then (``first_snapshot >=`` their
``end_snapshot``). Zero-byte buffers and buffers whose address is unknown are
counted as born but never matched.

Columns of ``Reuse.by_device`` (``device``) and ``Reuse.by_site`` (``site,
file, line, function``: the site of the *new* buffer), in ``reuse.csv``:

- ``buffers_born``, ``bytes_born``: buffers (shards) first seen in the run, and
  their bytes. A buffer seen through two ``jax.Array`` objects at once (the
  same device and address while both are alive) is counted once, as the one
  seen first; the others are ``shared``.
- ``reused_address``, ``reused_address_bytes``: of those, buffers that took an
  address an earlier, ended buffer held on the same device.
- ``reused_same_size``, ``reused_same_size_bytes``: ... with equal bytes.
- ``reused_immediately``, ``reused_immediately_bytes``: same-size reuses first
  seen in the very snapshot where the earlier holder was first gone: what
  donation looks like (also what freeing a buffer and making an equal one at
  once looks like).
- ``donated_in_place``, ``donated_in_place_bytes``: immediate reuses whose
  earlier holder ended ``deleted``: an output that took a donated input's
  buffer (or a buffer made right after an explicit ``.delete()``).
- ``shared``, ``shared_bytes``: array shards first seen at an address that
  another live array held on the same device: one buffer seen through a
  second ``jax.Array`` (counted in none of the columns above).

``Reuse.events`` has one row per reuse: ``device, address, array_id, site,
first_snapshot, bytes, previous_array_id, previous_site,
previous_last_snapshot, previous_end_snapshot, previous_bytes, previous_how,
gap_snapshots`` (``first_snapshot - previous_end_snapshot``: 0 is immediate),
``same_size, immediately, donated_in_place, process``.

What snapshots can and cannot see of reuse: docs/reports.md (buffer reuse).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

import numpy as np
import pandas as pd

from jaxmemprof.analysis.sites import NO_STACK

SITE_COLUMNS = ["site", "file", "line", "function"]
COUNT_COLUMNS = [
    "buffers_born", "bytes_born", "reused_address", "reused_address_bytes", "reused_same_size",
    "reused_same_size_bytes", "reused_immediately", "reused_immediately_bytes", "donated_in_place",
    "donated_in_place_bytes", "shared", "shared_bytes",
]
EVENT_COLUMNS = [
    "device", "address", "array_id", "site", "first_snapshot", "bytes", "previous_array_id",
    "previous_site", "previous_last_snapshot", "previous_end_snapshot", "previous_bytes",
    "previous_how", "gap_snapshots", "same_size", "immediately", "donated_in_place", "process",
]


@dataclass(frozen=True)
class Reuse:
    """Address reuse per device, per site (of the new buffer), and per event
    (columns: the module docstring); ``unknown_addresses``: buffers with
    no recorded address, which are not matched (``addresses_read`` says
    why: the run's ``--addresses`` setting)."""

    by_device: pd.DataFrame
    by_site: pd.DataFrame
    events: pd.DataFrame
    buffers: int = 0
    unknown_addresses: int = 0


def _empty(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})


def _addresses(values: list) -> tuple[np.ndarray, np.ndarray]:
    """Addresses as uint64, and which are known."""
    try:
        known = np.fromiter((v is not None for v in values), dtype=bool, count=len(values))
        if known.all():
            return np.array(values, dtype=np.uint64), known
        return np.array([v if v is not None else 0 for v in values], dtype=np.uint64), known
    except (TypeError, ValueError, OverflowError):
        out = np.zeros(len(values), dtype=np.uint64)
        known = np.zeros(len(values), dtype=bool)
        for i, v in enumerate(values):
            if isinstance(v, int) and 0 <= v < 2**64:
                out[i], known[i] = v, True
        return out, known


def shard_table(run, arrays_df: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per buffer (array shard): ``array_id, device, address`` (uint64;
    0 when unknown), ``known_address, bytes, first_snapshot, last_snapshot,
    end_snapshot`` (-1 while alive), ``how, process`` and the array's site
    columns (from ``arrays_df``, :func:`~jaxmemprof.analysis.lifetimes.array_lifetimes`)."""
    arrays: pd.DataFrame = run.arrays
    if arrays.empty:
        return _empty(["array_id", "device", "address", "known_address", "bytes", "first_snapshot",
                       "last_snapshot", "end_snapshot", "how", "process"] + SITE_COLUMNS)
    addrs, devs, sizes = arrays["addresses"], arrays["devices"], arrays["shard_bytes"]
    la = addrs.map(len).to_numpy(dtype=np.int64)
    ld = devs.map(len).to_numpy(dtype=np.int64)
    lb = sizes.map(len).to_numpy(dtype=np.int64)
    ok = (la == ld) & (la == lb)
    if not ok.all():  # a damaged record: its shards cannot be paired up
        arrays, addrs, devs, sizes, la = (
            arrays[ok], addrs[ok], devs[ok], sizes[ok], la[ok]
        )
    row = np.repeat(np.arange(len(arrays)), la)
    address, known = _addresses(list(chain.from_iterable(addrs)))
    nbytes = np.fromiter(chain.from_iterable(sizes), dtype=np.int64, count=len(row))
    device = np.array(list(chain.from_iterable(devs)), dtype=object).astype(str)
    end = pd.to_numeric(arrays["end_snapshot"], errors="coerce").fillna(-1).to_numpy(dtype=np.int64)
    how = arrays["how"].astype(object).to_numpy()
    how = np.where(end < 0, "alive", np.where(pd.isna(how), "alive", how)).astype(object)
    array_id = arrays["array_id"].to_numpy(dtype=np.int64)
    out = pd.DataFrame(
        {
            "array_id": array_id[row],
            "device": device,
            "address": address,
            "known_address": known,
            "bytes": nbytes,
            "first_snapshot": arrays["first_snapshot"].to_numpy(dtype=np.int64)[row],
            "last_snapshot": arrays["last_snapshot"].to_numpy(dtype=np.int64)[row],
            "end_snapshot": end[row],
            "how": how[row],
            "process": (pd.to_numeric(arrays["process"], errors="coerce").fillna(0).to_numpy(dtype=np.int64)[row]
                        if "process" in arrays else np.zeros(len(row), np.int64)),
        }
    )
    if arrays_df is not None and not arrays_df.empty and "site" in arrays_df:
        sites = arrays_df.set_index("array_id")[SITE_COLUMNS].reindex(out["array_id"].to_numpy())
        for c in SITE_COLUMNS:
            out[c] = sites[c].to_numpy()
        out["site"] = out["site"].fillna(NO_STACK)
        out["file"] = out["file"].fillna("")
        out["line"] = out["line"].fillna(0).astype(np.int64)
        out["function"] = out["function"].fillna("")
    else:
        out["site"], out["file"], out["line"], out["function"] = NO_STACK, "", 0, ""
    return out


def match_holders(shards: pd.DataFrame) -> pd.DataFrame:
    """Per row of :func:`shard_table`: ``is_reuse`` (it took the address of
    an earlier, ended holder), ``is_alias`` (another array seen first held
    the address while it was alive) and ``previous`` (the row of the holder
    it took the address from; -1 when none)."""
    n = len(shards)
    matchable = shards["known_address"].to_numpy() & (shards["bytes"].to_numpy() > 0)
    dev_code = pd.factorize(shards["device"])[0].astype(np.int64)
    addr = shards["address"].to_numpy(dtype=np.uint64)
    first = shards["first_snapshot"].to_numpy(dtype=np.int64)
    end = shards["end_snapshot"].to_numpy(dtype=np.int64)
    aid = shards["array_id"].to_numpy(dtype=np.int64)
    idx = np.flatnonzero(matchable)
    order = idx[np.lexsort((aid[idx], first[idx], addr[idx], dev_code[idx]))]
    d, a, f = dev_code[order], addr[order], first[order]
    # An alive holder never ends: it blocks every later one at its address.
    e = np.where(end[order] < 0, np.iinfo(np.int64).max, end[order])
    same = np.zeros(len(order), dtype=bool)
    same[1:] = (d[1:] == d[:-1]) & (a[1:] == a[:-1])
    group = np.cumsum(~same)
    # Latest end of all earlier holders of the address.
    running = pd.Series(e).groupby(group).cummax().to_numpy()
    prev_max = np.full(len(order), -1, dtype=np.int64)
    prev_max[1:] = np.where(same[1:], running[:-1], -1)
    reuse = same & (prev_max <= f)
    alias = same & (prev_max > f)
    # The previous holder is the last earlier one that was not an alias.
    pos = np.arange(len(order))
    last_buffer = pd.Series(np.where(alias, -1, pos)).groupby(group).cummax().to_numpy()
    prev_pos = np.full(len(order), -1, dtype=np.int64)
    prev_pos[1:] = np.where(same[1:], last_buffer[:-1], -1)
    is_reuse = np.zeros(n, dtype=bool)
    is_alias = np.zeros(n, dtype=bool)
    prev = np.full(n, -1, dtype=np.int64)
    is_reuse[order] = reuse
    is_alias[order] = alias
    prev[order] = np.where(reuse & (prev_pos >= 0), order[np.maximum(prev_pos, 0)], -1)
    return pd.DataFrame({"is_reuse": is_reuse, "is_alias": is_alias, "previous": prev})


def reuse(run, arrays_df: pd.DataFrame | None = None) -> Reuse:
    """Address reuse in ``run``; ``arrays_df``: :func:`array_lifetimes`' rows
    (for sites; computed with the default attribution when None)."""
    if arrays_df is None:
        from jaxmemprof.analysis.lifetimes import array_lifetimes

        arrays_df = array_lifetimes(run)
    shards = shard_table(run, arrays_df)
    if shards.empty:
        return Reuse(_empty(["device"] + COUNT_COLUMNS), _empty(SITE_COLUMNS + COUNT_COLUMNS), _empty(EVENT_COLUMNS))
    m = match_holders(shards)
    is_reuse = m["is_reuse"].to_numpy()
    alias = m["is_alias"].to_numpy()
    born = ~alias
    prev = m["previous"].to_numpy()
    p = np.where(prev >= 0, prev, 0)
    b = shards["bytes"].to_numpy(dtype=np.int64)
    first = shards["first_snapshot"].to_numpy(dtype=np.int64)
    p_end = shards["end_snapshot"].to_numpy(dtype=np.int64)[p]
    p_how = shards["how"].to_numpy(dtype=object)[p]
    same_size = is_reuse & (b[p] == b)
    immediately = same_size & (first == p_end)
    donated = immediately & (p_how == "deleted")

    flags = pd.DataFrame(
        {
            "buffers_born": born.astype(np.int64), "bytes_born": np.where(born, b, 0),
            "reused_address": is_reuse.astype(np.int64), "reused_address_bytes": np.where(is_reuse, b, 0),
            "reused_same_size": same_size.astype(np.int64), "reused_same_size_bytes": np.where(same_size, b, 0),
            "reused_immediately": immediately.astype(np.int64),
            "reused_immediately_bytes": np.where(immediately, b, 0),
            "donated_in_place": donated.astype(np.int64), "donated_in_place_bytes": np.where(donated, b, 0),
            "shared": alias.astype(np.int64), "shared_bytes": np.where(alias, b, 0),
        }
    )
    order_by = ["reused_address_bytes", "bytes_born"]
    by_device = flags.groupby(shards["device"].rename("device"), sort=True)[COUNT_COLUMNS].sum().reset_index()
    keyed = pd.concat([shards[SITE_COLUMNS].reset_index(drop=True), flags], axis=1)
    by_site = keyed.groupby(SITE_COLUMNS, sort=False, dropna=False)[COUNT_COLUMNS].sum().reset_index()
    by_site = by_site.sort_values(order_by + ["site"], ascending=[False, False, True], kind="stable")

    r = np.flatnonzero(is_reuse)
    pr = prev[r]
    events = pd.DataFrame(
        {
            "device": shards["device"].to_numpy()[r],
            "address": shards["address"].to_numpy()[r],
            "array_id": shards["array_id"].to_numpy()[r],
            "site": shards["site"].to_numpy()[r],
            "first_snapshot": first[r],
            "bytes": b[r],
            "previous_array_id": shards["array_id"].to_numpy()[pr],
            "previous_site": shards["site"].to_numpy()[pr],
            "previous_last_snapshot": shards["last_snapshot"].to_numpy()[pr],
            "previous_end_snapshot": p_end[r],
            "previous_bytes": b[pr],
            "previous_how": p_how[r],
            "gap_snapshots": first[r] - p_end[r],
            "same_size": same_size[r],
            "immediately": immediately[r],
            "donated_in_place": donated[r],
            "process": shards["process"].to_numpy()[r],
        }
    )
    events = events.sort_values(["first_snapshot", "device", "address", "array_id"], kind="stable")
    return Reuse(
        by_device=by_device[["device"] + COUNT_COLUMNS].reset_index(drop=True),
        by_site=by_site[SITE_COLUMNS + COUNT_COLUMNS].reset_index(drop=True),
        events=events[EVENT_COLUMNS].reset_index(drop=True),
        buffers=int(len(shards)),
        unknown_addresses=int((~shards["known_address"].to_numpy()).sum()),
    )

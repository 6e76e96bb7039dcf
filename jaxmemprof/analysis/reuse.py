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

from functools import cached_property

import numpy as np
import pandas as pd

from typing import TYPE_CHECKING

from jaxmemprof.analysis.sites import SITE_COLUMNS
from jaxmemprof.analysis.sites import NO_STACK

if TYPE_CHECKING:
    from jaxmemprof.analysis.attributed import Attributed

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


class Reuse:
    """Address reuse per device, per site (of the new buffer), and per event
    (columns: the module docstring; the events are made when first read:
    the report does not need them); ``buffers``: the buffers matched by
    address; ``unknown_addresses``: of those, buffers with no recorded
    address, which are not matched (the run's ``--addresses`` setting says
    why: render/notes.py)."""

    def __init__(self, by_device: pd.DataFrame, by_site: pd.DataFrame, events, buffers: int = 0,
                 unknown_addresses: int = 0):
        self.by_device, self.by_site, self._events = by_device, by_site, events
        self.buffers, self.unknown_addresses = buffers, unknown_addresses

    @cached_property
    def events(self) -> pd.DataFrame:
        return self._events() if callable(self._events) else self._events


def _empty(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})


def _site_codes(array_ids: np.ndarray, arrays_df: pd.DataFrame | None) -> tuple[np.ndarray, pd.DataFrame]:
    """Per buffer, the code of its array's site, and the sites' rows
    (``site, file, line, function``) by code; one placeholder site for
    buffers whose array has none."""
    placeholder = pd.DataFrame({"site": [NO_STACK], "file": [""], "line": [0], "function": [""]})
    if arrays_df is None or arrays_df.empty or "site" not in arrays_df:
        return np.zeros(len(array_ids), dtype=np.int64), placeholder
    codes, uniques = pd.factorize(arrays_df["site"])
    first_of = np.unique(codes, return_index=True)[1]
    rows = arrays_df[SITE_COLUMNS].iloc[first_of].reset_index(drop=True)
    rows["line"] = pd.to_numeric(rows["line"], errors="coerce").fillna(0).astype(np.int64)
    ids = arrays_df["array_id"].to_numpy(dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    at = np.searchsorted(ids[order], array_ids)
    at = np.minimum(at, len(ids) - 1)
    found = ids[order][at] == array_ids
    site = np.where(found, codes[order][at], len(rows))
    if not found.all():
        rows = pd.concat([rows, placeholder], ignore_index=True)
    return site.astype(np.int64), rows


def _counts(code: np.ndarray, n: int, flags: dict, nbytes: np.ndarray) -> pd.DataFrame:
    """Per code: each flag's buffers and bytes (COUNT_COLUMNS)."""
    out = {}
    for name, flag in flags.items():
        out[name] = np.bincount(code[flag], minlength=n).astype(np.int64)
        out["bytes_born" if name == "buffers_born" else f"{name}_bytes"] = np.bincount(
            code[flag], weights=nbytes[flag], minlength=n).astype(np.int64)
    return pd.DataFrame(out)[COUNT_COLUMNS]


def reuse(ar: Attributed) -> Reuse:
    """Address reuse in the attributed run: its buffers (``ar.shards``), whose
    address each took (``ar.holders``), and the site of each buffer's array
    (``ar.arrays``)."""
    arrays_df, shards = ar.arrays, ar.shards
    if shards.empty:
        return Reuse(_empty(["device"] + COUNT_COLUMNS), _empty(SITE_COLUMNS + COUNT_COLUMNS), _empty(EVENT_COLUMNS))
    m = ar.holders
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
    flags = {"buffers_born": born, "reused_address": is_reuse, "reused_same_size": same_size,
             "reused_immediately": immediately, "donated_in_place": donated, "shared": alias}

    # Each buffer's site, by code: the site of its array (arrays_df's rows).
    site, site_rows = _site_codes(shards["array_id"].to_numpy(dtype=np.int64), arrays_df)
    device, devices = pd.factorize(shards["device"], sort=True)
    by_device = _counts(device, len(devices), flags, b)
    by_device.insert(0, "device", np.asarray(devices, dtype=object))
    by_site = pd.concat([site_rows.reset_index(drop=True), _counts(site, len(site_rows), flags, b)], axis=1)
    by_site = by_site[np.bincount(site, minlength=len(site_rows)) > 0]  # the sites of some buffer
    by_site = by_site.sort_values(["reused_address_bytes", "bytes_born", "site"], ascending=[False, False, True],
                                  kind="stable")

    def events() -> pd.DataFrame:
        r = np.flatnonzero(is_reuse)
        pr = prev[r]
        names = site_rows["site"].to_numpy(dtype=object)
        events = pd.DataFrame(
            {
                "device": shards["device"].to_numpy()[r],
                "address": shards["address"].to_numpy()[r],
                "array_id": shards["array_id"].to_numpy()[r],
                "site": names[site[r]],
                "first_snapshot": first[r],
                "bytes": b[r],
                "previous_array_id": shards["array_id"].to_numpy()[pr],
                "previous_site": names[site[pr]],
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
        return events[EVENT_COLUMNS].reset_index(drop=True)

    return Reuse(
        by_device=by_device[["device"] + COUNT_COLUMNS].reset_index(drop=True),
        by_site=by_site[SITE_COLUMNS + COUNT_COLUMNS].reset_index(drop=True),
        events=events,
        buffers=int(len(shards)),
        unknown_addresses=int((~shards["known_address"].to_numpy()).sum()),
    )

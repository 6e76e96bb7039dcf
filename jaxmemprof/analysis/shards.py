"""A run's buffers: one row per array shard, and which earlier buffer each
one's device address belonged to.

Both the lifetimes (an array over a buffer another array holds is
``shared``) and the reuse analysis (an address taken over) read these; the
report computes them once (``analysis/attributed.py``).
"""

from __future__ import annotations

from itertools import chain

import numpy as np
import pandas as pd


SHARD_COLUMNS = ["array_id", "device", "address", "known_address", "bytes", "first_snapshot", "last_snapshot",
                 "end_snapshot", "how", "process"]


def _addresses(values: list) -> tuple[np.ndarray, np.ndarray]:
    """Addresses as uint64, and which are known."""
    try:
        if None not in values:
            return np.array(values, dtype=np.uint64), np.ones(len(values), dtype=bool)
        known = np.fromiter((v is not None for v in values), dtype=bool, count=len(values))
        return np.array([v if v is not None else 0 for v in values], dtype=np.uint64), known
    except (TypeError, ValueError, OverflowError):
        out = np.zeros(len(values), dtype=np.uint64)
        known = np.zeros(len(values), dtype=bool)
        for i, v in enumerate(values):
            if isinstance(v, int) and 0 <= v < 2**64:
                out[i], known[i] = v, True
        return out, known


def shard_table(run) -> pd.DataFrame:
    """One row per buffer (array shard): ``array_id, device, address`` (uint64;
    0 when unknown), ``known_address, bytes, first_snapshot, last_snapshot,
    end_snapshot`` (-1 while alive), ``how, process``."""
    arrays: pd.DataFrame = run.arrays
    if arrays.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in SHARD_COLUMNS})
    addrs, devs, sizes = arrays["addresses"], arrays["devices"], arrays["shard_bytes"]
    n = len(arrays)
    la = np.fromiter(map(len, addrs.to_numpy()), dtype=np.int64, count=n)
    ld = np.fromiter(map(len, devs.to_numpy()), dtype=np.int64, count=n)
    lb = np.fromiter(map(len, sizes.to_numpy()), dtype=np.int64, count=n)
    ok = (la == ld) & (la == lb)
    if not ok.all():  # a damaged record: its shards cannot be paired up
        arrays, addrs, devs, sizes, la = (
            arrays[ok], addrs[ok], devs[ok], sizes[ok], la[ok]
        )
    row = np.repeat(np.arange(len(arrays)), la)
    address, known = _addresses(list(chain.from_iterable(addrs)))
    nbytes = np.fromiter(chain.from_iterable(sizes), dtype=np.int64, count=len(row))
    device = np.array(list(chain.from_iterable(devs)), dtype=object)
    if not all(type(d) is str for d in set(device.tolist())):  # the journal is untrusted
        device = device.astype(str).astype(object)
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

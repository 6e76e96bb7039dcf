"""How long buffers live: per array, per site, and (estimated) for runs without
per-array data.

Everything here is measured at snapshot resolution. An array is *seen* in the
snapshots taken while it was alive; it was born some time after the snapshot
before its first one, and ended some time after its last one (at the latest
at its ``end_snapshot``, the first snapshot where it was gone). Lifetimes are
therefore measured from the first snapshot that saw the array to the first
that no longer did (or to the run's last snapshot while it is still alive):
an array that lives between two snapshots is never seen at all.

Columns of :func:`array_lifetimes` (``arrays.csv``/``lifetimes.csv``), one row
per array identity:

- ``array_id``: the array's identity in the run (never reused).
- ``site, file, line, function``: where it was created (see ``sites.py``).
- ``stack_id``: its creation stack in ``Run.stacks`` (NA when unknown).
- ``shape``: dimensions joined by ``x`` (``256x1024``); ``()`` for a scalar.
- ``dtype``: e.g. ``float32``.
- ``bytes``: device bytes, the sum of its shards' bytes (a replicated array
  counts once per device).
- ``nbytes``: logical size of the whole array (``jax.Array.nbytes``).
- ``shards``: addressable shards (buffers), one per device.
- ``devices``: the shards' devices, joined by ``;``.
- ``first_snapshot``, ``last_snapshot``: first and last snapshot it was seen alive in.
- ``first_t``, ``last_t``: their times, seconds since the run began.
- ``end_snapshot``: first snapshot where it was gone (NA while alive at the end).
- ``ended_t``: that snapshot's time (NaN while alive).
- ``lifetime_s``: ``ended_t`` (or the run's last snapshot time while alive)
  minus ``first_t``.
- ``lifetime_snapshots``: snapshots it was seen alive in.
- ``lifetime_steps``: markers (``jaxmemprof.mark``) placed between
  ``first_snapshot`` and ``end_snapshot`` (to the end of the run while alive):
  the same interval as ``lifetime_s``; NA when the run has no markers.
- ``how``: ``freed`` (the last reference went), ``deleted`` (donated, or
  ``.delete()``), or ``alive`` (still alive at the run's last snapshot).
- ``alive_at_start``: seen in the run's first snapshot (its birth is censored:
  it may be older).
- ``alive_at_end``: alive at the run's last snapshot (its end is censored).
- ``shared``: each of its buffers was held, at its first snapshot, by
  another live array seen before it: a second ``jax.Array`` over the same
  device memory (JAX 0.10.2 makes one for a ``device_put`` array's shard when
  its address is read). Its bytes are counted once, under the other array;
  site totals leave it out.
- ``process``: the process index.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from typing import TYPE_CHECKING

from jaxmemprof.analysis.groups import keyed_samples
from jaxmemprof.analysis.runs import run_peak
from jaxmemprof.analysis.sites import NO_STACK, SITE_COLUMNS

if TYPE_CHECKING:
    from jaxmemprof.analysis.attributed import Attributed


ARRAY_COLUMNS = [
    "array_id", "site", "file", "line", "function", "stack_id", "shape", "dtype", "bytes", "nbytes",
    "shards", "devices", "first_snapshot", "last_snapshot", "first_t", "last_t", "end_snapshot",
    "ended_t", "lifetime_s", "lifetime_snapshots", "lifetime_steps", "how", "alive_at_start",
    "alive_at_end", "shared", "process",
]

SITE_LIFETIME_COLUMNS = [
    "site", "file", "line", "function", "arrays_born", "bytes_born", "live_bytes_at_peak",
    "median_lifetime_s", "p90_lifetime_s", "max_lifetime_s", "byte_seconds", "alive_at_end",
    "alive_at_end_bytes",
]

CHURN_COLUMNS = [
    "site", "file", "line", "function", "births", "deaths", "bytes_born", "bytes_freed",
    "count_first", "count_last", "bytes_first", "bytes_last", "peak_count", "peak_bytes",
    "snapshots", "estimated",
]


def _empty(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})


def _shape_text(shape) -> str:
    try:
        dims = tuple(shape)
    except TypeError:
        return str(shape)
    return "x".join(str(d) for d in dims) if dims else "()"


def _map_unique(values, fn) -> np.ndarray:
    """``fn`` of each value, computed once per distinct value (shapes and
    device lists repeat across many arrays)."""
    try:
        codes, uniques = pd.factorize(values)
    except TypeError:  # an unhashable value (a damaged record): one by one
        return np.array([fn(v) for v in values], dtype=object)
    out = np.empty(len(uniques) + 1, dtype=object)
    out[:-1] = [fn(u) for u in uniques]
    if (codes < 0).any():  # factorize codes a missing value -1
        out[-1] = fn(None)
    return out[codes]


def _sites_of(stack_ids: pd.Series, stack_sites: pd.DataFrame) -> pd.DataFrame:
    """``site, file, line, function`` for each stack id (NA: no stack)."""
    table = stack_sites[SITE_COLUMNS]
    picked = table.reindex(stack_ids.to_numpy())
    missing = picked["site"].isna().to_numpy()
    out = pd.DataFrame(
        {
            "site": np.where(missing, NO_STACK, picked["site"].to_numpy(dtype=object)),
            "file": np.where(missing, "", picked["file"].to_numpy(dtype=object)),
            "line": np.where(missing, 0, picked["line"].fillna(0).to_numpy()).astype(np.int64),
            "function": np.where(missing, "", picked["function"].to_numpy(dtype=object)),
        }
    )
    return out


def _snapshot_times(snapshots: pd.DataFrame) -> pd.Series:
    return pd.Series(
        snapshots["t"].to_numpy(dtype=np.float64), index=snapshots["snapshot"].to_numpy(dtype=np.int64)
    ).sort_index()


def _times(times: pd.Series, numbers: np.ndarray) -> np.ndarray:
    """The time of each snapshot number (NaN where the snapshot is unknown)."""
    return times.reindex(numbers).to_numpy(dtype=np.float64)


def array_lifetimes(ar: Attributed) -> pd.DataFrame:
    """One row per array of the attributed run (columns: module docstring),
    in ``array_id`` order. Empty (with the columns) for a run without
    per-array data. (The stage's own table: analyses read ``ar.arrays``.)"""
    run = ar.run
    arrays: pd.DataFrame = run.arrays
    if arrays.empty:
        return _empty(ARRAY_COLUMNS)
    snaps: pd.DataFrame = run.snapshots
    times = _snapshot_times(snaps)
    numbers = times.index.to_numpy()
    first_snap = int(numbers[0]) if len(numbers) else 0

    stack_ids = pd.to_numeric(arrays["stack_id"], errors="coerce").astype("Int64")
    sites = _sites_of(stack_ids, ar.stack_sites)

    first = arrays["first_snapshot"].to_numpy(dtype=np.int64)
    last = arrays["last_snapshot"].to_numpy(dtype=np.int64)
    end = pd.array(arrays["end_snapshot"], dtype="Int64")
    alive = end.isna()
    end_filled = end.fillna(0).to_numpy(dtype=np.int64)

    first_t = _times(times, first)
    last_t = _times(times, last)
    ended_t = np.where(alive, np.nan, _times(times, end_filled))
    lifetime_s = np.where(alive, last_t, ended_t) - first_t

    # Snapshots seen alive in, counted among the snapshots the run has.
    pos_first = np.searchsorted(numbers, first, side="left")
    pos_last = np.searchsorted(numbers, last, side="right") - 1
    lifetime_snapshots = np.maximum(pos_last - pos_first + 1, 0).astype(np.int64)

    markers: pd.DataFrame = run.markers
    if markers is not None and not markers.empty:
        after = np.sort(pd.to_numeric(markers["after_snapshot"], errors="coerce").fillna(0).to_numpy(np.int64))
        # A marker after snapshot m lies in [first_snapshot, end): first <= m < end.
        upper = np.where(alive, len(after), np.searchsorted(after, end_filled - 1, side="right"))
        steps = pd.array(upper - np.searchsorted(after, first, side="left"), dtype="Int64")
    else:
        steps = pd.array([pd.NA] * len(arrays), dtype="Int64")

    shard_bytes = arrays["shard_bytes"]
    nbytes_dev = np.fromiter(map(sum, shard_bytes.to_numpy(dtype=object)), dtype=np.int64, count=len(arrays))
    shards = np.fromiter(map(len, shard_bytes.to_numpy(dtype=object)), dtype=np.int64, count=len(arrays))
    alive_np = np.asarray(alive, dtype=bool)
    how = np.where(alive_np, "alive", arrays["how"].astype(object).fillna("alive").to_numpy(dtype=object))

    out = pd.DataFrame(
        {
            "array_id": arrays["array_id"].to_numpy(dtype=np.int64),
            "site": sites["site"].to_numpy(),
            "file": sites["file"].to_numpy(),
            "line": sites["line"].to_numpy(),
            "function": sites["function"].to_numpy(),
            "stack_id": stack_ids.array,
            "shape": _map_unique(arrays["shape"].to_numpy(dtype=object), _shape_text),
            "dtype": arrays["dtype"].astype(str).to_numpy(dtype=object),
            "bytes": nbytes_dev,
            "nbytes": pd.to_numeric(arrays["nbytes"], errors="coerce").fillna(0).to_numpy(dtype=np.int64),
            "shards": shards,
            "devices": _map_unique(arrays["devices"].to_numpy(dtype=object), lambda d: ";".join(map(str, d))),
            "first_snapshot": first,
            "last_snapshot": last,
            "first_t": first_t,
            "last_t": last_t,
            "end_snapshot": end,
            "ended_t": ended_t,
            "lifetime_s": lifetime_s,
            "lifetime_snapshots": lifetime_snapshots,
            "lifetime_steps": steps,
            "how": how.astype(object),
            "alive_at_start": first <= first_snap,
            "alive_at_end": alive_np,
            "shared": _shared(run, ar.shards, ar.holders),
            "process": pd.to_numeric(arrays["process"], errors="coerce").fillna(0).to_numpy(dtype=np.int64)
            if "process" in arrays else 0,
        }
    )
    if not out["array_id"].is_monotonic_increasing:
        out = out.sort_values("array_id", kind="stable").reset_index(drop=True)
    return out[ARRAY_COLUMNS]


def _shared(run, shards: pd.DataFrame, holders: pd.DataFrame) -> np.ndarray:
    """Per row of ``run.arrays``: is every one of its buffers held by another
    array seen first (a second ``jax.Array`` over it)."""
    if shards.empty:
        return np.zeros(len(run.arrays), dtype=bool)
    alias = holders["is_alias"]
    per_array = alias.groupby(shards["array_id"].to_numpy()).all()
    return per_array.reindex(run.arrays["array_id"].to_numpy(), fill_value=False).to_numpy(dtype=bool)


def peak_snapshot(run) -> int | None:
    """The run's peak snapshot (analysis/runs.py run_peak)."""
    peak = run_peak(run.snapshots)
    return None if peak is None else peak.snapshot


def site_lifetimes(ar: Attributed) -> pd.DataFrame:
    """One row per site of :func:`array_lifetimes`' rows, largest
    ``byte_seconds`` first:

    - ``arrays_born``, ``bytes_born``: arrays created there (those alive in the
      first snapshot included; ``shared`` ones left out), and their device bytes.
    - ``live_bytes_at_peak``: its bytes alive at the run's peak snapshot (most
      ``live_bytes``); over all sites these add up to the peak's ``live_bytes``
      (less any shared arrays', which the sampler counts twice).
    - ``median_lifetime_s``, ``p90_lifetime_s``, ``max_lifetime_s``: over its
      arrays' ``lifetime_s`` (censored ones included, measured to the run's end).
    - ``byte_seconds``: sum of ``bytes * lifetime_s``: the memory-time the site
      holds.
    - ``alive_at_end``, ``alive_at_end_bytes``: its arrays (and bytes) still
      alive at the run's last snapshot.

    Where the run took snapshots at fixed steps (capture/steps.py), the sites
    are ordered by the memory they hold over steps (``bytes *
    lifetime_steps``) instead: the same in every run, where
    ``byte_seconds`` follows the machine's speed.
    """
    run, arrays_df = ar.run, ar.arrays
    if arrays_df is None or arrays_df.empty:
        return _empty(SITE_LIFETIME_COLUMNS)
    peak = peak_snapshot(run)
    df = arrays_df[~arrays_df["shared"].to_numpy(dtype=bool)] if "shared" in arrays_df else arrays_df
    if df.empty:
        return _empty(SITE_LIFETIME_COLUMNS)
    b = df["bytes"].to_numpy(dtype=np.int64)
    life = df["lifetime_s"].to_numpy(dtype=np.float64)
    at_peak = (
        (df["first_snapshot"].to_numpy() <= peak) & (df["last_snapshot"].to_numpy() >= peak)
        if peak is not None else np.zeros(len(df), bool)
    )
    end_alive = df["alive_at_end"].to_numpy(dtype=bool)
    work = pd.DataFrame(
        {
            "site": df["site"].to_numpy(), "file": df["file"].to_numpy(),
            "line": df["line"].to_numpy(), "function": df["function"].to_numpy(),
            "arrays_born": np.ones(len(df), np.int64),
            "bytes_born": b,
            "live_bytes_at_peak": np.where(at_peak, b, 0),
            "byte_seconds": b * np.nan_to_num(life, nan=0.0),
            "alive_at_end": end_alive.astype(np.int64),
            "alive_at_end_bytes": np.where(end_alive, b, 0),
            "lifetime_s": life,
        }
    )
    keyed = "trigger" in run.snapshots and bool((run.snapshots["trigger"] == "step").any())
    steps = pd.to_numeric(df["lifetime_steps"], errors="coerce") if keyed and "lifetime_steps" in df else None
    by_steps = steps is not None and steps.notna().any() and int(steps.fillna(0).max()) > 0
    work["byte_steps"] = b * steps.fillna(0).to_numpy(dtype=np.float64) if by_steps and steps is not None else 0.0
    g = work.groupby(SITE_COLUMNS, sort=False, dropna=False)
    sums = g[["arrays_born", "bytes_born", "live_bytes_at_peak", "byte_seconds", "alive_at_end",
              "alive_at_end_bytes", "byte_steps"]].sum()
    lt = g["lifetime_s"]
    sums["median_lifetime_s"] = lt.median()
    sums["p90_lifetime_s"] = lt.quantile(0.9)
    sums["max_lifetime_s"] = lt.max()
    out = sums.reset_index()
    first = "byte_steps" if by_steps else "byte_seconds"
    out = out.sort_values([first, "bytes_born", "site"], ascending=[False, False, True], kind="stable")
    return out.reset_index(drop=True)[SITE_LIFETIME_COLUMNS]


def estimated_site_churn(ar: Attributed) -> pd.DataFrame:
    """Births and deaths per site estimated from consecutive snapshot profiles
    alone: for runs without per-array data (a plain directory of ``.prof``
    files), or to compare with the exact figures.

    A profile has no buffer identity, only counts per (stack, size, device).
    Between two consecutive snapshots, a rise in a site's count of buffers of
    one size on one device counts as that many births, a fall as deaths.
    These are lower bounds: a buffer made and freed between two snapshots, or
    one freed while another of the same size is made at the same site, leaves
    the counts unchanged. Executables are left out.

    Columns: ``site, file, line, function``; ``births``, ``deaths`` (buffers,
    summed over consecutive pairs), ``bytes_born``, ``bytes_freed``;
    ``count_first``, ``count_last``, ``bytes_first``, ``bytes_last`` (held in
    the first and the last snapshot: ``count_first + births - deaths ==
    count_last``); ``peak_count``, ``peak_bytes`` (most held in one snapshot);
    ``snapshots`` (how many held any); ``estimated`` (always True: these are
    estimates). Sorted by ``bytes_born``, then ``births``, largest first.
    """
    run = ar.run
    snaps = run.snapshots
    if snaps.empty:
        return _empty(CHURN_COLUMNS)
    numbers = snaps["snapshot"].to_numpy(dtype=np.int64)
    files = snaps["file"].to_numpy(dtype=object) if "file" in snaps else numbers
    parts = []
    keyed: dict = {}  # a run stores a profile equal to the previous one once
    for n, f in zip(numbers, files):
        s = keyed.get(f)
        if s is None:
            s = keyed_samples(run.profile(int(n)), "site", ar.attribution)
            s = keyed[f] = s[s["kind"] != "executable"]
        if s.empty:
            continue
        count = s["count"].to_numpy(dtype=np.int64)
        size = np.where(count > 0, s["bytes"].to_numpy(dtype=np.int64) // np.maximum(count, 1), 0)
        parts.append(pd.DataFrame({
            "snapshot": n, "site": s["site"].to_numpy(), "file": s["file"].to_numpy(),
            "line": s["line"].to_numpy(), "function": s["function"].to_numpy(),
            "device": s["device"].to_numpy(), "size": size, "count": count,
            "bytes": s["bytes"].to_numpy(dtype=np.int64),
        }))
    if not parts:
        return _empty(CHURN_COLUMNS)
    long = pd.concat(parts, ignore_index=True)
    keys = SITE_COLUMNS + ["device", "size"]
    # One row per (site, device, size), one column per snapshot.
    counts = long.pivot_table(index=keys, columns="snapshot", values="count", aggfunc="sum", fill_value=0)
    counts = counts.reindex(columns=numbers, fill_value=0)
    c = counts.to_numpy(dtype=np.int64)
    size = counts.index.get_level_values("size").to_numpy(dtype=np.int64)
    step = np.diff(c, axis=1)
    born = np.clip(step, 0, None).sum(axis=1)
    died = np.clip(-step, 0, None).sum(axis=1)
    fine = pd.DataFrame(
        {
            "births": born, "deaths": died, "bytes_born": born * size, "bytes_freed": died * size,
            "count_first": c[:, 0], "count_last": c[:, -1],
            "bytes_first": c[:, 0] * size, "bytes_last": c[:, -1] * size,
        },
        index=counts.index,
    )
    by_site = fine.groupby(level=SITE_COLUMNS, sort=False).sum()
    # Per site and snapshot: what it held then.
    held = long.groupby(SITE_COLUMNS + ["snapshot"], sort=False)[["count", "bytes"]].sum()
    hg = held.groupby(level=SITE_COLUMNS, sort=False)
    by_site["peak_count"] = hg["count"].max()
    by_site["peak_bytes"] = hg["bytes"].max()
    by_site["snapshots"] = (held["count"] > 0).groupby(level=SITE_COLUMNS, sort=False).sum()
    out = by_site.reset_index()
    out["estimated"] = True
    out = out.sort_values(["bytes_born", "births", "site"], ascending=[False, False, True], kind="stable")
    return out.reset_index(drop=True)[CHURN_COLUMNS]

"""A run over time: totals, devices, the top sites and executables per snapshot.

Everything is computed from the run's tables without loops over arrays x
snapshots. An array is alive in every snapshot from ``first_snapshot`` to
``last_snapshot``: its bytes are added at the first and subtracted after the
last, and a cumulative sum along the snapshots gives each site's (or device's)
live bytes at every snapshot. A plain directory of ``.prof`` files has no
per-array data: its series come from each snapshot's profile instead
(``Timeline.source == "profiles"``).

Bytes of an array are the bytes of its addressable shards (a replicated array
counts once per device), as in the snapshot's ``live_bytes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jaxmemprof.analysis.groups import keyed_samples
from jaxmemprof.analysis.runs import run_peak
from jaxmemprof.analysis.sites import NO_STACK

if TYPE_CHECKING:
    from jaxmemprof.analysis.attributed import Attributed

OTHER = "other"
# Allocator statistics carried into the timeline (docs/jax-facts.md, memory_stats).
STAT_KEYS = ("bytes_in_use", "peak_bytes_in_use", "bytes_limit", "pool_bytes", "largest_free_block_bytes")
STAT_COLUMNS = STAT_KEYS + ("fragmentation", "unattributed_bytes")

TOTALS_COLUMNS = ["snapshot", "t", "trigger", "label", "live_bytes", "buffers", "arrays", "markers_seen",
                  *STAT_COLUMNS]
DEVICES_COLUMNS = ["snapshot", "t", "device", "live_bytes", "buffers", *STAT_COLUMNS]
SITES_COLUMNS = ["snapshot", "t", "site", "live_bytes", "arrays"]
EXECUTABLES_COLUMNS = ["snapshot", "t", "executables", "code_bytes"]
MARKERS_COLUMNS = ["marker", "label", "t", "after_snapshot"]

# Most cells of one dense sites x snapshots block (int64 each).
_MAX_CELLS = 4_000_000


@dataclass(frozen=True)
class Timeline:
    """A run's memory over time; every frame is long form, one row per
    observation, sorted by snapshot.

    - ``totals``, one row per snapshot: ``snapshot, t`` (seconds since the
      run started), ``trigger, label``, ``live_bytes`` (bytes of live arrays,
      all devices), ``buffers`` (live device buffers: one per shard),
      ``arrays`` (live jax.Arrays; buffers for a directory of profiles),
      ``markers_seen`` (markers recorded before this snapshot: the step
      count when the script marks each step), then the allocator statistics
      where the backend records them (GPU, TPU; NA elsewhere):
      ``bytes_in_use, peak_bytes_in_use, bytes_limit, pool_bytes`` (summed
      over devices), ``largest_free_block_bytes`` (the smallest over
      devices), ``fragmentation`` (the worst device), ``unattributed_bytes``
      (``bytes_in_use`` minus the live array bytes on the devices that report
      it: temporaries, allocator slack, library workspaces).
    - ``devices``, one row per snapshot x device: ``snapshot, t, device,
      live_bytes, buffers`` and the same allocator columns for that device.
      ``fragmentation = (pool_bytes - bytes_in_use - largest_free_block_bytes)
      / (pool_bytes - bytes_in_use)``.
    - ``sites``, one row per snapshot x site, for the ``top_sites`` sites with
      the highest peak live bytes and, when there are more sites, ``other``
      (all the rest): ``snapshot, t, site, live_bytes, arrays``. Sites are in
      ``site_order`` (largest peak first, ``other`` last).
    - ``executables``, one row per snapshot: ``snapshot, t, executables``
      (loaded executables), ``code_bytes`` (their generated code); NA when the
      run recorded none at all.
    - ``markers``: ``marker`` (1, 2, ... in order), ``label, t,
      after_snapshot`` (the last snapshot taken before it; NA when none was).
    - ``peak_snapshot, peak_t, peak_bytes``: the first snapshot with the most
      live bytes (None, None, 0 for an empty run).
    - ``source``: ``"arrays"`` (per-array records of a run directory) or
      ``"profiles"`` (each snapshot's pprof: no per-array data).
    """

    source: str
    totals: pd.DataFrame
    devices: pd.DataFrame
    sites: pd.DataFrame
    executables: pd.DataFrame
    markers: pd.DataFrame
    site_order: tuple
    peak_snapshot: int | None
    peak_t: float | None
    peak_bytes: int


# -- per-site series ---------------------------------------------------------------


class SiteSeries:
    """Live bytes and arrays of every site at every snapshot of a run, built
    on demand for the sites asked for.

    ``snapshots``: the run's snapshot numbers in order; ``sites``: one row per
    site (``site, file, line, function, peak_bytes``), indexed by a site code
    0..S-1; ``total_bytes``/``total_arrays``: per snapshot, over all sites.
    ``matrix(codes)`` gives (bytes, arrays), two int64 arrays of shape
    (len(codes), len(snapshots)).
    """

    def __init__(self, ar: Attributed):
        run = ar.run
        self.snapshots = run.snapshots["snapshot"].to_numpy(dtype=np.int64)
        self.n = len(self.snapshots)
        self.source = "arrays" if run.has_arrays else "profiles"
        self._profiles: tuple[pd.DataFrame, pd.DataFrame] | None = None  # (devices, executables)
        if run.has_arrays:
            self._from_arrays(run, ar.site_codes)
        else:
            self._from_profiles(run, ar.attribution)

    # -- arrays (interval form)

    def _from_arrays(self, run, site_codes):
        arrays = run.arrays
        table, stack_code = site_codes
        sid = pd.to_numeric(arrays["stack_id"], errors="coerce").fillna(-1).to_numpy(dtype=np.int64)
        codes = np.array(stack_code.reindex(sid).to_numpy(dtype=float), copy=True)
        missing = np.isnan(codes)
        if missing.any():
            # Arrays without a (known) stack: one placeholder site.
            hit = np.flatnonzero(table["site"].to_numpy() == NO_STACK)
            if len(hit):
                codes[missing] = hit[0]
            else:
                table = pd.concat([table, pd.DataFrame(
                    {"site": [NO_STACK], "file": [""], "line": [0], "function": [""]})], ignore_index=True)
                codes[missing] = len(table) - 1
        self.codes = codes.astype(np.int64)
        self.pos_first, self.pos_end = array_positions(self.snapshots, arrays)
        self.flat = shards(arrays)
        self.bytes = self.flat.array_bytes
        self.table = table
        self.S = len(table)
        self.total_bytes = _series(self.pos_first, self.pos_end, self.bytes, self.n)
        self.total_arrays = _series(self.pos_first, self.pos_end, None, self.n)
        peaks = np.zeros(self.S, dtype=np.int64)
        step = max(1, _MAX_CELLS // (self.n + 1))
        for lo in range(0, self.S, step):  # blocks of sites, to bound memory
            hi = min(self.S, lo + step)
            block, _ = self._dense(np.arange(lo, hi), counts=False)
            if block.shape[1]:
                peaks[lo:hi] = block.max(axis=1)
        self.sites = table.assign(peak_bytes=peaks)

    def _dense(self, wanted: np.ndarray, counts: bool = True):
        """(bytes, arrays) of the sites ``wanted`` (site codes), one row each."""
        k = len(wanted)
        row = np.full(self.S, -1, dtype=np.int64)
        row[wanted] = np.arange(k)
        r = row[self.codes]
        keep = r >= 0
        r, pf, pe, b = r[keep], self.pos_first[keep], self.pos_end[keep], self.bytes[keep]
        width = self.n + 1
        out_b = _accumulate(r * width + pf, r * width + pe, b, k * width).reshape(k, width)[:, : self.n]
        out_a = None
        if counts:
            out_a = _accumulate(r * width + pf, r * width + pe, None, k * width).reshape(k, width)[:, : self.n]
        return out_b, out_a

    # -- profiles

    def _from_profiles(self, run, attribution):
        rows, dev_rows, exe_rows = [], [], []
        cache: dict = {}
        for i, snap in enumerate(self.snapshots.tolist()):
            path = run.profile_path(snap)
            if path not in cache:
                cache[path] = _profile_tables(run.profile(snap), attribution)
            by_site, by_device, execs = cache[path]
            rows.append(by_site.assign(pos=i))
            dev_rows.append(by_device.assign(pos=i))
            exe_rows.append(execs.assign(pos=i))
        long = _concat(rows, ["site", "file", "line", "function", "bytes", "count", "pos"])
        table = long.drop_duplicates("site")[["site", "file", "line", "function"]].reset_index(drop=True)
        code = pd.Series(np.arange(len(table)), index=table["site"])
        c = code.reindex(long["site"]).to_numpy(dtype=np.int64)
        pos = long["pos"].to_numpy(dtype=np.int64)
        self.S = len(table)
        self.table = table
        self._mb = np.zeros((self.S, self.n), dtype=np.int64)
        self._ma = np.zeros((self.S, self.n), dtype=np.int64)
        np.add.at(self._mb, (c, pos), long["bytes"].to_numpy(dtype=np.int64))
        np.add.at(self._ma, (c, pos), long["count"].to_numpy(dtype=np.int64))
        self.total_bytes = self._mb.sum(axis=0)
        self.total_arrays = self._ma.sum(axis=0)
        self.sites = table.assign(peak_bytes=self._mb.max(axis=1) if self.n else 0)
        self._profiles = (
            _concat(dev_rows, ["device", "bytes", "count", "pos"]),
            _concat(exe_rows, ["site", "file", "line", "function", "count", "bytes", "pos"]),
        )

    def matrix(self, codes) -> tuple[np.ndarray, np.ndarray]:
        codes = np.asarray(codes, dtype=np.int64)
        if self._profiles is not None:
            return self._mb[codes], self._ma[codes]
        return self._dense(codes)

    # -- devices

    def device_series(self) -> pd.DataFrame:
        """Long form: ``pos, device, live_bytes, buffers`` (every snapshot x
        every device seen)."""
        if self._profiles is not None:
            dev = self._profiles[0]
            dev = dev[dev["device"] != ""]
            g = dev.groupby(["device", "pos"], sort=True)[["bytes", "count"]].sum()
            names = sorted(dev["device"].unique())
            idx = pd.MultiIndex.from_product([names, range(self.n)], names=["device", "pos"])
            g = g.reindex(idx, fill_value=0).reset_index()
            return g.rename(columns={"bytes": "live_bytes", "count": "buffers"})
        f = self.flat
        names, dcode = f.device_names, f.device_codes
        if not len(names):
            return pd.DataFrame({"pos": pd.Series(dtype=np.int64), "device": pd.Series(dtype=object),
                                 "live_bytes": pd.Series(dtype=np.int64), "buffers": pd.Series(dtype=np.int64)})
        owner = f.owner
        width = self.n + 1
        D = len(names)
        start = dcode * width + self.pos_first[owner]
        end = dcode * width + self.pos_end[owner]
        live = _accumulate(start, end, f.shard_bytes, D * width).reshape(D, width)[:, : self.n]
        bufs = _accumulate(start, end, None, D * width).reshape(D, width)[:, : self.n]
        return pd.DataFrame({
            "pos": np.tile(np.arange(self.n), D),
            "device": np.repeat(np.asarray(names, dtype=object), self.n),
            "live_bytes": live.ravel(),
            "buffers": bufs.ravel(),
        })

    def profile_executables(self) -> pd.DataFrame | None:
        """For a directory of profiles: executables per snapshot position and
        site (``pos, site, file, line, function, count, bytes``); None for a
        run with arrays."""
        return None if self._profiles is None else self._profiles[1]


def _concat(frames, columns) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype=object if c in ("site", "file", "function", "device") else np.int64)
                             for c in columns})
    return pd.concat(frames, ignore_index=True)


def _profile_tables(profile, attribution):
    """One profile's buffer bytes per site and per device, and its
    executables per site."""
    samples = keyed_samples(profile, "site", attribution)
    is_exe = (samples["kind"] == "executable").to_numpy()
    buf = samples[~is_exe]
    by_site = buf.groupby(["site", "file", "line", "function"], sort=False)[["bytes", "count"]].sum().reset_index()
    by_device = buf.groupby("device", sort=False)[["bytes", "count"]].sum().reset_index()
    execs = samples[is_exe].groupby(["site", "file", "line", "function"], sort=False)[["count", "bytes"]].sum()
    execs = execs.reset_index()
    return by_site, by_device, execs


def array_positions(snapshots: np.ndarray, arrays: pd.DataFrame):
    """Each array's live range as positions in ``snapshots``: alive at
    positions pos_first <= p < pos_end (empty when it was never seen in a
    snapshot that is still there)."""
    first = pd.to_numeric(arrays["first_snapshot"], errors="coerce").fillna(0).to_numpy(dtype=np.int64)
    last = pd.to_numeric(arrays["last_snapshot"], errors="coerce").fillna(-1).to_numpy(dtype=np.int64)
    pf = np.searchsorted(snapshots, first, side="left")
    pe = np.searchsorted(snapshots, last, side="right")
    return pf, np.maximum(pe, pf)


@dataclass
class _Flat:
    array_bytes: np.ndarray  # per array: bytes of its shards
    owner: np.ndarray  # per shard: its array's row
    shard_bytes: np.ndarray
    device_codes: np.ndarray
    device_names: list


def shards(arrays: pd.DataFrame) -> _Flat:
    """Flatten the per-shard tuples (bytes and device of every shard)."""
    sb = arrays["shard_bytes"].tolist()
    dv = arrays["devices"].tolist()
    n = len(sb)
    lens = np.fromiter(map(len, sb), dtype=np.int64, count=n)
    dlens = np.fromiter(map(len, dv), dtype=np.int64, count=n)
    if (lens != dlens).any():  # a damaged record: keep the shards both lists describe
        m = np.minimum(lens, dlens)
        sb = [t[:k] for t, k in zip(sb, m.tolist())]
        dv = [t[:k] for t, k in zip(dv, m.tolist())]
        lens = m
    total = int(lens.sum())
    shard_bytes = np.fromiter(chain.from_iterable(sb), dtype=np.int64, count=total)
    devices = list(chain.from_iterable(dv))
    codes, names = pd.factorize(pd.Series(devices, dtype=object), sort=True)
    owner = np.repeat(np.arange(n), lens)
    array_bytes = np.bincount(owner, weights=shard_bytes, minlength=n).astype(np.int64) if total else np.zeros(n, np.int64)
    # No shard information at all: fall back to the array's logical size.
    none = lens == 0
    if none.any():
        nb = pd.to_numeric(arrays["nbytes"], errors="coerce").fillna(0).to_numpy(dtype=np.int64)
        array_bytes[none] = nb[none]
    return _Flat(array_bytes, owner, shard_bytes, codes.astype(np.int64), [str(x) for x in names])


def _accumulate(start: np.ndarray, end: np.ndarray, weights, size: int) -> np.ndarray:
    """+w at ``start``, -w at ``end``, cumulated along each row (rows of
    width n+1 laid end to end: every range ends in its own row)."""
    if weights is None:
        d = np.bincount(start, minlength=size).astype(np.int64) - np.bincount(end, minlength=size).astype(np.int64)
    else:
        w = np.asarray(weights, dtype=np.int64)
        # Float bincount is exact below 2**53 bytes per cell.
        cells = np.bincount(start, weights=w, minlength=size) - np.bincount(end, weights=w, minlength=size)
        d = np.rint(cells).astype(np.int64)
    return np.cumsum(d) if size else d


def _series(pf, pe, weights, n) -> np.ndarray:
    return _accumulate(pf, pe, weights, n + 1)[:n]


# -- markers -----------------------------------------------------------------------


def placed_markers(run) -> pd.DataFrame:
    """``marker, label, t, after_snapshot`` in the order recorded."""
    m = run.markers
    if m is None or m.empty:
        return pd.DataFrame({"marker": pd.Series(dtype=np.int64), "label": pd.Series(dtype=object),
                             "t": pd.Series(dtype=float), "after_snapshot": pd.Series(dtype="Int64")})
    m = m.sort_values("marker" if "marker" in m else "t", kind="stable")
    return pd.DataFrame({
        "marker": np.arange(1, len(m) + 1, dtype=np.int64),
        "label": m["label"].astype(object).to_numpy(),
        "t": pd.to_numeric(m["t"], errors="coerce").to_numpy(dtype=float),
        "after_snapshot": pd.to_numeric(m["after_snapshot"], errors="coerce").astype("Int64").to_numpy(),
    })


def markers_seen(run) -> np.ndarray:
    """Per snapshot of ``run.snapshots``: how many markers were recorded
    before it (a marker after snapshot k comes before snapshot k+1; one with no
    snapshot before it comes before all)."""
    snaps = run.snapshots["snapshot"].to_numpy(dtype=np.int64)
    m = run.markers
    if m is None or m.empty:
        return np.zeros(len(snaps), dtype=np.int64)
    after = pd.to_numeric(m["after_snapshot"], errors="coerce").fillna(0).to_numpy(dtype=np.int64)
    after = np.sort(after)
    return np.searchsorted(after, snaps, side="left").astype(np.int64)


# -- allocator statistics -------------------------------------------------------------


def _stats_by_device(run) -> pd.DataFrame:
    """``snapshot, device`` and the STAT_KEYS columns (nullable Int64; -1 and
    missing values are NA) and ``fragmentation``."""
    ms = run.memory_stats
    cols = {"snapshot": pd.Series(dtype=np.int64), "device": pd.Series(dtype=object)}
    cols.update({k: pd.Series(dtype="Int64") for k in STAT_KEYS})
    if ms is None or ms.empty:
        out = pd.DataFrame(cols)
        out["fragmentation"] = pd.Series(dtype=float)
        return out
    ms = ms[ms["key"].isin(STAT_KEYS)]
    value = pd.to_numeric(ms["value"], errors="coerce")
    ms = ms.assign(value=value.where(value >= 0))
    wide = ms.pivot_table(index=["snapshot", "device"], columns="key", values="value", aggfunc="last", dropna=False)
    wide = wide.reindex(columns=list(STAT_KEYS)).reset_index()
    wide["snapshot"] = wide["snapshot"].astype(np.int64)
    wide["device"] = wide["device"].astype(str)
    for k in STAT_KEYS:
        wide[k] = wide[k].round().astype("Int64")
    wide.columns.name = None
    wide["fragmentation"] = _fragmentation(wide)
    return wide


def _fragmentation(df: pd.DataFrame) -> pd.Series:
    pool = df["pool_bytes"].astype("Float64")
    used = df["bytes_in_use"].astype("Float64")
    free_block = df["largest_free_block_bytes"].astype("Float64")
    free = pool - used
    frag = (free - free_block) / free
    frag = frag.where(free > 0)
    return frag.astype(float).clip(lower=0.0, upper=1.0)


# -- the timeline ------------------------------------------------------------------


def timeline(ar: Attributed, top_sites: int | None = None) -> Timeline:
    """The timeline of the attributed run (see :class:`Timeline`), naming
    ``top_sites`` sites (default: the options'); made once per attributed
    run and ``top_sites``."""
    top_sites = ar.options.top_sites if top_sites is None else top_sites
    made = ar.timelines.get(top_sites)
    if made is None:
        made = ar.timelines[top_sites] = _timeline(ar, top_sites)
    return made


def _timeline(ar: Attributed, top_sites: int) -> Timeline:
    run = ar.run
    snaps = run.snapshots
    series = ar.series
    n = series.n
    snap_no = series.snapshots
    t = snaps["t"].to_numpy(dtype=float)
    seen = markers_seen(run)

    # Devices: live bytes per device from the arrays (or profiles), joined
    # with that device's allocator statistics.
    dev = series.device_series()
    dev = dev.assign(snapshot=snap_no[dev["pos"].to_numpy(dtype=np.int64)] if len(dev) else np.zeros(0, np.int64))
    stats = _stats_by_device(run)
    stats = stats[stats["snapshot"].isin(snap_no)]
    devices = dev.drop(columns=["pos"]).merge(stats, on=["snapshot", "device"], how="outer")
    devices["live_bytes"] = devices["live_bytes"].fillna(0).astype(np.int64)
    devices["buffers"] = devices["buffers"].fillna(0).astype(np.int64)
    devices["unattributed_bytes"] = (devices["bytes_in_use"] - devices["live_bytes"]).astype("Int64")
    devices = devices.merge(pd.DataFrame({"snapshot": snap_no, "t": t}), on="snapshot", how="left")
    devices = devices.sort_values(["snapshot", "device"], kind="stable").reset_index(drop=True)[DEVICES_COLUMNS]

    # Totals per snapshot.
    totals = pd.DataFrame({
        "snapshot": snap_no,
        "t": t,
        "trigger": snaps["trigger"].to_numpy(dtype=object),
        "label": pd.Series([None if pd.isna(v) else str(v) for v in snaps["label"].tolist()], dtype=object),
        "live_bytes": snaps["live_bytes"].to_numpy(dtype=np.int64),
        "buffers": snaps["buffers"].to_numpy(dtype=np.int64),
        "arrays": snaps["arrays"].to_numpy(dtype=np.int64) if series.source == "arrays" else series.total_arrays,
        "markers_seen": seen,
    })
    with_stats = devices[devices["bytes_in_use"].notna() | devices["pool_bytes"].notna()
                         | devices["bytes_limit"].notna()]
    if len(with_stats):
        g = with_stats.groupby("snapshot")
        agg = pd.DataFrame({
            "bytes_in_use": g["bytes_in_use"].sum(min_count=1),
            "peak_bytes_in_use": g["peak_bytes_in_use"].sum(min_count=1),
            "bytes_limit": g["bytes_limit"].sum(min_count=1),
            "pool_bytes": g["pool_bytes"].sum(min_count=1),
            "largest_free_block_bytes": g["largest_free_block_bytes"].min(),
            "fragmentation": g["fragmentation"].max(),
            "unattributed_bytes": g["unattributed_bytes"].sum(min_count=1),
        }).reset_index()
        totals = totals.merge(agg, on="snapshot", how="left")
    for c in STAT_COLUMNS:
        if c not in totals:
            totals[c] = np.full(n, np.nan) if c == "fragmentation" else pd.array([pd.NA] * n, dtype="Int64")
        elif c == "fragmentation":
            totals[c] = totals[c].astype(float)
        else:
            totals[c] = totals[c].astype("Int64")
    totals = totals[TOTALS_COLUMNS]

    # The top sites by peak live bytes, and everything else as "other".
    ranked = series.sites.sort_values(["peak_bytes", "site"], ascending=[False, True], kind="stable")
    ranked = ranked[ranked["peak_bytes"] > 0] if (ranked["peak_bytes"] > 0).any() else ranked
    chosen = ranked.index.to_numpy()[: max(0, top_sites)]
    names = ranked["site"].tolist()[: len(chosen)]
    mb, ma = series.matrix(chosen) if len(chosen) else (np.zeros((0, n), np.int64), np.zeros((0, n), np.int64))
    if series.S > len(chosen):
        mb = np.vstack([mb, series.total_bytes - mb.sum(axis=0)])
        ma = np.vstack([ma, series.total_arrays - ma.sum(axis=0)])
        names = names + [OTHER]
    k = len(names)
    sites = pd.DataFrame({
        "snapshot": np.tile(snap_no, k),
        "t": np.tile(t, k),
        "site": np.repeat(np.asarray(names, dtype=object), n),
        "live_bytes": mb.ravel().astype(np.int64),
        "arrays": ma.ravel().astype(np.int64),
    })
    order = np.argsort(np.tile(np.arange(n), k), kind="stable")
    sites = sites.iloc[order].reset_index(drop=True)

    executables = _executables_series(run, series, snap_no, t)

    peak = run_peak(totals)
    peak_snapshot, peak_t, peak_bytes = (None, None, 0) if peak is None else (peak.snapshot, peak.t, peak.live_bytes)

    return Timeline(
        source=series.source, totals=totals, devices=devices, sites=sites, executables=executables,
        markers=placed_markers(run), site_order=tuple(names), peak_snapshot=peak_snapshot,
        peak_t=peak_t, peak_bytes=peak_bytes,
    )


def _executables_series(run, series: SiteSeries, snap_no, t) -> pd.DataFrame:
    n = len(snap_no)
    prof = series.profile_executables()
    count: np.ndarray  # per snapshot
    code: np.ndarray
    if prof is not None:
        count = np.bincount(prof["pos"].to_numpy(dtype=np.int64), weights=prof["count"].to_numpy(dtype=float), minlength=n)
        code = np.bincount(prof["pos"].to_numpy(dtype=np.int64), weights=prof["bytes"].to_numpy(dtype=float), minlength=n)
        recorded = len(prof) > 0
    else:
        ex = run.executables
        recorded = ex is not None and not ex.empty
        count = np.zeros(n)
        code = np.zeros(n)
        if recorded:
            ex_snap = pd.to_numeric(ex["snapshot"], errors="coerce").fillna(-1).to_numpy(dtype=np.int64)
            pos = np.searchsorted(snap_no, ex_snap)
            ok = pos < n
            ok[ok] = snap_no[pos[ok]] == ex_snap[ok]  # rows of snapshots still in the run
            count = np.bincount(pos[ok], weights=pd.to_numeric(ex["count"]).to_numpy(dtype=float)[ok], minlength=n)
            code = np.bincount(pos[ok], weights=pd.to_numeric(ex["code_bytes"]).to_numpy(dtype=float)[ok], minlength=n)
    if recorded:
        count = pd.array(np.rint(count).astype(np.int64), dtype="Int64")
        code = pd.array(np.rint(code).astype(np.int64), dtype="Int64")
    else:
        count = pd.array([pd.NA] * n, dtype="Int64")
        code = pd.array([pd.NA] * n, dtype="Int64")
    return pd.DataFrame({"snapshot": snap_no, "t": t, "executables": count, "code_bytes": code})[EXECUTABLES_COLUMNS]

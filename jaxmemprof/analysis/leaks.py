"""Leaks and recompilations: what keeps growing over a run.

A *leak* is a site whose live bytes grow steadily across the run. "The last
snapshot holds more than the first" is not enough (a model loaded half-way, a
cache warming up, one large temporary at the wrong moment), so each site's
per-snapshot series is put to a trend test:

- **Mann-Kendall**: S = sum over pairs i < j of sign(x_j - x_i), its variance
  corrected for ties, var = (n(n-1)(2n+5) - sum_t t(t-1)(2t+5)) / 18, and the
  one-sided p-value of an increasing trend from the normal approximation with
  continuity correction, p = erfc(z / sqrt 2) / 2, z = (S - 1) / sqrt(var).
  Kendall's tau-b, S / sqrt((n0 - n1) n0) (n0 = n(n-1)/2 pairs, n1 of them
  tied), says how monotone the growth is (1: every later snapshot holds
  more).
- **Theil-Sen**: the growth rate is the median of the pairwise slopes
  (x_j - x_i) / (t_j - t_i), robust to outliers; against time (bytes per
  second) and, when the script marks its steps with ``jaxmemprof.mark``,
  against the number of markers seen before each snapshot, from the first
  marker on (bytes per step; before it the program sets up). Where the run
  took snapshots at fixed steps (capture/steps.py), those are the series from
  the first step on, so that a run repeated reads the same points.

The tests look at each site's *steady phase* only: from the first step when
the script marks its steps, else from its last level shift (a split of the
series into two constant levels that explains at least 80 % of its variance,
found again in what follows while one does; a steady ramp never explains
more than 75 %). A set-up that rises and then stays flat is a shift between
phases, not growth; a leak is growth within the steady phase, and its rate,
first bytes and snapshots are that phase's.

A site is reported when p < ``alpha`` (0.01), tau-b >= ``min_tau`` (0.5), the
growth is positive, it grew at ``min_increases`` (3) or more snapshots, and it
is still growing at the end: the last third of its snapshots rises above the
first two thirds (their 90th percentile: a transient spike, such as a snapshot
taken while a call holds old and new state, does not hide a leak), and the
growth *continues* (``continues``): the series' floor (each point the least of
it and the next two) rises over at least 6 of 8 equal spans of the steady
phase's steps (else its snapshots' positions), and never gives back more
than half of its rise before rising again. A single jump, however
significant, is not a leak, nor are two or three level shifts (a model built
per section), a cache that filled up early and then stayed flat, or a
sawtooth that resets every epoch. The ``exit`` snapshot is left out (a
script's main() has returned by then), and so are sites whose live bytes
never reach ``min_bytes`` (1 KiB).

A *recompilation suspect* is a function compiled into several executables at
one site: each new input shape, dtype or static argument compiles it again.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jaxmemprof.analysis.counters import stats_by_device
from jaxmemprof.analysis.sites import NO_STACK
from jaxmemprof.analysis.timeline import markers_seen

if TYPE_CHECKING:
    from jaxmemprof.analysis.attributed import Attributed

KiB = 1024

LEAK_COLUMNS = [
    "site", "file", "line", "function",
    "growth_bytes_per_s", "growth_bytes_per_step",
    "live_bytes_first", "live_bytes_last", "arrays_first", "arrays_last",
    "p_value", "tau",
    "projected_bytes_after", "projected_growth_bytes", "projected_steps", "projected_seconds",
    "projected_share_of_peak", "snapshots_used", "device_limit_bytes", "steps_to_limit",
]
RECOMPILE_COLUMNS = [
    "site", "file", "line", "function", "name",
    "first_snapshot", "first_count", "last_count", "max_count", "growth",
    "first_code_bytes", "last_code_bytes", "new_after_setup", "suspect",
]
REJIT_COLUMNS = ["site", "file", "line", "function", "name", "functions", "after_setup", "suspect"]
# Without markers or jit probe data, the first tenth of the snapshots' time span counts as the setup.
SETUP_SHARE = 0.1
# A recompilation suspect's new executables come over at least this share of the time after the setup.
SPREAD_SHARE = 0.25
# ... and new ones still come after this share of the program's progress (steps, else snapshots) since.
STILL_COMING = 0.5


# -- statistics --------------------------------------------------------------------


def mann_kendall(x: np.ndarray) -> pd.DataFrame:
    """Mann-Kendall trend test of each row of ``x`` (series x snapshots).

    Returns one row per series: ``s`` (the S statistic), ``var`` (its
    variance, corrected for ties), ``tau`` (Kendall's tau-b against time),
    ``p_value`` (one-sided: the probability of an S this large without an
    increasing trend; 1.0 for a constant series)."""
    x = np.asarray(x)
    k, m = x.shape if x.ndim == 2 else (1, x.shape[0])
    x = x.reshape(k, m)
    s = np.zeros(k, dtype=np.int64)
    for i in range(m - 1):  # one vectorised pass per snapshot, across all series
        s += np.sign(x[:, i + 1:] - x[:, i:i + 1]).sum(axis=1, dtype=np.int64)
    tie_var: np.ndarray = np.zeros(k)
    tie_pairs: np.ndarray = np.zeros(k)
    if m and k:
        srt = np.sort(x, axis=1)
        change = np.ones((k, m), dtype=bool)
        change[:, 1:] = srt[:, 1:] != srt[:, :-1]
        starts = np.flatnonzero(change.ravel())
        lengths = np.diff(np.append(starts, k * m)).astype(float)
        rows = starts // m
        tie_var = np.bincount(rows, weights=lengths * (lengths - 1) * (2 * lengths + 5), minlength=k)
        tie_pairs = np.bincount(rows, weights=lengths * (lengths - 1) / 2, minlength=k)
    n0 = m * (m - 1) / 2
    var = (m * (m - 1) * (2 * m + 5) - tie_var) / 18.0
    denom = np.sqrt(np.maximum(n0 - tie_pairs, 0.0) * n0)
    with np.errstate(divide="ignore", invalid="ignore"):
        tau = np.where(denom > 0, s / denom, 0.0)
    p = []
    for si, vi in zip(s.tolist(), var.tolist()):  # one per series
        if vi <= 0:  # a constant series
            p.append(1.0)
            continue
        z = (si - 1 if si > 0 else si + 1 if si < 0 else 0) / math.sqrt(vi)  # continuity-corrected
        p.append(0.5 * math.erfc(z / math.sqrt(2.0)))
    return pd.DataFrame({"s": s, "var": var, "tau": tau, "p_value": np.array(p, dtype=float)})


def theil_sen(x: np.ndarray, t: np.ndarray, *, max_pairs: int = 20_000, seed: int = 0) -> np.ndarray:
    """Theil-Sen slope of each row of ``x`` against ``t``: the median of the
    slopes between all pairs of points with different ``t`` (a fixed random
    sample of ``max_pairs`` pairs when there are more). NaN when no pair
    has different ``t``."""
    x = np.asarray(x, dtype=float)
    x = x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)
    t = np.asarray(t, dtype=float)
    m = len(t)
    if m * (m - 1) // 2 <= max_pairs:
        i, j = np.triu_indices(m, 1)
    else:
        rng = np.random.default_rng(seed)
        a = rng.integers(0, m, size=2 * max_pairs)
        b = rng.integers(0, m, size=2 * max_pairs)
        ok = a != b
        a, b = a[ok][:max_pairs], b[ok][:max_pairs]
        i, j = np.minimum(a, b), np.maximum(a, b)
    dt = t[j] - t[i]
    keep = dt != 0
    i, j, dt = i[keep], j[keep], dt[keep]
    out = np.full(x.shape[0], np.nan)
    if not len(dt):
        return out
    block = max(1, 2_000_000 // len(dt))
    for lo in range(0, x.shape[0], block):  # bounded memory: blocks of series
        xb = x[lo:lo + block]
        out[lo:lo + block] = np.median((xb[:, j] - xb[:, i]) / dt, axis=1)
    return out


def steady_start(x: np.ndarray, *, min_length: int = 6, explained: float = 0.8) -> np.ndarray:
    """Where each row's steady phase begins. A level shift (a set-up that
    ends in a flat state, training after it) is a split of the row into two
    runs of constant level that explains at least ``explained`` of its
    variance; a steady ramp never does (at best 3/4). The later run is split
    again while that holds and it keeps ``min_length`` points; the start of
    what is left, or 0 (the whole row)."""
    x = np.asarray(x, dtype=float)
    out = np.zeros(x.shape[0], dtype=np.int64)
    for r in range(x.shape[0]):
        start = 0
        while x.shape[1] - start >= 2 * min_length:
            split = _level_shift(x[r, start:], min_length, explained)
            if split is None:
                break
            start += split
        out[r] = start
    return out


def _level_shift(x: np.ndarray, min_length: int, explained: float):
    """The split of ``x`` into two constant levels with the least squared
    error, the later keeping ``min_length`` points, when it explains at
    least ``explained`` of the variance; else None."""
    m = len(x)
    d = x - x.mean()  # exact sums for large byte counts
    total = float(np.dot(d, d))
    if total <= 0:
        return None
    c = np.cumsum(d)[:-1]
    left = np.arange(1, m, dtype=float)  # points before each split
    gain = (c ** 2 / left + c ** 2 / (m - left))[: m - min_length]  # what two levels explain
    k = int(np.argmax(gain))
    return k + 1 if gain[k] >= explained * total else None


# -- leaks -------------------------------------------------------------------------


def _empty(columns, dtypes=None) -> pd.DataFrame:
    dtypes = dtypes or {}
    return pd.DataFrame({c: pd.Series(dtype=dtypes.get(c, object)) for c in columns})


_LEAK_DTYPES = {
    "line": np.int64, "growth_bytes_per_s": float, "growth_bytes_per_step": float,
    "live_bytes_first": np.int64, "live_bytes_last": np.int64, "arrays_first": np.int64, "arrays_last": np.int64,
    "p_value": float, "tau": float, "projected_bytes_after": np.int64, "projected_growth_bytes": np.int64,
    "projected_steps": "Int64", "projected_seconds": float, "projected_share_of_peak": float,
    "snapshots_used": np.int64, "device_limit_bytes": "Int64", "steps_to_limit": "Int64",
}


def floor_of(x: np.ndarray, width: int = 3) -> np.ndarray:
    """The series' floor: each point the least of it and the ``width`` - 1
    after it. A transient spike (a snapshot taken while a call holds old and
    new state) is not in it; a fall that lasts (a reset) is."""
    x = np.asarray(x, dtype=float)
    out = x.copy()
    for k in range(1, width):
        out[:-k] = np.minimum(out[:-k], x[k:])
    return out


def continues(x: np.ndarray, axis: np.ndarray, *, parts: int = 8, min_share: float = 0.75,
              max_give_back: float = 0.5) -> bool:
    """Whether the growth of series ``x`` continues across its steady phase
    (``axis``: the step number, or the position, of each point): its floor
    (``floor_of``) rises over at least ``min_share`` of ``parts`` equal
    spans of the axis (fewer where there are fewer points: one span between
    each two), and never falls back by more than ``max_give_back`` of its
    rise before it rises again. One, two or three level shifts, a slow start that then stays flat,
    and a sawtooth reset every epoch all fail it; a steady leak passes."""
    x, axis = np.asarray(x, dtype=float), np.asarray(axis, dtype=float)
    floor = floor_of(x)
    # A fall at the end that nothing follows (the program letting go as it
    # ends) is no reset: the series up to its highest floor.
    end = len(floor) - int(np.argmax(floor[::-1])) if len(floor) else 0
    floor, axis = floor[:end], axis[:end]
    if len(floor) < 2:
        return False
    n = min(parts, len(floor) - 1)
    edges = np.linspace(axis[0], axis[-1], n + 1)
    # The floor at each edge: at the last point at or before it.
    at = floor[np.clip(np.searchsorted(axis, edges, side="right") - 1, 0, len(floor) - 1)]
    rising = int((np.diff(at) > 0).sum())
    if rising < math.ceil(min_share * n - 1e-9):
        return False
    rise = float(floor.max() - floor.min())
    give_back = float((np.maximum.accumulate(floor) - floor).max())
    return rise > 0 and give_back <= max_give_back * rise


def leaks(ar: Attributed, *, steps: int | None = None, min_bytes: int = KiB,
          alpha: float = 0.01, min_tau: float = 0.5, min_snapshots: int = 6, min_increases: int = 3,
          parts: int = 8, min_share: float = 0.75, max_give_back: float = 0.5,
          max_points: int = 500, max_pairs: int = 20_000) -> pd.DataFrame:
    """Sites whose live bytes grow steadily over the attributed run (see the
    module docstring for the tests), largest projected growth first;
    ``steps``: how far ahead to project (default: the options'). Columns:

    - ``site, file, line, function``: where the growing arrays are made;
    - ``growth_bytes_per_s``: Theil-Sen slope against time;
    - ``growth_bytes_per_step``: Theil-Sen slope against the number of
      markers seen before each snapshot, over the snapshots from the first
      marker on (NaN when the run has no markers);
    - ``live_bytes_first``, ``live_bytes_last``: the site's live bytes at the
      first and the last snapshot used; ``arrays_first``, ``arrays_last``:
      its live arrays (buffers, for a directory of profiles) at each (as many
      at the last as at the first: the arrays grew in size, not in number);
    - ``p_value`` (one-sided Mann-Kendall), ``tau`` (Kendall's tau-b);
    - ``projected_bytes_after``: the site's live bytes projected after
      ``steps`` more steps (``projected_steps``) when the run has markers,
      else after as long again as the snapshots used span
      (``projected_seconds``); ``projected_growth_bytes``: that minus
      ``live_bytes_last``; ``projected_share_of_peak``: the growth as a
      fraction of the run's peak live bytes;
    - ``device_limit_bytes``: the run's devices' bytes (``device_limit``),
      where known: the projection stops there; ``steps_to_limit``: steps
      until they are full at the site's rate (0: the run ran out, and the
      projected growth is what the site held then, less one step's);
    - ``snapshots_used``: snapshots in the series (the tests use at most
      ``max_points`` of them, evenly spaced; Theil-Sen at most ``max_pairs``
      pairs).
    """
    run, series = ar.run, ar.series
    steps = ar.options.steps if steps is None else steps
    snaps = run.snapshots
    trigger = snaps["trigger"].to_numpy(dtype=object)
    used = trigger != "exit"
    # Where the program marks its steps, its snapshots at fixed steps
    # (capture/steps.py) are the series from the first step on: the timed
    # ones among them (a long run's) land at moments that differ from run
    # to run, and would change the answer.
    keyed = trigger == "step"
    if keyed.sum() >= min_snapshots:
        used &= keyed | (markers_seen(run) == 0)
    if used.sum() < max(min_snapshots, 2):
        return _empty(LEAK_COLUMNS, _LEAK_DTYPES)
    candidates = series.sites.index.to_numpy()[series.sites["peak_bytes"].to_numpy() >= min_bytes]
    if not len(candidates):
        return _empty(LEAK_COLUMNS, _LEAK_DTYPES)
    mb, ma = series.matrix(candidates)
    at_end = mb[:, -1]  # at the run's last snapshot (an out-of-memory's, where it ran out)
    mb, ma = mb[:, used], ma[:, used]
    big = mb.max(axis=1) >= min_bytes
    candidates, mb, ma, at_end = candidates[big], mb[big], ma[big], at_end[big]
    if not len(candidates):
        return _empty(LEAK_COLUMNS, _LEAK_DTYPES)

    t = snaps["t"].to_numpy(dtype=float)[used]
    step_no = markers_seen(run)[used]
    n = mb.shape[1]
    pts = np.unique(np.rint(np.linspace(0, n - 1, min(n, max_points))).astype(np.int64))
    xs = mb[:, pts]

    # Per step, from the first step on: before it the program sets up (its
    # parameters appear at once), which is no step's growth.
    sx = step_no[pts]
    stepping = sx >= 1
    has_steps = run.markers is not None and stepping.sum() >= 2 and np.ptp(sx[stepping]) > 0
    per_step = (theil_sen(xs[:, stepping], sx[stepping], max_pairs=max_pairs) if has_steps
                else np.full(len(candidates), np.nan))
    # The tests look at the steady phase only: from the first step when the
    # program marks its steps, else from each site's level shift (a set-up
    # that ends in a flat state is a shift between phases, not growth).
    if has_steps:
        starts = np.full(len(candidates), int(np.argmax(stepping)), dtype=np.int64)
    else:
        starts = steady_start(xs, min_length=min_snapshots)
    mk = pd.DataFrame(index=range(len(candidates)), columns=["p_value", "tau"], dtype=float)
    per_s = np.full(len(candidates), np.nan)
    increases = np.zeros(len(candidates), dtype=np.int64)
    late_highs = np.zeros(len(candidates), dtype=bool)
    first_used = np.zeros(len(candidates), dtype=np.int64)
    for k in np.unique(starts):
        rows = np.flatnonzero(starts == k)
        seg, seg_t = xs[rows, k:], t[pts][k:]
        tested = mann_kendall(seg)
        mk.loc[rows, "p_value"] = tested["p_value"].to_numpy()
        mk.loc[rows, "tau"] = tested["tau"].to_numpy()
        per_s[rows] = theil_sen(seg, seg_t, max_pairs=max_pairs)
        full = mb[rows, pts[k]:]
        increases[rows] = (np.diff(full, axis=1) > 0).sum(axis=1)
        cut = max(1, (2 * full.shape[1]) // 3)
        # Still growing at the end: the last third goes above the first two thirds
        # (their 90th percentile, so that one transient spike does not hide a leak).
        late_highs[rows] = (full[:, cut:].max(axis=1, initial=np.iinfo(np.int64).min)
                            > np.percentile(full[:, :cut], 90, axis=1))
        first_used[rows] = pts[k]
    growth = np.where(np.isnan(per_step), per_s, per_step)
    axis = sx if has_steps else np.arange(len(pts))  # steps, else snapshots (periodic: time, bunched: not)
    persists = np.array([continues(xs[r, starts[r]:], axis[starts[r]:], parts=parts, min_share=min_share,
                                   max_give_back=max_give_back) for r in range(len(candidates))], dtype=bool)
    keep = ((mk["p_value"].to_numpy() < alpha) & (mk["tau"].to_numpy() >= min_tau) & (growth > 0)
            & (per_s > 0) & (increases >= min_increases) & late_highs & persists)
    if not keep.any():
        return _empty(LEAK_COLUMNS, _LEAK_DTYPES)

    span = float(t[-1] - t[0]) if n > 1 else 0.0
    last = mb[:, -1]
    if has_steps:
        proj_growth = per_step * steps
        proj_steps, proj_seconds = steps, np.nan
    else:
        proj_growth = per_s * span
        proj_steps, proj_seconds = pd.NA, span
    proj_growth = np.rint(np.maximum(np.nan_to_num(proj_growth), 0)).astype(np.int64)
    peak = int(snaps["live_bytes"].to_numpy()[used].max()) if n else 0
    # No leak grows past the devices it lives on: the projection stops where
    # the run's devices are full (their bytes from the options, else from
    # the counters the run recorded), and says in how many steps that is; a
    # run that ran out already is full.
    limit = device_limit(ar)
    to_limit = pd.array([pd.NA] * len(candidates), dtype="Int64")
    if limit is not None:
        ran_out = bool((trigger == "oom").any())
        room = 0 if ran_out else max(limit - int(snaps["live_bytes"].max()), 0)
        proj_growth = np.minimum(proj_growth, room)
        if ran_out and has_steps:  # what fixing it frees: all it held when the device ran out, but one step's
            proj_growth = np.maximum(at_end - np.rint(np.nan_to_num(np.maximum(per_step, 0))), 0).astype(np.int64)
        if has_steps:
            rate = np.where(per_step > 0, per_step, np.nan)
            to_limit = pd.array([pd.NA if r != r else int(np.ceil(room / r)) for r in rate], dtype="Int64")
    table = series.sites.loc[candidates]
    out = pd.DataFrame({
        "site": table["site"].to_numpy(dtype=object),
        "file": table["file"].to_numpy(dtype=object),
        "line": table["line"].to_numpy(dtype=np.int64),
        "function": table["function"].to_numpy(dtype=object),
        "growth_bytes_per_s": per_s,
        "growth_bytes_per_step": per_step,
        "live_bytes_first": mb[np.arange(len(candidates)), first_used].astype(np.int64),
        "live_bytes_last": last.astype(np.int64),
        "arrays_first": ma[np.arange(len(candidates)), first_used].astype(np.int64),
        "arrays_last": ma[:, -1].astype(np.int64),
        "p_value": mk["p_value"].to_numpy(),
        "tau": mk["tau"].to_numpy(),
        "projected_bytes_after": (last + proj_growth).astype(np.int64),
        "projected_growth_bytes": proj_growth,
        "projected_steps": pd.array([proj_steps] * len(candidates), dtype="Int64"),
        "projected_seconds": np.full(len(candidates), proj_seconds, dtype=float),
        "projected_share_of_peak": proj_growth / peak if peak else np.full(len(candidates), np.nan),
        "snapshots_used": (n - first_used).astype(np.int64),
        "device_limit_bytes": pd.array([limit] * len(candidates), dtype="Int64"),
        "steps_to_limit": to_limit,
    })[keep]
    out = out.sort_values(["projected_growth_bytes", "growth_bytes_per_s", "site"],
                          ascending=[False, False, True], kind="stable")
    return out.reset_index(drop=True)[LEAK_COLUMNS]


def device_limit(ar: Attributed) -> int | None:
    """The bytes of the run's devices together (its live bytes are summed
    over them): ``report --device-memory`` for each, else each device's
    limit in the counters it recorded (``bytes_limit``); None where neither
    is known (a CPU run without the option)."""
    stats = stats_by_device(ar.run)
    if ar.options.device_memory is not None:
        listed = ar.run.manifest.get("devices")
        devices = max(len(stats), len(listed) if isinstance(listed, list) else 0, 1)
        return int(ar.options.device_memory) * devices
    limits = [s["bytes_limit"] for s in stats.values() if s.get("bytes_limit")]
    return int(sum(limits)) if limits else None


# -- recompilations ------------------------------------------------------------------


def setup_end(run) -> float:
    """When the program's setup ends (``t_wall``): at the first marker (a
    step); else when the jitted function called most (the training step,
    from the jit probe) was first compiled; else after the first tenth of the
    snapshots' time span."""
    m = run.markers
    if m is not None and not m.empty:
        return float(m["t_wall"].min())
    counts, compiles = run.jit.counts, run.jit.compiles
    if counts is not None and not counts.empty and compiles is not None and not compiles.empty:
        busiest = counts.sort_values("calls", ascending=False, kind="stable")
        busiest = busiest[busiest["calls"] > 1]
        if not busiest.empty:
            first = compiles.loc[compiles["function_id"] == busiest["function_id"].iloc[0], "t_wall"]
            if not first.empty:
                return float(first.min())
    t = run.snapshots["t_wall"].to_numpy(dtype=float)
    return float(t.min() + SETUP_SHARE * np.ptp(t)) if len(t) else 0.0


def recompiles(ar: Attributed, *, min_executables: int = 5) -> pd.DataFrame:
    """Executables (per site and HLO module name) whose number or code size
    grew over the run. A site is a ``suspect`` when it compiled
    ``min_executables`` or more and new ones kept coming after the setup
    (``setup_end``): in two snapshots or more, spread over a quarter of the
    time after the setup at least (not one burst), and still in the later
    half of the program's progress since (its steps when it marks them, else
    its snapshots: not a set of shapes met once, in a first epoch). One
    executable per shape
    compiled once each while the program sets up (an optimizer's init, eager
    calls on each parameter) is not a recompilation problem. Columns:

    - ``site, file, line, function``: where they were compiled (the call);
    - ``name``: the HLO module name (``jit_train_step``); "" for a directory
      of profiles, which do not name executables;
    - ``first_snapshot``; ``first_count``: executables loaded then;
      ``last_count``: at the last snapshot before ``exit`` (0 when none is
      loaded then); ``max_count``: the most at any snapshot; ``growth =
      last_count - first_count``;
    - ``first_code_bytes``, ``last_code_bytes``: their generated code (0 on CPU);
    - ``new_after_setup``: executables that appeared after the setup;
    - ``suspect``: ``max_count >= min_executables``, new executables in two
      or more snapshots after the setup, and (for unnamed executables, since
      one line can compile several different functions) their number grew.

    Suspects first, then by ``max_count``.
    """
    run = ar.run
    snaps = run.snapshots
    dtypes = {"line": np.int64, "first_snapshot": np.int64, "first_count": np.int64, "last_count": np.int64,
              "max_count": np.int64, "growth": np.int64, "first_code_bytes": np.int64,
              "last_code_bytes": np.int64, "new_after_setup": np.int64, "suspect": bool}
    if snaps.empty:
        return _empty(RECOMPILE_COLUMNS, dtypes)
    if run.has_arrays:
        ex = run.executables
        if ex is None or ex.empty:
            return _empty(RECOMPILE_COLUMNS, dtypes)
        table, code = ar.site_codes
        sid = pd.to_numeric(ex["stack_id"], errors="coerce").fillna(-1).to_numpy(dtype=np.int64)
        c = code.reindex(sid).to_numpy(dtype=float)
        miss = np.isnan(c)
        info = table.set_index(np.arange(len(table)))
        site = np.where(miss, NO_STACK, info["site"].to_numpy(dtype=object)[np.where(miss, 0, c).astype(np.int64)]
                        if len(table) else NO_STACK)
        rows = pd.DataFrame({
            "snapshot": pd.to_numeric(ex["snapshot"]).to_numpy(dtype=np.int64),
            "site": site,
            "name": ex["name"].astype(str).to_numpy(dtype=object),
            "count": pd.to_numeric(ex["count"]).to_numpy(dtype=np.int64),
            "code_bytes": pd.to_numeric(ex["code_bytes"]).fillna(0).to_numpy(dtype=np.int64),
        })
        where = pd.concat([table, pd.DataFrame({"site": [NO_STACK], "file": [""], "line": [0], "function": [""]})])
        where = where.drop_duplicates("site").set_index("site")
    else:
        series = ar.series
        prof = series.profile_executables()
        if prof is None or prof.empty:
            return _empty(RECOMPILE_COLUMNS, dtypes)
        rows = pd.DataFrame({
            "snapshot": series.snapshots[prof["pos"].to_numpy(dtype=np.int64)],
            "site": prof["site"].to_numpy(dtype=object),
            "name": "",
            "count": prof["count"].to_numpy(dtype=np.int64),
            "code_bytes": prof["bytes"].to_numpy(dtype=np.int64),
        })
        where = prof.drop_duplicates("site").set_index("site")[["file", "line", "function"]]
    rows = rows[rows["snapshot"].isin(snaps["snapshot"])]
    rows = rows.groupby(["site", "name", "snapshot"], sort=True)[["count", "code_bytes"]].sum().reset_index()
    rows = rows[rows["count"] > 0]
    if rows.empty:
        return _empty(RECOMPILE_COLUMNS, dtypes)

    # New executables per snapshot, and those that came after the setup: in
    # the time since the snapshot before, which began after the setup ended.
    rise = (rows["count"] - rows.groupby(["site", "name"])["count"].shift(1).fillna(0)).clip(lower=0)
    setup = setup_end(run)
    ordered = snaps.sort_values("snapshot")
    began = pd.Series(ordered["t_wall"].shift(1).fillna(-np.inf).to_numpy(), index=ordered["snapshot"])
    late = rows["snapshot"].map(began).to_numpy(dtype=float) >= setup
    t_rows = rows["snapshot"].map(snaps.set_index("snapshot")["t_wall"]).to_numpy(dtype=float)
    # The program's progress at each snapshot: its steps (markers) when it
    # marks them, else the snapshot's position (a first epoch that compiles
    # is slower than the next: time would give it more than its share).
    seen = markers_seen(run)
    progress = pd.Series(seen if seen.any() else np.arange(len(snaps)), index=snaps["snapshot"].to_numpy())
    p_rows = rows["snapshot"].map(progress).to_numpy(dtype=float)
    rows = rows.assign(new=np.where(late, rise, 0), late_rise=late & (rise > 0),
                       late_t=np.where(late & (rise > 0), t_rows, np.nan),
                       late_p=np.where(late & (rise > 0), p_rows, np.nan))
    not_exit = snaps.loc[snaps["trigger"] != "exit", "snapshot"]
    last_snap = int(not_exit.max()) if len(not_exit) else int(snaps["snapshot"].max())
    g = rows.groupby(["site", "name"], sort=True)
    first = g.first()  # rows are sorted by snapshot within each group
    out = pd.DataFrame({
        "first_snapshot": first["snapshot"],
        "first_count": first["count"],
        "max_count": g["count"].max(),
        "first_code_bytes": first["code_bytes"],
        "max_code_bytes": g["code_bytes"].max(),
        "new_after_setup": g["new"].sum(),
        "late_rises": g["late_rise"].sum(),
        "late_span": g["late_t"].max() - g["late_t"].min(),
        "late_last": g["late_p"].max(),
    })
    at_last = rows[rows["snapshot"] == last_snap].set_index(["site", "name"])
    out["last_count"] = at_last["count"].reindex(out.index).fillna(0).astype(np.int64)
    out["last_code_bytes"] = at_last["code_bytes"].reindex(out.index).fillna(0).astype(np.int64)
    out["growth"] = out["last_count"] - out["first_count"]
    out = out.reset_index()
    named = out["name"] != ""
    grew = out["max_count"] > out["first_count"]
    # New ones kept coming: over a quarter of the time after the setup at
    # least, not in one burst (an evaluation or a summary once, at the end).
    after = max(float(snaps["t_wall"].max()) - setup, 1e-9)
    spread = out["late_span"].fillna(0).to_numpy(dtype=float) >= SPREAD_SHARE * after
    # And they keep coming: new ones still in the later half of the progress
    # after the setup (a set of shapes met once, in a first epoch, is not a
    # recompilation problem).
    started = progress[ordered.loc[ordered["t_wall"] >= setup, "snapshot"]].min() if (
        ordered["t_wall"] >= setup).any() else progress.max()
    half = started + STILL_COMING * (progress.max() - started)
    coming = out["late_last"].fillna(-np.inf).to_numpy(dtype=float) >= half
    out["suspect"] = ((out["max_count"] >= min_executables) & (named | grew) & (out["late_rises"] >= 2) & spread
                      & coming)
    keep = out["suspect"] | grew | (out["last_count"] > out["first_count"]) | (
        out["max_code_bytes"] > out["first_code_bytes"])
    out = out[keep]
    loc = where.reindex(out["site"])
    out["file"] = loc["file"].fillna("").to_numpy(dtype=object)
    out["line"] = loc["line"].fillna(0).to_numpy(dtype=np.int64)
    out["function"] = loc["function"].fillna("").to_numpy(dtype=object)
    out = out.sort_values(["suspect", "max_count", "site", "name"], ascending=[False, False, True, True],
                          kind="stable")
    out = out.reset_index(drop=True)[RECOMPILE_COLUMNS]
    return out.astype(dtypes)


def rejits(ar: Attributed, *, min_functions: int = 5) -> pd.DataFrame:
    """Lines where the program jitted the same function again and again
    (``jax.jit(f)`` inside a loop, from the jit probe): each new jitted
    function is traced and compiled anew, while its executables may be freed
    with it, so the executables loaded need not grow. Per line and function
    name: ``functions`` jitted there, ``after_setup`` of them after the setup
    (``setup_end``); ``suspect`` from ``min_functions``, two of them or more
    after the setup, and (where the run counted them) as many XLA compiles:
    JAX reuses the compile of the same Python function jitted again.
    Suspects first, then by ``functions``."""
    run, files = ar.run, ar.files
    dtypes = {"line": np.int64, "functions": np.int64, "after_setup": np.int64, "suspect": bool}
    f = run.jit.functions
    if f.empty:
        return _empty(REJIT_COLUMNS, dtypes)
    f = f[f["jit_file"].map(lambda x: isinstance(x, str) and bool(x) and not files.is_library(x))]
    if f.empty:
        return _empty(REJIT_COLUMNS, dtypes)
    late = f["t_wall"].to_numpy(dtype=float) > setup_end(run)
    counts = run.jit.counts
    compiled = np.nan
    if counts is not None and not counts.empty and "backend_compiles" in counts:
        per = counts.drop_duplicates("function_id", keep="last").set_index("function_id")  # a damaged journal
        compiled = f["function_id"].map(per["backend_compiles"]).astype(float)
    g = f.assign(late=late, compiled=compiled).groupby(["jit_file", "jit_line", "jit_function", "name"], sort=True)
    out = g.agg(functions=("function_id", "size"), after_setup=("late", "sum"),
                compiled=("compiled", lambda c: c.sum() if c.notna().any() else np.nan)).reset_index()
    out = out[out["functions"] > 1]
    # JAX reuses what it compiled for the same Python function jitted again:
    # only XLA compiles that kept coming (JAX's compile events, where the run
    # has them) make it a suspect.
    really = out["compiled"].isna() | (out["compiled"] >= min_functions)
    out["suspect"] = (out["functions"] >= min_functions) & (out["after_setup"] >= 2) & really
    out["file"] = out["jit_file"].map(files.display_path)
    out["site"] = out["file"] + ":" + out["jit_line"].astype(str) + " (" + out["jit_function"].astype(str) + ")"
    out = out.rename(columns={"jit_line": "line", "jit_function": "function"})
    out["name"] = out["name"].astype(str)
    out = out.sort_values(["suspect", "functions", "site"], ascending=[False, False, True], kind="stable")
    return out.reset_index(drop=True)[REJIT_COLUMNS].astype(dtypes)


# -- findings --------------------------------------------------------------------------


def number(v):
    """A JSON-able number: None for NaN."""
    return None if v is None or v != v else v



"""A journal's tables held to each other, for store/reader.py: tables its
writer made together (one dropped while another is there is damage), and
the markers' ``after_snapshot`` against the snapshots' own times (the
growth per step is measured from them). What disagrees is damage, said in
one line and noted as such (decode.note_damage): a gate that reads it
then says it cannot check (analysis/check.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from jaxmemprof.store.decode import ADDED_IN_ORDER, note_damage


def dropped_tables(present, warnings: list, not_made=frozenset()) -> None:
    """The tables a journal lacks though it has one added after them
    (ADDED_IN_ORDER): dropped, said in one line, and each noted as damage
    (a gate that reads one then says it cannot check). ``not_made``: tables
    this journal's format never has (schema 1's arrays describe themselves:
    no array_kinds)."""
    present = set(present) - set(not_made)
    newest = max((i for i, group in enumerate(ADDED_IN_ORDER) if any(t in present for t in group)), default=-1)
    lost = [t for group in ADDED_IN_ORDER[:newest + 1] for t in group if t not in present and t not in not_made]
    if not lost:
        return
    have = next(t for t in ADDED_IN_ORDER[newest] if t in present)
    text = (f"journal table{'s' if len(lost) > 1 else ''} {', '.join(lost)} "
            f"{'are' if len(lost) > 1 else 'is'} missing, though the journal has {have}, which its writer made with "
            f"{'them' if len(lost) > 1 else 'it'}: dropped; read as empty")
    warnings.append(text)
    damaged = getattr(warnings, "damaged", None)
    if damaged is not None:
        for t in lost:
            damaged.setdefault(t, text)


def markers_agree(markers: pd.DataFrame, snaps: pd.DataFrame, warnings: list) -> pd.DataFrame:
    """``markers`` less the rows whose ``after_snapshot`` (the count of
    snapshots written when the marker was, NULL for none) disagrees with the
    snapshots' own times: snapshots are taken one at a time, so of those
    started at or before the marker's time every one but the last (which
    may still have been being written) was written by then; the writer may
    have written later ones while the marker waited for it, but none past
    the journal's last where the marker came before that one. The others
    are damage, said in one line: growth per step is measured from them."""
    need = {"t_mono", "after_snapshot"}
    if "markers" in getattr(warnings, "damaged", {}):
        return markers  # its cells said damaged already (typed): one line says it
    if markers.empty or snaps.empty or not need <= set(markers.columns) or "t_mono" not in snaps.columns:
        return markers
    order = snaps.sort_values("snapshot")
    ids = order["snapshot"].to_numpy(dtype=np.int64)
    times = order["t_mono"].to_numpy(dtype=np.float64)
    if len(ids) and (not np.all(np.diff(ids) > 0) or not np.all(np.diff(times) >= 0) or np.isnan(times).any()):
        return markers  # the snapshots' own times out of order: nothing to hold the markers to
    t = markers["t_mono"].to_numpy(dtype=np.float64)
    after = pd.array(markers["after_snapshot"], dtype="Int64").to_numpy(dtype=np.float64, na_value=0.0)
    k = np.searchsorted(times, t, side="right")  # snapshots started at or before each marker
    padded = np.concatenate(([0, 0], ids))
    low = padded[k]  # ids[k - 2]: written before the marker's time
    # Past the journal's last snapshot: damage where the marker came before that snapshot (one after it may
    # name snapshots whose rows a killed run's journal lost, which the snapshots' own check says).
    last, t_last = (ids[-1], times[-1]) if len(ids) else (0, -np.inf)
    bad = ~np.isnan(t) & ((after < low) | ((after > last) & (t <= t_last)))
    if not bad.any():
        return markers
    i = int(np.flatnonzero(bad)[0])
    a = markers["after_snapshot"].iloc[i]
    said = "NULL" if pd.isna(a) else str(int(a))
    note_damage(warnings, "markers", f"{int(bad.sum())} of {len(bad)} row(s) of the journal's markers name a snapshot "
                                     f"their time does not fit (marker {markers['marker'].iloc[i]}: after_snapshot "
                                     f"{said}, though the last snapshot taken before it is "
                                     f"{int(padded[k[i] + 1]) if k[i] else 'none'}); left out")
    return markers[~bad].reset_index(drop=True)

"""Group a profile's bytes by site (or function, file, stack, device, kind),
and compare two profiles.

A diff is a merge of the new profile with the base scaled by -1, as in
``go tool pprof -diff_base``: the deltas of all groups add up to the new total
minus the base total, exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from jaxmemprof.analysis.sites import Attribution, stack_sites
from jaxmemprof.pprof.reader import Profile

KEY_COLUMNS: dict[str, tuple[str, ...]] = {
    "site": ("site", "file", "line", "function"),
    "function": ("function",),
    "file": ("file",),
    "stack": ("stack",),
    "device": ("device",),
    "kind": ("kind",),
}
GROUPINGS = tuple(KEY_COLUMNS)


@dataclass(frozen=True)
class Summary:
    """Bytes and counts of one profile per group, largest first.

    ``rows``: key columns, then ``bytes, count, share, cum_share``.
    ``omitted_rows``/``omitted_bytes``/``omitted_count``: what :func:`top`
    left out of ``rows`` (the totals always cover everything).
    """

    by: str
    key_columns: tuple[str, ...]
    rows: pd.DataFrame
    total_bytes: int
    total_count: int
    devices: pd.DataFrame
    kinds: pd.DataFrame
    omitted_rows: int = 0
    omitted_bytes: int = 0
    omitted_count: int = 0


@dataclass(frozen=True)
class Diff:
    """Per group that changed: ``base_bytes, new_bytes, delta_bytes,
    base_count, new_count, delta_count``, largest change first.
    ``unchanged_rows`` groups had equal bytes and counts on both sides."""

    by: str
    key_columns: tuple[str, ...]
    rows: pd.DataFrame
    totals: dict
    devices: pd.DataFrame
    kinds: pd.DataFrame
    unchanged_rows: int = 0
    omitted_rows: int = 0
    omitted_bytes: int = 0
    omitted_count: int = 0


def keyed_samples(profile: Profile, by: str, attribution: Attribution) -> pd.DataFrame:
    """The profile's samples with the key columns of ``by`` added."""
    if by not in KEY_COLUMNS:
        raise ValueError(f"unknown grouping {by!r}; choose from {', '.join(GROUPINGS)}")
    samples = profile.samples
    if by in ("device", "kind"):
        return samples
    per_stack = stack_sites(profile, attribution, with_stacks=(by == "stack"))
    keys = list(KEY_COLUMNS[by])
    picked = per_stack[keys].take(samples["stack_id"].to_numpy()).reset_index(drop=True)
    out = samples.copy()
    for k in keys:
        out[k] = picked[k].to_numpy()
    return out


def _group(samples: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    return samples.groupby(keys, sort=False, dropna=False)[["bytes", "count"]].sum().reset_index()


def summarize(profile: Profile, by: str = "site", attribution: Attribution = Attribution()) -> Summary:
    """Group ``profile`` by ``by``; rows sorted by bytes, then count, then key."""
    keys = list(KEY_COLUMNS[by])
    rows = _group(keyed_samples(profile, by, attribution), keys)
    rows = rows.sort_values(["bytes", "count"] + keys, ascending=[False, False] + [True] * len(keys))
    rows = rows.reset_index(drop=True)
    total = int(rows["bytes"].sum())
    rows["share"] = rows["bytes"] / total if total else 0.0
    rows["cum_share"] = rows["share"].cumsum()
    return Summary(
        by=by,
        key_columns=tuple(keys),
        rows=rows,
        total_bytes=total,
        total_count=int(rows["count"].sum()),
        devices=_sorted(_group(profile.samples, ["device"]), ["device"]),
        kinds=_sorted(_group(profile.samples, ["kind"]), ["kind"]),
    )


def _sorted(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    return rows.sort_values(keys).reset_index(drop=True)


def _merge(base: pd.DataFrame, new: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """new + (-1) * base per group, keeping each side's own values too."""
    both = pd.concat(
        [base.assign(_base=1), new.assign(_base=0)], ignore_index=True
    )
    is_base = both["_base"].to_numpy() == 1
    for col in ("bytes", "count"):
        v = both[col].to_numpy()
        both[f"base_{col}"] = np.where(is_base, v, 0)
        both[f"new_{col}"] = np.where(is_base, 0, v)
        both[f"delta_{col}"] = np.where(is_base, -v, v)
    cols = ["base_bytes", "new_bytes", "delta_bytes", "base_count", "new_count", "delta_count"]
    return both.groupby(keys, sort=False, dropna=False)[cols].sum().reset_index()


def diff(base: Profile, new: Profile, by: str = "site", attribution: Attribution = Attribution()) -> Diff:
    """Compare two profiles group by group; rows sorted by |delta bytes|,
    then |delta count|, then key."""
    keys = list(KEY_COLUMNS[by])
    rows = _merge(keyed_samples(base, by, attribution), keyed_samples(new, by, attribution), keys)
    totals = {
        "base_bytes": int(rows["base_bytes"].sum()),
        "new_bytes": int(rows["new_bytes"].sum()),
        "delta_bytes": int(rows["delta_bytes"].sum()),
        "base_count": int(rows["base_count"].sum()),
        "new_count": int(rows["new_count"].sum()),
        "delta_count": int(rows["delta_count"].sum()),
    }
    same = (rows["delta_bytes"] == 0) & (rows["delta_count"] == 0) & (rows["base_bytes"] == rows["new_bytes"])
    unchanged = int(same.sum())
    rows = rows[~same]
    order = pd.DataFrame(
        {"a": -rows["delta_bytes"].abs(), "b": -rows["delta_count"].abs(), "c": -rows["new_bytes"]}
    )
    rows = rows.loc[pd.concat([order, rows[keys]], axis=1).sort_values(["a", "b", "c"] + keys).index]
    rows = rows.reset_index(drop=True)
    return Diff(
        by=by,
        key_columns=tuple(keys),
        rows=rows,
        totals=totals,
        devices=_sorted(_merge(base.samples, new.samples, ["device"]), ["device"]),
        kinds=_sorted(_merge(base.samples, new.samples, ["kind"]), ["kind"]),
        unchanged_rows=unchanged,
    )


def top(result, n: int | None):
    """Keep the first ``n`` rows (all when ``n`` is None or 0), recording what
    was left out."""
    if not n or n >= len(result.rows):
        return result
    rest = result.rows.iloc[n:]
    col = "bytes" if isinstance(result, Summary) else "delta_bytes"
    ccol = "count" if isinstance(result, Summary) else "delta_count"
    return replace(
        result,
        rows=result.rows.iloc[:n].reset_index(drop=True),
        omitted_rows=len(rest),
        omitted_bytes=int(rest[col].sum()),
        omitted_count=int(rest[ccol].sum()),
    )

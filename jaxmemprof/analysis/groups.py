"""Group a profile's bytes by site (or function, file, stack, device, kind),
and compare two profiles.

A diff is a merge of the new profile with the base scaled by -1, as in
``go tool pprof -diff_base``: the deltas of all groups add up to the new total
minus the base total, exactly.

The grouping is plain Python over the profile's samples summed per class of
stack (``Profile.class_sums``: a class is the site frame, say) and per (kind,
device) (``Profile.label_sums``), so ``show`` and ``diff`` import
neither pandas nor numpy. A result keeps its rows as a :class:`Table`;
``rows``, ``devices`` and ``kinds`` read as DataFrames (built on first
access, with the dtypes a pandas group-by gives), for every other caller.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from itertools import compress
from typing import TYPE_CHECKING

from jaxmemprof.analysis.sites import Attribution, stack_classes

if TYPE_CHECKING:
    import pandas as pd

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

_SUMMARY_VALUES = ("bytes", "count", "share", "cum_share")
_DIFF_VALUES = ("base_bytes", "new_bytes", "delta_bytes", "base_count", "new_count", "delta_count")
_TEXT_COLUMNS = frozenset(("site", "file", "function", "stack", "device", "kind", "owner", "role"))
_FLOAT_COLUMNS = frozenset(("share", "cum_share"))


class Table:
    """Rows in plain Python: ``columns`` and one tuple per row. ``filled``
    says whether the group-by it came from had any rows (before a diff left
    out its unchanged groups): pandas gives text columns the string dtype
    then, and object (float64 for ``stack``) when it had none."""

    __slots__ = ("columns", "rows", "filled")

    def __init__(self, columns, rows, filled: bool):
        self.columns = tuple(columns)
        self.rows = rows
        self.filled = filled

    def __len__(self) -> int:
        return len(self.rows)

    def column(self, name: str) -> list:
        i = self.columns.index(name)
        return [r[i] for r in self.rows]

    def records(self, columns=None) -> list[dict]:
        cols = self.columns if columns is None else tuple(columns)
        idx = [self.columns.index(c) for c in cols]
        return [dict(zip(cols, (r[i] for i in idx))) for r in self.rows]

    def select(self, columns) -> Table:
        idx = [self.columns.index(c) for c in columns]
        return Table(columns, [tuple(r[i] for i in idx) for r in self.rows], self.filled)

    def head(self, n: int) -> Table:
        return Table(self.columns, self.rows[:n], self.filled)

    def frame(self) -> pd.DataFrame:
        import numpy as np
        import pandas as pd

        text = pd.Series([""]).dtype  # the dtype pandas gives strings (str from pandas 3 on)
        data = {}
        for i, c in enumerate(self.columns):
            vals = [r[i] for r in self.rows]
            if c in _TEXT_COLUMNS:
                if self.filled:
                    data[c] = pd.Series(vals, dtype=text)
                else:
                    data[c] = pd.Series(vals, dtype=np.float64 if c == "stack" else object)
            elif c in _FLOAT_COLUMNS:
                data[c] = pd.Series(vals, dtype=np.float64)
            else:
                data[c] = pd.Series(np.array(vals, dtype=np.int64))
        return pd.DataFrame(data, columns=list(self.columns))

    @classmethod
    def from_frame(cls, df) -> Table:
        cols = [str(c) for c in df.columns]
        rows = list(zip(*(df[c].tolist() for c in df.columns))) if len(df.columns) else [() for _ in range(len(df))]
        return cls(cols, rows, True)


class _Frame:
    """A result's field holding a :class:`Table` (or a DataFrame, as other
    callers give it, e.g. through dataclasses.replace): it reads as a
    DataFrame, built once."""

    def __set_name__(self, owner, name):
        self.name = name
        self.key = f"_{name}_value"
        self.cache = f"_{name}_frame"

    def __get__(self, obj, owner=None):
        if obj is None:
            raise AttributeError(self.name)  # no default for the dataclass
        v = obj.__dict__[self.key]
        if isinstance(v, Table):
            f = obj.__dict__.get(self.cache)
            if f is None:
                f = obj.__dict__[self.cache] = v.frame()
            return f
        return v

    def __set__(self, obj, value):
        obj.__dict__[self.key] = value
        obj.__dict__.pop(self.cache, None)


_FRAME_FIELDS = ("rows", "devices", "kinds")


def table_of(result, name: str = "rows") -> Table:
    """A result's ``rows`` (or ``devices``, ``kinds``) as a :class:`Table`,
    without pandas when the result was made here."""
    v = result.__dict__[f"_{name}_value"]
    return v if isinstance(v, Table) else Table.from_frame(v)


def _replace(result, **changes):
    """dataclasses.replace, but the frame fields pass on as they are stored
    (no DataFrame is built)."""
    kw = {}
    for f in fields(result):
        if f.name in changes:
            kw[f.name] = changes[f.name]
        elif f.name in _FRAME_FIELDS:
            kw[f.name] = result.__dict__[f"_{f.name}_value"]
        else:
            kw[f.name] = getattr(result, f.name)
    return type(result)(**kw)


@dataclass(frozen=True)
class Breakdown:
    """Bytes and counts of one profile per group, largest first.

    ``rows``: key columns, then ``bytes, count, share, cum_share``.
    ``omitted_rows``/``omitted_bytes``/``omitted_count``: what :func:`top`
    left out of ``rows`` (the totals always cover everything).
    """

    by: str
    key_columns: tuple[str, ...]
    if TYPE_CHECKING:  # mypy reads any value here as a default; _Frame() is none (its __get__ on the class raises)
        rows: pd.DataFrame
    else:
        rows: pd.DataFrame = _Frame()
    total_bytes: int
    total_count: int
    devices: pd.DataFrame = _Frame()
    kinds: pd.DataFrame = _Frame()
    omitted_rows: int = 0
    omitted_bytes: int = 0
    omitted_count: int = 0

    def table(self, name: str = "rows") -> Table:
        """``rows`` (or ``devices``, ``kinds``) as a :class:`Table` (``table_of``)."""
        return table_of(self, name)


@dataclass(frozen=True)
class Diff:
    """Per group that changed: ``base_bytes, new_bytes, delta_bytes,
    base_count, new_count, delta_count``, largest change first.
    ``unchanged_rows`` groups had equal bytes and counts on both sides."""

    by: str
    key_columns: tuple[str, ...]
    if TYPE_CHECKING:  # mypy reads any value here as a default; _Frame() is none (its __get__ on the class raises)
        rows: pd.DataFrame
    else:
        rows: pd.DataFrame = _Frame()
    totals: dict
    devices: pd.DataFrame = _Frame()
    kinds: pd.DataFrame = _Frame()
    unchanged_rows: int = 0
    omitted_rows: int = 0
    omitted_bytes: int = 0
    omitted_count: int = 0

    def table(self, name: str = "rows") -> Table:
        """``rows`` (or ``devices``, ``kinds``) as a :class:`Table` (``table_of``)."""
        return table_of(self, name)


def keyed_samples(profile: Profile, by: str, attribution: Attribution) -> pd.DataFrame:
    """The profile's samples with the key columns of ``by`` added."""
    from jaxmemprof.analysis.sites import stack_sites

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


def _sums(profile: Profile, by: str, attribution: Attribution) -> dict:
    """``{key tuple: [bytes, count]}`` over the profile's samples."""
    if by not in KEY_COLUMNS:
        raise ValueError(f"unknown grouping {by!r}; choose from {', '.join(GROUPINGS)}")
    if by in ("device", "kind"):
        return {(k,): v for k, v in _label_sums(profile, 1 if by == "device" else 0).items()}
    acc: dict = {}
    classes, keys = stack_classes(profile, attribution, by)
    nb, nc, seen = profile.class_sums(classes, len(keys))
    for key, b, c in compress(zip(keys, nb, nc), seen):
        a = acc.get(key)
        if a is None:
            acc[key] = [b, c]
        else:
            a[0] += b
            a[1] += c
    return acc


def _label_sums(profile: Profile, col: int) -> dict:
    """``{device or kind: [bytes, count]}`` (``col``: 1 device, 0 kind)."""
    acc: dict = {}
    for kd, (b, c) in profile.label_sums().items():
        a = acc.get(kd[col])
        if a is None:
            acc[kd[col]] = [b, c]
        else:
            a[0] += b
            a[1] += c
    return acc


def summarize(profile: Profile, by: str, attribution: Attribution) -> Breakdown:
    """Group ``profile`` by ``by``; rows sorted by bytes, then count, then key."""
    keys = list(KEY_COLUMNS[by])
    sums = _sums(profile, by, attribution)
    items = sorted(sums.items(), key=lambda kv: (-kv[1][0], -kv[1][1], *kv[0]))
    total = sum(b for b, _ in sums.values())
    total_count = sum(c for _, c in sums.values())
    rows = []
    cum = None
    for key, (b, c) in items:
        # As numpy has it: int64 / int64 is float(a) / float(b); cumsum starts at the first.
        share = float(b) / float(total) if total else 0.0
        cum = share if cum is None else cum + share
        rows.append((*key, b, c, share, cum))
    filled = bool(sums)
    return Breakdown(
        by=by,
        key_columns=tuple(keys),
        rows=Table(keys + list(_SUMMARY_VALUES), rows, filled),
        total_bytes=total,
        total_count=total_count,
        devices=_breakdown(profile, 1, "device"),
        kinds=_breakdown(profile, 0, "kind"),
    )


def _breakdown(profile: Profile, col: int, name: str) -> Table:
    sums = _label_sums(profile, col)
    return Table((name, "bytes", "count"), [(k, b, c) for k, (b, c) in sorted(sums.items())], bool(sums))


def _merged(base: dict, new: dict) -> dict:
    """``{key: (base_bytes, new_bytes, delta_bytes, base_count, new_count,
    delta_count)}``."""
    out = {}
    for key, (b, c) in base.items():
        nb, nc = new.get(key, (0, 0))
        out[key] = (b, nb, nb - b, c, nc, nc - c)
    for key, (nb, nc) in new.items():
        if key not in base:
            out[key] = (0, nb, nb, 0, nc, nc)
    return out


def diff(base: Profile, new: Profile, by: str, attribution: Attribution, same=None) -> Diff:
    """Compare two profiles group by group; rows sorted by |delta bytes|,
    then |delta count|, then key. ``same``: ``(base sums, new sums, by) ->
    base sums`` with a base group that is one of the new profile's under
    another name keyed as that one (two runs' scripts under two names:
    analysis/rundiff.py ``same_sites``)."""
    keys = list(KEY_COLUMNS[by])
    b, n = _sums(base, by, attribution), _sums(new, by, attribution)
    merged = _merged(same(b, n, by) if same is not None else b, n)
    totals = dict(zip(_DIFF_VALUES, (sum(v[i] for v in merged.values()) for i in range(6))))
    changed = [(k, v) for k, v in merged.items() if not (v[2] == 0 and v[5] == 0 and v[0] == v[1])]
    changed.sort(key=lambda kv: (-abs(kv[1][2]), -abs(kv[1][5]), -kv[1][1], *kv[0]))
    filled = bool(merged)
    return Diff(
        by=by,
        key_columns=tuple(keys),
        rows=Table(keys + list(_DIFF_VALUES), [(*k, *v) for k, v in changed], filled),
        totals=totals,
        devices=_diff_breakdown(base, new, 1, "device"),
        kinds=_diff_breakdown(base, new, 0, "kind"),
        unchanged_rows=len(merged) - len(changed),
    )


def _diff_breakdown(base: Profile, new: Profile, col: int, name: str) -> Table:
    merged = _merged(_label_sums(base, col), _label_sums(new, col))
    return Table((name, *_DIFF_VALUES), [(k, *v) for k, v in sorted(merged.items())], bool(merged))


def top(result, n: int | None):
    """Keep the first ``n`` rows (all when ``n`` is None or 0), recording what
    was left out."""
    stored = result.__dict__.get("_rows_value")
    if not isinstance(stored, Table):
        return _top_frame(result, n)
    if not n or n >= len(stored):
        return result
    col = "bytes" if isinstance(result, Breakdown) else "delta_bytes"
    ccol = "count" if isinstance(result, Breakdown) else "delta_count"
    rest = Table(stored.columns, stored.rows[n:], stored.filled)
    return _replace(
        result,
        rows=stored.head(n),
        omitted_rows=len(rest),
        omitted_bytes=sum(rest.column(col)),
        omitted_count=sum(rest.column(ccol)),
    )


def _top_frame(result, n):
    """:func:`top` of a result whose rows someone gave as a DataFrame."""
    if not n or n >= len(result.rows):
        return result
    rest = result.rows.iloc[n:]
    col = "bytes" if isinstance(result, Breakdown) else "delta_bytes"
    ccol = "count" if isinstance(result, Breakdown) else "delta_count"
    return _replace(
        result,
        rows=result.rows.iloc[:n].reset_index(drop=True),
        omitted_rows=len(rest),
        omitted_bytes=int(rest[col].sum()),
        omitted_count=int(rest[ccol].sum()),
    )

"""The pprof profile as the reader gives it: plain Python data (no pandas or
numpy: ``show`` and ``diff`` group it without them), and tidy pandas frames
built from it on first use.
"""

from __future__ import annotations

from itertools import compress

class Profile:
    """One pprof profile.

    The reader keeps it in plain Python form (no pandas or numpy: ``show``
    and ``diff`` group it without them); the tidy frames below are built on
    first access and kept:

    - ``samples``: one row per sample: ``sample_id, kind, device, count, bytes,
      stack_id`` (``kind``/``device`` come from JAX's labels, "" when absent;
      ``bytes`` is the chosen value, ``count`` its companion count, 0 if none).
    - ``frames``: one row per distinct frame, indexed by ``frame_id``:
      ``function, file, line``.
    - ``stacks``: for each ``stack_id``, the tuple of its frame ids, innermost
      first (inlined frames expanded, as pprof does).
    - ``labels`` (built on demand): every label: ``sample_id, key, value, num``.
    - ``sample_types``: ``index, type, unit``; ``value_index`` and
      ``count_index`` say which were used for ``bytes`` and ``count``.

    It can also be made from frames directly (a job's merged profile), with
    the same arguments, in the same order, as before.
    """

    def __init__(self, source, samples=None, frames=None, stacks=(), label_sets=(), label_ids=None,
                 sample_types=None, value_index=0, count_index=None, time_nanos=0, duration_nanos=0,
                 comments=(), *, _parts=None):
        self.source = source
        self.stacks = tuple(stacks)
        self.label_sets = tuple(label_sets)
        self.value_index = value_index
        self.count_index = count_index
        self.time_nanos = time_nanos
        self.duration_nanos = duration_nanos
        self.comments = tuple(comments)
        self._parts = _parts
        self._cache: dict = {}
        if _parts is None:
            self._cache.update(samples=samples, frames=frames, sample_types=sample_types, label_ids=label_ids)

    def __repr__(self) -> str:
        return (f"Profile(source={self.source!r}, {self.sample_count} samples, {len(self.stacks)} stacks, "
                f"value_type={self.value_type!r})")

    def _cached(self, key, make):
        v = self._cache.get(key)
        if v is None:
            v = self._cache[key] = make()
        return v

    # The frames, built on first access (pandas and numpy are imported then).

    @property
    def samples(self):
        return self._cached("samples", self._make_samples)

    @property
    def frames(self):
        return self._cached("frames", self._make_frames)

    @property
    def sample_types(self):
        return self._cached("sample_types", self._make_sample_types)

    @property
    def label_ids(self):
        return self._cached("label_ids", lambda: self._per_sample()[2])

    def _per_sample(self):
        """(stack ids, value ids, label ids) per sample, as int64 arrays."""
        def make():
            import numpy as np

            parts = self._parts
            codes = np.array(parts.codes, dtype=np.int64)
            tails = np.array(parts.tails, dtype=np.int64).reshape(-1, 2)[codes & ((1 << parts.shift) - 1)]
            return codes >> parts.shift, tails[:, 0], tails[:, 1]
        return self._cached("_per_sample", make)

    def _make_samples(self):
        import numpy as np
        import pandas as pd

        parts = self._parts
        stack_ids, value_ids, label_ids = self._per_sample()
        n = len(stack_ids)
        ntypes = len(parts.types)
        values = np.array(parts.value_rows, dtype=np.int64).reshape(-1, ntypes)[value_ids]
        kinds = np.array([k for k, _ in parts.label_kd], dtype=object)[label_ids]
        devices = np.array([d for _, d in parts.label_kd], dtype=object)[label_ids]
        ci = self.count_index
        return pd.DataFrame(
            {
                "sample_id": np.arange(n, dtype=np.int64),
                "kind": kinds,
                "device": devices,
                "count": values[:, ci] if ci is not None else np.zeros(n, np.int64),
                "bytes": values[:, self.value_index],
                "stack_id": stack_ids,
            }
        )

    def _make_frames(self):
        import numpy as np
        import pandas as pd

        keys = self._parts.frame_keys
        frames = pd.DataFrame(
            {
                "function": pd.Series([k[0] for k in keys], dtype=object),
                "file": pd.Series([k[1] for k in keys], dtype=object),
                "line": np.fromiter((k[2] for k in keys), dtype=np.int64, count=len(keys)),
            }
        )
        frames.index.name = "frame_id"
        return frames

    def _make_sample_types(self):
        import pandas as pd

        types = self._parts.types
        return pd.DataFrame(
            {"index": range(len(types)), "type": [t for t, _ in types], "unit": [u for _, u in types]}
        )

    # Plain views, for the code that needs no frames (show, diff).

    @property
    def types(self) -> list[tuple[str, str]]:
        """``(type, unit)`` of each sample type."""
        if self._parts is not None:
            return self._parts.types
        st = self.sample_types
        return list(zip(st["type"].tolist(), st["unit"].tolist()))

    @property
    def frame_keys(self) -> list[tuple[str, str, int]]:
        """``(function, file, line)`` per frame id."""
        if self._parts is not None:
            return self._parts.frame_keys
        fr = self.frames
        return list(zip(fr["function"].tolist(), fr["file"].tolist(), fr["line"].tolist()))

    @property
    def sample_count(self) -> int:
        return len(self._parts.codes) if self._parts is not None else len(self.samples)

    def stack_groups(self) -> list[tuple[str, str, int, int, int]]:
        """The samples summed per ``(kind, device, stack_id)``: rows
        ``(kind, device, stack_id, bytes, count)``, in no particular order."""
        return self._cached("_stack_groups", self._make_stack_groups)

    def _make_stack_groups(self):
        parts = self._parts
        if parts is None:
            s = self.samples
            if s.empty:
                return []
            g = s.groupby(["kind", "device", "stack_id"], sort=False, dropna=False)[["bytes", "count"]].sum()
            return [(k, d, int(sid), int(b), int(c)) for (k, d, sid), b, c
                    in zip(g.index, g["bytes"].tolist(), g["count"].tolist())]
        return parts.stack_groups(self.value_index, self.count_index)

    @property
    def value_type(self) -> str:
        t, u = self.types[self.value_index]
        return f"{t}/{u}"

    @property
    def total_bytes(self) -> int:
        if self._parts is None:
            return int(self.samples["bytes"].sum())
        return sum(g[3] for g in self.stack_groups())

    @property
    def labels(self):
        import pandas as pd

        rows = [
            (i, key, value, num)
            for i, lid in enumerate(self.label_ids.tolist())
            for key, value, num in self.label_sets[lid]
        ]
        return pd.DataFrame(rows, columns=["sample_id", "key", "value", "num"])

    def stack_frames(self):
        """Long form of the stacks: ``stack_id, depth, function, file, line``
        (depth 0 is the innermost frame)."""
        import numpy as np

        lengths = np.fromiter((len(s) for s in self.stacks), dtype=np.int64, count=len(self.stacks))
        frame_ids = np.fromiter(
            (f for s in self.stacks for f in s), dtype=np.int64, count=int(lengths.sum())
        )
        stack_id = np.repeat(np.arange(len(self.stacks), dtype=np.int64), lengths)
        starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
        depth = np.arange(len(frame_ids), dtype=np.int64) - starts
        out = self.frames.loc[frame_ids].reset_index(drop=True)
        out.insert(0, "depth", depth)
        out.insert(0, "stack_id", stack_id)
        return out


class _Parts:
    """What the reader found, in plain form. Per sample only one int:
    ``stack_id << shift | tail`` (a tail is a distinct (values, labels)
    pair: ``tails[tail] = (value_id, label_id)``)."""

    __slots__ = ("types", "frame_keys", "value_rows", "label_kd", "tails", "codes", "shift")

    def __init__(self, types, frame_keys, value_rows, label_kd, tails, codes, shift):
        self.types = types
        self.frame_keys = frame_keys
        self.value_rows = value_rows
        self.label_kd = label_kd  # (kind, device) per label set
        self.tails = tails
        self.codes = codes
        self.shift = shift

    def stack_groups(self, value_index, count_index):
        shift = self.shift
        mask = (1 << shift) - 1
        rows = self.value_rows
        # Label sets with the same (kind, device) are one group.
        group_of: dict = {}
        kd_index = [group_of.setdefault(kd, len(group_of)) for kd in self.label_kd]
        ngroups = max(len(group_of), 1)
        tbytes = [rows[v][value_index] for v, _ in self.tails]
        tcount = [rows[v][count_index] for v, _ in self.tails] if count_index is not None else None
        tgroup = [kd_index[lab] for _, lab in self.tails]
        nstacks = (max(self.codes) >> shift) + 1 if self.codes else 0
        size = nstacks * ngroups
        if size > 4 * len(self.codes) + 4096:
            return self._stack_groups_sparse(tbytes, tcount, tgroup, ngroups)
        nb = [0] * size
        nc = [0] * size
        seen = [False] * size
        # The one loop over every sample: kept to list indexing.
        if tcount is None:
            for code in self.codes:
                t = code & mask
                g = (code >> shift) * ngroups + tgroup[t]
                nb[g] += tbytes[t]
                seen[g] = True
        else:
            for code in self.codes:
                t = code & mask
                g = (code >> shift) * ngroups + tgroup[t]
                nb[g] += tbytes[t]
                nc[g] += tcount[t]
                seen[g] = True
        kds = list(group_of)
        return [(*kds[g % ngroups], g // ngroups, nb[g], nc[g]) for g in compress(range(size), seen)]

    def _stack_groups_sparse(self, tbytes, tcount, tgroup, ngroups):
        """:meth:`stack_groups` with a dict, when a list per (stack, group)
        would be far larger than the samples (many label sets)."""
        shift = self.shift
        mask = (1 << shift) - 1
        acc: dict = {}
        get = acc.get
        for code in self.codes:
            t = code & mask
            g = (code >> shift) * ngroups + tgroup[t]
            a = get(g)
            if a is None:
                acc[g] = [tbytes[t], tcount[t] if tcount is not None else 0]
            else:
                a[0] += tbytes[t]
                if tcount is not None:
                    a[1] += tcount[t]
        kds = list(dict.fromkeys(self.label_kd))
        return [(*kds[g % ngroups], g // ngroups, b, c) for g, (b, c) in acc.items()]

    def abs_total(self, col: int) -> int:
        """The sum of ``|value[col]|`` over every sample."""
        from collections import Counter

        mask = (1 << self.shift) - 1
        tails, rows = self.tails, self.value_rows
        return sum(abs(rows[tails[t][0]][col]) * m for t, m in Counter(c & mask for c in self.codes).items())

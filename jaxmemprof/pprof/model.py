"""The pprof profile as the reader gives it: plain Python data (no pandas or
numpy: ``show`` and ``diff`` group it without them), and tidy pandas frames
built from it on first use.
"""

from __future__ import annotations

from collections import Counter
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
        self._stacks = None if stacks is None else tuple(stacks)  # None: built from _parts' flat form
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

    def without_kind(self, kind: str) -> Profile:
        """The profile less its samples labelled ``kind`` (a run's
        executables: their code is no array's bytes); itself when it has none."""
        s = self.samples
        keep = (s["kind"] != kind).to_numpy()
        if s.empty or keep.all():
            return self
        kept = s[keep].reset_index(drop=True)
        kept["sample_id"] = range(len(kept))
        return Profile(self.source, samples=kept, frames=self.frames, stacks=self.stacks,
                       label_sets=self.label_sets, label_ids=self.label_ids[keep], sample_types=self.sample_types,
                       value_index=self.value_index, count_index=self.count_index, time_nanos=self.time_nanos,
                       duration_nanos=self.duration_nanos, comments=self.comments)

    def __repr__(self) -> str:
        return (f"Profile(source={self.source!r}, {self.sample_count} samples, {len(self.stacks)} stacks, "
                f"value_type={self.value_type!r})")

    @property
    def stacks(self) -> tuple[tuple[int, ...], ...]:
        if self._stacks is None:
            flat, ends = self._parts.flat, self._parts.ends
            self._stacks = tuple(tuple(flat[s:e]) for s, e in zip([0, *ends], ends))
        return self._stacks

    def first_frames(self, flags: list) -> list[int]:
        """Per stack_id, its first frame (innermost) whose ``flags[frame_id]``
        is true, else its first frame, else -1 (an empty stack)."""
        parts = self._parts
        if self._stacks is not None or parts is None:
            out = []
            for stack in self.stacks:
                for fid in stack:
                    if flags[fid]:
                        out.append(fid)
                        break
                else:
                    out.append(stack[0] if stack else -1)
            return out
        flat = parts.flat
        out = []
        add = out.append
        start = 0
        for end in parts.ends:
            if start < end:
                fid = flat[start]
                if not flags[fid]:
                    j = start + 1
                    while j < end and not flags[flat[j]]:
                        j += 1
                    if j < end:
                        fid = flat[j]
                add(fid)
            else:
                add(-1)
            start = end
        return out

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

    def class_sums(self, class_of: list[int], nclasses: int) -> tuple[list[int], list[int], list[bool]]:
        """The samples summed per class of their stack (``class_of[stack_id]``,
        in ``range(nclasses)``): bytes, count and whether any sample is in
        it, per class."""
        nb, nc, seen = [0] * nclasses, [0] * nclasses, [False] * nclasses
        if self._parts is None:
            for _, _, sid, b, c in self.stack_groups():
                k = class_of[sid]
                nb[k] += b
                nc[k] += c
                seen[k] = True
            return nb, nc, seen
        return self._parts.class_sums(self.value_index, self.count_index, class_of, nb, nc, seen)

    def label_sums(self) -> dict[tuple[str, str], list[int]]:
        """``{(kind, device): [bytes, count]}`` over the samples (kept: do not change it)."""
        return self._cached("_label_sums", self._make_label_sums)

    def _make_label_sums(self):
        if self._parts is None:
            acc: dict = {}
            for k, d, _, b, c in self.stack_groups():
                a = acc.setdefault((k, d), [0, 0])
                a[0] += b
                a[1] += c
            return acc
        return self._parts.label_sums(self.value_index, self.count_index)

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


class Parts:
    """What the reader found, in plain form. Per sample only one int:
    ``stack_id << shift | tail`` (a tail is a distinct (values, labels)
    pair: ``tails[tail] = (value_id, label_id)``)."""

    __slots__ = ("types", "frame_keys", "value_rows", "label_kd", "tails", "codes", "shift", "flat", "ends")

    def __init__(self, types, frame_keys, value_rows, label_kd, tails, codes, shift):
        self.types = types
        self.frame_keys = frame_keys
        self.value_rows = value_rows
        self.label_kd = label_kd  # (kind, device) per label set
        self.tails = tails
        self.codes = codes
        self.shift = shift
        # The stacks in flat form, when the reader gives them so: every stack's
        # frame ids in one list, and where each stack ends in it.
        self.flat = self.ends = None

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

    def _tail_values(self, value_index, count_index):
        rows = self.value_rows
        tbytes = [rows[v][value_index] for v, _ in self.tails]
        tcount = [rows[v][count_index] for v, _ in self.tails] if count_index is not None else [0] * len(tbytes)
        return tbytes, tcount

    def class_sums(self, value_index, count_index, class_of, nb, nc, seen):
        """:meth:`Profile.class_sums`: one loop over the samples (over the
        distinct ones, with their number, when stacks repeat)."""
        shift = self.shift
        mask = (1 << shift) - 1
        tbytes, tcount = self._tail_values(value_index, count_index)
        codes = self.codes
        if 2 * len(class_of) > len(codes):  # stacks mostly distinct: counting them first gains nothing
            for code in codes:
                k = class_of[code >> shift]
                t = code & mask
                nb[k] += tbytes[t]
                nc[k] += tcount[t]
                seen[k] = True
        else:
            for code, m in Counter(codes).items():
                k = class_of[code >> shift]
                t = code & mask
                nb[k] += tbytes[t] * m
                nc[k] += tcount[t] * m
                seen[k] = True
        return nb, nc, seen

    def label_sums(self, value_index, count_index) -> dict:
        """:meth:`Profile.label_sums`."""
        mask = (1 << self.shift) - 1
        tbytes, tcount = self._tail_values(value_index, count_index)
        acc: dict = {}
        for t, m in Counter(map(mask.__and__, self.codes)).items():
            a = acc.get(kd := self.label_kd[self.tails[t][1]])
            if a is None:
                acc[kd] = [tbytes[t] * m, tcount[t] * m]
            else:
                a[0] += tbytes[t] * m
                a[1] += tcount[t] * m
        return acc

    def abs_total(self, col: int) -> int:
        """The sum of ``|value[col]|`` over every sample."""
        mask = (1 << self.shift) - 1
        tails, rows = self.tails, self.value_rows
        return sum(abs(rows[tails[t][0]][col]) * m for t, m in Counter(c & mask for c in self.codes).items())

"""Write pprof profiles: any frames, values and labels, gzipped as pprof and
`go tool pprof` expect them."""

from __future__ import annotations

import gzip
from collections.abc import Iterable

from jaxmemprof.pprof import profile_pb2

# go tool pprof's own convention for the base half of a merged diff profile.
BASE_LABEL = ("pprof::base", "true")


class _Builder:
    def __init__(self):
        self.msg = profile_pb2.Profile()
        self._strings: dict[str, int] = {}
        self._functions: dict[tuple[str, str], int] = {}
        self._locations: dict[tuple[int, int], int] = {}
        self.string("")

    def string(self, s: str) -> int:
        i = self._strings.get(s)
        if i is None:
            i = self._strings[s] = len(self._strings)
            self.msg.string_table.append(s.encode("utf-8", errors="surrogateescape"))
        return i

    def location(self, function: str, file: str, line: int) -> int:
        fid = self._functions.get((function, file))
        if fid is None:
            fid = self._functions[(function, file)] = len(self._functions) + 1
            self.msg.function.add(id=fid, name=self.string(function), system_name=self.string(function),
                                  filename=self.string(file))
        lid = self._locations.get((fid, line))
        if lid is None:
            lid = self._locations[(fid, line)] = len(self._locations) + 1
            loc = self.msg.location.add(id=lid)
            loc.line.add(function_id=fid, line=line)
        return lid


def write_profile(
    sample_types: list[tuple[str, str]],
    samples: Iterable[tuple[tuple, tuple, dict]],
    *,
    default_type: str | None = None,
    comments: Iterable[str] = (),
    time_nanos: int = 0,
) -> bytes:
    """A gzipped pprof. ``samples``: ``(frames, values, labels)`` with frames
    ``(function, file, line)`` innermost first, one value per sample type,
    and labels ``{key: text}``."""
    b = _Builder()
    for t, u in sample_types:
        b.msg.sample_type.add(type=b.string(t), unit=b.string(u))
    for frames, values, labels in samples:
        s = b.msg.sample.add()
        s.location_id.extend(b.location(fn, f, int(ln)) for fn, f, ln in frames)
        s.value.extend(int(v) for v in values)
        for k, v in labels.items():
            if v != "":
                s.label.add(key=b.string(k), str=b.string(str(v)))
    if default_type:
        b.msg.default_sample_type = b.string(default_type)
    b.msg.comment.extend(b.string(c) for c in comments)
    b.msg.time_nanos = int(time_nanos)
    return gzip.compress(b.msg.SerializeToString(), mtime=0)

"""What ``jaxmemprof top`` shows of a run being written: live bytes per site
and device at the newest snapshot, what grew since the frame before and since
the run's first snapshot, and the sites that keep growing.

A :class:`Tracker` follows one process's run from frame to frame (it keeps the
per-site bytes of the first snapshot and of the frame before); each frame
reads one profile, the newest. A snapshot file the reader refused (damaged,
or a gzip bomb) is remembered and not read again while it stays the same file.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass, field

import pandas as pd

from jaxmemprof.analysis.groups import summarize
from jaxmemprof.analysis.sites import Attribution

# A site that grew in this many frames in a row is called growing.
GROWING_FRAMES = 3


@dataclass(frozen=True)
class Frame:
    """One process now. ``sites``: ``site, bytes, count, delta_bytes`` (since
    the frame before; on the first, since the snapshot before), ``start_delta_bytes`` (since the run's
    first snapshot; NA when it cannot be read), ``grew_frames`` (frames in a
    row it grew in), largest first, ``top`` of them; ``other_sites``/
    ``other_bytes``: the rest. ``devices``: ``device, bytes, delta_bytes``.
    ``growing``: (site, bytes grown over those frames, frames) of the sites
    that grew in ``GROWING_FRAMES`` frames in a row or more."""

    process: int | None
    path: str
    command: str
    finished: bool
    exit_status: object
    gone: bool  # the recording process died without finishing
    snapshots: int
    markers: int
    snapshot: int | None
    t: float | None
    live_bytes: int
    delta_bytes: int
    peak: tuple | None
    sites: pd.DataFrame
    other_sites: int
    other_bytes: int
    devices: pd.DataFrame
    growing: tuple
    events: tuple
    error: str | None = None
    history: tuple = field(default=())


def _by_site(profile, attribution) -> tuple[pd.Series, pd.Series, pd.DataFrame]:
    s = summarize(profile, "site", attribution)
    rows = s.rows[s.rows["bytes"] > 0] if not s.rows.empty else s.rows
    buffers = s.devices
    return (rows.set_index("site")["bytes"].astype("int64"), rows.set_index("site")["count"].astype("int64"),
            buffers)


class Refusals:
    """Profiles the reader refused, by the identity of their file (device,
    inode, size, modification time): :meth:`load` gives the same error again
    without reading such a file, until it changes. Keeps the newest
    ``keep``."""

    def __init__(self, keep: int = 1024):
        self.keep = keep
        self._refused: OrderedDict = OrderedDict()

    @staticmethod
    def _identity(path):
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            return None  # the reader says why
        return (os.fspath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def load(self, path, name=None):
        from jaxmemprof.errors import InputError
        from jaxmemprof.pprof.reader import load_profile

        key = self._identity(path)
        if key is not None and key in self._refused:
            raise self._refused[key]
        try:
            return load_profile(path, name=name)
        except InputError as exc:
            if key is not None:
                self._refused[key] = exc
                while len(self._refused) > self.keep:
                    self._refused.popitem(last=False)
            raise


class Tracker:
    """Frames of one process's run, in turn."""

    def __init__(self, process: int | None, attribution: Attribution, top: int = 15,
                 refusals: Refusals | None = None):
        self.process = process
        self.refusals = refusals if refusals is not None else Refusals()
        self.attribution = attribution
        self.top = top
        self.snapshot = None  # the snapshot of the frame before
        self.sites_before: pd.Series | None = None
        self.devices_before: pd.Series | None = None
        self.sites_start: pd.Series | None = None
        self.start_snapshot = None
        self.streak: dict[str, tuple[int, int]] = {}  # site -> (frames in a row it grew, bytes grown)
        self.live_before = None
        self.frame: Frame | None = None

    def _start_sites(self, poll) -> pd.Series | None:
        first = poll.first
        if first is None or first[4] is None:
            return None
        if self.start_snapshot != first[0]:
            try:
                self.sites_start = _by_site(self.refusals.load(first[4]), self.attribution)[0]
            except Exception:
                self.sites_start = None
            self.start_snapshot = first[0]
        return self.sites_start

    def update(self, poll) -> Frame:
        """The frame for ``poll`` (a store.follow.Poll); the same frame again
        when no new snapshot came."""
        m = poll.manifest
        command = " ".join(str(a) for a in (m.get("argv") or m.get("command") or []))
        latest = poll.latest
        if latest is None:
            return self._frame(poll, command, None, None, 0, 0, _empty_sites(), 0, 0, _empty_devices(), (),
                               error=poll.error or "no snapshot yet")
        if self.frame is not None and latest[0] == self.snapshot:
            f = self.frame
            return Frame(**{**f.__dict__, "finished": poll.finished, "gone": poll.gone,
                            "exit_status": m.get("exit_status"),
                            "snapshots": poll.snapshots, "markers": poll.markers, "peak": poll.peak,
                            "events": poll.events, "history": poll.history})
        snapshot, t_wall, live, _, file = latest
        try:
            profile = self.refusals.load(file, name=f"{poll.path}@{snapshot}")
        except Exception as exc:  # thinned or damaged meanwhile: the frame before stays
            if self.frame is not None:
                return self.frame
            return self._frame(poll, command, None, None, 0, 0, _empty_sites(), 0, 0, _empty_devices(), (),
                               error=f"snapshot {snapshot} unreadable: {exc}")
        sites, counts, devices = _by_site(profile, self.attribution)
        start = self._start_sites(poll)
        if self.sites_before is None and poll.previous is not None:
            # The first frame: growth since the snapshot before the newest.
            try:
                prev_sites, _, prev_devices = _by_site(self.refusals.load(poll.previous[4]), self.attribution)
                self.sites_before, self.live_before = prev_sites, poll.previous[2]
                pd_ = prev_devices[prev_devices["device"].astype(str) != ""]
                self.devices_before = pd_.set_index("device")["bytes"].astype("int64")
            except Exception:
                pass
        before = self.sites_before
        keys = sites.index.union(before.index) if before is not None else sites.index
        now = sites.reindex(keys, fill_value=0)
        delta = now - before.reindex(keys, fill_value=0) if before is not None else now * 0
        for site in keys:
            d = int(delta[site])
            if d > 0:
                n, grown = self.streak.get(site, (0, 0))
                self.streak[site] = (n + 1, grown + d)
            else:
                self.streak.pop(site, None)
        table = pd.DataFrame({"site": sites.index.astype(str), "bytes": sites.to_numpy(),
                              "count": counts.reindex(sites.index).to_numpy()})
        table["delta_bytes"] = delta.reindex(sites.index).fillna(0).astype("int64").to_numpy()
        if start is not None:
            table["start_delta_bytes"] = (sites - start.reindex(sites.index, fill_value=0)).to_numpy()
        else:
            table["start_delta_bytes"] = pd.array([pd.NA] * len(table), dtype="Int64")
        table["grew_frames"] = [self.streak.get(s, (0, 0))[0] for s in table["site"]]
        table = table.sort_values(["bytes", "site"], ascending=[False, True], kind="stable").reset_index(drop=True)
        shown, rest = table.head(self.top), table.iloc[self.top:]
        dev = devices[devices["device"].astype(str) != ""] if "device" in devices else devices
        dev_bytes = dev.set_index("device")["bytes"].astype("int64") if not dev.empty else pd.Series(dtype="int64")
        dev_before = self.devices_before
        dev_table = pd.DataFrame({"device": dev_bytes.index.astype(str), "bytes": dev_bytes.to_numpy()})
        dev_table["delta_bytes"] = (dev_bytes - dev_before.reindex(dev_bytes.index, fill_value=0)).to_numpy() \
            if dev_before is not None else 0
        growing = tuple(sorted(((s, g, n) for s, (n, g) in self.streak.items() if n >= GROWING_FRAMES),
                               key=lambda x: (-x[1], x[0])))
        live_delta = live - self.live_before if self.live_before is not None else 0
        self.snapshot, self.sites_before, self.devices_before, self.live_before = snapshot, sites, dev_bytes, live
        start_wall = m.get("start_epoch")
        t = t_wall - start_wall if isinstance(start_wall, (int, float)) and t_wall is not None else None
        self.frame = self._frame(poll, command, snapshot, t, live, live_delta, shown.reset_index(drop=True),
                                 len(rest), int(rest["bytes"].sum()) if len(rest) else 0, dev_table, growing)
        return self.frame

    def _frame(self, poll, command, snapshot, t, live, delta, sites, other_sites, other_bytes, devices, growing,
               error=None) -> Frame:
        return Frame(process=self.process, path=str(poll.path), command=command, finished=poll.finished,
                     gone=poll.gone, exit_status=poll.manifest.get("exit_status"), snapshots=poll.snapshots, markers=poll.markers,
                     snapshot=snapshot, t=t, live_bytes=live, delta_bytes=delta, peak=poll.peak, sites=sites,
                     other_sites=other_sites, other_bytes=other_bytes, devices=devices, growing=growing,
                     events=poll.events, error=error, history=poll.history)


def _empty_sites() -> pd.DataFrame:
    return pd.DataFrame({"site": pd.Series(dtype=object), "bytes": pd.Series(dtype="int64"),
                         "count": pd.Series(dtype="int64"), "delta_bytes": pd.Series(dtype="int64"),
                         "start_delta_bytes": pd.Series(dtype="Int64"), "grew_frames": pd.Series(dtype="int64")})


def _empty_devices() -> pd.DataFrame:
    return pd.DataFrame({"device": pd.Series(dtype=object), "bytes": pd.Series(dtype="int64"),
                         "delta_bytes": pd.Series(dtype="int64")})

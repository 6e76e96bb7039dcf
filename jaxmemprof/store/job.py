"""A multi-process job: one run directory per process, under one job directory.

::

    RUN/
      process-0/     a complete run directory (manifest.json, journal.sqlite, snapshots/)
      process-1/
      ...

Each process of a job recorded with ``jaxmemprof run`` writes its own
``process-N`` (see capture/session.py); every reader of a run works on one of
them as it is. This module finds the processes of a job, reads what each one
says about itself cheaply (its manifest and its snapshots' totals, never a
profile), aligns their clocks, adds their memory up over time, and merges
per-host copies of one job into one directory (copying, never moving).

Clock alignment: ``jax.distributed.initialize`` returns in every process at
once (it waits until all of them have connected), and each process records
the wall-clock time it returned (the ``distributed-init`` event). A process's
offset is that time minus process 0's (the lowest process that recorded
one); its times are shifted by it. Processes that did not record it are taken
at their own wall clocks (hosts synchronised by NTP differ by milliseconds).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import sqlite3
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from jaxmemprof.errors import InputError, check_not_empty
from jaxmemprof.store import layout
from jaxmemprof.store.journal import connect_read_only, recorder_running

_PROCESS = re.compile(re.escape(layout.PROCESS_DIR_PREFIX) + r"(0|[1-9][0-9]{0,8})")


def process_index_of(name: str) -> int | None:
    """N for a directory named ``process-N``, else None."""
    m = _PROCESS.fullmatch(name)
    return int(m[1]) if m else None


# A name that means a process index but is not written as one (process-00,
# process-+1, "process- 1", process-1e3): refused, never read as another
# process nor left out of the job unsaid.
_PROCESS_LIKE = re.compile(re.escape(layout.PROCESS_DIR_PREFIX) + r"[\s+\-]*[0-9][0-9\s+\-_.eE]*")


def odd_process_name(name: str) -> bool:
    """Whether ``name`` looks like a process directory's but is not
    ``process-N`` (N without a sign or leading zeros)."""
    return process_index_of(name) is None and _PROCESS_LIKE.fullmatch(name) is not None


def _is_run(path: Path) -> bool:
    return (path / layout.MANIFEST).is_file() or (path / layout.JOURNAL).is_file()


PROCESS_LINK_REFUSAL = ("is a symlink; a job's processes are read only from its own directories, never "
                        "through a link out of it (copy the process in: jaxmemprof merge)")


def process_directories(path) -> list[tuple[int, Path]]:
    """``(N, path/process-N)`` for each process directory of a job, by N.
    A symlink named ``process-N`` is refused (InputError), never followed:
    a copy of a job is its own directories."""
    path = Path(path)
    out = []
    try:
        entries = list(os.scandir(path))
    except OSError:
        return []
    for e in sorted(entries, key=lambda e: e.name):
        n = process_index_of(e.name)
        if n is None:
            if odd_process_name(e.name) and (e.is_dir(follow_symlinks=False) or e.is_symlink()):
                raise InputError(e.path, "is not a process directory's name: a process's is process-N (process-0, "
                                         "process-1, ...): rename it, or move it out of the job")
            continue
        if e.is_symlink():
            raise InputError(e.path, PROCESS_LINK_REFUSAL)
        if e.is_dir(follow_symlinks=False):
            out.append((n, Path(e.path)))
    return sorted(out)


def is_job_directory(path) -> bool:
    """A directory that is not a run itself and holds ``process-N`` directories."""
    path = Path(path)
    return path.is_dir() and not _is_run(path) and bool(process_directories(path))


# -- what each process says about itself ----------------------------------------------


@dataclass
class ProcessTotals:
    """One process of a job, read cheaply: its manifest and the totals of its
    snapshots (``snapshot, t_wall, t, live_bytes, trigger, label, file``;
    ``t`` on the job's aligned clock, seconds since the job started)."""

    process: int
    path: Path
    manifest: dict
    snapshots: pd.DataFrame
    finished: bool
    init_wall: float | None  # when jax.distributed.initialize returned, on this host's clock
    offset_s: float = 0.0  # this host's clock minus the job's reference clock
    thinned: frozenset = frozenset()
    error: str | None = None  # why it could not be read at all
    warnings: list = field(default_factory=list)

    @property
    def host(self) -> str:
        return str(self.manifest.get("hostname") or "")

    @functools.cached_property
    def running(self) -> bool:
        """Not finished, and its recording process still holds it (False: killed)."""
        return not self.finished and recorder_running(self.path)

    @property
    def peak(self) -> tuple[int | None, int]:
        """(snapshot, live bytes) at this process's own peak."""
        s = self.snapshots
        if s.empty:
            return None, 0
        i = s["live_bytes"].idxmax()
        return int(s.at[i, "snapshot"]), int(s.at[i, "live_bytes"])


_SNAPSHOT_COLUMNS = ["snapshot", "t_wall", "live_bytes", "trigger", "label", "file"]


def _connect(db: Path) -> sqlite3.Connection:
    return connect_read_only(db, tolerant=True)


def _number(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if np.isfinite(v) and abs(v) < 2.0**53 else None


def read_process(n: int, path: Path) -> ProcessTotals:
    """Process ``n`` of a job from ``path``: never raises for damage (a
    process killed before it wrote anything is one that did not finish)."""
    from jaxmemprof.store.reader import read_manifest

    warnings: list[str] = []
    manifest: dict = {}
    empty = pd.DataFrame({c: pd.Series(dtype=object) for c in _SNAPSHOT_COLUMNS + ["t"]})
    try:
        manifest = read_manifest(path / layout.MANIFEST)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        warnings.append(f"manifest.json unreadable ({' '.join(str(exc).split())})")
    finished = manifest.get("end_time") is not None
    link = layout.linked_entry(path)
    if link is not None:  # never followed out of the run
        return ProcessTotals(n, path, manifest, empty, finished, None,
                              error=f"{link.name} is a symlink; not read (a run is read only from its own files)",
                              warnings=warnings)
    db = path / layout.JOURNAL
    if not db.is_file():
        return ProcessTotals(n, path, manifest, empty, False, None, error="no journal (it recorded nothing)",
                              warnings=warnings)
    init = None
    thinned: set = set()
    try:
        con = _connect(db)
        try:
            rows = con.execute("SELECT snapshot, t_wall, live_bytes, trigger, label, file FROM snapshots "
                               "ORDER BY snapshot").fetchall()
            try:
                ev = con.execute("SELECT message FROM events WHERE kind = 'distributed-init' "
                                 "ORDER BY event LIMIT 1").fetchone()
            except sqlite3.Error:
                ev = None
            try:
                thinned = {r[0] for r in con.execute("SELECT snapshot FROM thinned")}
            except sqlite3.Error:
                thinned = set()
        finally:
            con.close()
    except sqlite3.Error as exc:
        return ProcessTotals(n, path, manifest, empty, finished, None,
                              error=f"journal unreadable ({' '.join(str(exc).split())})", warnings=warnings)
    good = [r for r in rows if _number(r[0]) is not None and _number(r[1]) is not None
            and _number(r[2]) is not None and isinstance(r[5], str)]
    if len(good) < len(rows):
        warnings.append(f"{len(rows) - len(good)} damaged snapshot row(s) left out")
    snaps = pd.DataFrame(good, columns=_SNAPSHOT_COLUMNS)
    snaps["snapshot"] = snaps["snapshot"].astype(np.int64)
    snaps["t_wall"] = snaps["t_wall"].astype(float)
    snaps["live_bytes"] = snaps["live_bytes"].astype(np.int64)
    if ev is not None:
        try:
            doc = json.loads(ev[0]) if isinstance(ev[0], str) and len(ev[0]) < 4096 else None
            init = _number(doc.get("t_wall")) if isinstance(doc, dict) else None
        except ValueError:
            init = None
    if init is None and isinstance(manifest.get("distributed"), dict):
        init = _number(manifest["distributed"].get("t_wall"))
    mi = manifest.get("process_index")
    if isinstance(mi, int) and not isinstance(mi, bool) and mi != n:
        warnings.append(f"its manifest says process {mi} (jax.distributed's index); read as process {n}, "
                        "the directory's name")
    snaps["t"] = snaps["t_wall"]
    return ProcessTotals(n, path, manifest, snaps, finished, init, thinned=frozenset(thinned), warnings=warnings)


@dataclass
class Job:
    """A job directory's processes, read and aligned (see the module's doc)."""

    path: Path
    processes: list  # ProcessTotals, by process index
    t0_wall: float  # the job's start on the reference clock
    alignment: str  # "jax.distributed.initialize", "wall clocks", or "mixed: ..."
    warnings: list = field(default_factory=list)

    def process(self, n: int) -> ProcessTotals:
        for p in self.processes:
            if p.process == n:
                return p
        raise InputError(str(self.path), f"has no process {n} (it has {process_list_text(self.indices)})")

    @property
    def indices(self) -> list[int]:
        return [p.process for p in self.processes]


def process_list_text(indices) -> str:
    """``0–3, 5, 7, 8``: runs of three or more consecutive indices as ranges."""
    xs = sorted(set(int(i) for i in indices))
    parts, i = [], 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        parts += [f"{xs[i]}\u2013{xs[j]}"] if j - i >= 2 else [str(x) for x in xs[i:j + 1]]
        i = j + 1
    return ", ".join(parts)


def align(processes: list) -> tuple[list, float, str]:
    """Shift each process's times onto the reference clock (module doc);
    returns (processes with ``offset_s`` and ``snapshots.t`` set, the job's
    start on that clock, how they were aligned)."""
    with_init = [p for p in processes if p.init_wall is not None]
    ref = with_init[0].init_wall if with_init else None
    out = []
    for p in processes:
        offset = (p.init_wall - ref) if (ref is not None and p.init_wall is not None) else 0.0
        out.append(replace(p, offset_s=float(offset)))
    starts = []
    for p in out:
        start = _number(p.manifest.get("start_epoch"))
        if start is None and not p.snapshots.empty:
            start = float(p.snapshots["t_wall"].min())
        if start is not None:
            starts.append(start - p.offset_s)
    t0 = min(starts) if starts else 0.0
    for p in out:
        p.snapshots = p.snapshots.assign(t=p.snapshots["t_wall"] - p.offset_s - t0)
    if len(with_init) == len(out):
        how = "jax.distributed.initialize"
    elif not with_init:
        how = "wall clocks"
    else:
        missing = [p.process for p in out if p.init_wall is None]
        named = process_list_text(missing)
        if named.count(",") >= 8:
            named = f"{len(missing)} of them"
        how = f"jax.distributed.initialize (processes {named} at their wall clocks)"
    return out, t0, how


def load_job(path) -> Job:
    """Read a job directory's processes (manifests and snapshot totals only)."""
    check_not_empty(path)
    path = Path(path)
    if not path.is_dir():
        raise InputError(str(path), "no such job directory" if not path.exists() else "is not a directory")
    dirs = process_directories(path)
    if not dirs:
        raise InputError(str(path), "holds no process-N directories (not a multi-process job)")
    procs = [read_process(n, p) for n, p in dirs]
    procs, t0, how = align(procs)
    warnings = []
    for p in procs:
        for w in p.warnings:
            warnings.append(f"process {p.process}: {w}")
    return Job(path=path, processes=procs, t0_wall=t0, alignment=how, warnings=warnings)


# -- the job's memory over time --------------------------------------------------------


@dataclass(frozen=True)
class JobTimeline:
    """``totals``: ``t, live_bytes`` (the sum over processes) at every moment a
    process took a snapshot or ended; ``peak_t``, ``peak_bytes``; ``at_peak``:
    process -> the snapshot in effect in it at the job's peak (absent: it was
    not running then)."""

    totals: pd.DataFrame
    peak_t: float | None
    peak_bytes: int
    at_peak: dict


def job_timeline(job: Job) -> JobTimeline:
    """Each process holds a snapshot's live bytes from that snapshot until
    its next one, and nothing before its first or after its last (it had not
    started, or had ended); the job holds their sum. Linear in snapshots (one
    sort)."""
    parts = []
    for p in job.processes:
        s = p.snapshots
        if s.empty:
            continue
        t = s["t"].to_numpy(float)
        v = s["live_bytes"].to_numpy(np.int64)
        delta = np.diff(v, prepend=0)
        parts.append(pd.DataFrame({"t": t, "order": 0, "delta": delta}))
        parts.append(pd.DataFrame({"t": [t[-1]], "order": [1], "delta": [-int(v[-1])]}))
    if not parts:
        return JobTimeline(pd.DataFrame({"t": pd.Series(dtype=float), "live_bytes": pd.Series(dtype=np.int64)}),
                           None, 0, {})
    ev = pd.concat(parts, ignore_index=True)
    g = ev.groupby(["t", "order"], sort=True)["delta"].sum().reset_index()
    g["live_bytes"] = g["delta"].cumsum().astype(np.int64)
    # The value held at a moment: after the snapshots taken then, before the ends.
    totals = g[g["order"] == 0][["t", "live_bytes"]].reset_index(drop=True)
    i = int(totals["live_bytes"].to_numpy().argmax())
    peak_t, peak_bytes = float(totals.at[i, "t"]), int(totals.at[i, "live_bytes"])
    at_peak = {}
    for p in job.processes:
        s = p.snapshots
        if s.empty:
            continue
        t = s["t"].to_numpy(float)
        if t[0] <= peak_t <= t[-1]:
            k = int(np.searchsorted(t, peak_t, side="right")) - 1
            at_peak[p.process] = int(s["snapshot"].iloc[k])
    return JobTimeline(totals, peak_t, peak_bytes, at_peak)


# -- merging per-host copies of one job -----------------------------------------------------


def _sources(inputs) -> list[tuple[int, Path, str]]:
    """(N, directory, the input it came from) for every process in ``inputs``:
    job directories (their process-N), process directories, and single runs
    whose manifest names their process index. An input that holds a link
    where a run's own file or directory belongs (or a symlinked process-N)
    is refused: merge copies runs, never links out of them."""
    from jaxmemprof.store.reader import read_manifest

    found = []
    for spec in inputs:
        check_not_empty(spec)
        p = Path(spec)
        if not p.is_dir():
            raise InputError(spec, "no such directory" if not p.exists() else "is not a directory")
        if is_job_directory(p):
            found += [(n, d, spec) for n, d in process_directories(p)]
            continue
        if not _is_run(p) and layout.linked_entry(p) is None:
            raise InputError(spec, "is neither a job directory (process-N/) nor a run directory")
        _refuse_foreign(p)
        n = process_index_of(p.name)
        if n is None:
            try:
                mi = read_manifest(p / layout.MANIFEST).get("process_index")
            except (OSError, ValueError, UnicodeDecodeError):
                mi = None
            if not isinstance(mi, int) or isinstance(mi, bool) or mi < 0:
                raise InputError(spec, "is a run whose manifest names no process index; "
                                       "rename it process-N to say which process it is")
            n = mi
        found.append((n, p, spec))
    for _, d, _ in found:
        _refuse_foreign(d)
    seen: dict[int, str] = {}
    for n, d, spec in found:
        if n in seen:
            raise InputError(spec, f"holds process {n}, which {seen[n]} holds too")
        seen[n] = str(d)
    return sorted(found)


def _refuse_foreign(run: Path) -> None:
    """A run to copy whose own names hold a link (or a FIFO, ...): refused."""
    bad = layout.foreign_entry(run)
    if bad is not None:
        p, kind = bad
        raise InputError(str(p), f"{layout.what(kind)} where a run holds its own "
                                 f"{'directory' if p.name == layout.SNAPSHOT_DIR and p.parent == run else 'file'}; "
                                 "merge copies only a run's own files, never links: copy the run whole first")


def _ignore_locks(directory, names):
    return [n for n in names if n == layout.LOCK]


def merge_job(output, inputs) -> list[tuple[int, Path]]:
    """Copy every process of ``inputs`` into ``output/process-N`` (a new or
    empty directory). Inputs are only read: nothing is moved or removed.
    Each process is copied under a temporary name of its own (created
    exclusively: never an existing entry) and renamed onto a name that holds
    nothing, so ``output`` never holds half a process, and nothing is
    written through a link. Returns (N, where it came from)."""
    check_not_empty(output)
    out = Path(output)
    sources = _sources(inputs)
    if not sources:
        raise InputError(" ".join(map(str, inputs)), "no process to merge")
    if out.exists() or out.is_symlink():
        if not out.is_dir() or out.is_symlink():
            raise InputError(str(out), "exists and is not a directory")
        if any(out.iterdir()):
            raise InputError(str(out), "is not empty; merge writes into a new or empty directory")
    real_out = os.path.realpath(out)
    for _, d, spec in sources:
        real = os.path.realpath(d)
        if real_out == real or real_out.startswith(real + os.sep):
            raise InputError(str(out), f"is inside {spec}, one of the inputs")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(str(out), f"cannot create it: {exc.strerror or exc}") from None
    done = []
    for n, d, _ in sources:
        final = out / f"{layout.PROCESS_DIR_PREFIX}{n}"
        tmp = out / f".{final.name}.tmp{os.getpid()}"
        try:
            tmp.mkdir()  # exclusive: fails on anything there, a link included
        except OSError as exc:
            raise InputError(str(tmp), f"cannot be created: {exc.strerror or exc}") from None
        try:
            shutil.copytree(d, tmp, symlinks=True, ignore=_ignore_locks, dirs_exist_ok=True)
            kind = layout.entry_kind(final)
            if kind != "absent":
                raise InputError(str(final), f"{layout.what(kind)}: appeared while merging; refused")
            os.rename(tmp, final)
        except (OSError, shutil.Error, InputError) as exc:
            shutil.rmtree(tmp, ignore_errors=True)  # our own temporary copy only
            if isinstance(exc, InputError):
                raise
            reason = getattr(exc, "strerror", None) or " ".join(str(exc).split())[:300]
            raise InputError(str(d), f"cannot be copied into {out}: {reason}") from None
        done.append((n, d))
    return done


def who(processes, most: int = 8) -> str:
    """``processes 0–3, 7``; a long list is cut after ``most`` parts (the
    terminal's; JSON and CSV have them all)."""
    parts = process_list_text(processes).split(", ")
    text = ", ".join(parts) if len(parts) <= most + 2 else ", ".join(parts[:most]) + f", … ({len(processes)} in all)"
    return f"process{'es' if len(processes) > 1 else ''} {text}"

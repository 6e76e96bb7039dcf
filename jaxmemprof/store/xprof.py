"""An XProf profile read into the run model (``Run``), beside the run
directory's reader (store/reader.py): the analyses read a profile as they
read a run, and never learn the format.

What a profile is: the directory ``jax.profiler.trace(DIR)`` writes
(``DIR/plugins/profile/<run>/<host>.xplane.pb``, one file per host), any
directory above or at ``<run>/``, or one ``.xplane.pb``. Where a log
directory holds several captures, the newest (its name is its time) is read,
and the reader says so.

Into the run model (one ``Run`` per host; several hosts: one ``Run`` whose
devices are ``HOST/DEVICE``, its programs those of the first host):

- the memory profile, where the profile has one (TPU, GPU), as snapshots:
  each device's bytes in use at moments of the capture (its peak among
  them), ``memory_stats`` (``bytes_in_use``, ``peak_bytes_in_use``,
  ``bytes_limit``), and at each snapshot the allocations live then, by the
  op they are for (the user's line, where an HLO op's metadata names it);
- each program the profile holds (``/host:metadata``'s HLO protos) as a
  jitted function of the jit tables: XLA's figures by kind, its peak, its
  buffers at that peak by line, its curve, one call with its arguments by
  the names JAX gave them and its outputs, aliased arguments marked donated,
  and how many times it ran.

What a profile cannot say is left out and said (``XprofRun.notes``): the
Python that held arrays, when the caller let go of an argument (the donation
finding takes the step's usual ``state = step(state, batch)``), a compile of
a change (no program to compile: a saving is an upper bound).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from jaxmemprof.errors import InputError
from jaxmemprof.store import layout
from jaxmemprof.xprof.xplane import SUFFIX

# The tables (pandas, numpy) are imported where a profile is read: telling
# whether a path is one (is_profile: `show`/`diff` ask it of every pprof
# file) imports neither.
if TYPE_CHECKING:
    from jaxmemprof.store.xprof_tables import XprofRun

PROFILE_DIRS = ("plugins", "profile")


def profile_files(path) -> tuple[list[Path], str]:
    """(the .xplane.pb files of the profile at ``path``, a note on which
    capture was chosen ('' where there was one)); ([], '') where ``path``
    is no profile. InputError for a profile directory with no host file."""
    path = Path(path)
    if path.is_file():
        return ([path], "") if path.name.endswith(SUFFIX) else ([], "")
    if not path.is_dir():
        return [], ""
    here = _xplanes(path)
    if here:
        return here, ""
    runs_dir = path / PROFILE_DIRS[0] / PROFILE_DIRS[1]
    if not runs_dir.is_dir() and path.name == PROFILE_DIRS[1] and path.parent.name == PROFILE_DIRS[0]:
        runs_dir = path
    if not runs_dir.is_dir() and path.name == PROFILE_DIRS[0]:
        runs_dir = path / PROFILE_DIRS[1]
    if not runs_dir.is_dir():
        return [], ""
    captures = sorted((d for d in runs_dir.iterdir() if d.is_dir() and not d.is_symlink()), key=lambda d: d.name)
    found = [(d, _xplanes(d)) for d in captures]
    found = [(d, f) for d, f in found if f]
    if not found:
        raise InputError(str(path), f"is an XProf log directory with no .xplane.pb under {runs_dir} (an empty or "
                                    "unfinished capture?)")
    chosen, files = found[-1]
    note = (f"{len(found)} captures under {runs_dir}: read the newest, {chosen.name} (give its directory to read "
            "another)") if len(found) > 1 else ""
    return files, note


def _xplanes(d: Path) -> list[Path]:
    try:
        return sorted(p for p in d.iterdir() if p.name.endswith(SUFFIX) and p.is_file() and not p.is_symlink())
    except OSError:
        return []


def is_profile(path) -> bool:
    """Whether ``path`` is an XProf profile (a .xplane.pb, or a directory
    holding one where a capture puts it, that is not a run directory); an
    empty capture directory is one too (reading it says what is missing)."""
    path = Path(path)
    if path.is_file():
        return path.name.endswith(SUFFIX)
    if not path.is_dir() or (path / layout.MANIFEST).is_file() or (path / layout.JOURNAL).is_file():
        return False  # a run directory is a run, whatever a trace beside it holds (run --xprof may put one there)
    if _xplanes(path):
        return True
    return (path / PROFILE_DIRS[0] / PROFILE_DIRS[1]).is_dir() or (
        path.name == PROFILE_DIRS[1] and path.parent.name == PROFILE_DIRS[0]) or (
        path.name == PROFILE_DIRS[0] and (path / PROFILE_DIRS[1]).is_dir())


def load_profile_run(path, host: int | None = None) -> XprofRun:
    """The profile at ``path`` as a run (``host``: the index of one host's
    file, in name order; None: every host)."""
    path = Path(path)
    from jaxmemprof.store.xprof_tables import build_run

    files, note = profile_files(path)
    if not files:
        raise InputError(str(path), "is not an XProf profile (no .xplane.pb)")
    if host is not None:
        if host >= len(files):
            raise InputError(str(path), f"has no host {host} (it has {len(files)}: 0 to {len(files) - 1})")
        files = [files[host]]
    t0 = time.perf_counter()
    run = build_run(path, files, multi=len(files) > 1, process=host)
    if note:
        run.warnings.append(note)
    run.manifest["read_s"] = time.perf_counter() - t0
    return run


def host_count(path) -> int:
    return len(profile_files(path)[0])

__all__ = ["host_count", "is_profile", "load_profile_run", "profile_files"]

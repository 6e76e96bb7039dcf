"""A capture session: the run directory, its writer and the sampler, shared by
``jaxmemprof run`` and ``with jaxmemprof.profile():``."""

from __future__ import annotations

import dataclasses
import errno
import functools
import json
import os
import platform
import re
import sqlite3
import stat
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from jaxmemprof._version import __version__
from jaxmemprof.capture.hooks import AfterImport
from jaxmemprof.capture.jit import JitProbe
from jaxmemprof.capture.sampler import Sampler, _jax_ready, profile_buffers
from jaxmemprof.errors import InputError
from jaxmemprof.store import layout
from jaxmemprof.store.writer import RunWriter, SnapshotRecord, Thinning

DEFAULT_ROOT = "jaxmemprof-runs"

_active: "Session | None" = None


def active() -> "Session | None":
    return _active


def default_output(stem: str) -> Path:
    """``jaxmemprof-runs/<stem>-<time>``; :func:`prepare_directory` makes
    it unique (``-2``, ``-3``, ...) when another run took the name. A
    process of a multi-process job whose launcher names the job
    (SLURM_JOB_ID, ...) gets ``<stem>-job-<id>``, the same in every process."""
    job = launcher_process()
    if job is not None and job.job_id:
        return _DefaultPath(Path(DEFAULT_ROOT) / f"{stem}-job-{_name_safe(job.job_id)}")
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return _DefaultPath(Path(DEFAULT_ROOT) / f"{stem}-{stamp}")


def _name_safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)[:64] or "job"


# -- the processes of a multi-process job ---------------------------------------------

# Launchers name a process's rank (and the job's size) before JAX knows it:
# (rank variable, size variable), first match wins.
RANK_VARIABLES = (
    ("JAX_PROCESS_ID", "JAX_NUM_PROCESSES"),
    ("SLURM_PROCID", "SLURM_NTASKS"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMI_RANK", "PMI_SIZE"),
    ("PMIX_RANK", None),
    ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"),
)
# Variables that name the job (so that every process picks the same default run name).
JOB_ID_VARIABLES = ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID", "OMPI_MCA_ess_base_jobid")


@dataclass(frozen=True)
class LauncherProcess:
    """This process's place in a multi-process job, as its launcher says."""

    index: int
    count: int | None  # None: the launcher does not say
    variable: str  # the variable that named it
    job_id: str | None = None


def launcher_process(environ=None) -> "LauncherProcess | None":
    """This process's rank from the first launcher variable set to a
    process index, when it is part of a job: the variable's size partner
    is more than 1, or is not set. None for a lone process (no variable, or
    a job of one), which keeps the single-run layout. A variable that does
    not hold a number is passed over (it is the launcher's, not ours)."""
    env = os.environ if environ is None else environ
    for rank_var, size_var in RANK_VARIABLES:
        text = env.get(rank_var, "").strip()
        if not text:
            continue
        if not text.isdigit():
            continue
        count = None
        size = env.get(size_var, "").strip() if size_var else ""
        if size.isdigit():
            count = int(size)
        if count is not None and count <= 1:
            return None
        job_id = next((env[v].strip() for v in JOB_ID_VARIABLES if env.get(v, "").strip()), None)
        return LauncherProcess(index=int(text), count=count, variable=rank_var, job_id=job_id)
    return None


def process_directory_name(index: int) -> str:
    return f"{layout.PROCESS_DIR_PREFIX}{index}"


# The process directories this process claimed: absolute path -> LauncherProcess.
_processes: dict[str, LauncherProcess] = {}


class _DefaultPath(type(Path())):
    """A default run name: another free name is chosen if it is taken."""


# The lock file of each run directory this process records into: held (flock)
# for the run's life, so that two runs never share one directory.
LOCK_NAME = layout.LOCK
_locks: dict[str, int] = {}
_lock_times: dict[str, float] = {}  # when each lock was taken (wall clock)


def prepare_directory(path: Path, force: bool, by_hand: bool = False) -> Path:
    """Claim ``path`` for a new run and return it.

    A fresh name is made with an exclusive mkdir; any directory is then
    locked for the run's life (a second run into it is refused at once).
    A non-empty directory is refused unless ``force``; even with ``force``,
    only a directory holding one of our runs (a manifest of ours) is reused,
    and only the files jaxmemprof writes are removed from it. A link (live
    or dangling) or anything else where one of our names belongs (the lock,
    the manifest, SQLite's files, snapshots/ and the files in it, the
    temporary names, ``process-N``) is refused, with or without ``force``,
    before anything is written: nothing is ever written through it.

    ``by_hand`` (``jaxmemprof run -o DIR``, before the script ran): the
    claim may wait for jax.distributed.initialize, for the processes of a
    job that no launcher variable names (see "jobs started by hand")."""
    proc = launcher_process()
    if proc is not None:
        return _prepare_process_directory(Path(path), proc, force)
    if isinstance(path, _DefaultPath):
        path = Path(_claim_fresh_name(path))
    else:
        path = Path(path)
        if path.exists() and not path.is_dir():
            raise InputError(str(path), "exists and is not a directory")
        _mkdir(path, exist_ok=True)
        if by_hand and _can_defer():
            return _claim_by_hand(path, force)
    return _claim(path, force)


def _claim(path: Path, force: bool, state: str = "recording") -> Path:
    """Lock ``path`` for this run and clear what an earlier run of ours left
    there (``force``); the lock is released if that fails."""
    _lock(path, state)
    try:
        _clear_for_reuse(path, force)
    except BaseException:
        release_directory(path)
        raise
    return path


def _prepare_process_directory(job: Path, proc: LauncherProcess, force: bool) -> Path:
    """``job/process-N`` for process N of a job: the job directory is shared
    (every process creates it if need be; never a single run's directory),
    the process directory is claimed, locked and cleared as a run directory
    is. Two processes that claim one index: the second is refused. A link
    at ``job/process-N`` (to a directory or to nothing) is refused."""
    if job.exists() and not job.is_dir():
        raise InputError(str(job), "exists and is not a directory")
    _mkdir(job, exist_ok=True)
    if (job / layout.MANIFEST).exists() or (job / layout.JOURNAL).exists():
        raise InputError(str(job), f"holds a single-process run, not a job's processes ({proc.variable}="
                                   f"{proc.index} makes this process {process_directory_name(proc.index)} "
                                   "of a job); choose another --output")
    path = job / process_directory_name(proc.index)
    _mkdir(path, exist_ok=True, own=True)
    _claim(path, force)
    _processes[os.path.abspath(path)] = proc
    return path


def _mkdir(path: Path, exist_ok: bool, own: bool = False) -> bool:
    """Create ``path`` (and its parents); False when it already existed.
    ``own``: the name is ours (``process-N``), so a link there is refused
    even when it leads to a directory; else the name is the user's, and a
    link to a directory is that directory."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise InputError(str(path.parent), "exists and is not a directory") from None
    except OSError as exc:
        raise InputError(str(path), f"cannot create the run directory: {exc.strerror or exc}") from None
    try:
        path.mkdir()
        return True
    except FileExistsError:
        if not exist_ok:
            raise
        kind = layout.entry_kind(path)
        if kind == "dir" or (kind == "link" and not own and path.is_dir()):
            return False
        if own:
            raise InputError(str(path), layout.refusal(kind, directory=True)) from None
        if kind == "link":
            raise InputError(str(path), "is a symlink to nothing (a dangling link); choose another --output") from None
        raise InputError(str(path), "exists and is not a directory") from None
    except OSError as exc:
        raise InputError(str(path), f"cannot create the run directory: {exc.strerror or exc}") from None


def _claim_fresh_name(path: Path) -> Path:
    """The first of ``path``, ``path-2``, ``path-3``, ... that this process
    creates itself (mkdir is atomic: two runs never get one name)."""
    for n in range(1, 10_000):
        candidate = path if n == 1 else path.with_name(f"{path.name}-{n}")
        try:
            _mkdir(candidate, exist_ok=False)
            return candidate
        except FileExistsError:
            continue
    raise InputError(str(path), "no free run name; choose one with --output")


_LOCK_FLAGS = (os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
               | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))


class _Busy(InputError):
    """The directory is locked by another jaxmemprof run."""


def _lock(path: Path, state: str = "recording") -> None:
    """Hold an exclusive lock on ``path/.jaxmemprof.lock`` until the run
    ends (or the process dies: the kernel releases it). The file is removed
    when the run ends; a lock taken on a file removed meanwhile is retried.
    Opened without following a link (a symlink there, live or dangling, is
    refused before anything is written), and only a regular file of one
    name (not a hard link to someone's file) is truncated. It holds the
    PID and the claim's state (see _claim_text)."""
    import fcntl

    lock_path = path / LOCK_NAME
    for _ in range(100):
        try:
            fd = os.open(lock_path, _LOCK_FLAGS, 0o644)
        except OSError as exc:
            kind = layout.entry_kind(lock_path) if exc.errno in (errno.ELOOP, errno.EMLINK, errno.EISDIR,
                                                                 errno.ENXIO) else None
            if kind not in (None, "absent", "file"):
                raise InputError(str(lock_path), layout.refusal(kind)) from None
            raise InputError(str(path), f"cannot write to the run directory: {exc.strerror or exc}") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            os.close(fd)
            problem = ("has other names (a hard link): not a lock file of ours" if stat.S_ISREG(st.st_mode)
                       else layout.refusal("dir" if stat.S_ISDIR(st.st_mode) else "other"))
            raise InputError(str(lock_path), problem)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                os.close(fd)
                raise _Busy(str(path), "another jaxmemprof run is recording into it; choose another "
                                            "--output (the processes of one job: set JAX_PROCESS_ID, or let "
                                            "the launcher's rank variable say, so that each records "
                                            "RUN/process-N)") from None
            # A file system without locks (some network ones): recorded
            # unlocked, as before locks existed.
        try:
            same = os.path.samestat(st, os.lstat(lock_path))
        except OSError:
            same = False
        if same:
            t0 = time.time()
            try:
                os.ftruncate(fd, 0)
                os.write(fd, _claim_text(state, t0))
            except OSError as exc:
                os.close(fd)
                raise InputError(str(path), f"cannot write to the run directory: {exc.strerror or exc}") from None
            _locks[os.path.abspath(path)] = fd
            _lock_times[os.path.abspath(path)] = t0
            return
        os.close(fd)  # the run that held it removed it: lock the new one
    raise InputError(str(path), "cannot lock the run directory")


def release_directory(path: Path) -> None:
    """Remove the run's lock file (only while it is still the file locked:
    never a name someone put in its place), then release the lock."""
    fd = _locks.pop(os.path.abspath(path), None)
    _lock_times.pop(os.path.abspath(path), None)
    if fd is None:
        return
    lock_path = Path(path) / LOCK_NAME
    try:
        if os.path.samestat(os.fstat(fd), os.lstat(lock_path)):
            os.unlink(lock_path)
    except OSError:
        pass
    os.close(fd)


def _forget_locks_in_child() -> None:
    """A forked child shares its parent's lock (one open file description):
    it drops its copy of the descriptor, so that the lock ends with the
    parent's run, never removing the parent's lock file."""
    for fd in _locks.values():
        try:
            os.close(fd)
        except OSError:
            pass
    _locks.clear()
    _lock_times.clear()
    _deferred.clear()


# -- jobs started by hand --------------------------------------------------------------
#
# Processes that learn their index only from their own
# jax.distributed.initialize(coordinator, num_processes=N, process_id=i), each
# run as `jaxmemprof run -o JOB`, cannot know at start that they are a job.
# JAX computes nothing before initialize, so the claim waits for it:
#
# - The first to lock JOB (the holder) records into JOB itself, exactly as a
#   single run does; its lock file says how far it is (_claim_text):
#   "starting", "jax" (jax imported), "distributed" (inside initialize), or
#   "recording" (a single run for good: its backend is up, or JAX was up
#   before the claim, or profile()).
# - Another run into JOB locked by a holder inside initialize (or one that
#   reaches it within a few seconds of its start) does not give up: it
#   records into a directory of its own, JOB/pending-PID (locked, a complete
#   run: killed there, nothing is lost). A holder that is a single run for
#   good refuses it at once, as before.
# - When initialize returns a job (num_processes > 1) in the holder and
#   pending runs are waiting in JOB, the holder moves its files into
#   JOB/process-i and lets JOB's lock go; each pending run then claims
#   JOB/process-j as a launcher's process does (_prepare_process_directory)
#   and moves its files there. A holder alone in JOB (one -o per host) keeps
#   the single layout, its manifest holding JAX's index, as before.
# Every name is made without following a link and nothing is renamed onto an
# existing name (RunWriter.move_to).

PENDING_PREFIX = "pending-"
BY_INITIALIZE = "process_id"  # what named the process: jax.distributed.initialize(process_id=...)
_STATE_WIDTH = 11
# How long a run into a locked JOB waits at its start for the holder to reach
# jax.distributed.initialize: since the holder's claim, before it imported jax
# and after (a job's processes start together, and import jax first).
WAIT_FOR_JAX_S = 10.0
WAIT_FOR_INITIALIZE_S = 30.0
# How long a pending process waits, once initialize returned, for the holder
# to move its run out of JOB.
WAIT_FOR_HOLDER_S = 60.0


@dataclass
class _Deferred:
    job: Path  # JOB as given (-o)
    force: bool
    pending: Path | None  # a pending run's own directory; None: the holder, recording into JOB itself
    settled: bool = False  # the claim is decided (a job's process, or a single run for good)
    holds_job: bool = False  # JOB's own lock is this run's too (a holder recording into a pending directory)


# Run directories whose claim waits for jax.distributed.initialize: absolute path -> _Deferred.
_deferred: dict[str, _Deferred] = {}


def _claim_text(state: str, t0: float) -> bytes:
    """The lock file's text: the PID, then the claim's state and when it was
    made; one length for one process, so that a state is rewritten in place."""
    return f"{os.getpid()}\n{state.ljust(_STATE_WIDTH)} {t0:.3f}\n".encode()


def _set_claim_state(path: Path, state: str) -> None:
    key = os.path.abspath(path)
    fd = _locks.get(key)
    if fd is None:
        return
    try:
        os.pwrite(fd, _claim_text(state, _lock_times.get(key, time.time())), 0)
    except OSError:
        pass


def _open_lock_file(path: Path) -> int | None:
    """``path``'s lock file opened to read, never through a link (nor a
    FIFO or another special file); None when there is no such file."""
    try:
        fd = os.open(Path(path) / LOCK_NAME, os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _read_claim(path: Path) -> tuple[str, float] | None:
    """(state, when it was claimed) from ``path``'s lock file, read without
    following a link; None when it is absent, not ours, or being written."""
    fd = _open_lock_file(path)
    if fd is None:
        return None
    try:
        text = os.read(fd, 256).decode("ascii", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)
    lines = text.split("\n")
    if len(lines) < 3:
        return ("recording", 0.0) if len(lines) == 2 and lines[0].strip().isdigit() else None  # an older one's: PID only
    parts = lines[1].split()
    try:
        return parts[0], float(parts[1])
    except (IndexError, ValueError):
        return None


def _held(path: Path) -> bool:
    """Whether a live process holds ``path``'s lock (False: none, or gone)."""
    import fcntl

    fd = _open_lock_file(path)
    if fd is None:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        return exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK)
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def _distributed_up() -> bool:
    state = getattr(sys.modules.get("jax._src.distributed"), "global_state", None)
    return getattr(state, "client", None) is not None or getattr(state, "service", None) is not None


def _can_defer() -> bool:
    """Whether this process may still learn from jax.distributed.initialize
    that it is part of a job: JAX has no backend up and is not distributed."""
    return _jax_ready() is None and not _distributed_up()


def _claim_by_hand(path: Path, force: bool) -> Path:
    """Claim ``path`` as a single run that may become a job's process (the
    holder), or, when another run holds it while it waits for
    jax.distributed.initialize, a pending directory of this run's own in it."""
    state = "jax" if "jax" in sys.modules else "starting"
    try:
        if force and _holds_only_processes(path):
            # A job recorded here before, run again with --force: each process
            # replaces its own process-N once initialize names it; until then
            # the holder too records beside them.
            _lock(path, state)
            try:
                pending = _begin_pending(path, force)
            except BaseException:
                release_directory(path)
                raise
            _deferred[os.path.abspath(pending)].holds_job = True
            return pending
        _claim(path, force, state)
    except _Busy:
        if not _holder_waits_for_initialize(path):
            raise
        return _begin_pending(path, force)
    _deferred[os.path.abspath(path)] = _Deferred(job=path, force=force, pending=None)
    return path


def _holds_only_processes(path: Path) -> bool:
    """Whether ``path`` holds a job's processes and nothing else of ours or
    anyone's: process-N and pending-PID directories (never links), a lock."""
    found = False
    try:
        names = os.listdir(path)
    except OSError:
        return False
    for name in names:
        kind = layout.entry_kind(Path(path) / name)
        if name == LOCK_NAME and kind == "file":
            continue
        if kind == "dir" and (name.startswith(PENDING_PREFIX) or re.fullmatch(r"process-(0|[1-9][0-9]*)", name)):
            found = found or name.startswith(layout.PROCESS_DIR_PREFIX)
            continue
        return False
    return found


def _holder_waits_for_initialize(path: Path) -> bool:
    """Whether the run holding ``path`` is inside jax.distributed.initialize,
    waited for while it is on its way there (see WAIT_FOR_*); False as soon
    as it is a single run for good or gone."""
    start = time.monotonic()
    while True:
        claim = _read_claim(path)
        if claim is None:
            if time.monotonic() - start > 2.0 or not _held(path):
                return False
        else:
            state, t0 = claim
            if state == "distributed":
                return True
            if state not in ("starting", "jax"):
                return False
            limit = WAIT_FOR_JAX_S if state == "starting" else WAIT_FOR_INITIALIZE_S
            # Since the holder's claim (its clock), and at most that long here.
            if min(time.time() - t0, time.monotonic() - start) > limit:
                return False
            if not _held(path):
                return False
        time.sleep(0.05)


def _begin_pending(job: Path, force: bool) -> Path:
    """JOB/pending-PID: a run directory of this run's own, made and locked
    exclusively, where it records until initialize says which process it is."""
    base = job / f"{PENDING_PREFIX}{os.getpid()}"
    for n in range(1, 100):
        path = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            _mkdir(path, exist_ok=False)
        except FileExistsError:
            continue
        _claim(path, False)
        _deferred[os.path.abspath(path)] = _Deferred(job=job, force=force, pending=Path(os.path.abspath(path)))
        return path
    raise InputError(str(job), "another jaxmemprof run is recording into it; choose another --output")


def _pending_peers(job: Path) -> bool:
    """Whether a live run waits in ``job`` (a JOB/pending-PID it holds)."""
    try:
        names = [e.name for e in os.scandir(job) if e.name.startswith(PENDING_PREFIX)
                 and e.is_dir(follow_symlinks=False)]
    except OSError:
        return False
    return any(_held(Path(job) / n) for n in names)


def _wait_for_job(job: Path) -> str | None:
    """Wait until the holder has moved its run out of ``job``; None then,
    else why not (it stays a single run)."""
    start = time.monotonic()
    while True:
        if all(layout.entry_kind(Path(job) / n) == "absent" for n in (layout.MANIFEST, layout.JOURNAL)):
            return None
        claim = _read_claim(job)
        if claim is not None and claim[0] == "recording" or not _held(job):
            return "it holds a single-process run"
        if time.monotonic() - start > WAIT_FOR_HOLDER_S:
            return "the run holding it did not make it a job"
        time.sleep(0.02)


# The summary a process of a job writes as it ends (analysis/job.py SUMMARY_FILE).
_SUMMARY_FILE = layout.SUMMARY


def _is_summary_file(name: str) -> bool:
    return name == _SUMMARY_FILE or re.fullmatch(rf"\.{re.escape(_SUMMARY_FILE)}\.tmp[0-9]+", name) is not None


def _is_our_run(path: Path) -> bool:
    """Whether ``path`` holds a manifest that jaxmemprof wrote (read
    without following a link)."""
    try:
        fd = os.open(path / layout.MANIFEST, os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return False
    try:
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return False
            doc = json.loads(f.read(1 << 20))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(doc, dict) and "jaxmemprof_version" in doc and "schema_version" in doc


def _refuse_foreign_entries(path: Path) -> None:
    """A name the new run writes through, replaces or removes must be ours:
    the lock, the manifest, the journal and SQLite's files, the summary and
    every temporary name regular files, snapshots/ a real directory and the
    snapshot files in it regular files. A symlink (live or dangling), a
    FIFO, a directory where a file goes: refused, with or without --force."""
    found = layout.foreign_entry(path)
    if found is not None:
        p, kind = found
        raise InputError(str(p), layout.refusal(kind, directory=p.name == layout.SNAPSHOT_DIR
                                                 and p.parent == path))


def _clear_for_reuse(path: Path, force: bool) -> None:
    """Refuse a non-empty directory unless ``force`` and it holds one of our
    runs; then remove only the files a run writes (never anything else).
    Whatever holds one of our names but is not ours refuses the directory
    first (see _refuse_foreign_entries). Removal goes through descriptors of
    the directory and of its snapshots/, so a link is never followed."""
    _refuse_foreign_entries(path)
    others = [p for p in path.iterdir() if p.name != LOCK_NAME]
    if not others:
        return
    if not force:
        raise InputError(str(path), "is not empty; choose another --output or pass --force")
    if not _is_our_run(path):
        raise InputError(str(path), "is not empty and holds no jaxmemprof run (no manifest of ours); "
                                    "--force replaces only a run; choose another --output")
    dfd = layout.open_directory(path)
    try:
        for p in others:
            name = p.name
            if (layout.is_run_file(name) or _is_summary_file(name)) and layout.entry_kind(name, dfd) == "file":
                _unlink(name, dfd)
        if layout.entry_kind(layout.SNAPSHOT_DIR, dfd) == "dir":
            sfd = layout.open_directory(layout.SNAPSHOT_DIR, dir_fd=dfd, follow=False)
            try:
                for name in os.listdir(sfd):
                    if layout.is_snapshot_file(name) and layout.entry_kind(name, sfd) == "file":
                        _unlink(name, sfd)
            finally:
                os.close(sfd)
            try:
                os.rmdir(layout.SNAPSHOT_DIR, dir_fd=dfd)
            except OSError:
                pass  # it holds files of someone else's: left as they are
    finally:
        os.close(dfd)


def _unlink(name: str, dir_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def allocator_environment() -> dict:
    return {
        k: v for k, v in sorted(os.environ.items())
        if k.startswith(layout.ALLOCATOR_ENV_PREFIXES) or k in layout.ALLOCATOR_ENV_NAMES
    }


class Session:
    def __init__(self, directory: Path, *, target_argv: list[str], interval: float,
                 max_overhead: float, jit_probe: bool = True, addresses: str = "auto",
                 command: list[str] | None = None, on_finish=None, plan=None):
        # on_finish(path): what a process of a job does with its run as it
        # ends (the CLI and the API ask for its summary); capture analyses nothing.
        self.on_finish = on_finish
        self.directory = directory
        self.t_start = time.monotonic()
        # Absolute: the script may chdir, the run directory stays put.
        self.path = Path(os.path.abspath(directory))
        try:
            thinning = thinning_schedule()
        except InputError:
            release_directory(self.path)
            raise
        manifest = {
            "jaxmemprof_version": __version__,
            "command": command if command is not None else list(sys.argv),
            "argv": target_argv,
            "cwd": os.getcwd(),
            "python": sys.version.split()[0],
            "jax_version": _version("jax"),
            "jaxlib_version": _version("jaxlib"),
            "platform": platform.platform(),
            "hostname": platform.node(),
            "pid": os.getpid(),
            "environment": allocator_environment(),
            "start_time": datetime.now(timezone.utc).isoformat(),
            "start_epoch": time.time(),
            "end_time": None,
            "exit_status": None,
            "settings": {"interval": interval, "max_overhead": max_overhead, "jit_probe": jit_probe,
                         "addresses": addresses, "thinning": dataclasses.asdict(thinning),
                         # run --plan (capture/jit/plan.py PlanOptions); null without it
                         "plan": plan.settings() if plan is not None and jit_probe else None},
        }
        proc = _processes.get(str(self.path))
        if proc is not None:  # as the launcher says; JAX's own index replaces it once known
            manifest.update(process_index=proc.index, process_count=proc.count, process_variable=proc.variable,
                            job_id=proc.job_id)
        self.process = proc
        # A claim that waits for jax.distributed.initialize (jobs started by hand).
        self.deferred = _deferred.pop(str(self.path), None)
        if self.deferred is not None and self.deferred.pending is not None:
            manifest["pending"] = {"job": os.path.abspath(self.deferred.job)}
        self._dist_patch = None
        self._dist_hook = None
        try:
            self.writer = RunWriter(self.path, manifest, thinning=thinning)
        except (OSError, sqlite3.Error) as exc:
            release_directory(self.path)
            raise InputError(str(directory), f"cannot write the run: {_reason(exc)}") from None
        self.forked = False  # a forked child's copy: records nothing
        self.child_hooks: list = []  # called in a forked child, to stop recording there
        self.sampler = Sampler(self.writer, interval=interval, max_overhead=max_overhead, addresses=addresses)
        # Under run, the console script that started jaxmemprof is the outermost
        # frame of every stack the program makes: not the program's own. XLA's
        # dumps at the end take their share of the half of --max-overhead the
        # sampler leaves.
        launcher = (os.path.abspath(sys.argv[0]),) if target_argv and sys.argv and os.path.isfile(sys.argv[0]) else ()
        self.probe = JitProbe(self.writer, dump_share=max_overhead / 2, exclude=launcher,
                              plan=plan) if jit_probe else None
        if self.probe is not None:
            self.sampler.hooks.append(self.probe.on_snapshot)
            self.probe.observer = self.sampler

    def start(self) -> "Session":
        global _active
        _active = self
        if self.probe is not None:
            self.probe.install()
        self._hook_warnings()
        self._hook_distributed()
        if self.deferred is not None:
            self.sampler.hooks.append(self._on_snapshot_claim)
        self.sampler.start()
        return self

    # jax.distributed.initialize returns in every process of a job at once (it
    # waits for all of them to connect): the moment it returns is recorded,
    # to align the processes' clocks, with the index JAX gives the process.
    def _hook_distributed(self) -> None:
        jax = sys.modules.get("jax")
        if jax is not None and hasattr(jax, "distributed"):
            self._patch_distributed(jax)
            return
        self._dist_hook = AfterImport("jax", self._patch_distributed)
        sys.meta_path.insert(0, self._dist_hook)

    def _patch_distributed(self, jax) -> None:
        dist = getattr(jax, "distributed", None)
        original = getattr(dist, "initialize", None)
        if original is None or not callable(original) or hasattr(original, "_jaxmemprof_original"):
            return

        @functools.wraps(original)
        def initialize(*args, **kwargs):
            s = _active
            if s is not None and not s.forked:
                s._claim_state_is("distributed")
            try:
                result = original(*args, **kwargs)
            except BaseException:
                s = _active
                if s is not None and not s.forked:
                    s._settle_single()
                raise
            s = _active
            if s is not None and not s.forked:
                s._on_distributed_init()
            return result

        initialize._jaxmemprof_original = original
        try:
            dist.initialize = initialize
        except Exception:
            return
        self._dist_patch = (dist, original, initialize)
        self._claim_state_is("jax")

    def _unhook_distributed(self) -> None:
        if self._dist_hook is not None and self._dist_hook in sys.meta_path:
            sys.meta_path.remove(self._dist_hook)
        if self._dist_patch is not None:
            dist, original, ours = self._dist_patch
            if getattr(dist, "initialize", None) is ours:
                dist.initialize = original
            self._dist_patch = None

    def _on_distributed_init(self) -> None:
        """Record when jax.distributed.initialize returned (the job's common
        moment) and the process index and count it set (read from JAX's
        state: asking jax.process_index() would start the backend)."""
        t_wall, t_mono = time.time(), time.monotonic()
        try:
            state = getattr(sys.modules.get("jax._src.distributed"), "global_state", None)
            index, count = getattr(state, "process_id", None), getattr(state, "num_processes", None)
            index = index if isinstance(index, int) else None
            count = count if isinstance(count, int) else None
            if self.deferred is not None and not self.deferred.settled:
                self._claim_job_process(index, count)
            info = {"t_wall": t_wall, "t_mono": t_mono, "process_index": index, "process_count": count}
            proc = self.process
            job = count is not None and count > 1  # initialize(num_processes=1) makes no job
            if proc is not None and job and index is not None and index != proc.index:
                info["launcher_process_index"] = proc.index
                self.writer.add_event("warning", f"jax.distributed.initialize made this process {index}; "
                                                 f"{proc.variable} said {proc.index}, which names its directory")
            self.writer.add_event("distributed-init", json.dumps(info))
            with self.writer._lock:
                if self.writer.closed:
                    return
                m = self.writer.manifest
                m["distributed"] = info
                if index is not None and job:
                    m["process_index"], m["process_count"] = index, count
                layout.write_json_atomic(self.path / layout.MANIFEST, m)
        except Exception:
            pass  # never break the program's own initialize

    # -- a claim that waits for jax.distributed.initialize (jobs started by hand) --

    def _claim_state_is(self, state: str) -> None:
        d = self.deferred
        if d is not None and not d.settled and (d.pending is None or d.holds_job):
            _set_claim_state(d.job, state)

    def _release_job_lock(self) -> None:
        d = self.deferred
        if d is not None and d.holds_job:
            d.holds_job = False
            release_directory(d.job)

    def _settle_single(self) -> None:
        """No job after all: the holder is a single run for good (a run
        waiting for it is then refused); a pending run stays where it is."""
        d = self.deferred
        if d is None or d.settled:
            return
        d.settled = True
        if d.pending is None:
            _set_claim_state(self.path, "recording")
        elif d.holds_job:
            _set_claim_state(d.job, "recording")
            self._pending_alone("holds a job's processes, not a single run")
        else:
            self._pending_alone("another jaxmemprof run is recording into it")

    def _on_snapshot_claim(self) -> None:
        """The backend is up (a snapshot was taken) without initialize: a single run."""
        if self.deferred is not None and not self.deferred.settled:
            self._settle_single()

    def _pending_alone(self, why: str) -> None:
        _warn(f"jaxmemprof: warning: {self.deferred.job}: {why}; this process is recorded in {self.directory}\n")

    def _claim_job_process(self, index: int | None, count: int | None) -> None:
        """initialize returned: a process of a job claims JOB/process-<index>
        and moves its run there (the holder only when pending runs wait in
        JOB: alone, it keeps the single layout). Whatever fails leaves the
        run where it is, complete, with a warning."""
        d = self.deferred
        if index is None or count is None or count <= 1:
            self._settle_single()
            return
        d.settled = True
        proc = LauncherProcess(index=index, count=count, variable=BY_INITIALIZE)
        name = process_directory_name(index)
        job = Path(os.path.abspath(d.job))
        old = self.path
        if d.pending is None:
            if not _pending_peers(job):
                _set_claim_state(job, "recording")
                return
            dst = job / name
            try:
                _mkdir(dst, exist_ok=True, own=True)
                _claim(dst, d.force)
            except InputError as exc:
                _set_claim_state(job, "recording")
                _warn(f"jaxmemprof: warning: {exc}; this process is recorded as a single run in {self.directory}\n")
                return
        else:
            why = _wait_for_job(job)
            if why is not None:
                self._pending_alone(why)
                return
            try:
                dst = _prepare_process_directory(job, proc, d.force)
            except InputError as exc:
                self._pending_alone(exc.problem if exc.source == str(job) else str(exc))
                return
        try:
            self.writer.move_to(dst)
        except (OSError, InputError, sqlite3.Error) as exc:
            release_directory(dst)
            _processes.pop(str(dst), None)
            try:
                os.rmdir(dst)
            except OSError:
                pass
            if d.pending is None:
                _set_claim_state(job, "recording")
            _warn(f"jaxmemprof: warning: {dst}: cannot move the run there ({_reason(exc)}); this process is "
                  f"recorded in {self.directory}\n")
            return
        release_directory(old)
        self._release_job_lock()
        if d.pending is not None:
            try:
                os.rmdir(old)  # empty now: only a directory of ours, never anything in it
            except OSError:
                pass
        self.path = dst
        self.directory = Path(d.job) / name
        self.process = proc
        _processes[str(dst)] = proc
        with self.writer._lock:
            m = self.writer.manifest
            m.pop("pending", None)
            m.update(process_index=index, process_count=count, process_variable=BY_INITIALIZE)

    # Warnings are heard where the warnings module shows each one
    # (_showwarnmsg, which calls showwarning), so that the script still sees
    # its own warnings.showwarning.
    def _hook_warnings(self) -> None:
        self._showwarnmsg = getattr(warnings, "_showwarnmsg", None)
        self._showwarnmsg_impl = getattr(warnings, "_showwarnmsg_impl", None)
        if self._showwarnmsg is not None:
            warnings._showwarnmsg = self._on_warning

    def _unhook_warnings(self) -> None:
        if self._showwarnmsg is not None and getattr(warnings, "_showwarnmsg", None) == self._on_warning:
            warnings._showwarnmsg = self._showwarnmsg

    def _on_warning(self, msg):
        """Record each warning the program shows (JAX's 'Some donated buffers
        were not usable', say), then show it as before. Warnings a
        catch_warnings(record=True) block collects are not shown: not recorded."""
        shown = getattr(warnings, "_showwarnmsg_impl", None) is self._showwarnmsg_impl
        if shown and not self.forked:
            try:
                self.writer.add_event(
                    "warning", f"{msg.category.__name__}: {msg.message} ({msg.filename}:{msg.lineno})"[:4000])
            except Exception:
                pass
        self._showwarnmsg(msg)

    def stop(self, exit_status, ended_by: str) -> None:
        """Stop sampling and record how the run ended (the last snapshot has
        been taken by the caller). Nothing in a forked child."""
        global _active
        if self.forked:
            return
        self.sampler.stop()
        if self.probe is not None:
            self.probe.uninstall()
        self._unhook_warnings()
        self._unhook_distributed()
        if _active is self:
            _active = None
        if self.deferred is not None and not self.deferred.settled and self.deferred.pending is not None:
            self._settle_single()
        try:
            self._finish(exit_status, ended_by)
        except Exception as exc:  # a full disk: what was committed stays readable
            _warn(f"jaxmemprof: warning: could not finalise {self.directory}: {exc}\n")
        else:
            if ended_by != "SIGTERM" and self._in_job():
                self._write_summary()
        release_directory(self.path)
        self._release_job_lock()

    def _in_job(self) -> bool:
        count = self.writer.manifest.get("process_count")
        return self.process is not None or (isinstance(count, int) and count > 1)

    def _write_summary(self) -> None:
        """A process of a job analyses its own run as it ends (its host does
        that work, beside the others), so that `report` on the job reads one
        small file per process: ``on_finish``, given by whoever started the
        session. A failure costs only that: report then analyses the process
        itself."""
        if self.on_finish is None:
            return
        try:
            self.on_finish(self.path)
        except Exception:
            pass

    def detach_in_child(self) -> None:
        """In a forked child: stop recording at once, touching nothing the
        parent's run uses (its SQLite connection is neither committed nor
        closed here; its lock file stays the parent's)."""
        self.forked = True
        self.sampler.failed = "forked"  # no snapshot, and no event about it
        self.sampler._stop.set()
        self.writer.detach()
        if self.probe is not None:
            self.probe.active = False
        self._unhook_warnings()
        for hook in self.child_hooks:
            try:
                hook()
            except Exception:
                pass

    def _finish(self, exit_status, ended_by: str) -> None:
        facts = _backend_facts()
        proc = self.process
        if proc is not None:
            if facts.get("process_count") in (None, 1):  # JAX not distributed (or not up): the launcher's word
                facts.update(process_index=proc.index, process_count=proc.count)
            elif facts.get("process_index") != proc.index:
                facts["launcher_process_index"] = proc.index
        self.writer.finish(
            end_time=datetime.now(timezone.utc).isoformat(),
            duration_s=round(time.monotonic() - self.t_start, 6),
            exit_status=exit_status,
            ended_by=ended_by,
            thinned_snapshots=self.writer.thinned,
            **facts,
        )


THINNING_ENV = "JAXMEMPROF_THINNING"


def thinning_schedule() -> Thinning:
    """The default schedule, or ``RECENT_S:BASE_WIDTH_S:EVERY`` from
    $JAXMEMPROF_THINNING (a compressed clock, to see thinning in a short run)."""
    text = os.environ.get(THINNING_ENV)
    if not text:
        return Thinning()
    try:
        recent, width, every = text.split(":")
        sched = Thinning(recent_s=float(recent), base_width_s=float(width), every=int(every))
        if not (sched.recent_s > 0 and sched.base_width_s > 0 and sched.every > 0):
            raise ValueError
    except ValueError:
        raise InputError(THINNING_ENV, f"{text!r}: expected RECENT_S:BASE_WIDTH_S:EVERY, all above 0") from None
    return sched


def _warn(text: str) -> None:
    """A line on stderr, if the script left one to write to."""
    try:
        sys.stderr.write(text)
    except Exception:
        pass


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc)


# -- forked children ------------------------------------------------------------------
#
# A forked child never writes into its parent's run: it stops recording that
# run at once. A child forked before the program brought JAX up, that then
# brings JAX up itself (JAX imported, or first used, after the fork: what JAX
# supports in a forked child), is recorded into a run of its own beside the
# parent's, RUN.fork-PID (RUN/process-N.fork-PID in a job), from the moment
# it does. A child forked once JAX was up is not recorded: JAX's threads are
# not copied by fork, and a profile taken there could hang.

FORK_SUFFIX = ".fork-"
_jax_up_at_fork = False
_fork_watch: "_ForkWatch | None" = None


def fork_directory(parent: Path, pid: int) -> Path:
    return parent.with_name(f"{parent.name}{FORK_SUFFIX}{pid}")


def _before_fork() -> None:
    global _jax_up_at_fork
    _jax_up_at_fork = _active is not None and _jax_ready() is not None


class _ForkWatch:
    """In a forked child: waits (in a thread of its own) until the child
    brings JAX up, then records it into its own run directory."""

    def __init__(self, parent: "Session"):
        self.parent_path = parent.path
        m = parent.writer.manifest
        self.argv = list(m.get("argv") or [])
        self.command = list(m.get("command") or [])
        self.interval = parent.sampler.interval
        self.max_overhead = parent.sampler.max_overhead
        self.addresses = parent.sampler.addresses
        self.on_finish = parent.on_finish
        self.session: Session | None = None
        self.done = False

    def start(self) -> None:
        import threading

        threading.Thread(target=self._loop, name="jaxmemprof-fork", daemon=True).start()

    def _loop(self) -> None:
        from jaxmemprof.capture.sampler import block_signals_in_this_thread

        block_signals_in_this_thread()
        while not self.done:
            if _jax_ready() is not None:
                self._begin()
                return
            time.sleep(min(self.interval, 0.2))

    def _begin(self) -> None:
        global _active
        if _active is not None or self.done:
            return  # the child records itself (profile()), or is ending
        try:
            path = fork_directory(self.parent_path, os.getpid())
            _mkdir(path, exist_ok=False)
            _lock(path)
            s = Session(path, target_argv=self.argv, interval=self.interval, max_overhead=self.max_overhead,
                        jit_probe=False, addresses=self.addresses, command=self.command, on_finish=self.on_finish)
            with s.writer._lock:
                s.writer.manifest["forked_from"] = {"pid": os.getppid(), "run": str(self.parent_path)}
                layout.write_json_atomic(path / layout.MANIFEST, s.writer.manifest)
            s.start()
            self.session = s
        except Exception:
            return
        mp_util = sys.modules.get("multiprocessing.util")
        if mp_util is not None and hasattr(mp_util, "Finalize"):
            # A multiprocessing child ends by os._exit, after its finalizers.
            try:
                mp_util.Finalize(None, finish_fork_child, args=(None, "exit"), exitpriority=100)
            except Exception:
                pass


def finish_fork_child(exit_status, ended_by: str) -> None:
    """At a forked child's end: its own run's last snapshot, then finalised."""
    w = _fork_watch
    if w is None:
        return
    w.done = True
    s = w.session
    if s is None or s.forked or s.writer.closed:
        return
    try:
        s.sampler.stop()
        s.sampler.snapshot("exit")
    except Exception:
        pass
    s.stop(exit_status, ended_by)


def _after_fork_in_child() -> None:
    """Registered once: a forked child stops recording the parent's run (and
    may record its own, see above)."""
    global _active, _fork_watch
    s = _active
    _active = None
    _forget_locks_in_child()
    _fork_watch = None
    if s is not None:
        s.detach_in_child()
        if not _jax_up_at_fork:
            try:
                _fork_watch = _ForkWatch(s)
                _fork_watch.start()
            except Exception:
                _fork_watch = None


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


def _backend_facts() -> dict:
    """Devices and processes, read only if the target brought JAX up."""
    jax = _jax_ready()
    if jax is None:
        return {"backend": None, "devices": [], "process_index": 0, "process_count": 1}
    try:
        return {
            "backend": jax.default_backend(),
            "devices": [
                {"id": d.id, "name": str(d), "kind": getattr(d, "device_kind", ""),
                 "process_index": d.process_index,
                 "local_hardware_id": getattr(d, "local_hardware_id", None)}
                for d in jax.local_devices()
            ],
            "process_index": jax.process_index(),
            "process_count": jax.process_count(),
        }
    except Exception as exc:
        return {"backend": None, "devices": [], "backend_error": str(exc)}


# -- one test's totals, kept in memory (the pytest plugin's --jaxmemprof) -------------


class _TotalsWriter:
    """Where a TotalsSession's sampler and jit probe write: what one test's
    peak needs, in memory (no run directory, no journal): each snapshot's
    number, time, trigger, label and live bytes; each compiled signature's
    memory_analysis() figures; each sampled call's signature, input leaves
    and live bytes before it."""

    thinned = 0

    def __init__(self):
        self._lock = threading.RLock()
        self.closed = False
        self.manifest: dict = {}
        self.rows: list[dict] = []  # the snapshots
        self.functions: dict = {}  # function_id -> name
        self.compiles: list[dict] = []
        self.calls: list[dict] = []
        self.events: list = []

    @property
    def snapshots(self) -> int:
        return len(self.rows)

    def add_snapshot(self, rec) -> int:
        with self._lock:
            self.rows.append({"snapshot": len(self.rows) + 1, "t_wall": rec.t_wall, "trigger": rec.trigger,
                              "label": rec.label, "live_bytes": rec.live_bytes})
            return len(self.rows)

    # The jit probe's rows, in the order of store/layout.py's jit tables.
    def add_jit_function(self, row: dict) -> None:
        self.functions[row["function_id"]] = row.get("name")

    def add_jit_compile(self, row: tuple) -> None:
        fid, _, t_wall, signature, argument, output, alias, temp, code = row[:9]
        self.compiles.append({"function_id": fid, "t_wall": t_wall, "signature": signature,
                              "argument_bytes": argument, "output_bytes": output, "alias_bytes": alias,
                              "temp_bytes": temp, "generated_code_bytes": code})

    def add_jit_call(self, row: tuple) -> None:
        self.calls.append({"function_id": row[1], "call_index": row[2], "t_wall": row[3], "inputs": row[8],
                           "signature": row[10], "live_before": row[11]})

    def add_event(self, kind: str, message: str, snapshot=None) -> None:
        self.events.append((kind, message))

    def add_jit_program(self, *args, **kwargs) -> None:
        pass  # XLA's buffers by line: not kept (the totals need memory_analysis() alone)

    def set_jit_liveness(self, *args) -> None:
        pass

    def set_jit_counts(self, rows) -> None:
        pass

    def owned_by_this_thread(self) -> bool:
        return self._lock._is_owned()

    def detach(self) -> None:
        self.closed = True

    def finish(self, **fields) -> None:
        self.closed = True


class _TotalsSampler(Sampler):
    """Snapshots of the totals only: JAX's profile, and the bytes of the
    buffers in it (as a run's snapshots count them); no array described."""

    def _collect(self, jax, trigger, label, t_wall, t_mono, live, wait: bool) -> SnapshotRecord:
        profile = jax.profiler.device_memory_profile()
        live_bytes, buffers = profile_buffers(profile)
        return SnapshotRecord(t_wall=t_wall, t_mono=t_mono, trigger=trigger, label=label, profile=b"",
                              live_bytes=live_bytes, buffers=buffers, arrays=0)

    def _affordable_at(self):
        # No array is described: the next snapshot costs what the last one did.
        return self._t0 + (self._spent + self._cost) * self._wall_per_sampling_s, None


class _TotalsProbe(JitProbe):
    def _read_program(self, state, signature, compiled, ma) -> bool:
        return True  # memory_analysis() is all the totals need: the executable's program is not read


class TotalsSession:
    """One test's device memory, in memory, for a figure without its lines
    (``pytest --jaxmemprof`` on a test without a limit): snapshots of the
    totals (the caller's, and one every ``interval`` seconds within
    ``max_overhead``) and the jit probe's memory_analysis() of what the test
    compiles, in ``writer``. No run directory; not the active session."""

    def __init__(self, *, interval: float, max_overhead: float):
        self.writer = _TotalsWriter()
        self.sampler = _TotalsSampler(self.writer, interval=interval, max_overhead=max_overhead)
        self.probe = _TotalsProbe(self.writer, dump_share=0.0, dump_min_s=0.0)
        self.sampler.hooks.append(self.probe.on_snapshot)
        self.probe.observer = self.sampler

    def start(self) -> "TotalsSession":
        self.probe.install()
        self.sampler.start()
        return self

    def stop_sampling(self) -> None:
        """The sampler's thread and the probe stop (snapshots on demand go on)."""
        self.sampler.stop()
        if self.probe is not None:
            probe, self.probe = self.probe, None
            probe.uninstall()
            # No cycle left between them: freed with the session, not by a
            # garbage collection of the old generation later.
            self.sampler.hooks.clear()
            probe.observer = None
        self.sampler._thread = None  # joined: the thread and the sampler no longer hold each other

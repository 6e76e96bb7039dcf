"""The run directory: claimed for one run and locked for its life (a second
run into it is refused), reused only when it holds one of our runs (--force),
and cleared of nothing but the files a run writes; a link or anything else
where one of our names belongs is refused before anything is written. Also
the default run name, a multi-process job's process-N directories (named by
the launcher's variables), and the claim of a job started by hand, which
waits for jax.distributed.initialize to say which process this is."""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from jaxmemprof.capture.sampler import jax_ready
from jaxmemprof.errors import InputError
from jaxmemprof.store import layout

DEFAULT_ROOT = "jaxmemprof-runs"


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


class BadProcessIndex(InputError):
    """A launcher variable that names a process index no launcher writes
    (``+1``, ``01``, `` 1``, ``10**20``, one past the job's size)."""


# A process index as launchers write it (and as process-N names it); a number
# written otherwise is refused, not read as another process.
_INDEX = re.compile(r"0|[1-9][0-9]{0,8}")
_NUMBER_LIKE = re.compile(r"\s*[+-]?\s*[0-9]+\s*")


def launcher_process(environ=None) -> LauncherProcess | None:
    """This process's rank from the first launcher variable set to a
    process index, when it is part of a job: the variable's size partner
    is more than 1, or is not set. None for a lone process (no variable, or
    a job of one), which keeps the single-run layout. A variable that does
    not hold a number is passed over (it is the launcher's, not ours); one
    that holds a number no launcher writes as an index (a sign, a leading
    zero or space, more than 9 digits, not below the job's size) raises
    BadProcessIndex."""
    env = os.environ if environ is None else environ
    for rank_var, size_var in RANK_VARIABLES:
        text = env.get(rank_var, "")
        if not text.strip():
            continue
        if not _INDEX.fullmatch(text):
            if _NUMBER_LIKE.fullmatch(text):
                raise BadProcessIndex(f"{rank_var}={text!r}", "is not a process index (a launcher writes 0, 1, 2, "
                                                             "...): set it to this process's index, or unset it")
            continue
        count = None
        size = env.get(size_var, "").strip() if size_var else ""
        if _INDEX.fullmatch(size):
            count = int(size)
        if count is not None and count <= 1:
            return None
        if count is not None and int(text) >= count:
            raise BadProcessIndex(f"{rank_var}={text!r}", f"is not a process index of a job of {count} "
                                                         f"({size_var}={size!r}): its indices are 0 to {count - 1}")
        job_id = next((env[v].strip() for v in JOB_ID_VARIABLES if env.get(v, "").strip()), None)
        return LauncherProcess(index=int(text), count=count, variable=rank_var, job_id=job_id)
    return None


def process_directory_name(index: int) -> str:
    return f"{layout.PROCESS_DIR_PREFIX}{index}"


# The process directories this process claimed: absolute path -> LauncherProcess.
processes: dict[str, LauncherProcess] = {}


if TYPE_CHECKING:
    _ConcretePath = Path
else:
    _ConcretePath = type(Path())  # PosixPath or WindowsPath: Path itself takes no subclass before 3.12


class _DefaultPath(_ConcretePath):
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
        return prepare_process_directory(Path(path), proc, force)
    if isinstance(path, _DefaultPath):
        path = Path(_claim_fresh_name(path))
    else:
        path = Path(path)
        if path.exists() and not path.is_dir():
            raise InputError(str(path), "exists and is not a directory")
        mkdir(path, exist_ok=True)
        if by_hand and _can_defer():
            return _claim_by_hand(path, force)
    return claim_directory(path, force)


def claim_directory(path: Path, force: bool, state: str = "recording") -> Path:
    """Lock ``path`` for this run and clear what an earlier run of ours left
    there (``force``); the lock is released if that fails."""
    lock(path, state)
    try:
        _clear_for_reuse(path, force)
    except BaseException:
        release_directory(path)
        raise
    return path


def prepare_process_directory(job: Path, proc: LauncherProcess, force: bool) -> Path:
    """``job/process-N`` for process N of a job: the job directory is shared
    (every process creates it if need be; never a single run's directory),
    the process directory is claimed, locked and cleared as a run directory
    is. Two processes that claim one index: the second is refused. A link
    at ``job/process-N`` (to a directory or to nothing) is refused."""
    if job.exists() and not job.is_dir():
        raise InputError(str(job), "exists and is not a directory")
    mkdir(job, exist_ok=True)
    if (job / layout.MANIFEST).exists() or (job / layout.JOURNAL).exists():
        raise InputError(str(job), f"holds a single-process run, not a job's processes ({proc.variable}="
                                   f"{proc.index} makes this process {process_directory_name(proc.index)} "
                                   "of a job); choose another --output")
    path = job / process_directory_name(proc.index)
    mkdir(path, exist_ok=True, own=True)
    claim_directory(path, force)
    processes[os.path.abspath(path)] = proc
    return path


def mkdir(path: Path, exist_ok: bool, own: bool = False) -> bool:
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
            mkdir(candidate, exist_ok=False)
            return candidate
        except FileExistsError:
            continue
    raise InputError(str(path), "no free run name; choose one with --output")


_LOCK_FLAGS = (os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
               | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))


class _Busy(InputError):
    """The directory is locked by another jaxmemprof run."""


def lock(path: Path, state: str = "recording") -> None:
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


def forget_locks_in_child() -> None:
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
    deferred.clear()


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
deferred: dict[str, _Deferred] = {}


def _claim_text(state: str, t0: float) -> bytes:
    """The lock file's text: the PID, then the claim's state and when it was
    made; one length for one process, so that a state is rewritten in place."""
    return f"{os.getpid()}\n{state.ljust(_STATE_WIDTH)} {t0:.3f}\n".encode()


def set_claim_state(path: Path, state: str) -> None:
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
    from jaxmemprof.store.journal import recorder_running

    return recorder_running(path)


def _distributed_up() -> bool:
    state = getattr(sys.modules.get("jax._src.distributed"), "global_state", None)
    return getattr(state, "client", None) is not None or getattr(state, "service", None) is not None


def _can_defer() -> bool:
    """Whether this process may still learn from jax.distributed.initialize
    that it is part of a job: JAX has no backend up and is not distributed."""
    return jax_ready() is None and not _distributed_up()


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
            lock(path, state)
            try:
                pending = _begin_pending(path, force)
            except BaseException:
                release_directory(path)
                raise
            deferred[os.path.abspath(pending)].holds_job = True
            return pending
        claim_directory(path, force, state)
    except _Busy:
        if not _holder_waits_for_initialize(path):
            raise
        return _begin_pending(path, force)
    deferred[os.path.abspath(path)] = _Deferred(job=path, force=force, pending=None)
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
            mkdir(path, exist_ok=False)
        except FileExistsError:
            continue
        claim_directory(path, False)
        deferred[os.path.abspath(path)] = _Deferred(job=job, force=force, pending=Path(os.path.abspath(path)))
        return path
    raise InputError(str(job), "another jaxmemprof run is recording into it; choose another --output")


def pending_peers(job: Path) -> bool:
    """Whether a live run waits in ``job`` (a JOB/pending-PID it holds)."""
    try:
        names = [e.name for e in os.scandir(job) if e.name.startswith(PENDING_PREFIX)
                 and e.is_dir(follow_symlinks=False)]
    except OSError:
        return False
    return any(_held(Path(job) / n) for n in names)


def wait_for_job(job: Path) -> str | None:
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


# The summary a process of a job writes as it ends (analysis/job.py PROCESS_RESULT).
_PROCESS_RESULT = layout.PROCESS_RESULT


def _is_process_result_file(name: str) -> bool:
    return name == _PROCESS_RESULT or re.fullmatch(rf"\.{re.escape(_PROCESS_RESULT)}\.tmp[0-9]+", name) is not None


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
            if (layout.is_run_file(name) or _is_process_result_file(name)) and layout.entry_kind(name, dfd) == "file":
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

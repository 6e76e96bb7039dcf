"""The run directory: names, the journal's schema, and atomic file writes.

A run directory (one process)::

    RUN/
      manifest.json          what ran, where, versions, start/end, exit status
      journal.sqlite         every table (SQLite, WAL mode, append-only)
      snapshots/000001.prof.gz   the unmodified device_memory_profile() bytes

A multi-process run will hold one such directory per process, named
``process-N``, under a top-level run directory.

Crash safety: each snapshot file is written under a temporary name and
renamed; its journal row is committed after the rename, in one transaction
with the array records of that snapshot. A reader trusts only committed rows,
so a run killed at any moment (SIGKILL included) stays readable.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from pathlib import Path

from jaxmemprof.finite import finite

from jaxmemprof.errors import InputError

# 2: arrays name their description in array_kinds (schema 1 repeated it in
# every arrays row: shape, dtype, nbytes, shard_bytes, devices, sharding,
# memory_kind, stack_id). The reader reads both.
JOURNAL_SCHEMA_VERSION = 2  # the journal's schema, the manifest's schema_version (2: array_kinds)
MANIFEST = "manifest.json"
JOURNAL = "journal.sqlite"
# Held (flock) by the process recording into the run directory, removed when the run ends.
LOCK = ".jaxmemprof.lock"
SNAPSHOT_DIR = "snapshots"
PROCESS_DIR_PREFIX = "process-"
# SQLite's files: the journal and what it keeps beside it (WAL, its index, a rollback journal).
JOURNAL_FILES = (JOURNAL, JOURNAL + "-wal", JOURNAL + "-shm", JOURNAL + "-journal")
# What a process of a job writes as it ends: its result, read by the job's report (analysis/job.py).
PROCESS_RESULT = "summary.json"

# Environment variables that decide how JAX allocates device memory.
ALLOCATOR_ENV_PREFIXES = ("XLA_PYTHON_CLIENT_",)
ALLOCATOR_ENV_NAMES = ("XLA_CLIENT_MEM_FRACTION", "TF_GPU_ALLOCATOR", "XLA_FLAGS", "JAX_PLATFORMS")

SCHEMA = """
CREATE TABLE IF NOT EXISTS snapshots (
    snapshot      INTEGER PRIMARY KEY,  -- 1, 2, ... in the order taken
    t_wall        REAL NOT NULL,        -- seconds since the epoch
    t_mono        REAL NOT NULL,        -- time.monotonic(), for durations
    trigger       TEXT NOT NULL,        -- interval, first, step, exit, exception, oom, signal, api
    label         TEXT,
    file          TEXT NOT NULL,        -- snapshots/NNNNNN.prof.gz, relative to the run
    live_bytes    INTEGER NOT NULL,     -- bytes of live buffers in the profile
    buffers       INTEGER NOT NULL,     -- live buffers (one per device shard)
    arrays        INTEGER NOT NULL,     -- live jax.Arrays seen by jax.live_arrays()
    cost_s        REAL NOT NULL,        -- CPU time taking it took (the sampler's thread; with its checks since the last)
    wall_s        REAL NOT NULL         -- wall time, including waits for the GIL
);
CREATE TABLE IF NOT EXISTS stacks (
    stack_id      INTEGER PRIMARY KEY,
    frames        TEXT NOT NULL         -- JSON [[file, line, function], ...], innermost first
);
CREATE TABLE IF NOT EXISTS array_kinds (  -- what arrays share: each description stored once
    kind_id       INTEGER PRIMARY KEY,
    shape         TEXT NOT NULL,        -- JSON list
    dtype         TEXT NOT NULL,
    nbytes        INTEGER NOT NULL,     -- logical size of the whole array
    shard_bytes   TEXT NOT NULL,        -- JSON list, one per addressable shard
    devices       TEXT NOT NULL,        -- JSON list of str(device), one per shard
    sharding      TEXT NOT NULL,
    memory_kind   TEXT,
    stack_id      INTEGER               -- creation traceback, in stacks
);
CREATE TABLE IF NOT EXISTS arrays (     -- one per array identity: its birth
    array_id      INTEGER PRIMARY KEY,  -- identity across snapshots (never reused)
    py_id         INTEGER NOT NULL,     -- Python id() while it lived (may be reused later)
    first_snapshot INTEGER NOT NULL,
    kind_id       INTEGER NOT NULL,     -- its description, in array_kinds
    addresses     TEXT NOT NULL         -- JSON list of buffer addresses, one per shard
);
CREATE TABLE IF NOT EXISTS array_ends (
    array_id      INTEGER PRIMARY KEY,
    last_snapshot INTEGER NOT NULL,     -- the last snapshot it was alive in
    end_snapshot  INTEGER NOT NULL,     -- the first snapshot it was gone in
    how           TEXT NOT NULL         -- 'freed' or 'deleted' (donated or .delete())
);
CREATE TABLE IF NOT EXISTS executables (  -- loaded executables, per snapshot
    snapshot      INTEGER NOT NULL,
    stack_id      INTEGER,              -- where it was compiled, in stacks
    name          TEXT NOT NULL,        -- the HLO module name, e.g. jit_train_step
    count         INTEGER NOT NULL,     -- how many are loaded (more than 1: recompiled)
    code_bytes    INTEGER NOT NULL      -- generated code size, summed
);
CREATE TABLE IF NOT EXISTS jit_functions (  -- functions jitted through jax.jit (the jit probe)
    function_id   INTEGER PRIMARY KEY,
    name          TEXT NOT NULL,
    qualname      TEXT NOT NULL,
    file          TEXT NOT NULL,        -- where the function is defined
    line          INTEGER NOT NULL,
    jit_file      TEXT NOT NULL,        -- where jax.jit was applied
    jit_line      INTEGER NOT NULL,
    jit_function  TEXT NOT NULL,
    jit_source    TEXT,                 -- the statement at that line as the program had it (a
                                        -- notebook cell's, a file edited since), through the line
                                        -- its brackets close on; '' when unreadable or over
                                        -- 1,000 characters
    params        TEXT NOT NULL,        -- JSON: parameter names, in order
    donate_argnums TEXT NOT NULL,       -- JSON lists, as given to jax.jit
    donate_argnames TEXT NOT NULL,
    static_argnums TEXT NOT NULL,
    static_argnames TEXT NOT NULL,
    t_wall        REAL NOT NULL,
    wrapper       TEXT,                 -- how the user jitted it: jax.jit, jax.pmap, a known library's
                                        -- wrapper (its NAME in jaxmemprof/facts/libraries/), or
                                        -- package:function for another library's
    wrapper_options TEXT                -- JSON: the wrapper's own options (its donation option)
);
CREATE TABLE IF NOT EXISTS jit_compiles (  -- one per compiled signature: memory_analysis()
    function_id   INTEGER NOT NULL,
    call_index    INTEGER NOT NULL,     -- the call that compiled it (or the next one)
    t_wall        REAL NOT NULL,
    signature     TEXT NOT NULL,
    argument_bytes INTEGER, output_bytes INTEGER, alias_bytes INTEGER, temp_bytes INTEGER,
    generated_code_bytes INTEGER, host_argument_bytes INTEGER, host_output_bytes INTEGER,
    host_alias_bytes INTEGER, host_temp_bytes INTEGER, host_generated_code_bytes INTEGER,
    peak_bytes INTEGER
);
CREATE TABLE IF NOT EXISTS jit_calls (  -- sampled calls
    call_id       INTEGER PRIMARY KEY,
    function_id   INTEGER NOT NULL,
    call_index    INTEGER NOT NULL,     -- 1 for the function's first call
    t_wall        REAL NOT NULL,
    t_mono        REAL NOT NULL,
    caller_file   TEXT NOT NULL,
    caller_line   INTEGER NOT NULL,
    caller_function TEXT NOT NULL,
    inputs        TEXT NOT NULL,        -- JSON: array leaves of the arguments
    outputs       TEXT NOT NULL,        -- JSON: array leaves of the result
    inputs_alive  TEXT,                 -- JSON: per input leaf, its fate by the next call: held,
                                        -- dropped (by the calling statement), dropped-later, deleted
    signature     TEXT,                 -- the compiled signature it ran (jit_compiles.signature)
    live_before   TEXT                  -- JSON {device: bytes}: live just before the call (NULL: not counted)
);
CREATE TABLE IF NOT EXISTS jit_counts (
    function_id   INTEGER PRIMARY KEY,
    calls         INTEGER NOT NULL,     -- calls counted
    compiles      INTEGER NOT NULL,
    calls_complete INTEGER,             -- 1: every call counted; 0: counting stopped once its
                                        -- samples were taken (calls is then a lower bound)
    traced        INTEGER,              -- calls made while a transformation traced (no device call)
    backend_compiles INTEGER            -- XLA compiles during its observed calls (JAX's compile events)
);
CREATE TABLE IF NOT EXISTS jit_call_live (  -- every call of a user's function, its live bytes counted (a row
                                        -- where a call finds more live on a device than the function's before)
    function_id   INTEGER NOT NULL,
    call          INTEGER NOT NULL,     -- the function's n-th device call (sampled or not)
    t_wall        REAL NOT NULL,
    live_before   TEXT,                 -- JSON {device: bytes}: live just before the call, its arguments
                                        -- among them (NULL on an "end" row)
    signature     TEXT,                 -- the signature it ran, where the function had one (NULL: not known)
    counted       INTEGER NOT NULL,     -- its calls counted so far
    seen          INTEGER NOT NULL,     -- its calls seen so far (counted or over the counts' budget)
    kind          TEXT NOT NULL         -- max: a call with more live; end: the counts at the end
);
CREATE TABLE IF NOT EXISTS jit_programs (  -- XLA's account of each compiled signature, read from its executable
                                        -- (runs recorded before: of the largest signature, from a dump)
    function_id   INTEGER NOT NULL,
    signature     TEXT NOT NULL,
    module        TEXT NOT NULL,        -- the HLO module, e.g. jit_train_step
    length        INTEGER NOT NULL,     -- instructions in its sequence
    peak_position INTEGER NOT NULL,     -- where in it the program's peak is
    peak_bytes    INTEGER NOT NULL,     -- what the buffers live there add up to (XLA's live ranges)
    argument_bytes INTEGER NOT NULL, output_bytes INTEGER NOT NULL, alias_bytes INTEGER NOT NULL,
    temp_bytes    INTEGER NOT NULL,     -- allocations by kind, as memory_analysis() adds them
    dump_s        REAL NOT NULL         -- wall time the reading took (a dump's: its compile too)
);
CREATE TABLE IF NOT EXISTS jit_buffers (  -- its buffers live at that peak, and its largest others
    function_id   INTEGER NOT NULL,
    name          TEXT NOT NULL,        -- the HLO value, e.g. sort.0{}
    bytes         INTEGER NOT NULL,
    shape         TEXT NOT NULL,        -- f32[1024,1024]
    kind          TEXT NOT NULL,        -- argument, output, aliased, temporary, constant
    op            TEXT NOT NULL,        -- the op that made it, e.g. jit(step)/dot_general
    frames        TEXT NOT NULL,        -- JSON [[file, line, function], ...] of the line that made it, innermost first
    live_start    INTEGER NOT NULL,     -- its live range in the instruction sequence
    live_end      INTEGER NOT NULL,
    at_peak       INTEGER NOT NULL,     -- 1: live at the program's peak
    signature     TEXT                  -- the program's (jit_programs.signature); NULL in runs recorded before
);
CREATE TABLE IF NOT EXISTS jit_curves (  -- each program's bytes live at each position of its sequence
    function_id   INTEGER NOT NULL,
    signature     TEXT NOT NULL,        -- the program's (jit_programs.signature)
    curve         TEXT NOT NULL         -- JSON {positions, bytes, stacks: [[[kind, frames, op], bytes]], other}
);
CREATE TABLE IF NOT EXISTS jit_plans (  -- run --plan: a step compiled at other batch sizes, from its
                                        -- arguments' shapes (no array allocated); none without --plan
    function_id   INTEGER NOT NULL,
    signature     TEXT NOT NULL,        -- the recorded signature it was planned from (jit_compiles.signature)
    variant       TEXT NOT NULL,        -- recorded (as the run jitted it), donated, bfloat16
    batch         INTEGER NOT NULL,     -- the batch it was compiled for
    recorded_batch INTEGER NOT NULL,    -- the batch the run used
    axis          INTEGER NOT NULL,     -- the batch's dimension in the inputs scaled
    argument_bytes INTEGER, output_bytes INTEGER, alias_bytes INTEGER, temp_bytes INTEGER,
    generated_code_bytes INTEGER,       -- XLA's memory_analysis(), per device (NULL where it failed)
    devices       TEXT NOT NULL,        -- JSON: the devices the call runs on
    live_outside  TEXT,                 -- JSON {device: bytes}: live before the recorded call, less its arguments
    compile_s     REAL NOT NULL,        -- the lower and compile's wall time (0: the run's own figures)
    backend       TEXT NOT NULL,        -- the platform that compiled it: cpu, gpu, tpu
    detail        TEXT,                 -- JSON: the inputs scaled, what the variant changed, why it was planned
    error         TEXT                  -- why it could not be compiled (NULL: compiled)
);
CREATE TABLE IF NOT EXISTS jit_targets (  -- run --target: the planned steps compiled for a TPU slice that is
                                          -- not there (capture/jit/targets.py); jit_plans' columns after target
    target        TEXT NOT NULL,        -- the slice's name (v5e:2x2)
    function_id   INTEGER NOT NULL,
    signature     TEXT NOT NULL,        -- the recorded signature it was compiled from
    variant       TEXT NOT NULL,        -- recorded (as the run jitted it), donated, bfloat16
    batch         INTEGER,              -- the batch it was compiled for (NULL: the recorded one, not told)
    recorded_batch INTEGER,             -- the batch the run used (NULL: not told; without --plan it need not be)
    axis          INTEGER NOT NULL,
    argument_bytes INTEGER, output_bytes INTEGER, alias_bytes INTEGER, temp_bytes INTEGER,
    generated_code_bytes INTEGER,       -- XLA:TPU's memory_analysis(), per device (NULL where it failed)
    devices       TEXT NOT NULL,        -- JSON: the slice's devices the call runs on
    live_outside  TEXT,                 -- JSON {device: bytes}: on the run's devices, as in jit_plans
    compile_s     REAL NOT NULL,
    backend       TEXT NOT NULL,        -- tpu
    detail        TEXT,
    error         TEXT
);
CREATE TABLE IF NOT EXISTS jit_target_buffers (  -- run --target: XLA:TPU's buffers in device memory live at the
                                                 -- peak of the step compiled for the slice at the recorded batch
    target        TEXT NOT NULL,
    function_id   INTEGER NOT NULL,
    signature     TEXT NOT NULL,
    name          TEXT NOT NULL,        -- the HLO value
    bytes         INTEGER NOT NULL,
    shape         TEXT NOT NULL,
    kind          TEXT NOT NULL,        -- argument, output, aliased, temporary, constant
    op            TEXT NOT NULL,
    frames        TEXT NOT NULL,        -- JSON [[file, line, function], ...] of the line that made it, innermost first
    program_peak_bytes INTEGER NOT NULL -- the program's peak in device memory (its buffer assignment, swept)
);
CREATE TABLE IF NOT EXISTS snapshot_calls (  -- a call in progress as a snapshot started (the jit probe's
                                        -- watched calls only): the snapshot saw a moment of that call
    snapshot      INTEGER NOT NULL,
    function_id   INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS jit_whatif (  -- a recorded signature compiled with a change made (the arguments the
                                        -- donation advice names donated), at the end of the run, from its
                                        -- arguments' shapes (no array allocated): what the change does, measured
    function_id   INTEGER NOT NULL,
    signature     TEXT NOT NULL,        -- the recorded signature (jit_compiles.signature)
    change        TEXT NOT NULL,        -- JSON: {"donate": [argument labels], "argnums": [...], "argnames": [...]}
    argument_bytes INTEGER, output_bytes INTEGER, alias_bytes INTEGER, temp_bytes INTEGER,
    generated_code_bytes INTEGER,       -- XLA's memory_analysis() of the changed compile, per device (NULL: failed)
    compile_s     REAL NOT NULL,        -- the lower and compile's wall time
    backend       TEXT NOT NULL,        -- the platform that compiled it: cpu, gpu, tpu
    error         TEXT                  -- why it was not compiled ("not verified: over the compile budget", ...)
);
CREATE TABLE IF NOT EXISTS memory_stats (
    snapshot      INTEGER NOT NULL,
    device        TEXT NOT NULL,
    key           TEXT NOT NULL,
    value         INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS markers (
    marker        INTEGER PRIMARY KEY,
    t_wall        REAL NOT NULL,
    t_mono        REAL NOT NULL,
    label         TEXT NOT NULL,
    after_snapshot INTEGER              -- the last snapshot taken before it, if any
);
CREATE TABLE IF NOT EXISTS thinned (  -- old interval snapshots whose profile was removed as the run went
    snapshot      INTEGER PRIMARY KEY   -- its row in snapshots stays (time, totals); its executables and
                                        -- memory_stats rows and its profile file (unless a kept snapshot
                                        -- shares it) are gone; arrays keep every birth and end
);
CREATE TABLE IF NOT EXISTS events (
    event         INTEGER PRIMARY KEY,
    t_wall        REAL NOT NULL,
    kind          TEXT NOT NULL,        -- warning, exception, oom, signal, sampler-error
    message       TEXT NOT NULL,
    snapshot      INTEGER
);
CREATE TABLE IF NOT EXISTS py_chains (  -- a chain of Python references from a root to arrays (capture/py_holders.py)
    chain_id      INTEGER PRIMARY KEY,
    root_kind     TEXT NOT NULL,        -- global (a module's), local (a live frame's)
    root          TEXT NOT NULL,        -- the module's name (__main__), or the frame's function (its qualname)
    file          TEXT NOT NULL,        -- the module's or the function's file
    function      TEXT NOT NULL,        -- the frame's function ('' for a global)
    line          INTEGER NOT NULL,     -- the function's first line (0 for a global)
    steps         TEXT NOT NULL,        -- JSON [[kind, label], ...] from the root down: kind key (a global's
                                        -- name, a dict's key), local, attr, item, member, closure, cache, ref;
                                        -- a label "…" stands for any of many (a list's items)
    container     TEXT NOT NULL         -- the type of the object that refers to the array itself (list)
);
CREATE TABLE IF NOT EXISTS py_holders (  -- which chain held each live array at a search (the largest
                                         -- search before the end, and the last: a larger one replaces the rows)
    snapshot      INTEGER NOT NULL,     -- the snapshot searched after
    array_id      INTEGER NOT NULL,     -- arrays.array_id
    chain_id      INTEGER NOT NULL      -- py_chains.chain_id
);
CREATE TABLE IF NOT EXISTS py_holder_searches (  -- each search for holders and its cost
    snapshot      INTEGER PRIMARY KEY,
    trigger       TEXT NOT NULL,        -- the snapshot's
    cost_s        REAL NOT NULL,        -- CPU time of the search (the searching thread)
    arrays        INTEGER NOT NULL,     -- live arrays searched for
    found         INTEGER NOT NULL,     -- of them, held by a chain found
    complete      INTEGER NOT NULL,     -- 1: every root was searched within the budget
    visited       INTEGER NOT NULL,     -- objects walked
    superseded    INTEGER NOT NULL      -- 1: a later search at more live bytes replaced its py_holders rows
);
CREATE TABLE IF NOT EXISTS source_names (  -- code whose file name is no file to show: a notebook's cells
    file          TEXT PRIMARY KEY,     -- the name Python compiled it under (ipykernel's temporary file)
    label         TEXT NOT NULL         -- how sites there are named instead: In [7] (site In [7]:3 (<module>))
);
CREATE TABLE IF NOT EXISTS held_by (  -- what holds live arrays, where the program's environment names it
    snapshot      INTEGER NOT NULL,     -- the snapshot it was seen at
    py_id         INTEGER NOT NULL,     -- the array's id() (arrays.py_id, alive at that snapshot)
    frames        TEXT NOT NULL,        -- JSON [[file, line, function], ...]: its traceback, as in stacks
    shape         TEXT NOT NULL,        -- JSON list
    dtype         TEXT NOT NULL,        -- the three find its row where the id is a view's (a second
                                        -- jax.Array JAX made over its buffer: one row holds both)
    kind          TEXT NOT NULL,        -- output-history: IPython's Out, _, __, ___, _N
    holder        TEXT NOT NULL,        -- Out[12]
    names         TEXT NOT NULL,        -- JSON: every name holding it there (["Out[12]", "_12", "_"])
    only          INTEGER NOT NULL      -- 1: nothing else referred to it (freed when the holder lets go)
);
"""


def snapshot_name(index: int) -> str:
    return f"{SNAPSHOT_DIR}/{index:06d}.prof.gz"


# What a run writes, and all that ``run --force`` may remove: the manifest, the
# journal and SQLite's files beside it, snapshot files, and the temporary
# files of interrupted atomic writes (``.NAME.tmpPID``).
_TMP = re.compile(r"\.(?P<name>.+)\.tmp[0-9]+")
_SNAPSHOT = re.compile(r"[0-9]{6,}\.prof\.gz")


def _untemp(name: str) -> str:
    m = _TMP.fullmatch(name)
    return m["name"] if m else name


def is_run_file(name: str) -> bool:
    """Whether a top-level file of a run directory is one jaxmemprof writes."""
    return _untemp(name) in JOURNAL_FILES or _untemp(name) == MANIFEST


def is_snapshot_file(name: str) -> bool:
    """Whether a file in ``snapshots/`` is one jaxmemprof writes."""
    return _SNAPSHOT.fullmatch(_untemp(name)) is not None


def is_our_name(name: str) -> bool:
    """Whether a top-level entry of a run directory is named as one that
    jaxmemprof writes (a file, its temporary name, the lock, snapshots/)."""
    return name in (LOCK, SNAPSHOT_DIR) or is_run_file(name) or _untemp(name) == PROCESS_RESULT


# -- never through a link ---------------------------------------------------------------
#
# Everything jaxmemprof creates, writes, renames onto or removes inside a run
# directory is reached without following a symlink: a link (live or dangling)
# or anything else where our own file or directory belongs is refused, never
# written through, replaced or removed. The run directory itself is the
# user's to name (a link to a directory is taken as that directory); the
# names inside it are ours.

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)

_WHAT = {"link": "is a symlink", "dir": "is a directory", "file": "is a regular file",
         "other": "is a special file (a FIFO, socket or device)"}


def entry_kind(path, dir_fd: int | None = None) -> str:
    """What is at ``path`` itself, its last component never followed:
    "absent", "link", "file", "dir" or "other"."""
    try:
        mode = os.lstat(path, dir_fd=dir_fd).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return "absent"
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    return "other"


def what(kind: str) -> str:
    """``entry_kind``'s answer in words: "is a symlink", ..."""
    return _WHAT.get(kind, "is not what jaxmemprof writes")


def refusal(kind: str, directory: bool = False) -> str:
    """The one-line problem of a name of ours that holds something else."""
    own = "directory" if directory else "file"
    return (f"{what(kind)} where jaxmemprof writes its own {own}; refused (jaxmemprof never writes through a "
            "link or replaces what it did not write): remove it or choose another --output")


def open_directory(path, *, dir_fd: int | None = None, follow: bool = True) -> int:
    """A descriptor of the directory ``path`` (relative to ``dir_fd``);
    ``follow`` False: a symlink there fails (OSError) instead of being followed."""
    return os.open(path, os.O_RDONLY | _DIRECTORY | _CLOEXEC | (0 if follow else _NOFOLLOW), dir_fd=dir_fd)


def own_directory(path: Path, dir_fd: int) -> int:
    """Create ``path.name`` in ``dir_fd`` if it is not there, and return a
    descriptor of it: InputError when a link or anything but a directory
    holds the name."""
    name = Path(path).name
    try:
        os.mkdir(name, 0o777, dir_fd=dir_fd)
    except FileExistsError:
        pass
    try:
        return open_directory(name, dir_fd=dir_fd, follow=False)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            raise InputError(str(path), refusal(entry_kind(name, dir_fd), directory=True)) from None
        raise


def foreign_entry(run: Path) -> tuple[Path, str] | None:
    """The first of ``run``'s entries named as jaxmemprof's own (top level,
    and the snapshot files in ``snapshots/``) that holds something else: a
    symlink (live or dangling), a FIFO or a directory where a file goes, a
    file where ``snapshots/`` goes. (its path, its entry_kind), or None."""
    run = Path(run)
    try:
        names = sorted(n for n in os.listdir(run) if is_our_name(n))
    except OSError:
        return None
    for name in names:
        kind = entry_kind(run / name)
        if kind not in ("absent", "dir" if name == SNAPSHOT_DIR else "file"):
            return run / name, kind
    snaps = run / SNAPSHOT_DIR
    if SNAPSHOT_DIR in names and entry_kind(snaps) == "dir":
        try:
            inner = sorted(n for n in os.listdir(snaps) if is_snapshot_file(n))
        except OSError:
            inner = []
        for name in inner:
            kind = entry_kind(snaps / name)
            if kind not in ("absent", "file"):
                return snaps / name, kind
    return None


def linked_entry(run: Path, names=(MANIFEST, *JOURNAL_FILES, SNAPSHOT_DIR)) -> Path | None:
    """The first of ``names`` in ``run`` that is a symlink (what a reader
    refuses: it never follows a link out of a run), or None."""
    for name in names:
        if entry_kind(Path(run) / name) == "link":
            return Path(run) / name
    return None


READ_REFUSAL = ("is a symlink; a run is read only from its own files, never through a link out of it "
                "(copy the file into the run instead)")


def snapshot_file(run: Path, name, *, dir_checked: bool = False) -> Path | None:
    """``run/name`` when ``name`` (from a journal: untrusted) names a regular
    file directly in the run's own ``snapshots/`` (not a link, not a path
    elsewhere); None otherwise. ``dir_checked``: snapshots/ is known to be
    a real directory."""
    if not isinstance(name, str) or "\0" in name:
        return None
    parts = name.split("/")
    if len(parts) != 2 or parts[0] != SNAPSHOT_DIR or parts[1] in ("", ".", ".."):
        return None
    p = Path(run) / name
    try:
        if not dir_checked and entry_kind(Path(run) / SNAPSHOT_DIR) != "dir":
            return None
        return p if entry_kind(p) == "file" else None
    except (OSError, ValueError):
        return None


def _create_temp(name: str, dir_fd: int) -> tuple[str, int]:
    """A new temporary file for ``name`` in ``dir_fd``, opened for writing:
    ``.NAME.tmpPID``, or, when anything (a planted link, live or dangling,
    included) holds that name, the next free one (``.NAME.tmpPID01`` ...).
    Created exclusively (O_EXCL, O_NOFOLLOW): never an existing file."""
    base = f".{name}.tmp{os.getpid()}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
    for k in range(100):
        tmp = base if k == 0 else f"{base}{k:02d}"
        try:
            return tmp, os.open(tmp, flags, 0o666, dir_fd=dir_fd)
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, f"no free temporary name for {name}")


def write_atomic(path: Path, data: bytes, *, dir_fd: int | None = None) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename, so
    that ``path`` is either absent or complete. Nothing is written through a
    link: the temporary file is created new (see _create_temp), and
    ``path`` is replaced only when it is absent or a regular file (else
    InputError, and nothing is changed). ``dir_fd``: the directory that
    holds ``path`` (its name is used there; ``path`` names it in errors);
    without it, ``path``'s parent is opened once for the whole write."""
    path = Path(path)
    name = path.name
    fd_dir = open_directory(path.parent) if dir_fd is None else dir_fd
    try:
        tmp: str | None
        tmp, fd = _create_temp(name, fd_dir)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            kind = entry_kind(name, fd_dir)
            if kind not in ("absent", "file"):
                raise InputError(str(path), refusal(kind))
            os.replace(tmp, name, src_dir_fd=fd_dir, dst_dir_fd=fd_dir)
            tmp = None
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp, dir_fd=fd_dir)
                except OSError:
                    pass
    finally:
        if dir_fd is None:
            os.close(fd_dir)


def write_json_atomic(path: Path, doc: dict, *, dir_fd: int | None = None) -> None:
    """``doc`` as JSON; NaN and infinities (which JSON has not) as null."""
    text = json.dumps(finite(doc), indent=1, sort_keys=True, allow_nan=False)
    write_atomic(path, (text + "\n").encode(), dir_fd=dir_fd)

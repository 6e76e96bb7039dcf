"""A compile of jaxmemprof's own writes nothing where the program's compiles
write, and nothing outside the run:

- a compile that is read through XLA's dump (``jaxmemprof.xla.dump``) dumps
  into a new directory *inside the run directory* (``.xla-dump-XXXXXXXX``),
  removed once the dump is read: on every exit path that runs Python (an
  exception, KeyboardInterrupt, SystemExit) by its ``finally``; on a path
  that does not (a signal's default action), ``remove_open()`` removes what
  is still open; a process killed outright (SIGKILL) leaves it inside its
  own run, never in ``$TMPDIR``. With no run directory (the pytest plugin's
  totals kept in memory) it goes to the system's temporary directory.
- every compile of jaxmemprof's own overrides, per compile, the dump options
  the program set for the process (``XLA_FLAGS`` or ``LIBTPU_INIT_ARGS``:
  ``--xla_dump_to``, the formats, the module filter), so the program's dump
  directory (or stdout) receives only the program's own compiles, and a dump
  of ours holds only what is read from it (``compile_own``). Two places
  read them, so both are set: XLA's compiler takes
  ``compile(compiler_options=...)`` as overrides of the flags' DebugOptions
  for that one compile; PJRT dumps a compile's inputs before any override
  applies (``module_NNNN.NAME/``: module.mlir, compile_options.textproto,
  topology.textproto; xla/pjrt/dump/dump.cc, MaybeDumpCompileInputs), from
  the DebugOptions JAX builds (``jax._src.compiler.get_compile_options``),
  which are set in place for the compiling thread's own compile. JAX's own
  dump of a module as it is compiled (``jax_dump_ir_to``) is skipped for it
  likewise.
  ``xla_enable_dumping=False`` with no directory and no format leaves XLA
  nowhere to write (measured on XLA:CPU and XLA:TPU, jax 0.10.2, libtpu
  0.0.42.1: tests/test_writes_outside.py).

Where the program asks for no dump, a compile of ours that dumps nothing
passes no options at all, so it still hits the compile cache exactly where
it did. No jax import here (plain Python, cheap to import).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import threading
import time

DUMP_PREFIX = ".xla-dump-"

# The dump formats XLA writes (each on its own turns dumping on, to stdout where no directory is named).
_FORMATS = ("xla_dump_hlo_as_proto", "xla_dump_hlo_as_dot", "xla_dump_hlo_as_html", "xla_dump_hlo_as_url",
            "xla_dump_hlo_snapshots", "xla_dump_fusion_visualization")
# A compile of ours that must dump nothing, whatever the process's flags say.
NO_DUMP = {"xla_enable_dumping": False, "xla_dump_to": "", "xla_dump_hlo_as_text": False,
           **{name: False for name in _FORMATS}}
# A dump of ours: the optimised HLO, its buffer assignment and live ranges as text (what dump.py reads),
# of every module, after optimisation only (no pass-by-pass dump a program's --xla_dump_hlo_pass_re asks for),
# in XLA's long text with its metadata (the op names and the stack frames the buffers are read by line from:
# XLA's defaults, set in case the program's flags turned them off).
_DUMP = {"xla_enable_dumping": True, "xla_dump_hlo_as_text": True, "xla_dump_hlo_as_long_text": True,
         "xla_dump_disable_metadata": False, "xla_dump_hlo_module_re": "",
         "xla_dump_hlo_pass_re": "", "xla_dump_hlo_pipeline_re": "", "xla_dump_max_hlo_modules": -1,
         **{name: False for name in _FORMATS}}

# Dump directories made and not yet removed (no lock: a set's add, discard and copy are each atomic in
# CPython, and remove_open() may run in a signal handler that interrupted this module's own code).
_open: set = set()


def program_dumps(environ=None) -> bool:
    """Whether the process's XLA was told to dump (``XLA_FLAGS``, or
    ``LIBTPU_INIT_ARGS`` for XLA:TPU): any ``--xla_dump*`` flag."""
    environ = os.environ if environ is None else environ
    return any("xla_dump" in (environ.get(name) or "") for name in ("XLA_FLAGS", "LIBTPU_INIT_ARGS"))


def compile_options(dump_to: str | None = None) -> dict | None:
    """``compiler_options`` for a compile of jaxmemprof's own: with
    ``dump_to``, a dump of the program into that directory (and nowhere
    else); without, none where the program dumps nothing (the compile as it
    was: a cache hit stays one), else every dump turned off for it."""
    if dump_to:
        return {**_DUMP, "xla_dump_to": str(dump_to)}
    return dict(NO_DUMP) if program_dumps() else None


def compile_own(lowered, dump_to: str | None = None):
    """``lowered.compile()`` as a compile of jaxmemprof's own: dumped into
    ``dump_to`` only (a directory of ours), or nowhere; the program's dump
    options (its flags, and JAX's ``jax_dump_ir_to``) never apply to it. See
    the module's text."""
    options = compile_options(dump_to)
    with _in_this_thread("jax._src.interpreters.mlir", "dump_module_to_file", _no_ir_dump):
        if options is None:
            return lowered.compile()
        with _in_this_thread("jax._src.compiler", "get_compile_options", _with_debug_options(options)):
            return lowered.compile(compiler_options=options)


def _with_debug_options(options: dict):
    """``get_compile_options`` whose result carries ``options`` in its
    DebugOptions themselves (what PJRT reads before the overrides apply)."""

    def wrap(original):
        def get_compile_options(*args, **kwargs):
            built = original(*args, **kwargs)
            try:
                debug = built.executable_build_options.debug_options
            except Exception:
                return built
            for name, value in options.items():
                try:
                    setattr(debug, name, value)
                except Exception:  # a field this jaxlib does not expose: its override stands
                    pass
            return built

        return get_compile_options

    return wrap


def _no_ir_dump(original):
    """JAX's dump of a module as it is compiled (``jax_dump_ir_to``, its
    ``compile`` stage): none, for a compile of ours."""
    return lambda *args, **kwargs: None


# (module, name) -> [the dispatcher installed, the function it replaced, {thread ident: [replacements]}]:
# one dispatcher per function however many threads replace it at once (a compile of ours on a
# background thread while the end phase compiles in the main one), put back when the last leaves.
_replaced: dict[tuple[str, str], list] = {}  # (module, name) -> [dispatch, original, by_thread]
_replaced_lock = threading.Lock()


@contextlib.contextmanager
def _in_this_thread(module: str, name: str, wrap):
    """JAX's internal function ``module.name`` replaced by ``wrap(it)`` for
    calls from this thread while the block runs; another thread's calls
    (the program's, if any still compiles) reach the original. Looked up
    defensively: where it is missing, nothing is replaced (the per-compile
    overrides alone stand)."""
    mod = sys.modules.get(module)
    if getattr(mod, name, None) is None:
        yield
        return
    key, me = (module, name), threading.get_ident()
    with _replaced_lock:
        entry = _replaced.get(key)
        if entry is None or getattr(mod, name, None) is not entry[0]:
            original = getattr(mod, name)
            by_thread: dict = {}

            def dispatch(*args, **kwargs):
                mine = by_thread.get(threading.get_ident())
                return (mine[-1] if mine else original)(*args, **kwargs)

            entry = _replaced[key] = [dispatch, original, by_thread]
            setattr(mod, name, dispatch)
        entry[2].setdefault(me, []).append(wrap(entry[1]))
        held: list = entry  # [dispatch, original, by_thread]
    try:
        yield
    finally:
        with _replaced_lock:
            mine = held[2].get(me)
            if mine:
                mine.pop()
                if not mine:
                    del held[2][me]
            if not held[2] and _replaced.get(key) is held:
                del _replaced[key]
                if getattr(mod, name, None) is held[0]:
                    setattr(mod, name, held[1])


def _root(under) -> str | None:
    """The directory a dump directory goes in: the run directory of a
    writer (its ``directory``), a path given, or None (the system's
    temporary directory)."""
    if under is None or isinstance(under, (str, os.PathLike)):
        return None if under is None else os.fspath(under)
    directory = getattr(under, "directory", None)
    return None if directory is None else os.fspath(directory)


def dump_directory(under=None) -> str:
    """A new, empty directory for one compile's dump, inside ``under`` (a
    run writer or its directory; see ``_root``); the caller removes it with
    ``remove``."""
    path = tempfile.mkdtemp(prefix=DUMP_PREFIX, dir=_root(under))
    _open.add(path)
    return path


def remove(path: str) -> None:
    """A dump directory removed, whatever it holds (never following a link out of it)."""
    shutil.rmtree(path, ignore_errors=True)
    _open.discard(path)


@contextlib.contextmanager
def dump_scratch(under=None):
    """``with dump_scratch(writer) as directory:``: a dump directory inside
    the run, removed as the block ends, however it ends."""
    path = dump_directory(under)
    try:
        yield path
    finally:
        remove(path)


def remove_open(tries: int = 50) -> None:
    """Every dump directory still open removed: for an end that runs no
    ``finally`` (a signal's default action, ``os._exit``). Safe from any
    thread, and more than once. A compile still writing its dump there (the
    main thread's, while another thread ends the process) can add a file
    while the directory is being emptied, and its removal then fails: tried
    again, ``tries`` times 10 ms at most."""
    for path in _open.copy():
        for _ in range(tries):
            remove(path)
            if not os.path.lexists(path):
                break
            time.sleep(0.01)

"""What python runs, and running it as python does: a script (source or
compiled), a directory or zip file holding a ``__main__.py``, ``-`` (the
script on stdin), ``-m MODULE`` and ``-c CODE``, its kind decided once as
python decides it; ``sys.path[0]`` as python sets it for each; and a fresh
``__main__`` module with the globals python gives it.
"""

from __future__ import annotations

import builtins
import linecache
import os
import runpy
import sys
import types
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Target:
    """What python runs: ``path`` (a script, a directory or zip file with a
    ``__main__.py``, or ``-`` for the script on stdin), ``module`` (``-m``)
    or ``command`` (``-c``), with its arguments."""

    path: str | None  # a script, a directory or zip with __main__.py, or "-" (stdin)
    module: str | None  # a module run as -m
    args: tuple[str, ...]
    command: str | None = None  # code run as -c

    @property
    def named(self) -> str:
        """The script's path, else the module's name (without -c, one is given)."""
        name = self.path or self.module
        assert name is not None, "a target is a script, a module or a command"
        return name

    @property
    def argv(self) -> list[str]:
        if self.command is not None:
            return ["-c", *self.args]
        return [self.named, *self.args]

    @property
    def stem(self) -> str:
        if self.command is not None:
            return "command"
        if self.path == STDIN:
            return "stdin"
        if self.path:
            return Path(self.path).stem or "run"
        return self.named.rsplit(".", 1)[-1]

    def shown(self, display_path) -> str:
        """The target as the summary names it (a path through ``display_path``)."""
        if self.command is not None:
            return "-c " + " ".join(self.command.split())[:60]
        if self.path == STDIN:
            return "- (stdin)"
        return display_path(self.path) if self.path else self.named


STDIN = "-"


def script_file(path: str) -> str:
    """``__file__`` as python sets it: the path joined to the current
    directory, not normalised (``python ./s.py`` gives ``/cwd/./s.py``)."""
    return path if os.path.isabs(path) else os.path.join(os.getcwd(), path)


def script_path0(path: str) -> str:
    """``sys.path[0]`` as python sets it: the directory of the script with
    every symlink resolved."""
    return os.path.dirname(os.path.realpath(path))


def _has_importer(path: str) -> bool:
    """Whether python runs ``path`` as a directory or zip file holding a
    ``__main__.py`` (an import hook takes it), not as a script; looked up
    and cached in sys.path_importer_cache as python does."""
    cache = sys.path_importer_cache
    try:
        if path in cache:
            return cache[path] is not None
    except TypeError:
        return False
    cache[path] = None
    for hook in list(sys.path_hooks):
        try:
            importer = hook(path)
        except ImportError:
            continue
        except Exception:
            return False
        cache[path] = importer
        return True
    return False


# How the target runs: its kind, decided once as python decides it.
FILE, MAIN_DIR, STDIN_NAME, COMMAND, _MODULE = "file", "main-dir", "stdin", "command", "module"


def target_kind(target: Target) -> str:
    if target.command is not None:
        return COMMAND
    if target.module is not None and not target.path:
        return _MODULE
    if target.path == STDIN:
        return STDIN_NAME
    return MAIN_DIR if _has_importer(script_file(target.path or "")) else FILE


def target_path0(target: Target, kind: str) -> str:
    """What python puts first in sys.path."""
    if kind in (COMMAND, STDIN_NAME):
        return ""
    if kind == _MODULE:
        return os.getcwd()
    if kind == MAIN_DIR:
        return script_file(target.path or "")
    return script_path0(target.path or "")


def replace_path0(path0: str, keep: bool) -> None:
    """sys.path[0] as python sets it for the target, in place of
    jaxmemprof's own, whose import cache entry goes with it, as the
    target's does unless ``keep`` (python has none for a directory nothing
    was imported from yet; a directory or zip run has its importer)."""
    old = sys.path[0] if sys.path else None
    sys.path[0:1] = [path0]
    for entry in (old, path0 if not keep else None):  # a cache only: remade when next needed
        if isinstance(entry, str):
            sys.path_importer_cache.pop(entry, None)


def _fresh_main(**names) -> types.ModuleType:
    """A new ``__main__`` module with the globals python gives it, made
    sys.modules' (as under python, it stays __main__, its globals alive,
    until the process ends: the exit snapshot sees them)."""
    from importlib.machinery import BuiltinImporter

    main = types.ModuleType("__main__")
    main.__dict__.update(__builtins__=builtins, __loader__=BuiltinImporter, __annotations__={})
    main.__dict__.update(names)
    sys.modules["__main__"] = main
    return main


def _is_pyc(path: str, head: bytes) -> bool:
    """Python's test for a compiled file: the name, or the magic's first half."""
    from importlib.util import MAGIC_NUMBER

    return path.endswith(".pyc") or head[:2] == MAGIC_NUMBER[:2]


def _load_pyc(data: bytes):
    import marshal
    from importlib.util import MAGIC_NUMBER

    if data[:4] != MAGIC_NUMBER:
        raise RuntimeError("Bad magic number in .pyc file")
    try:
        code = marshal.loads(data[16:])
    except (EOFError, ValueError, TypeError):
        code = None
    if not isinstance(code, types.CodeType):
        raise RuntimeError("Bad code object in .pyc file")
    return code


def exec_script(path: str, main_box: list) -> None:
    """What ``python path`` does: a fresh ``__main__`` module running the
    file (source or compiled), with the globals python gives it."""
    from importlib.machinery import SourceFileLoader, SourcelessFileLoader

    path = script_file(path)
    with open(path, "rb") as f:
        source = f.read()
    pyc = _is_pyc(path, source)
    loader = (SourcelessFileLoader if pyc else SourceFileLoader)("__main__", path)
    main = _fresh_main(__file__=path, __cached__=None, __spec__=None, __loader__=loader)
    main_box.append(main)
    code = _load_pyc(source) if pyc else compile(source, path, "exec", dont_inherit=True)
    exec(code, main.__dict__)


def exec_stdin(main_box: list) -> None:
    """What ``python -`` does: the script read from stdin, as ``<stdin>``."""
    main = _fresh_main(__file__="<stdin>", __cached__=None)
    main_box.append(main)
    stream = getattr(sys.stdin, "buffer", None)
    if stream is not None:
        source = stream.read()
    else:
        chunks = []
        while chunk := os.read(0, 1 << 16):
            chunks.append(chunk)
        source = b"".join(chunks)
    exec(compile(source, "<stdin>", "exec", dont_inherit=True), main.__dict__)


def exec_command(code: str) -> None:
    """What ``python -c code`` does (3.13 and later: its lines are kept for
    tracebacks, through linecache's hook the interpreter itself calls)."""
    main = _fresh_main()
    compiled = compile(code, "<string>", "exec", dont_inherit=True)
    register = getattr(linecache, "_register_code", None) if sys.version_info >= (3, 13) else None
    if register is not None:
        try:
            register("<string>", code, "<string>")
        except Exception:  # a signature of a later Python's: the traceback then shows no lines
            pass
    exec(compiled, main.__dict__)


def exec_module(name: str, alter_argv: bool = True) -> None:
    """What ``python -m name`` does (and, with ``__main__`` and no argv
    change, ``python DIR`` for a directory or zip): runpy's own entry for
    it, in a fresh ``__main__`` module (so tracebacks, sys.argv[0] and
    ``__main__`` are python's; a missing module ends with python's one-line
    message)."""
    main = types.ModuleType("__main__")
    main.__dict__.update(__builtins__=builtins, __annotations__={})
    sys.modules["__main__"] = main
    runpy._run_module_as_main(name, alter_argv=alter_argv)  # type: ignore[attr-defined]  # python -m's own; not in the stubs

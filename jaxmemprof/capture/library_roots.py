"""Which code is a library's, decided in the target process, however the
libraries were installed, and kept in the run (its manifest's ``libraries``:
paths.Libraries), so that the run reads the same on any machine.

Today's rule (paths.is_builtin_library) knows JAX, the standard library and
site-packages by their paths. The program's sys.path says more:

- a directory that was on it before the program ran (PYTHONPATH, a .pth
  file, a launcher's) and lies outside the program's tree (the script's
  directory and the working directory) is a library's, whatever its name: a
  ``pip install --target DIR`` on PYTHONPATH, a vendored tree, Bazel's
  runfiles;
- a zip on it is a library's (a zipapp, an egg), unless it is the program;
- anywhere else on it (inside the program's tree or above it, or put there
  by the program itself: ``sys.path.append('../src')``), only the top-level
  packages of the distributions installed there (a ``*.dist-info`` that is
  not an editable install) are: the user's own project installed with
  ``pip install -e .`` stays the user's.

Computed at first use (the jit probe's first frame, the first search for
holders), again when sys.path has changed, and as the script ends (sys.path
as the script left it: written into the manifest then; a run killed before
has none, and reads by today's rule), then fixed for the run: a few ``stat`` and
``scandir`` calls, nothing imported at start-up; a distribution's
top_level.txt or RECORD is read only outside site-packages.
"""

from __future__ import annotations

import os
import sys

from jaxmemprof.facts.paths import MANIFEST_KEY, Libraries, is_builtin_library

_libraries: Libraries | None = None
_seen_path: tuple | None = None  # sys.path when _libraries was computed
_final: dict | bool = False  # the manifest it was recorded in as the script ended: fixed while that run records
_cache: dict[str, bool] = {}




def _real(path: str) -> str:
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):
        return path


def _entries_before() -> frozenset:
    """sys.path as python made it before any program ran (this module is
    imported by ``run`` before its target starts), less its first entry
    (``run`` replaces it with the target's own, as python would)."""
    out: set[str] = set()
    for entry in sys.path[1:]:
        if type(entry) is str:
            a = os.path.abspath(entry or os.curdir)
            out.update((a, _real(a)))
    return frozenset(out)


_BEFORE = _entries_before()


def _within(path: str, directory: str) -> bool:
    directory = directory.rstrip("/\\") or directory
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def program_tree(manifest: dict | None = None) -> tuple[str, ...]:
    """The program's own tree: its working directory as the run began, and
    its script's directory (a zipapp or a directory run: that path itself,
    and the directory holding it)."""
    manifest = manifest if isinstance(manifest, dict) else _manifest() or {}
    tree = []
    cwd = manifest.get("cwd") if isinstance(manifest.get("cwd"), str) else None
    tree.append(os.path.abspath(cwd or os.getcwd()))
    argv = manifest.get("argv")
    first = argv[0] if isinstance(argv, list) and argv and isinstance(argv[0], str) else None
    if first is None:  # profile() in a script: the script's own
        first = getattr(sys.modules.get("__main__"), "__file__", None)
        if not isinstance(first, str) or is_builtin_library(os.path.abspath(first)):
            first = None
    if first and not first.startswith("-") and first != "-":
        target = os.path.join(tree[0], first)
        if os.path.isdir(target):
            tree.append(os.path.abspath(target))
        elif os.path.exists(target):
            if not os.path.isfile(target) or not target.endswith((".py", ".pyc", ".pyw")):
                tree.append(os.path.abspath(target))  # a zipapp: its own files
            tree.append(os.path.dirname(os.path.abspath(target)))
            tree.append(os.path.dirname(_real(target)))  # python's sys.path[0]: the script's real directory
    out = []
    for t in tree:
        for form in (t, _real(t)):
            if form not in out:
                out.append(form)
    return tuple(out)


def _editable(dist_info: str) -> bool:
    """Whether a ``*.dist-info`` is an editable install (PEP 610's
    direct_url.json): its project's files are elsewhere, and the user's."""
    try:
        with open(os.path.join(dist_info, "direct_url.json"), encoding="utf-8") as f:
            text = f.read(65536)
    except OSError:
        return False
    import json

    try:
        return bool((json.loads(text).get("dir_info") or {}).get("editable"))
    except (ValueError, AttributeError):
        return False


def _top_level(dist_info: str) -> set[str]:
    """A distribution's top-level packages and modules: its top_level.txt,
    else the first part of each file its RECORD lists."""
    names = set()
    try:
        with open(os.path.join(dist_info, "top_level.txt"), encoding="utf-8") as f:
            names = {n.strip().replace("/", os.sep) for n in f if n.strip()}
        if names:
            return names
    except OSError:
        pass
    try:
        import csv

        with open(os.path.join(dist_info, "RECORD"), encoding="utf-8", newline="") as f:
            for row in csv.reader(f):
                if not row or not row[0]:
                    continue
                first = row[0].replace("\\", "/").split("/", 1)[0]
                if first in ("..", ".", "__pycache__") or first.endswith((".dist-info", ".data", ".pth")):
                    continue
                names.add(first[:-3] if first.endswith(".py") and "/" not in row[0] else first)
    except (OSError, csv.Error, UnicodeDecodeError):
        pass
    return names


def _distribution_packages(entry: str, tree: tuple[str, ...]) -> list[str]:
    """The top-level packages and modules of the distributions installed in
    ``entry`` (a directory on sys.path inside the program's tree), editable
    installs left out; none that holds the program's tree."""
    out: list[str] = []
    try:
        with os.scandir(entry) as it:
            infos = [e.path for e in it if e.name.endswith(".dist-info") and e.is_dir()]
    except OSError:
        return out
    for info in sorted(infos):
        if _editable(info):
            continue
        for name in sorted(_top_level(info)):
            if not name or name.startswith(".") or os.sep in name.strip(os.sep):
                continue
            for candidate in (os.path.join(entry, name), os.path.join(entry, name + ".py")):
                if os.path.exists(candidate) and not any(_within(t, candidate) for t in tree):
                    out.append(candidate)
    return out


def compute(manifest: dict | None = None, path: list | None = None) -> Libraries:
    """The libraries of this process's ``sys.path`` (or ``path``), for the
    program whose tree the run's ``manifest`` says.

    A directory is a library's whole when it was on sys.path before the
    program ran (PYTHONPATH, a .pth file, a launcher's) and lies outside the
    program's tree; one the program put there itself (``sys.path.append('../src')``)
    or one that is inside the program's tree (or above it) is the program's,
    but for the distributions installed there. A zip on sys.path is a
    library's unless it is the program. Recorded by ``profile()``, the
    notebook's magics or the pytest plugin (no target of run's), only
    distributions and zips are: the program's start is not known there."""
    manifest = manifest if isinstance(manifest, dict) else _manifest() or {}
    tree = program_tree(manifest)
    real_tree = tuple(dict.fromkeys(_real(t) for t in tree))
    argv = manifest.get("argv")
    before = _BEFORE if isinstance(argv, list) and argv else frozenset()
    dirs, packages = [], []
    for entry in list(sys.path if path is None else path):
        if type(entry) is not str:  # (never a program's str subclass)
            continue
        absolute = os.path.abspath(entry or os.curdir)
        if is_builtin_library(absolute + os.sep + "x.py") and not any(_within(t, absolute) for t in real_tree):
            dirs.append(absolute)  # site-packages, the standard library: today's rule says it already
            continue
        real = _real(absolute)
        if os.path.isfile(real):  # a zip (a zipapp, an egg): a library's, unless it is the program itself
            if real not in real_tree and absolute not in tree:
                dirs.append(absolute)
            continue
        if not os.path.isdir(real):
            continue
        inside = any(_within(real, t) or _within(t, real) for t in real_tree)
        if not inside and (absolute in before or real in before):
            for form in (absolute, real):
                if form not in dirs:
                    dirs.append(form)
        else:
            for p in _distribution_packages(absolute, real_tree):
                if p not in packages:
                    packages.append(p)
    return Libraries(dirs=tuple(dict.fromkeys(dirs)), packages=tuple(packages), program=tree)


def _no_run() -> dict | None:
    return None


# () -> the manifest of the run recording in this process, or None: set by
# capture/session.py, which imports this module (never the other way round).
manifest_of = _no_run


def _manifest() -> dict | None:
    m = manifest_of()
    return m if isinstance(m, dict) else None


def _merge(old: Libraries | None, new: Libraries) -> Libraries:
    if old is None:
        return new
    return Libraries(dirs=tuple(dict.fromkeys([*old.dirs, *new.dirs])),
                     packages=tuple(dict.fromkeys([*old.packages, *new.packages])), program=new.program)


def current() -> Libraries:
    """This process's libraries: computed at first use, again when sys.path
    has changed (they only grow), fixed once recorded as the script ended."""
    global _libraries, _seen_path, _final
    if _final is not False:
        if _final is _manifest() and _libraries is not None:
            return _libraries
        _final = False  # another run (profile() again): decided again
    now = tuple(sys.path)
    if _libraries is None or now != _seen_path:
        try:
            got = _merge(_libraries, compute())
        except Exception:  # never the program's failure: today's rule then
            got = _libraries or Libraries()
        if got != _libraries:
            _cache.clear()
        _libraries, _seen_path = got, now
    return _libraries


def is_library(filename: str) -> bool:
    """Whether a code object's file is library code (today's rule, then the
    libraries of this process's sys.path), cached per file name."""
    v = _cache.get(filename)
    if v is None:
        path = os.path.abspath(filename) if filename and not filename.startswith("<") else filename
        v = _cache[filename] = is_builtin_library(path) or current().holds(path)
    return v


def record(manifest: dict, final: bool = True) -> None:
    """Put this process's libraries in the run's ``manifest`` (as the script
    ends: sys.path as the script left it; ``final``: fixed from then on).
    Kept as it is when already recorded as final."""
    global _final, _libraries, _seen_path
    if _final is manifest and MANIFEST_KEY in manifest:
        return
    try:
        libs = _merge(_libraries, compute(manifest))
    except Exception:
        return
    if libs != _libraries:
        _cache.clear()
    _libraries, _seen_path = libs, tuple(sys.path)
    _final = manifest if final else False
    manifest[MANIFEST_KEY] = libs.to_json()


def forget() -> None:
    """A new run in this process (profile() again, a forked child's run):
    decide again."""
    global _libraries, _seen_path, _final
    _libraries, _seen_path, _final = None, None, False
    _cache.clear()

"""Which source files are library code: the one rule, shared by the capture
(which must decide in the target process, without pandas) and the analyses.

A file is *library* code when it belongs to JAX or jaxlib, the Python standard
library, jaxmemprof itself (this copy, or a file of its subpackages in
another), or an installed package (site-packages, dist-packages); everything
else is the user's. A run recorded since issue 51 also keeps its own
:class:`Libraries`, decided in the target process (capture/library_roots.py):
the directories on its sys.path outside the program's tree (``pip install
--target`` directories on PYTHONPATH, vendored trees, zipapps, Bazel's
runfiles) and the top-level packages of the distributions installed inside
it; a file under one is library code too, wherever the run is read. A run
recorded before has none: today's rule alone.
"""

from __future__ import annotations

import os
import re
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

_INSTALLED = re.compile(r"[/\\](?:site|dist)-packages[/\\]")
# A Python standard library directory on any machine: .../lib/python3.11/...,
# .../lib/python3.13t/..., C:\Python311\Lib\...
_STDLIB = re.compile(r"(?:^|[/\\])lib[/\\]python\d+(?:\.\d+)?t?[/\\]|(?:^|[/\\])Lib[/\\]")
_LIBRARY_DIRS = ("jax", "jaxlib", "jax_plugins")
# The `jaxmemprof` console script that pip writes (the outermost frame of a run started with it).
_LAUNCHER = re.compile(r"[/\\](?:bin|Scripts)[/\\]jaxmemprof(?:\.exe|-script\.py)?$")
_OWN_PACKAGE = str(Path(__file__).resolve().parents[1]) + os.sep  # jaxmemprof/ (this is jaxmemprof/facts/paths.py)


def _own_files() -> re.Pattern:
    """jaxmemprof's files wherever a copy of it lives (a run recorded with
    another checkout than the one reporting it): a file in one of its
    subpackages under a ``jaxmemprof`` directory; not any file in a folder of
    that name (a clone's examples/ are the user's)."""
    here = Path(__file__).resolve().parents[1]
    names = sorted(p.name for p in here.iterdir() if (p / "__init__.py").is_file())
    return re.compile(r"[/\\]jaxmemprof[/\\](?:" + "|".join(map(re.escape, names)) + r")[/\\]")


_OWN_FILES = _own_files()


def _local_stdlib_dirs() -> tuple[str, ...]:
    dirs = set()
    for key in ("stdlib", "platstdlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            dirs.add(str(Path(p)) + os.sep)
    return tuple(sorted(dirs))


_LOCAL_STDLIB = _local_stdlib_dirs()


def is_builtin_library(path: str) -> bool:
    """JAX, jaxlib, jaxmemprof itself (its launcher too), the standard library,
    installed packages."""
    if not path or path.startswith("<frozen ") or _LAUNCHER.search(path):
        return True
    if _INSTALLED.search(path) or _STDLIB.search(path):
        return True
    if path.startswith(_LOCAL_STDLIB) or path.startswith(_OWN_PACKAGE) or _OWN_FILES.search(path):
        return True
    parts = re.split(r"[/\\]", path)
    return any(p in _LIBRARY_DIRS for p in parts[:-1])


def is_own_file(path: str) -> bool:
    """A file of jaxmemprof itself (this copy, or a file of its subpackages in another)."""
    return path.startswith(_OWN_PACKAGE) or bool(_OWN_FILES.search(path))


def installed_part(path: str, libraries: Libraries | None = None) -> str | None:
    """The path from an installed package down (``flax/nnx/...``), or None
    for a file that is not in site-packages or dist-packages, nor (given the
    run's ``libraries``) under one of its library directories."""
    found = list(_INSTALLED.finditer(path))
    if found:
        m = found[-1]
        return path[m.end():]
    return libraries.part(path) if libraries is not None else None


# The manifest's key of a run's libraries (capture/library_roots.py writes it).
MANIFEST_KEY = "libraries"


def _prefix(directory: str) -> str:
    """``directory`` with its separator (the one its path is written with)."""
    if directory.endswith(("/", "\\")):
        return directory
    return directory + ("\\" if "\\" in directory and "/" not in directory else "/")


@dataclass(frozen=True)
class Libraries:
    """A run's own library code, as the target process decided it.

    ``dirs``: whole directories (a sys.path entry outside the program's tree,
    a zip on sys.path): every file under one is library code, shown from it
    down. ``packages``: a distribution's top-level package directory or
    module file inside the program's tree (``pip install --target vendor``):
    library code, shown from the package down. ``program``: the program's
    tree (its script's directory and its working directory), for the record.
    """

    dirs: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()
    program: tuple[str, ...] = ()
    # Made from the two above.
    _dir_prefixes: tuple[str, ...] = field(init=False, repr=False, compare=False, default=())
    _package_prefixes: tuple[str, ...] = field(init=False, repr=False, compare=False, default=())

    def __post_init__(self):
        object.__setattr__(self, "_dir_prefixes", tuple(_prefix(d) for d in self.dirs))
        object.__setattr__(self, "_package_prefixes", tuple(_prefix(p) for p in self.packages))

    def holds(self, path: str) -> bool:
        """Whether ``path`` is a file of these libraries."""
        return bool(path) and (path.startswith(self._dir_prefixes) or path.startswith(self._package_prefixes)
                               or path in self.packages)

    def part(self, path: str) -> str | None:
        """The path from the library's package down (``optax/_src/alias.py``),
        or None for a file not under these libraries."""
        best = None
        for prefix in self._dir_prefixes:
            if path.startswith(prefix) and (best is None or len(prefix) > len(best)):
                best = prefix
        for package, prefix in zip(self.packages, self._package_prefixes):
            if path == package or path.startswith(prefix):
                cut = max(package.rfind("/"), package.rfind("\\")) + 1
                if best is None or cut > len(best):
                    best = package[:cut]
        return path[len(best):] if best is not None and len(path) > len(best) else None

    def to_json(self) -> dict:
        return {"dirs": list(self.dirs), "packages": list(self.packages), "program": list(self.program)}

    @classmethod
    def from_manifest(cls, manifest) -> Libraries | None:
        """The libraries a run's manifest records, or None for a run that
        records none (recorded before them: today's rule alone). A damaged
        entry keeps only its well-formed paths."""
        got = manifest.get(MANIFEST_KEY) if isinstance(manifest, dict) else None
        if not isinstance(got, dict):
            return None

        def paths(key):
            v = got.get(key)
            return tuple(p for p in v if isinstance(p, str) and p and "\0" not in p) if isinstance(v, list) else ()

        return cls(dirs=paths("dirs"), packages=paths("packages"), program=paths("program"))

    @classmethod
    def union(cls, many) -> Libraries | None:
        """One set of libraries for several runs (a diff's, a job's), or None
        when none records any."""
        many = [m for m in many if m is not None]
        if not many:
            return None
        if len(many) == 1:
            return many[0]
        return cls(dirs=tuple(dict.fromkeys(d for m in many for d in m.dirs)),
                   packages=tuple(dict.fromkeys(p for m in many for p in m.packages)),
                   program=tuple(dict.fromkeys(p for m in many for p in m.program)))


def is_library(path: str, libraries: Libraries | None = None) -> bool:
    """Today's rule (:func:`is_builtin_library`), then the run's own
    ``libraries`` (None: a run that recorded none)."""
    return is_builtin_library(path) or (libraries is not None and libraries.holds(path))


@dataclass(frozen=True)
class Place:
    """Where one source file lies, by the rule above: ``library``
    (:func:`is_library`) and ``installed`` (:func:`installed_part`: the path
    from its package down, or None)."""

    library: bool
    installed: str | None


def place(path: str, libraries: Libraries | None = None) -> Place:
    """Both answers of the rule about ``path`` at once (given the run's
    ``libraries``, None: a run that recorded none): the one question an
    analysis asks of a file."""
    return Place(is_library(path, libraries), installed_part(path, libraries))

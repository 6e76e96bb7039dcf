"""Which source files are library code: the one rule, shared by the capture
(which must decide in the target process, without pandas) and the analyses.

A file is *library* code when it belongs to JAX or jaxlib, the Python standard
library, jaxmemprof itself (this copy, or a file of its subpackages in
another), or an installed package (site-packages, dist-packages); everything
else is the user's.
"""

from __future__ import annotations

import os
import re
import sysconfig
from pathlib import Path

_INSTALLED = re.compile(r"[/\\](?:site|dist)-packages[/\\]")
# A Python standard library directory on any machine: .../lib/python3.11/...,
# .../lib/python3.13t/..., C:\Python311\Lib\...
_STDLIB = re.compile(r"(?:^|[/\\])lib[/\\]python\d+(?:\.\d+)?t?[/\\]|(?:^|[/\\])Lib[/\\]")
_LIBRARY_DIRS = ("jax", "jaxlib", "jax_plugins")
# The `jaxmemprof` console script that pip writes (the outermost frame of a run started with it).
_LAUNCHER = re.compile(r"[/\\](?:bin|Scripts)[/\\]jaxmemprof(?:\.exe|-script\.py)?$")
_OWN_PACKAGE = str(Path(__file__).resolve().parent) + os.sep


def _own_files() -> re.Pattern:
    """jaxmemprof's files wherever a copy of it lives (a run recorded with
    another checkout than the one reporting it): a file in one of its
    subpackages under a ``jaxmemprof`` directory; not any file in a folder of
    that name (a clone's examples/ are the user's)."""
    here = Path(__file__).resolve().parent
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


def installed_part(path: str) -> str | None:
    """The path from an installed package down (``flax/nnx/...``), or None
    for a file that is not in site-packages or dist-packages."""
    m = None
    for m in _INSTALLED.finditer(path):
        pass
    return path[m.end():] if m is not None else None

"""jaxmemprof: where your JAX program's device memory goes, by your own lines of code.

Importing this package does not import jax; only capturing a run does.
"""

import sys as _sys

from jaxmemprof.versions import too_old as _too_old

if (_refused := _too_old()) is not None:  # pip installs it on none of them (requires-python); a checkout:
    if _sys.argv[:1] == ["-m"] or _sys.argv[0].endswith(("/jaxmemprof", "\\jaxmemprof.exe")):  # the command
        _sys.stderr.write(_refused + "\n")
        raise SystemExit(2)
    raise ImportError(_refused)

from jaxmemprof._version import __version__

__all__ = ["__version__", "profile", "ProfiledRun", "mark", "snapshot", "load_profile", "load_run", "InputError"]

from jaxmemprof.api import ProfiledRun, mark, profile, snapshot
from jaxmemprof.errors import InputError


def load_profile(source, **kwargs):
    """Read a pprof profile (gzip or raw; a path or bytes) into tidy frames.

    See :func:`jaxmemprof.pprof.reader.load_profile`.
    """
    from jaxmemprof.pprof.reader import load_profile as _load

    return _load(source, **kwargs)


def load_run(path):
    """Read a run directory (or a directory of .prof files) into DataFrames.

    See :class:`jaxmemprof.store.reader.Run`.
    """
    from jaxmemprof.store.reader import load_run as _load

    return _load(path)


def load_ipython_extension(ipython):
    """``%load_ext jaxmemprof``: the notebook's magics, and every function
    jitted in the kernel from now on observed by each run
    (jaxmemprof/notebook/, docs/notebooks.md)."""
    from jaxmemprof.notebook import load_ipython_extension as _load

    _load(ipython)


def unload_ipython_extension(ipython):
    from jaxmemprof.notebook import unload_ipython_extension as _unload

    _unload(ipython)

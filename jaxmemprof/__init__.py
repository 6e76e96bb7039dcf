"""jaxmemprof: where your JAX program's device memory goes, by your own lines of code.

Importing this package does not import jax; only capturing a run does.
"""

from jaxmemprof._version import __version__

__all__ = ["__version__", "profile", "mark", "snapshot", "load_profile", "load_run", "InputError"]

from jaxmemprof.api import mark, profile, snapshot
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

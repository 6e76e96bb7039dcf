"""jaxmemprof: where your JAX program's device memory goes, by your own lines of code.

Importing this package does not import jax; only capturing a run does.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "load_profile", "InputError"]

from jaxmemprof.errors import InputError


def load_profile(source, **kwargs):
    """Read a pprof profile (gzip or raw; a path or bytes) into tidy frames.

    See :func:`jaxmemprof.pprof.reader.load_profile`.
    """
    from jaxmemprof.pprof.reader import load_profile as _load

    return _load(source, **kwargs)

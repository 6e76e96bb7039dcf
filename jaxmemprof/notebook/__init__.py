"""jaxmemprof in a notebook: ``%load_ext jaxmemprof``.

- ``kernel``: from the extension's loading on, every function jitted in the
  kernel is observed by each run's jit probe; each run records the cells'
  labels (sites read ``In [7]:3``) and what IPython's output history holds;
- ``history``: which live arrays the output history holds, and whether
  anything else does;
- ``magics``: ``%%jaxmemprof``, ``%jaxmemprof start|stop|report``;
- ``display``: what a notebook shows of a run (the summary and findings,
  the report, the report's page inline).

docs/notebooks.md shows it at work.
"""

from __future__ import annotations

_loaded: dict = {}  # id(shell) -> (the Kernel observer, the magics)


def load_ipython_extension(shell) -> None:
    from jaxmemprof import api
    from jaxmemprof.capture import session
    from jaxmemprof.notebook.kernel import Kernel
    from jaxmemprof.notebook.magics import JaxmemprofMagics

    if id(shell) in _loaded:
        return
    if session.active() is not None:
        from IPython.core.error import UsageError

        raise UsageError("jaxmemprof: a run is recording this kernel; load the extension before it starts")
    kernel = Kernel(shell)
    kernel.install()
    api.observers.append(kernel)
    magics = JaxmemprofMagics(shell)
    shell.register_magics(magics)
    _loaded[id(shell)] = (kernel, magics)


def unload_ipython_extension(shell) -> None:
    """``%unload_ext jaxmemprof``: a run ``%jaxmemprof start`` began is
    stopped (and kept), the magics are IPython's no longer (``%%jaxmemprof``
    is then "not found"), and ``jax.jit`` is JAX's own again; runs no longer
    name cells or look at the output history."""
    from jaxmemprof import api

    kernel, magics = _loaded.pop(id(shell), (None, None))
    if kernel is None:
        return
    try:
        run = magics.end_recording()
        if run is not None:
            print(f"jaxmemprof: stopped recording into {run.path} ({run.target}); its report: "
                  f"jaxmemprof.load_run({str(run.path)!r}), or jaxmemprof report {run.path} in a terminal")
    finally:
        _unregister(shell, magics)
        if kernel in api.observers:
            api.observers.remove(kernel)
        kernel.uninstall()


def _unregister(shell, magics) -> None:
    """Take the magics out of IPython's tables (it has no call for that):
    each line and cell magic bound to them, and their class's entry."""
    manager = getattr(shell, "magics_manager", None)
    if manager is None:
        return
    for table in getattr(manager, "magics", {}).values():
        for name, fn in list(table.items()):
            if getattr(fn, "__self__", None) is magics:
                del table[name]
    registry = getattr(manager, "registry", {})
    for name, registered in list(registry.items()):
        if registered is magics:
            del registry[name]

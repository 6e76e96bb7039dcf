"""The kernel's side of a notebook's runs: the jit probe for the whole kernel,
cells named by their label, and IPython's output history looked at as a run
ends.

The jit probe (capture/jit/) observes what is jitted while it is installed,
and a run's own probe is installed for the run only; a notebook jits its
train step in one cell and runs it under ``%%jaxmemprof`` in another. So,
from ``%load_ext jaxmemprof`` on, the kernel keeps a probe of its own
installed (``KernelJit``): a function jitted outside any run gets its proxy
at once, knowing the user's line that jitted it, and quiet (its calls go
straight to the jitted function, at no cost). When a run starts, each
function the kernel knows is handed to that run's probe as a function of its
own (``JitProbe.adopt``: a new function id, its own samples and
XLA's figures of the first signature it runs); when the run ends, it is
given back, quiet. Functions the run's probe jitted itself are kept for the
runs after it.

IPython compiles each cell under a file name of its own (ipykernel: a
temporary file, ``/tmp/ipykernel_PID/HASH.py``; the terminal:
``<ipython-input-N-HASH>``); as a run ends, the kernel's cells so far are
recorded with their labels (``In [7]``), so that sites read ``In [7]:3``.
"""

from __future__ import annotations

import functools
import sys
import weakref

from jaxmemprof.capture.jit import JitProbe, Probed, QuietProbed
from jaxmemprof.facts.libraries import PATCHED


class _Discard:
    """The kernel probe's writer: outside a run, what it would record is
    nobody's (the rows are copied into each run's own journal instead)."""

    closed = False

    def __getattr__(self, name):
        return _nothing


def _nothing(*args, **kwargs):
    return None


class KernelJit:
    """``jax.jit`` and ``jax.pmap`` observed for the kernel's life (see the
    module's docstring)."""

    def __init__(self):
        self.probe: JitProbe | None = None
        self._known: dict[int, weakref.ref] = {}  # id(proxy) -> a weak reference to it
        self._patched: list = []  # (jax, name, the probe's function, ours)
        self._run = None  # the probe of the run recording, if any

    # -- installing ---------------------------------------------------------------------

    def install(self) -> None:
        import jax

        self.probe = JitProbe(_Discard())
        self.probe.install()
        for name, _ in PATCHED:
            theirs = getattr(jax, name, None)
            if theirs is not None:
                ours = self._jit(theirs)
                setattr(jax, name, ours)
                self._patched.append((jax, name, theirs, ours))

    def uninstall(self) -> None:
        for jax, name, theirs, ours in self._patched:
            if getattr(jax, name, None) is ours:
                setattr(jax, name, theirs)
        self._patched.clear()
        if self.probe is not None:
            self.probe.uninstall()

    def _jit(self, theirs):
        """``jax.jit`` as the kernel has it: the kernel probe's, whose proxy
        (made outside a run) is known and quiet until a run takes it."""
        kernel = self

        @functools.wraps(theirs)
        def jit(*args, **kwargs):
            made = theirs(*args, **kwargs)
            if not args and "fun" not in kwargs and not isinstance(made, Probed):
                # @jax.jit(donate_argnums=...): a decorator, whose result is the jitted function
                decorator = made

                @functools.wraps(decorator)
                def decorate(*a, **k):
                    return kernel._born(decorator(*a, **k))

                return decorate
            return kernel._born(made)

        return jit

    def _born(self, made):
        if isinstance(made, Probed) and made._probe is self.probe:
            self._know(made)
            made.__class__ = QuietProbed
        return made

    def _know(self, proxy) -> None:
        key = id(proxy)
        known = self._known

        def gone(ref, key=key):
            if known.get(key) is ref:
                del known[key]

        known[key] = weakref.ref(proxy, gone)

    def known(self) -> list:
        return [p for p in (r() for r in list(self._known.values())) if p is not None]

    # -- a run ------------------------------------------------------------------------

    def begin(self, run_probe) -> None:
        """A run's probe takes every function the kernel knows (each a
        function of the run's own); while it records, functions jitted are
        its own (the kernel's probe passes them through)."""
        assert self.probe is not None, "begin before install"
        self.probe.active = False
        self._run = run_probe
        self.probe.forget_dropped()
        for proxy in self.known():
            run_probe.adopt(proxy)

    def end(self, run_probe) -> None:
        """The run ended (its probe uninstalled): its functions, the kernel's
        and those it jitted, are the kernel's again, quiet."""
        assert self.probe is not None, "end before install"
        if self._run is run_probe:
            self._run = None
        # The kernel's again (so that the run's probe, and its sampler, can go).
        for proxy in run_probe.hand_back(self.probe):
            self._know(proxy)
        self.probe.active = True


class Kernel:
    """The extension's observer of every run the API records in this kernel
    (api.observers): the whole kernel's jit probe, cell labels and the
    output history, for each."""

    def __init__(self, shell):
        self.shell = shell
        self.jit = KernelJit()

    def install(self) -> None:
        self.jit.install()

    def uninstall(self) -> None:
        self.jit.uninstall()

    def started(self, session) -> None:
        if session.probe is not None:
            self.jit.begin(session.probe)
        import IPython

        with session.writer._lock:
            session.writer.manifest["notebook"] = {"ipython_version": IPython.__version__,
                                                   "kernel": type(self.shell).__name__}

    def ending(self, session, snapshot) -> None:
        from jaxmemprof.notebook.history import holders

        session.writer.add_source_names(cell_labels(self.shell))
        if snapshot is not None:
            # Under the sampler's lock: it holds none of the program's arrays
            # meanwhile (every reference to them is then counted right).
            with session.sampler.holding():
                rows = holders(self.shell, sys.modules["jax"])
            session.writer.add_held_by([(snapshot, *row) for row in rows])

    def ended(self, session) -> None:
        if session.probe is not None:
            self.jit.end(session.probe)


def cell_labels(shell) -> list[tuple[str, str]]:
    """(file name, ``In [N]``) of every cell the kernel compiled: IPython's
    own map (the one its tracebacks read, ``Cell In[7]``)."""
    names = getattr(getattr(shell, "compile", None), "_filename_map", None)
    if not isinstance(names, dict):
        return []
    return [(str(f), f"In [{n}]") for f, n in list(names.items()) if isinstance(n, int)]

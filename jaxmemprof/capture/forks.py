"""Forked children of a recorded program. A forked child never writes into
its parent's run: it stops recording that run at once. A child forked before
the program brought JAX up, that then brings JAX up itself (JAX imported, or
first used, after the fork: what JAX supports in a forked child), is recorded
into a run of its own beside the parent's, RUN.fork-PID (RUN/process-N.fork-PID
in a job), from the moment it does. A child forked once JAX was up is not
recorded: JAX's threads are not copied by fork, and a profile taken there
could hang.

The at-fork hooks are registered once, by capture/session.py (where the
active session lives), which hands this module the session that was active."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from jaxmemprof.capture.rundir import forget_locks_in_child, lock, mkdir
from jaxmemprof.capture.sampler import jax_ready
from jaxmemprof.store import layout

if TYPE_CHECKING:
    from jaxmemprof.capture.session import Session

FORK_SUFFIX = ".fork-"
_jax_up_at_fork = False
_fork_watch: _ForkWatch | None = None


def fork_directory(parent: Path, pid: int) -> Path:
    return parent.with_name(f"{parent.name}{FORK_SUFFIX}{pid}")


def before_fork(active: Session | None) -> None:
    """Before a fork: whether JAX is up under the active session."""
    global _jax_up_at_fork
    _jax_up_at_fork = active is not None and jax_ready() is not None


class _ForkWatch:
    """In a forked child: waits (in a thread of its own) until the child
    brings JAX up, then records it into its own run directory."""

    def __init__(self, parent: Session, active):
        self.parent_path = parent.path
        m = parent.writer.manifest
        self.argv = list(m.get("argv") or [])
        self.command = list(m.get("command") or [])
        self.interval = parent.sampler.interval
        self.max_overhead = parent.sampler.max_overhead
        self.addresses = parent.sampler.addresses
        self.on_finish = parent.on_finish
        # The child's run is a Session as the parent's (its class: this module
        # does not import session.py, which imports it); active() the
        # child's active session.
        self.session_type = type(parent)
        self.active = active
        self.session: Session | None = None
        self.done = False

    def start(self) -> None:
        from jaxmemprof.capture.threads import start_thread

        start_thread(self._loop, "jaxmemprof-fork")  # no hook of the program's in it

    def _loop(self) -> None:
        from jaxmemprof.capture.sampler import block_signals_in_this_thread

        block_signals_in_this_thread()
        while not self.done:
            if jax_ready() is not None:
                self._begin()
                return
            time.sleep(min(self.interval, 0.2))

    def _begin(self) -> None:
        if self.active() is not None or self.done:
            return  # the child records itself (profile()), or is ending
        try:
            path = fork_directory(self.parent_path, os.getpid())
            mkdir(path, exist_ok=False)
            lock(path)
            s = self.session_type(path, target_argv=self.argv, interval=self.interval,
                                  max_overhead=self.max_overhead, jit_probe=False, addresses=self.addresses,
                                  command=self.command, on_finish=self.on_finish)
            with s.writer._lock:
                s.writer.manifest["forked_from"] = {"pid": os.getppid(), "run": str(self.parent_path)}
                layout.write_json_atomic(path / layout.MANIFEST, s.writer.manifest)
            s.start()
            self.session = s
        except Exception:
            return
        mp_util = sys.modules.get("multiprocessing.util")
        if mp_util is not None and hasattr(mp_util, "Finalize"):
            # A multiprocessing child ends by os._exit, after its finalizers.
            try:
                mp_util.Finalize(None, finish_fork_child, args=(None, "exit"), exitpriority=100)
            except Exception:
                pass


def finish_fork_child(exit_status, ended_by: str) -> None:
    """At a forked child's end: its own run's last snapshot, then finalised."""
    w = _fork_watch
    if w is None:
        return
    w.done = True
    s = w.session
    if s is None or s.forked or s.writer.closed:
        return
    try:
        s.sampler.stop()
        s.sampler.snapshot("exit")
    except Exception:
        pass
    s.stop(exit_status, ended_by)


def after_fork_in_child(parent: Session | None, active) -> None:
    """In a forked child, ``parent`` the session that was active (no longer
    the active one): the child stops recording the parent's run (and may
    record its own, see above); ``active()`` the child's active session."""
    global _fork_watch
    forget_locks_in_child()
    _fork_watch = None
    if parent is not None:
        parent.detach_in_child()
        if not _jax_up_at_fork:
            try:
                _fork_watch = _ForkWatch(parent, active)
                _fork_watch.start()
            except Exception:
                _fork_watch = None

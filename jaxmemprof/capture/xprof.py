"""``run --xprof``: a ``jax.profiler`` trace of the same program, recorded
into the run directory (``RUN/xprof/plugins/profile/<session>/``), so that
``export --format perfetto`` merges JAX's ops with the run's memory.

Started once JAX's backend is up (the sampler's backend hook, in its
thread), stopped as the run ends (Session.end_work, or Session.stop on any
other way out): never left running. JAX allows one trace at a time, so
while ours runs, the program's own trace (``jax.profiler.trace``,
``start_trace``, JAX 0.12's ``ProfileSession``) first stops ours, which is then kept as it was, and
the program's goes on as without jaxmemprof; a trace the program had
already started when the backend came up means none of ours (said as an
event). JAX's Python tracer sets a profile function in every thread; the
sampler's own thread drops it at once (our threads never run under the
program's profile functions). A forked child never stops or writes the
parent's trace (its own start_trace then meets JAX's refusal, as it would
under a parent that traced)."""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from pathlib import Path

from jaxmemprof.store import layout
from jaxmemprof.store.jax_trace import LOG_DIR, PROFILE_SUBDIR

STOP_WAIT_S = 120.0  # the most the run's end waits for a start of JAX's trace to return


def xprof_capture(session) -> XprofCapture:
    """run --xprof's capture for ``session``, started by its sampler once JAX's backend is up."""
    capture = XprofCapture(session)
    session.sampler.backend_hooks.append(capture.start)
    return capture


class XprofCapture:
    def __init__(self, session):
        self.session = session
        self.started = False
        self.before: set = set()
        self.facts: dict = {"log_dir": LOG_DIR}
        self._patched: list = []
        self._lock = threading.Lock()
        self._local = threading.local()

    @property
    def log_dir(self) -> Path:
        return Path(self.session.path) / LOG_DIR

    def _sessions(self) -> set:
        try:
            return {d.name for d in self.log_dir.joinpath(*PROFILE_SUBDIR).iterdir() if d.is_dir()}
        except OSError:
            return set()

    def start(self) -> None:
        """Start JAX's trace (the backend is up): in the sampler's thread."""
        jax = sys.modules.get("jax")
        profiler = getattr(jax, "profiler", None)
        if profiler is None:
            return self._note("not recorded: jax.profiler is not there")
        with self._lock:
            if self.started or self.session.forked:
                return
            kind = layout.entry_kind(self.log_dir)
            if kind == "absent":
                try:
                    os.mkdir(self.log_dir)
                except OSError as exc:
                    return self._note(f"not recorded: cannot make {self.log_dir} ({exc.strerror or exc})")
            elif kind != "dir":
                return self._note(f"not recorded: {self.log_dir} {layout.refusal(kind, directory=True)}")
            self.before = self._sessions()
            self._patch(jax)  # first: a start of the program's meanwhile waits for ours, then stops it
            t0, w0 = time.perf_counter(), time.time()
            self._local.ours = True  # this thread's start is ours: the patch lets it through
            try:
                profiler.start_trace(str(self.log_dir))
            except Exception as exc:  # the program's own trace is running: JAX allows one
                self._unpatch()
                return self._note(f"not recorded: jax.profiler.start_trace failed ({str(exc).splitlines()[0]})")
            finally:
                self._local.ours = False
                sys.setprofile(None)  # JAX's Python tracer: not in our thread
            self.started = True
            self.facts.update(start_wall=w0, start_s=round(time.perf_counter() - t0, 6))

    def stop(self, why: str = "the run's end") -> None:
        """Stop JAX's trace, if ours runs, and record where it went (never raises: the run's end goes on)."""
        try:
            self._stop(why)
        except Exception:
            pass

    def _stop(self, why: str) -> None:
        if not self._lock.acquire(timeout=STOP_WAIT_S):  # a start that does not return: never hang the run
            return self._note(f"not stopped: its start had not returned in {STOP_WAIT_S:g} s")
        try:
            self._stop_locked(why)
        finally:
            self._lock.release()

    def _stop_locked(self, why: str) -> None:
        if not self.started:
            return
        self.started = False
        self._unpatch()
        if self.session.forked:  # a forked child's copy: the trace is the parent's to stop and write
            return
        jax = sys.modules.get("jax")
        t0 = time.perf_counter()
        try:
            jax.profiler.stop_trace()  # type: ignore[union-attr]
        except Exception as exc:
            self._note(f"not saved: jax.profiler.stop_trace failed ({str(exc).splitlines()[0]})")
        self.facts.update(stop_wall=time.time(), stop_s=round(time.perf_counter() - t0, 6), stopped_by=why)
        made = sorted(self._sessions() - self.before)
        if made:
            self.facts["session"] = made[-1]
        self._record()

    def _note(self, text: str) -> None:
        self.facts["error"] = text
        try:
            self.session.writer.add_event("warning", f"--xprof: {text}")
        except Exception:
            pass
        self._record()

    def _record(self) -> None:
        """The capture's facts in the manifest (written with it as the run ends)."""
        try:
            with self.session.writer._lock:
                self.session.writer.manifest["xprof"] = dict(self.facts)
        except Exception:
            pass

    # The program's own trace stops ours first (JAX allows one trace at a time): where every start goes
    # through, ProfileSession.start (JAX 0.12: trace() and start_trace() both make one), else start_trace
    # (0.10: trace() calls it), in jax.profiler and in the module trace() looks it up in.
    def _patch(self, jax) -> None:
        private = sys.modules.get("jax._src.profiler")
        session = getattr(private, "ProfileSession", None)
        if session is not None and callable(getattr(session, "start", None)):
            targets = [session]
            name = "start"
        else:
            targets = [m for m in (jax.profiler, private) if m is not None]
            name = "start_trace"
        for owner in targets:
            original = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
            if original is None or hasattr(original, "_jaxmemprof_original"):
                continue

            @functools.wraps(original)
            def start(*args, _original=original, **kwargs):
                if not getattr(self._local, "ours", False):  # the program's: ours stopped and kept first
                    self.stop("the program's own jax.profiler trace")
                return _original(*args, **kwargs)

            start._jaxmemprof_original = original  # type: ignore[attr-defined]
            setattr(owner, name, start)
            self._patched.append((owner, name, original, start))

    def _unpatch(self) -> None:
        for owner, name, original, ours in self._patched:
            current = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
            if current is ours:
                setattr(owner, name, original)
        self._patched = []

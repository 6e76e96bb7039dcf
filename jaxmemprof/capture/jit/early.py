"""The end's compiles started early: while the program runs, a thread of
ours (``jaxmemprof-compile``) compiles what the end of the run would compile
anyway, so that its cost overlaps the program instead of following it.

- **What.** XLA's dump of a user's function's largest signature, where its
  executable lacks the buffer assignment (programs.py: the dump fallback),
  as soon as that signature is compiled; and the donation advice's verifying
  compile (whatif.py) of each kept signature whose run's trace is kept
  (retrace.Trace: a replay, no Python of the program's run again), as soon
  as a sampled call's fates are known and the donation rule names
  arguments. A re-trace of the program's Python (another batch, bfloat16,
  jax.pmap's) is never made here: its shield redirects the process's
  standard descriptors, which the program is still writing to; nor a
  compile whose trace holds arrays (a closure's constants): the thread holds
  none of the program's arrays.
- **How the end uses it.** Each compile is kept under what it was made of
  (the function, its signature, what was donated); the end's compiles ask
  for theirs first (``result``) and compile only what is missing or
  changed (the donation rule, read again at the end on every sampled call,
  may name other arguments than it did mid-run). At the end (``close``)
  what is queued is dropped; the compile under way goes on beside the end
  phase, which does the rest in the main thread, as before, with its
  progress shown and a signal still skipping it. The end asks for the
  compile under way only once it has nothing else to do (``taken``,
  ``join``), or waits for it where it needs that very compile (``result``):
  on a TPU a step's dump and its donation's compile, 18 and 19 s of the
  GPT's end, then overlap instead of following each other.
- **Which first.** A dump first (the report's figures need it whatever the
  budget), then the donation of the function with the largest call peak:
  the one likelier to hold the run's true peak, whose donation the end
  would compile first too (budget.py); a function whose calls hold less
  (an evaluation step, a model's method) waits, and is dropped where the
  program ends first.
- **Unseen.** The thread's compiles are jaxmemprof's own (programs.py
  ``_unseen_compile``, for that thread alone): no persistent cache, no
  compile log line, no jax.monitoring event for the program's listeners or
  the probe's. JAX's tracing state is the thread's own. The thread takes no
  signal (the program's threads get them, as under python), writes to no
  stream, and starts at the first compile it has to make; where the program
  has XLA dump its modules (--xla_dump_to) nothing is compiled beside it:
  a compile of ours would take a module number from XLA's counter.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading

from jaxmemprof.capture.threads import OwnThread

# Compiles kept at most (a program that compiles a new signature every step makes few worth keeping).
KEEP_RESULTS = 256
MISSING = object()


def _program_dumps() -> bool:
    """Whether the program has XLA dump its modules (``--xla_dump_to`` in
    XLA_FLAGS): a compile of ours beside it would take a module number from
    XLA's counter, and the program's own dumps would be named otherwise than
    under python. Its compiles then wait for the end, as before."""
    return "xla_dump_to" in os.environ.get("XLA_FLAGS", "")


class Early:
    """One run's early compiles (``probe.early``)."""

    def __init__(self, probe):
        self.probe = probe
        self._cv = threading.Condition()
        self._queue: dict = {}  # job key -> (priority, submitted, job): the largest priority first, then the oldest
        self._submitted = itertools.count()
        self._results: dict = {}  # compile key -> what the compile gave
        # (function_id, nums, names) -> {a donated lowering's key: (figures, None)}: the programs its
        # donations compiled (no executable kept: it would hold device memory), for the signatures
        # that lower to one of them (whatif._donated)
        self._lowerings: dict = {}
        self._running = None  # the key of the job under way
        self._making = None  # the result key it makes, where one alone is known (a dump's)
        self._thread: OwnThread | None = None
        self.closed = False
        self.compiled = 0  # compiles made on the thread
        self.seconds = 0.0  # their wall time
        self.used = 0  # of them, what the end took instead of compiling

    # -- from the program's threads (cheap: a job queued) ---------------------------------

    def submit(self, key, job, priority: float = 0.0, makes=None) -> None:
        """Queue ``job()`` under ``key``; one queued already under that key is
        replaced (its newer state stands). The thread takes the job of the
        largest ``priority`` first. ``makes``: the one result key it makes,
        where that is known."""
        with self._cv:
            if self.closed or _program_dumps():
                return  # compiled at the end, as before
            self._queue.pop(key, None)
            self._queue[key] = (priority, next(self._submitted), job, makes)
            if self._thread is None:
                self._thread = OwnThread(self._work, "jaxmemprof-compile")  # no hook of the program's in it
                try:
                    self._thread.start()
                except RuntimeError:  # interpreter shutting down: the end compiles it
                    self._queue.clear()
                    self.closed = True
                    return
            self._cv.notify()

    def sampled(self, state) -> None:
        """A sampled call of ``state``'s function has its fates: its
        donations verified anew from what is kept now."""
        slot = state.plan
        if slot is None or not state.user or not slot.traces or self.closed:
            return
        planner = self.probe.planner
        if state not in planner.top:  # not among the largest: its shapes are not kept to the end either
            return
        kept = [(sig, slot.abstract[sig], slot.traces[sig]) for sig in list(slot.abstract)
                if sig in slot.traces and slot.traces[sig].const_bytes == 0]
        real = planner.real_of(state)
        if kept and real is not None:
            self.submit(("donate", state.function_id), lambda: self._donations(state, real, kept), slot.best or 0)

    def dump(self, state, signature: str, lowered) -> None:
        """``state``'s largest signature so far needs XLA's dump (programs.py)."""
        if state.user:
            self.submit(("dump", state.function_id), lambda: self._dump(state, signature, lowered), float("inf"),
                        makes=("dump", state.function_id, signature))

    # -- the end ------------------------------------------------------------------------------

    def result(self, key, default=MISSING):
        """What the compile under ``key`` gave, if the thread made it; where
        the thread is making it now, once it is made (the end would
        otherwise make it again beside it)."""
        with self._cv:
            while self._making_now(key):
                self._cv.wait(0.1)
            value = self._results.get(key, MISSING)
        if value is MISSING:
            return default
        self.used += 1
        return value

    def donation(self, function_id, signature: str, nums, names):
        """The donation's verifying compile made here (compile_figures's
        answer), or None: not made, or failed (beside the running program;
        the end compiles it again once the program is done)."""
        done = self.result(donation_key(function_id, signature, nums, names), None)
        if done is not None and done[2] is not None:
            with self._cv:
                self.used -= 1
            return None
        return done

    def lowerings(self, function_id, nums, names, wait: bool = True) -> dict:
        """The donated programs compiled here for the function's donation
        (compiles.compile_call's ``seen``, figures only); ``wait``: once the
        thread's donation job for the function, if under way, is done (not
        from the thread itself)."""
        with self._cv:
            while wait and self._running is not None and self._running[:2] == ("donate", function_id):
                self._cv.wait(0.1)
            return dict(self._lowerings.get((function_id, frozenset(nums), frozenset(names)), {}))

    def taken(self, key) -> bool:
        """Whether the thread made the compile under ``key`` or is making it
        now (the end leaves it to the thread, and goes on)."""
        with self._cv:
            if key in self._results or self._making_now(key):
                self.used += 1
                return True
        return False

    def _making_now(self, key) -> bool:
        """(Under the lock.) Whether the job under way may make ``key``'s result."""
        if key in self._results or self._running != key[:2]:
            return False
        return self._making is None or self._making == key

    def close(self, wait: bool = True) -> None:
        """No more compiles here: those queued are dropped; with ``wait``,
        the one under way is waited for (a compile is not interrupted; a
        signal in the main thread interrupts the wait); without, it goes on
        beside the end's own compiles until ``join``."""
        with self._cv:
            self.closed = True
            self._queue.clear()
            self._cv.notify_all()
        if wait:
            self.join()

    def running(self) -> bool:
        """Whether a compile is under way."""
        with self._cv:
            return self._running is not None

    def join(self) -> None:
        """Wait for the compile under way, if any."""
        with self._cv:
            while self._running is not None:
                self._cv.wait(0.1)

    def said(self) -> None:
        """What the thread compiled, and how much of it the end used (a run event)."""
        if self.compiled:
            import json

            self.probe.writer.add_event("early-compiles", json.dumps(
                {"compiled": self.compiled, "seconds": round(self.seconds, 3), "used": self.used}))

    # -- the thread -------------------------------------------------------------------------

    def _work(self) -> None:
        from jaxmemprof.capture.sampler import block_signals_in_this_thread

        block_signals_in_this_thread()
        while True:
            with self._cv:
                while not self._queue and not self.closed:
                    self._cv.wait()
                if self.closed:
                    return
                key = max(self._queue, key=lambda k: (self._queue[k][0], -self._queue[k][1]))
                _, _, job, self._making = self._queue.pop(key)
                self._running = key
            try:
                if sys.gettrace() is not None:  # the program's settrace_all_threads (3.12): not in ours
                    sys.settrace(None)
                if sys.getprofile() is not None:
                    sys.setprofile(None)
                job()
            except BaseException as exc:  # recorded where it can be; never on the program's streams
                try:
                    self.probe._error(None, exc)
                except BaseException:
                    pass
            finally:
                job = None  # nothing of the program's held between jobs
                with self._cv:
                    self._running = self._making = None
                    self._cv.notify_all()

    def _keep(self, key, value) -> None:
        with self._cv:
            if len(self._results) >= KEEP_RESULTS:
                self._results.pop(next(iter(self._results)))
            self._results[key] = value

    def _donations(self, state, real, kept) -> None:
        from jaxmemprof.capture.jit.whatif import compile_figures, donated_arguments, function_donors, rejit

        probe = self.probe
        found = function_donors(probe.writer, state.function_id)
        if not found:
            return
        nums, names = donated_arguments(found)
        wrapper = state.row.get("wrapper") or "jax.jit"
        for sig, ab, trace in kept:
            key = donation_key(state.function_id, sig, nums, names)
            if self.closed or key in self._results:
                continue
            fn = rejit(probe, state, real, nums, names, trace)
            if isinstance(fn, str):
                continue
            seen = self.lowerings(state.function_id, nums, names, wait=False)
            done = compile_figures(probe._jax, fn, ab, wrapper=wrapper, retraced=False, seen=seen)
            self.compiled += 1
            self.seconds += done[1]
            self._keep(key, done)
            with self._cv:
                self._lowerings[(state.function_id, frozenset(nums), frozenset(names))] = {
                    k: (v[0], None) for k, v in seen.items()}

    def _dump(self, state, signature: str, lowered) -> None:
        if self.closed:
            return
        seconds = self.probe._dump_lowered(state, signature, lowered)
        self.compiled += 1
        self.seconds += seconds
        self._keep(("dump", state.function_id, signature), seconds)


def donation_key(function_id, signature: str, nums, names) -> tuple:
    """What a donation's verifying compile is made of."""
    return "donate", function_id, signature, frozenset(nums), frozenset(names)

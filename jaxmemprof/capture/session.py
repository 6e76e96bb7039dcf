"""A capture session: the run directory, its writer and the sampler, shared by
``jaxmemprof run`` and ``with jaxmemprof.profile():``. The run directory's
claim is capture/rundir.py's, forked children capture/forks.py's, and the
pytest plugin's in-memory totals capture/totals.py's."""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import os
import platform
import re
import signal
import sqlite3
import sys
import threading
import time
import warnings
from datetime import datetime, UTC
from pathlib import Path

from jaxmemprof._version import __version__
from jaxmemprof.capture import forks, library_roots, parking
from jaxmemprof.capture.hooks import AfterImport
from jaxmemprof.capture.jit import JitProbe
# default_output and prepare_directory: how run, profile() and the pytest
# plugin name and claim the directory of the session they start. The rest are read from here by the modules
# and tests that import them through the session (hence noqa F401).
from jaxmemprof.capture.rundir import (BY_INITIALIZE, LauncherProcess, claim_directory, deferred, mkdir,  # noqa: F401
                                       pending_peers, prepare_process_directory, processes,
                                       set_claim_state, wait_for_job, default_output, prepare_directory,
                                       process_directory_name, release_directory)
from jaxmemprof.capture.py_holders import Searches
from jaxmemprof.capture.sampler import Sampler, jax_ready
from jaxmemprof.capture.xprof import xprof_capture
from jaxmemprof.errors import InputError
from jaxmemprof.store import layout
from jaxmemprof.store.writer import RunWriter, Thinning

_active: Session | None = None


def active() -> Session | None:
    return _active


def _active_manifest() -> dict | None:
    writer = getattr(_active, "writer", None) if _active is not None else None
    return getattr(writer, "manifest", None)


library_roots.manifest_of = _active_manifest


_VERSION_LINE = re.compile(r"""^_(release_)?version(?:\s*:\s*str)?\s*=\s*['"]([^'"]+)['"]""", re.M)


def _version(dist: str) -> str | None:
    """The installed version of jax or jaxlib, cheaply (run's start-up pays
    for it before the script runs): the module's own ``__version__`` where
    it is imported, else its version.py read without importing it (its
    release version first), else the package metadata (a scan of sys.path)."""
    module = sys.modules.get(dist)
    if isinstance(getattr(module, "__version__", None), str):
        return module.__version__
    try:
        spec = importlib.util.find_spec(dist)
        if spec is not None and spec.origin:
            with open(os.path.join(os.path.dirname(spec.origin), "version.py"), encoding="utf-8") as f:
                found = {bool(m.group(1)): m.group(2) for m in _VERSION_LINE.finditer(f.read(100_000))}
            if found:
                return found.get(True) or found[False]
    except (ImportError, OSError, ValueError):
        pass
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _platform() -> str:
    """``Linux-6.18.44-x86_64``: the system, its release and the machine
    (platform.platform() would start a ``uname -p`` process for them)."""
    u = os.uname()
    return f"{u.sysname}-{u.release}-{u.machine}"


def allocator_environment() -> dict:
    return {
        k: v for k, v in sorted(os.environ.items())
        if k.startswith(layout.ALLOCATOR_ENV_PREFIXES) or k in layout.ALLOCATOR_ENV_NAMES
    }


class Session:
    def __init__(self, directory: Path, *, target_argv: list[str], interval: float,
                 max_overhead: float, jit_probe: bool = True, addresses: str = "auto",
                 command: list[str] | None = None, on_finish=None, plan=None, verify_s: float | None = None,
                 holders: bool = True, targets: tuple = (), xprof: bool = False):
        # on_finish(path): what a process of a job does with its run as it
        # ends (the CLI and the API ask for its summary); capture analyses nothing.
        self.on_finish = on_finish
        self.directory = directory
        self.t_start = time.monotonic()
        # Absolute: the script may chdir, the run directory stays put.
        self.path = Path(os.path.abspath(directory))
        try:
            thinning = thinning_schedule()
        except InputError:
            release_directory(self.path)
            raise
        manifest = {
            "jaxmemprof_version": __version__,
            "command": command if command is not None else list(sys.argv),
            "argv": target_argv,
            "cwd": os.getcwd(),
            "python": sys.version.split()[0],
            "jax_version": _version("jax"),
            "jaxlib_version": _version("jaxlib"),
            "platform": _platform(),
            "hostname": platform.node(),
            "pid": os.getpid(),
            "environment": allocator_environment(),
            "start_time": datetime.now(UTC).isoformat(),
            "start_epoch": time.time(),
            "end_time": None,
            "exit_status": None,
            "settings": {"interval": interval, "max_overhead": max_overhead, "jit_probe": jit_probe,
                         "addresses": addresses, "thinning": dataclasses.asdict(thinning),
                         # run --plan (capture/jit/plan.py PlanOptions); null without it
                         "plan": plan.settings() if plan is not None and jit_probe else None,
                         # run --verify-seconds: the verifying compiles' budget (null: a share of the run)
                         "verify_s": verify_s,
                         # run --no-holders: false (no search for the Python references holding arrays)
                         "holders": holders,
                         # run --target: the TPU slices the step is compiled for (capture/jit/targets.py)
                         "targets": list(targets) if jit_probe else [],
                         # run --xprof: a jax.profiler trace recorded into RUN/xprof (capture/xprof.py)
                         "xprof": xprof},
        }
        proc = processes.get(str(self.path))
        if proc is not None:  # as the launcher says; JAX's own index replaces it once known
            manifest.update(process_index=proc.index, process_count=proc.count, process_variable=proc.variable,
                            job_id=proc.job_id)
        self.process = proc
        # A claim that waits for jax.distributed.initialize (jobs started by hand).
        self.deferred = deferred.pop(str(self.path), None)
        if self.deferred is not None and self.deferred.pending is not None:
            manifest["pending"] = {"job": os.path.abspath(self.deferred.job)}
        self._dist_patch = None
        self._dist_hook = None
        try:
            self.writer = RunWriter(self.path, manifest, thinning=thinning)
        except (OSError, sqlite3.Error) as exc:
            release_directory(self.path)
            raise InputError(str(directory), f"cannot write the run: {_reason(exc)}") from None
        self.forked = False  # a forked child's copy: records nothing
        # run: how and when the script ended, recorded before jaxmemprof's end
        # phase (script_ended); what of that phase was done (finalise_end).
        self.script_end: dict | None = None
        self._t_script_end: float | None = None
        self._end_skipped_by: str | None = None
        self.child_hooks: list = []  # called in a forked child, to stop recording there
        self.sampler = Sampler(self.writer, interval=interval, max_overhead=max_overhead, addresses=addresses)
        self.sampler.py_holders = Searches(self.writer) if holders else None
        # Under run, the console script that started jaxmemprof is the outermost
        # frame of every stack the program makes: not the program's own. XLA's
        # dumps at the end take their share of the half of --max-overhead the
        # sampler leaves.
        launcher = (os.path.abspath(sys.argv[0]),) if target_argv and sys.argv and os.path.isfile(sys.argv[0]) else ()
        self.probe = JitProbe(self.writer, dump_share=max_overhead / 2, exclude=launcher,
                              plan=plan, verify_s=verify_s, targets=targets) if jit_probe else None
        if self.probe is not None:
            self.sampler.hooks.append(self.probe.on_snapshot)
            self.sampler.in_flight = self.probe.calls_in_flight
            self.probe.observer = self.sampler
            self.probe.on_step = self._jit_step
        self.program_marks = False  # the program marks its steps itself (jaxmemprof.mark)
        self._planning_by_backend = bool(self.probe is not None and plan is not None and plan.device_bytes is not None)
        if self._planning_by_backend:
            self.sampler.backend_hooks.append(self._plan_by_backend)
        self.xprof = xprof_capture(self) if xprof else None  # run --xprof: JAX's trace, backend up to the end

    def start(self) -> Session:
        global _active
        _active = self
        if self.probe is not None:
            self.probe.install()
        self._hook_warnings()
        self._hook_distributed()
        if self.deferred is not None:
            # JAX's backend up before jax.distributed.initialize: initialize can no longer be called.
            self.sampler.backend_hooks.append(self._on_snapshot_claim)
            self.sampler.hooks.append(self._on_snapshot_claim)
        self.sampler.start()
        return self

    # jax.distributed.initialize returns in every process of a job at once (it
    # waits for all of them to connect): the moment it returns is recorded,
    # to align the processes' clocks, with the index JAX gives the process.
    def _hook_distributed(self) -> None:
        jax = sys.modules.get("jax")
        if jax is not None and hasattr(jax, "distributed"):
            self._patch_distributed(jax)
            return
        self._dist_hook = AfterImport("jax", self._patch_distributed)
        sys.meta_path.insert(0, self._dist_hook)

    def _patch_distributed(self, jax) -> None:
        dist = getattr(jax, "distributed", None)
        original = getattr(dist, "initialize", None)
        if original is None or not callable(original) or hasattr(original, "_jaxmemprof_original"):
            return

        @functools.wraps(original)
        def initialize(*args, **kwargs):
            s = _active
            if s is not None and not s.forked:
                s._claim_state_is("distributed")
            try:
                result = original(*args, **kwargs)
            except BaseException:
                s = _active
                if s is not None and not s.forked:
                    s._settle_single()
                raise
            s = _active
            if s is not None and not s.forked:
                s._on_distributed_init()
            return result

        initialize._jaxmemprof_original = original
        try:
            dist.initialize = initialize
        except Exception:
            return
        self._dist_patch = (dist, original, initialize)
        self._claim_state_is("jax")

    def _unhook_distributed(self) -> None:
        if self._dist_hook is not None and self._dist_hook in sys.meta_path:
            sys.meta_path.remove(self._dist_hook)
        if self._dist_patch is not None:
            dist, original, ours = self._dist_patch
            if getattr(dist, "initialize", None) is ours:
                dist.initialize = original
            self._dist_patch = None

    def _on_distributed_init(self) -> None:
        """Record when jax.distributed.initialize returned (the job's common
        moment) and the process index and count it set (read from JAX's
        state: asking jax.process_index() would start the backend)."""
        t_wall, t_mono = time.time(), time.monotonic()
        try:
            state = getattr(sys.modules.get("jax._src.distributed"), "global_state", None)
            index, count = getattr(state, "process_id", None), getattr(state, "num_processes", None)
            index = index if isinstance(index, int) else None
            count = count if isinstance(count, int) else None
            if self.deferred is not None and not self.deferred.settled:
                self._claim_job_process(index, count)
            info = {"t_wall": t_wall, "t_mono": t_mono, "process_index": index, "process_count": count}
            proc = self.process
            job = count is not None and count > 1  # initialize(num_processes=1) makes no job
            if proc is not None and job and index is not None and index != proc.index:
                info["launcher_process_index"] = proc.index
                self.writer.add_event("warning", f"jax.distributed.initialize made this process {index}; "
                                                 f"{proc.variable} said {proc.index}, which names its directory")
            self.writer.add_event("distributed-init", json.dumps(info))
            with self.writer._lock:
                if self.writer.closed:
                    return
                m = self.writer.manifest
                m["distributed"] = info
                if index is not None and job:
                    m["process_index"], m["process_count"] = index, count
                layout.write_json_atomic(self.path / layout.MANIFEST, m)
        except Exception:
            pass  # never break the program's own initialize

    # -- a claim that waits for jax.distributed.initialize (jobs started by hand) --

    def _claim_state_is(self, state: str) -> None:
        d = self.deferred
        if d is not None and not d.settled and (d.pending is None or d.holds_job):
            set_claim_state(d.job, state)

    def _release_job_lock(self) -> None:
        d = self.deferred
        if d is not None and d.holds_job:
            d.holds_job = False
            release_directory(d.job)

    def _settle_single(self) -> None:
        """No job after all: the holder is a single run for good (a run
        waiting for it is then refused); a pending run stays where it is."""
        d = self.deferred
        if d is None or d.settled:
            return
        d.settled = True
        if d.pending is None:
            set_claim_state(self.path, "recording")
        elif d.holds_job:
            set_claim_state(d.job, "recording")
            self._pending_alone("holds a job's processes, not a single run")
        else:
            self._pending_alone("another jaxmemprof run is recording into it")

    def _plan_by_backend(self) -> None:
        """--plan-device-memory's largest fitting peak by the rule of the
        backend the run is on, once JAX's backend is up (the command line
        reckoned it before, by the GPU's pool): a TPU's whole chip."""
        import dataclasses

        from jaxmemprof.facts.backends import get as backend_of

        probe = self.probe
        if not self._planning_by_backend or probe is None:
            return
        self._planning_by_backend = False
        planner = probe.planner
        options = planner.options
        platform = sys.modules["jax"].default_backend()
        peak = backend_of(platform).largest_fitting_peak(options.device_bytes)
        if peak != options.fit_peak_bytes:
            planner.options = dataclasses.replace(options, fit_peak_bytes=peak)
            settings = self.writer.manifest.get("plan")
            if isinstance(settings, dict):
                settings["fit_peak_bytes"] = peak  # written with the manifest as the run ends

    def _on_snapshot_claim(self) -> None:
        """The backend is up (seen by the sampler, or a snapshot was taken)
        without initialize: a single run."""
        if self.deferred is not None and not self.deferred.settled:
            self._settle_single()

    def _pending_alone(self, why: str) -> None:
        _warn(f"jaxmemprof: warning: {self.deferred.job}: {why}; this process is recorded in {self.directory}\n")

    def _claim_job_process(self, index: int | None, count: int | None) -> None:
        """initialize returned: a process of a job claims JOB/process-<index>
        and moves its run there (the holder only when pending runs wait in
        JOB: alone, it keeps the single layout). Whatever fails leaves the
        run where it is, complete, with a warning."""
        d = self.deferred
        if index is None or count is None or count <= 1:
            self._settle_single()
            return
        d.settled = True
        proc = LauncherProcess(index=index, count=count, variable=BY_INITIALIZE)
        name = process_directory_name(index)
        job = Path(os.path.abspath(d.job))
        old = self.path
        if d.pending is None:
            if not pending_peers(job):
                set_claim_state(job, "recording")
                return
            dst = job / name
            try:
                mkdir(dst, exist_ok=True, own=True)
                claim_directory(dst, d.force)
            except InputError as exc:
                set_claim_state(job, "recording")
                _warn(f"jaxmemprof: warning: {exc}; this process is recorded as a single run in {self.directory}\n")
                return
        else:
            why = wait_for_job(job)
            if why is not None:
                self._pending_alone(why)
                return
            try:
                dst = prepare_process_directory(job, proc, d.force)
            except InputError as exc:
                self._pending_alone(exc.problem if exc.source == str(job) else str(exc))
                return
        try:
            self.writer.move_to(dst)
        except (OSError, InputError, sqlite3.Error) as exc:
            release_directory(dst)
            processes.pop(str(dst), None)
            try:
                os.rmdir(dst)
            except OSError:
                pass
            if d.pending is None:
                set_claim_state(job, "recording")
            _warn(f"jaxmemprof: warning: {dst}: cannot move the run there ({_reason(exc)}); this process is "
                  f"recorded in {self.directory}\n")
            return
        release_directory(old)
        self._release_job_lock()
        if d.pending is not None:
            try:
                os.rmdir(old)  # empty now: only a directory of ours, never anything in it
            except OSError:
                pass
        self.path = dst
        self.directory = Path(d.job) / name
        self.process = proc
        processes[str(dst)] = proc
        with self.writer._lock:
            m = self.writer.manifest
            m.pop("pending", None)
            m.update(process_index=index, process_count=count, process_variable=BY_INITIALIZE)

    # Warnings are heard where the warnings module shows each one
    # (_showwarnmsg, which calls showwarning), so that the script still sees
    # its own warnings.showwarning.
    def _hook_warnings(self) -> None:
        self._showwarnmsg = getattr(warnings, "_showwarnmsg", None)
        self._showwarnmsg_impl = getattr(warnings, "_showwarnmsg_impl", None)
        if self._showwarnmsg is not None:
            warnings._showwarnmsg = self._on_warning

    def _unhook_warnings(self) -> None:
        if self._showwarnmsg is not None and getattr(warnings, "_showwarnmsg", None) == self._on_warning:
            warnings._showwarnmsg = self._showwarnmsg

    def _on_warning(self, msg):
        """Record each warning the program shows (JAX's 'Some donated buffers
        were not usable', say), then show it as before. Warnings a
        catch_warnings(record=True) block collects are not shown: not recorded."""
        shown = getattr(warnings, "_showwarnmsg_impl", None) is self._showwarnmsg_impl
        if shown and not self.forked:
            try:
                self.writer.add_event(
                    "warning", f"{msg.category.__name__}: {msg.message} ({msg.filename}:{msg.lineno})"[:4000])
            except Exception:
                pass
        self._showwarnmsg(msg)

    # -- the program's steps -----------------------------------------------------------

    def place_marker(self, label: str) -> None:
        """A marker on the run's timeline, counted as a step: at the grid's
        steps a snapshot, here, in the calling thread (capture/steps.py)."""
        sampler = self.sampler
        if sampler.failed:
            return
        n = sampler.steps.placed()  # counted first: no timed first snapshot in between
        try:
            self.writer.add_marker(label)
        except Exception as exc:  # never break the program being profiled
            sampler.fail(exc)
            return
        sampler.step(n)

    def _jit_step(self, name: str) -> bool:
        """A call of the program's step begins (JitProbe.stepped): a marker,
        unless the program marks its steps or takes its snapshots itself
        (then never again)."""
        if self.program_marks or self.sampler.steps.own:  # its own steps, or its own snapshots
            return False
        self.place_marker(f"call of {name}")
        return True

    # -- run's end: the script's, then jaxmemprof's end phase ------------------------

    def script_ended(self, exit_status, ended_by: str) -> None:
        """The script is over (its threads joined, its atexit handlers run):
        record its exit status, how and when it ended in the manifest now,
        before any of jaxmemprof's end phase (the last snapshot and its
        holder search, the compiles, the summary), so that a run killed in
        that phase still says how the script ended, and the run's duration is
        the script's. The run is finished only once finalised (end_time)."""
        if self.forked or self.script_end is not None:
            return
        self._t_script_end = time.monotonic()
        self.script_end = {"exit_status": exit_status, "ended_by": ended_by,
                           "end_time": datetime.now(UTC).isoformat(),
                           "duration_s": round(self._t_script_end - self.t_start, 6)}
        try:
            with self.writer._lock:
                if self.writer.closed:
                    return
                m = self.writer.manifest
                m["script_end"] = dict(self.script_end)
                library_roots.record(m)  # which code is a library's, from sys.path as the script left it
                layout.write_json_atomic(self.path / layout.MANIFEST, m)
        except Exception:
            pass  # a full disk: the run's end says it again when it is finalised

    def end_work(self, ended_by: str, progress=None) -> None:
        """The end phase's work after the last snapshot: the jit probe taken
        out, with XLA's dumps and the end's compiles (verify, --plan,
        --target; ``progress(text)`` told what each compile is). Interrupted,
        what is left is done by finalise_end."""
        self.sampler.stop()
        if self.xprof is not None:
            self.xprof.stop()  # never raises
        probe = self.probe
        if probe is not None:
            probe.on_progress = progress
            if self._planning_by_backend and jax_ready() is not None:  # the sampler never saw the backend up
                self._plan_by_backend()
            probe.uninstall(ended_by)
            self.probe = None  # done: stop() does not do it again

    def finalise_end(self, skipped_by: int | None = None) -> None:
        """The run finalised once the script ended (script_ended): the
        manifest finished with the script's status, how and when it ended,
        the lock released. ``skipped_by``: the signal that skipped the rest
        of the end phase (from the main thread, the jit probe is then taken
        out without its compiles; from another thread, while the main thread
        may still be in one, it is left alone)."""
        if self.forked:
            return
        end = self.script_end or {}
        probe, self.probe = self.probe, None
        if skipped_by is not None:
            self._end_skipped_by = _signal_name(skipped_by)
            if probe is not None and threading.current_thread() is threading.main_thread():
                try:
                    probe.uninstall(None, end_work=False)
                except Exception:
                    pass
            try:
                self.writer.add_event("warning", f"the end of the run was interrupted ({self._end_skipped_by}, "
                                                 f"after the script ended): the rest of its work was skipped")
            except Exception:
                pass
        self.stop(end.get("exit_status"), end.get("ended_by", "exit"))

    def stop(self, exit_status, ended_by: str) -> None:
        """Stop sampling and record how the run ended (the last snapshot has
        been taken by the caller). Nothing in a forked child."""
        global _active
        if self.forked:
            return
        self.sampler.stop()
        if self.xprof is not None:
            self.xprof.stop()  # never raises
        if self.probe is not None:
            self.probe.uninstall(ended_by)
        self._unhook_warnings()
        self._unhook_distributed()
        if _active is self:
            _active = None
        if self.deferred is not None and not self.deferred.settled and self.deferred.pending is not None:
            self._settle_single()
        try:
            self._finish(exit_status, ended_by)
        except Exception as exc:  # a full disk: what was committed stays readable
            from jaxmemprof.store.writer import write_failure

            _warn(f"jaxmemprof: warning: {self.directory}: its end was not recorded: {write_failure(exc)}; what "
                  "was saved before reads back as a run that was killed\n")
        else:
            if ended_by != "SIGTERM" and self._in_job():
                self._write_process_result()
        release_directory(self.path)
        self._release_job_lock()

    def _in_job(self) -> bool:
        count = self.writer.manifest.get("process_count")
        return self.process is not None or (isinstance(count, int) and count > 1)

    def _write_process_result(self) -> None:
        """A process of a job analyses its own run as it ends (its host does
        that work, beside the others), so that `report` on the job reads one
        small file per process: ``on_finish``, given by whoever started the
        session. A failure costs only that: report then analyses the process
        itself."""
        if self.on_finish is None:
            return
        try:
            self.on_finish(self.path)
        except Exception:
            pass

    def detach_in_child(self) -> None:
        """In a forked child: stop recording at once, touching nothing the
        parent's run uses (its SQLite connection is neither committed nor
        closed here; its lock file stays the parent's)."""
        self.forked = True
        self.sampler.failed = "forked"  # no snapshot, and no event about it
        self.sampler._stop.set()
        self.writer.detach()
        if self.probe is not None:
            self.probe.active = False
        self._unhook_warnings()
        for hook in self.child_hooks:
            try:
                hook()
            except Exception:
                pass

    def _finish(self, exit_status, ended_by: str) -> None:
        facts = _backend_facts()
        library_roots.record(self.writer.manifest)  # (kept as the script's end recorded it)
        proc = self.process
        if proc is not None:
            if facts.get("process_count") in (None, 1):  # JAX not distributed (or not up): the launcher's word
                facts.update(process_index=proc.index, process_count=proc.count)
            elif facts.get("process_index") != proc.index:
                facts["launcher_process_index"] = proc.index
        now = time.monotonic()
        ended = {"end_time": datetime.now(UTC).isoformat(), "duration_s": round(now - self.t_start, 6)}
        end = self.script_end
        if end is not None:
            # The script's end, not the end phase's: the report's "script ran N s".
            ended = {"end_time": end["end_time"], "duration_s": end["duration_s"],
                     "end_phase": {"seconds": round(now - self._t_script_end, 6),
                                   "finished_time": ended["end_time"], "skipped_by": self._end_skipped_by,
                                   "program_threads_stopped": parking.parked()}}
        self.writer.finish(
            **ended,
            exit_status=exit_status,
            ended_by=ended_by,
            thinned_snapshots=self.writer.thinned,
            **facts,
        )


THINNING_ENV = "JAXMEMPROF_THINNING"


def thinning_schedule() -> Thinning:
    """The default schedule, or ``RECENT_S:BASE_WIDTH_S:EVERY`` from
    $JAXMEMPROF_THINNING (a compressed clock, to see thinning in a short run)."""
    text = os.environ.get(THINNING_ENV)
    if not text:
        return Thinning()
    try:
        recent, width, every = text.split(":")
        sched = Thinning(recent_s=float(recent), base_width_s=float(width), every=int(every))
        if not (sched.recent_s > 0 and sched.base_width_s > 0 and sched.every > 0):
            raise ValueError
    except ValueError:
        raise InputError(THINNING_ENV, f"{text!r}: expected RECENT_S:BASE_WIDTH_S:EVERY, all above 0") from None
    return sched


def _warn(text: str) -> None:
    """A line on stderr, if the script left one to write to."""
    try:
        sys.stderr.write(text)
    except Exception:
        pass


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc)


# -- forked children (capture/forks.py): the hooks registered once, here, where
# the active session lives.


def _before_fork() -> None:
    forks.before_fork(_active)


def _after_fork_in_child() -> None:
    """A forked child stops recording the parent's run (and may record its
    own, see capture/forks.py)."""
    global _active
    s = _active
    _active = None
    forks.after_fork_in_child(s, active)


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


def _backend_facts() -> dict:
    """Devices and processes, read only if the target brought JAX up."""
    jax = jax_ready()
    if jax is None:
        return {"backend": None, "devices": [], "process_index": 0, "process_count": 1}
    try:
        return {
            "backend": jax.default_backend(),
            "devices": [
                {"id": d.id, "name": str(d), "kind": getattr(d, "device_kind", ""),
                 "process_index": d.process_index,
                 "local_hardware_id": getattr(d, "local_hardware_id", None)}
                for d in jax.local_devices()
            ],
            "process_index": jax.process_index(),
            "process_count": jax.process_count(),
        }
    except Exception as exc:
        return {"backend": None, "devices": [], "backend_error": str(exc)}

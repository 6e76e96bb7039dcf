"""Run a program exactly as ``python`` would, under the sampler.

Every way python runs one: a script (source or compiled), a directory or
zip file holding a ``__main__.py``, ``-`` (the script on stdin), ``-m
MODULE`` and ``-c CODE``. The target sees ``sys.argv``, ``sys.path[0]``,
``__name__ == "__main__"``, ``__file__`` and the rest of ``__main__``'s
globals as under python. It ends as python ends it: an uncaught SystemExit
gives its status (an object that is not a number printed, as python prints
it); another exception goes to ``sys.excepthook`` (the script's, if it set
one; one that calls sys.exit sets the status) and gives 1; then the
non-daemon threads are joined and the atexit handlers run, while the run
still records, before the run is finalised. Ctrl-C ends the process by
SIGINT after the traceback and the atexit handlers, SIGTERM ends it at once
(its default action), as under python; the run is finalised first, with a
last snapshot. A forked child stops recording at once and ends as python's
would, with no summary. Once the script is over, how it ended is recorded
before jaxmemprof's own end phase (signals.EndPhase): the script's signal
handlers are put back as before it, its daemon threads are stopped where
python's finalisation would stop them (parking.py), and a SIGINT or SIGTERM
skips the rest of that phase, keeping the script's exit status.

This module runs the program from start to end (``run_target``); its parts:
target.py (what runs, and running it as python does), exits.py (the end:
the exit status, the excepthook, the threads, the atexit handlers),
signals.py (ending by SIGINT or SIGTERM) and tracebacks.py (the user's
traceback).
"""

from __future__ import annotations

import signal
import sys
import threading

from jaxmemprof.capture import library_roots
from jaxmemprof.capture.jit.oom import is_oom
from jaxmemprof.capture.oom import failure_line
from jaxmemprof.capture.exits import (ProcessState, report_exception, run_atexit_handlers, system_exit_status,
                                      wait_for_threads)
from jaxmemprof.capture.parking import park_program_threads
from jaxmemprof.capture.session import Session
from jaxmemprof.capture.signals import EndPhase, exit_by_signal, install_exit_by_signal, SigTerm, dispositions
from jaxmemprof.capture.threads import foreign_hooks
from jaxmemprof.capture.target import (COMMAND, FILE, MAIN_DIR, STDIN_NAME, Target, exec_command, exec_module,
                                       exec_script, exec_stdin, target_kind, target_path0, replace_path0)
from jaxmemprof.capture.tracebacks import described, is_out_of_memory, message, type_name


def run_target(target: Target, session: Session, progress=None) -> EndPhase:
    """Run ``target`` under ``session`` until the program ends as python
    ends it (its non-daemon threads joined, its atexit handlers run), record
    how it ended, and begin jaxmemprof's end phase with the run's last
    snapshot: the EndPhase returned (its ``status`` and ``how``) runs the
    rest. ``progress(text)``: told each step of the end phase. In a forked
    child the script ran in, raise SystemExit instead: the child ends there,
    as python's would (no summary, nothing recorded)."""
    initial = dispositions()  # the signals' handlers before the script: put back once it is over
    install_exit_by_signal()
    ours = ProcessState.capture()
    kind = target_kind(target)
    sys.argv = target.argv
    replace_path0(target_path0(target, kind), keep=kind == MAIN_DIR)

    end = EndPhase(session, initial)
    term = SigTerm(session)
    term.install()
    session.child_hooks.append(term.forget_in_child)
    session.start()
    try:
        status, how, threads, main_hooks = _run(target, kind, session)
        hooks = _end_programs_hooks(main_hooks) if not session.forked else []
    except BaseException:
        term.uninstall()
        raise
    if session.forked:
        term.uninstall()
        from jaxmemprof.capture.forks import finish_fork_child

        finish_fork_child(status, how)  # its own run, if it recorded one
        raise SystemExit(status)
    # The script is over: how and when it ended is recorded before anything
    # else, then jaxmemprof's handling of SIGINT and SIGTERM replaces the
    # script's handlers (put back as they were before it), the SIGTERM
    # handling of the script's time last.
    session.script_ended(status, how)
    if hooks:
        _add_event(session, "program-hooks", f"the program set {', '.join(hooks)}, which Python runs in every thread: "
                                       f"its callbacks also saw jaxmemprof's own threads (the sampler's, the "
                                       f"compiles') as the program's", None)
    # Python stops the program's daemon threads here, as it finalises: they
    # run none of its code through jaxmemprof's end phase either.
    park_program_threads(lambda filename: not library_roots.is_library(filename))
    script = ProcessState.capture()
    end.begin(status, how, script_streams=(script.stdout, script.stderr))
    term.uninstall()
    if progress is not None:
        end.progress(progress)
    # The rest of jaxmemprof's work (the summary) runs with its own
    # directory, sys.path and streams; the script's are put back at exit,
    # for python's last flush.
    script.restore_at_exit()
    ours.restore()
    end.run("the last snapshot", lambda: _last_snapshot(session, how, threads))
    return end


def _end_programs_hooks(main_hooks: tuple) -> list[str]:
    """The script is over (its atexit handlers run): its trace and profile
    functions run in none of jaxmemprof's end phase (the main thread's were
    taken off in ``_run``; threading's for new threads, here). What Python offers no way to
    keep out of jaxmemprof's threads (a sys.monitoring tool, a
    threading.settrace_all_threads function: 3.12 and later), for a
    warning (capture/threads.py)."""
    hooks = foreign_hooks(main_hooks)
    for kind in ("trace", "profile"):
        if getattr(threading, f"get{kind}", lambda: None)() is not None:
            getattr(threading, f"set{kind}")(None)
    return hooks


def _last_snapshot(session: Session, how: str, threads: bool) -> None:
    """The run's last snapshot, of the memory as the program left it (with
    the search for what holds its arrays). The background thread is stopped
    first, so that this snapshot is the last."""
    sampler = session.sampler
    sampler.stop()
    if how == "exit" or threads:
        sampler.snapshot("exit")


def _run(target: Target, kind: str, session: Session) -> tuple[int, str, bool, tuple]:
    """The script run, then what python runs after it: (exit status, how it
    ended, whether a non-daemon thread was still running, the main thread's
    trace and profile functions the script left set)."""
    main_box: list = []  # the __main__ module python deletes __file__ from at the end
    failure: BaseException | None
    try:
        if kind == FILE:
            exec_script(target.named, main_box)
        elif kind == STDIN_NAME:
            exec_stdin(main_box)
        elif kind == COMMAND:
            exec_command(target.command or "")
        elif kind == MAIN_DIR:
            exec_module("__main__", alter_argv=False)
        else:
            exec_module(target.named)
    except BaseException as exc:
        failure = exc
    else:
        failure = None
    # The main thread's trace and profile functions (the program's) taken off
    # before any code of jaxmemprof's runs, with no Python call before (a
    # function that raises as it is taken off is taken off by python), and put
    # back only where python runs them after the script: threading's shutdown
    # and the atexit handlers (exits.py).
    hooks: tuple = (None, None)
    for _ in range(3):
        try:
            hooks = (sys.gettrace() or hooks[0], sys.getprofile() or hooks[1])
            sys.setprofile(None)
            sys.settrace(None)
            break
        except BaseException:
            continue
    # Outside the handler, as python calls sys.excepthook (an exception in
    # the hook has no context).
    sampler = session.sampler
    exited = isinstance(failure, SystemExit)  # python's exit then skips its end of the script
    if failure is None:
        status, how = 0, "exit"
    elif isinstance(failure, SystemExit):  # exited
        status, how = system_exit_status(failure), "exit"
    else:
        # The traceback still holds the frames, and so the arrays they
        # reference: the snapshot sees memory as it was at the failure. The
        # sampler goes on: the program's threads may still run.
        name = type_name(failure)
        if type(failure) is KeyboardInterrupt:  # exactly: a subclass is an exception like any other
            sampler.snapshot("signal", "SIGINT")
            status, how = 128 + signal.SIGINT, "SIGINT"
        elif is_out_of_memory(failure) or is_oom(failure):  # XLA's RESOURCE_EXHAUSTED, the host's MemoryError
            index = sampler.snapshot("oom", name)
            text = described(failure) if isinstance(failure, MemoryError) else message(failure) or ""
            _add_event(session, "oom", text[:20000], index)
            _add_event(session, "oom-at", failure_line(failure), index)
            status, how = 1, "oom"
        else:
            index = sampler.snapshot("exception", name)
            _add_event(session, "exception", described(failure)[:2000], index)
            status, how = 1, "exception"
        box, failure = [failure], None
        hook_status = report_exception(box)
        if hook_status is not None:  # the hook called sys.exit: python exits with its status
            status, exited = hook_status, True
        elif how == "SIGINT":
            # Python ends by SIGINT itself after an uncaught KeyboardInterrupt,
            # once the atexit handlers have run.
            exit_by_signal(signal.SIGINT)
    failure = None
    if not exited and main_box:
        # Python removes these once the script is done (not when it exits by SystemExit).
        for name in ("__file__", "__cached__"):
            main_box[0].__dict__.pop(name, None)
    del main_box
    if session.forked:
        return status, how, False, hooks
    threads = wait_for_threads(hooks)
    run_atexit_handlers(hooks)
    if getattr(threading, "_SHUTTING_DOWN", False):
        # The program is over; jaxmemprof's own work goes on (its imports
        # may register threading atexit calls, refused after shutdown).
        threading._SHUTTING_DOWN = False  # type: ignore[attr-defined]  # CPython's own flag; not in the stubs
    return status, how, threads, hooks


def _add_event(session: Session, kind: str, message: str, index) -> None:
    try:
        session.writer.add_event(kind, message, index)
    except Exception:
        pass

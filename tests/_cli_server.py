"""A fork server for the tests' reading commands (``show``, ``diff``,
``report``, ``export``, ``check``...).

A reading command spends most of its life importing: pandas, the analyses
and the renderers, 0.2-0.4 s of a 0.5 s ``report``, paid again by each of
the suite's several hundred commands. A server process imports them once;
each command then runs in a child forked from it, which is a process of its
own as ``python -m jaxmemprof`` makes one: its own working directory,
environment, standard streams (files, as a pipe would be: not a terminal),
exit status, exit handlers and interpreter shutdown, and no state left by
the command before it (each child starts from the server's state, which no
command touched). What the child does not repeat is the imports.

The server never imports JAX (a process with XLA's threads must not fork):
``run`` and ``top`` keep real subprocesses, as do the tests about what a
command imports.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# Commands that run in the server's children; any other (run, top, merge
# of live runs...) is a real subprocess.
READING = frozenset({"show", "diff", "report", "export", "check", "merge", "--version", "--help"})

_idle: list[subprocess.Popen] = []
_all: list[subprocess.Popen] = []
_lock = threading.Lock()


def _start(env: dict) -> subprocess.Popen:
    log = tempfile.TemporaryFile()
    server = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=log, env=env, text=True, start_new_session=True)
    server.log = log
    with _lock:
        _all.append(server)
    return server


def _stop_all() -> None:
    for server in _all:
        try:
            os.killpg(server.pid, signal.SIGKILL)
        except OSError:
            pass
        server.wait()


atexit.register(_stop_all)


def _line(server: subprocess.Popen) -> dict:
    line = server.stdout.readline()
    if not line:
        server.wait()
        server.log.seek(0)
        raise AssertionError(f"the CLI fork server died (exit {server.returncode}):\n"
                             f"{server.log.read().decode(errors='replace')[-5000:]}")
    return json.loads(line)


def run(argv: list[str], *, cwd, env: dict, input: str | None, timeout: float, server_env: dict
        ) -> subprocess.CompletedProcess:
    """``python -m jaxmemprof ARGV`` in ``env`` as a child of a fork server
    (started in ``server_env``): the completed process, as
    ``subprocess.run(..., capture_output=True, text=True)`` returns it."""
    with _lock:
        server = _idle.pop() if _idle else None
    if server is None:
        server = _start(server_env)
    with tempfile.TemporaryDirectory(prefix="jmp-cli-") as d:
        paths = {name: os.path.join(d, name) for name in ("stdin", "stdout", "stderr")}
        with open(paths["stdin"], "w") as f:
            f.write(input or "")
        for name in ("stdout", "stderr"):
            open(paths[name], "w").close()
        request = {"argv": argv, "cwd": os.path.abspath(cwd or os.getcwd()), "env": env, **paths}
        server.stdin.write(json.dumps(request) + "\n")
        server.stdin.flush()
        pid = _line(server)["pid"]  # the server answers as it forks
        killed = []

        def expire():
            killed.append(pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

        timer = threading.Timer(timeout, expire)
        timer.start()
        status = _line(server)["status"]  # the child's end, or its kill at the timeout
        timer.cancel()
        with _lock:
            _idle.append(server)
        if killed and status == -signal.SIGKILL:  # not a child that ended as the timer fired
            raise subprocess.TimeoutExpired(["jaxmemprof", *argv], timeout)
        out = [Path(paths[name]).read_text() for name in ("stdout", "stderr")]  # as text=True decodes
    return subprocess.CompletedProcess([sys.executable, "-m", "jaxmemprof", *argv], status, *out)


# -- the server: run as `python tests/_cli_server.py` --------------------------------------------
#
# Requests on stdin, one JSON line each; for each, a child runs the command
# with its streams on the request's files, and the server answers with the
# child's pid, then its exit status, one JSON line each.

def _serve() -> None:
    import jaxmemprof.cli
    from jaxmemprof.cli.base import main
    # what the reading commands import when they start, imported here for its cost (hence noqa F401)
    import numpy  # noqa: F401
    import pandas  # noqa: F401

    import jaxmemprof.analysis.report
    import jaxmemprof.render.report
    import jaxmemprof.render.tables
    assert "jax" not in sys.modules, "the server must not import JAX (its threads do not survive a fork)"
    entry = os.path.normpath(os.path.join(os.path.dirname(jaxmemprof.cli.__file__), os.pardir, "__main__.py"))

    def answer(doc):
        sys.stdout.write(json.dumps(doc) + "\n")
        sys.stdout.flush()

    for line in sys.stdin:
        req = json.loads(line)
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(req, main, entry)
        answer({"pid": pid})
        _, status = os.waitpid(pid, 0)
        answer({"status": os.waitstatus_to_exitcode(status)})


def _child(req: dict, main, entry: str) -> None:
    """The command, in the forked child: the request's streams on fds 0-2,
    new Python streams on them as the interpreter's start-up makes them
    (stderr line-buffered, backslashreplace), then `python -m jaxmemprof`."""
    for fd, (path, flags) in enumerate(((req["stdin"], os.O_RDONLY),
                                        (req["stdout"], os.O_WRONLY | os.O_TRUNC),
                                        (req["stderr"], os.O_WRONLY | os.O_TRUNC))):
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    enc = sys.stdout.encoding
    sys.stdin = sys.__stdin__ = open(0, encoding=enc, closefd=False)
    sys.stdout = sys.__stdout__ = open(1, "w", encoding=enc, closefd=False)
    sys.stderr = sys.__stderr__ = open(2, "w", encoding=enc, errors="backslashreplace", buffering=1, closefd=False)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    sys.argv = [entry, *req["argv"]]
    sys.path[0] = os.getcwd()  # as `python -m` sets it
    try:
        main(prog_name="jaxmemprof")
        code = 0
    except SystemExit as exc:  # as the interpreter reads it
        code = exc.code
        if code is None:
            code = 0
        elif not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    # The end of a process, less the teardown of every module the server
    # imported (a tenth of a second, and nothing a command can see): the
    # exit handlers, the streams flushed, then the exit status.
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            code = code or 120  # as Python's own exit does when it cannot flush stdout
    os._exit(code & 0xFF)


if __name__ == "__main__":
    _serve()

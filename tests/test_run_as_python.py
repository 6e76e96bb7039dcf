"""`jaxmemprof run` is python: each script runs under plain python and under
`run`, and what the script can observe (exit status, stdout, stderr) must
be the same."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import cpu_env, sigint_at, write_script

from jaxmemprof.store.reader import load_run


def _python(script, *args, cwd):
    return subprocess.run([sys.executable, str(script), *map(str, args)], cwd=cwd, env=cpu_env(),
                          capture_output=True, text=True, timeout=120)


def _jaxmemprof(script, *args, cwd, out, extra=()):
    return subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", str(out), *extra,
                           str(script), *map(str, args)], cwd=cwd, env=cpu_env(), capture_output=True,
                          text=True, timeout=120)


def both(tmp_path, source, *args, name="s.py", script=None, cwd=None, extra=(), out="run", at_once=True):
    """(python's result, run's result, the run directory) for one script;
    the two processes at the same time (``at_once``: a script that writes
    beside itself runs under one, then the other)."""
    if script is None:
        script = write_script(tmp_path, name, source)
    cwd = cwd or tmp_path
    out = tmp_path / out
    if not at_once:
        return _python(script, *args, cwd=cwd), _jaxmemprof(script, *args, cwd=cwd, out=out, extra=extra), out
    with ThreadPoolExecutor(2) as pool:
        py = pool.submit(_python, script, *args, cwd=cwd)
        jm = pool.submit(_jaxmemprof, script, *args, cwd=cwd, out=out, extra=extra)
        return py.result(), jm.result(), out


def assert_same(py, jm, stderr=True):
    assert jm.returncode == py.returncode, jm.stderr
    assert jm.stdout == py.stdout
    if stderr:
        assert jm.stderr == py.stderr


# -- what the script sees ---------------------------------------------------------


def test_symlinked_script_gets_its_real_directory_in_sys_path(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (real / "helper.py").write_text("WHO = 'helper'\n")
    write_script(real, "s.py", """
        import sys
        import helper
        print(helper.WHO, sys.path[0], __file__, sys.argv[0])
    """)
    links = tmp_path / "links"
    links.mkdir()
    (links / "s.py").symlink_to(real / "s.py")
    for i, given in enumerate((links / "s.py", "links/s.py", "./links/s.py")):
        py, jm, _ = both(tmp_path, None, script=given, out=f"run{i}")
        assert py.returncode == 0, py.stderr
        assert_same(py, jm)
    assert str(real) in py.stdout and "/./links/s.py" in py.stdout


def test_main_module_globals_are_pythons(tmp_path):
    py, jm, _ = both(tmp_path, '''
        """The docstring."""
        import sys
        main = sys.modules["__main__"]
        print(main is sys.modules[__name__], __doc__, __spec__, __cached__, type(__loader__).__name__)
        print(sorted((k, type(v).__name__) for k, v in dict(globals()).items() if k not in ("sys", "main")))
    ''')
    assert py.returncode == 0, py.stderr
    assert_same(py, jm)


def test_chdir_in_the_script_loses_nothing(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    script = write_script(tmp_path, "cd.py", """
        import atexit, os
        import jax.numpy as jnp
        import jaxmemprof
        a = jnp.ones((1000,))
        jaxmemprof.snapshot("before")
        os.chdir("elsewhere")
        atexit.register(lambda: print("atexit in", os.path.basename(os.getcwd())))
        b = jnp.ones((2000,))
        jaxmemprof.snapshot("after")
        print("done")
    """)
    py = _python(script, cwd=tmp_path)
    # A relative -o, and the summary (no -q), which reads the run back.
    jm = subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "-o", "rel-run", "--interval", "0.05",
                         str(script)], cwd=tmp_path, env=cpu_env(), capture_output=True, text=True, timeout=120)
    assert py.returncode == jm.returncode == 0, jm.stderr
    assert jm.stdout == py.stdout == "done\natexit in elsewhere\n"
    assert "could not" not in jm.stderr and "warning" not in jm.stderr, jm.stderr
    assert "run: rel-run  (next: jaxmemprof report rel-run)" in jm.stderr
    run = load_run(tmp_path / "rel-run")
    assert run.finished and not run.warnings
    labels = list(run.snapshots["label"])
    assert "before" in labels and "after" in labels and run.snapshots["trigger"].iloc[-1] == "exit"
    assert int(run.snapshots.set_index("label").loc["after", "live_bytes"]) == 12000
    assert not (tmp_path / "elsewhere" / "rel-run").exists()


def test_atexit_handlers_and_exit_status(tmp_path):
    py, jm, run_dir = both(tmp_path, """
        import atexit, sys
        atexit.register(print, "second")
        atexit.register(lambda: print("first", sys.argv[1:]))
        print("body")
        sys.exit(int(sys.argv[1]))
    """, "3")
    assert py.returncode == 3 and py.stdout == "body\nfirst ['3']\nsecond\n"
    assert_same(py, jm)
    assert load_run(run_dir).finished


def test_scripts_own_excepthook_is_called(tmp_path):
    py, jm, run_dir = both(tmp_path, """
        import sys
        def hook(kind, value, tb):
            print("hook:", kind.__name__, value, tb.tb_frame.f_code.co_name, tb.tb_next is not None)
        sys.excepthook = hook
        def fail():
            raise ValueError("boom")
        fail()
    """)
    assert py.returncode == 1 and py.stdout == "hook: ValueError boom <module> True\n"
    assert_same(py, jm)
    assert load_run(run_dir).manifest["ended_by"] == "exception"


def test_an_excepthook_that_fails(tmp_path):
    py, jm, _ = both(tmp_path, """
        import sys
        def hook(kind, value, tb):
            raise KeyError("in the hook")
        sys.excepthook = hook
        raise ValueError("original")
    """)
    assert "Error in sys.excepthook" in py.stderr and "Original exception was" in py.stderr
    assert_same(py, jm)


@pytest.mark.parametrize("how", ["sys.stdout.close()", "sys.stdout = None", "sys.stderr.close()",
                                 "sys.stderr = None", "sys.stdout = sys.stderr = None"])
def test_script_that_closes_or_removes_its_streams(tmp_path, how):
    py, jm, run_dir = both(tmp_path, f"""
        import sys
        import jax.numpy as jnp
        x = jnp.ones(10)
        print("before", flush=True)
        {how}
    """)
    assert py.returncode == 0, py.stderr
    assert_same(py, jm)
    assert load_run(run_dir).finished


def test_uncaught_exception_with_stderr_removed(tmp_path):
    py, jm, _ = both(tmp_path, """
        import sys
        sys.stderr = None
        raise ValueError("nobody sees me")
    """)
    assert py.returncode == 1
    assert_same(py, jm, stderr=False)


def test_profile_inside_run_defers_to_the_outer_run(tmp_path):
    py, jm, run_dir = both(tmp_path, at_once=False, source="""
        import jax.numpy as jnp
        import jaxmemprof
        with jaxmemprof.profile("inner-run") as where:
            x = jnp.ones((500,))
            jaxmemprof.snapshot("inside")
            with jaxmemprof.profile("nested") as again:
                assert again == where
        print("ok")
    """)
    assert py.returncode == 0, py.stderr
    assert jm.returncode == 0 and jm.stdout == "ok\n", jm.stderr
    run = load_run(run_dir)
    assert "inside" in list(run.snapshots["label"])
    assert not (tmp_path / "nested").exists()
    assert load_run(tmp_path / "inner-run").finished  # python's own, from profile()


# -- signals ------------------------------------------------------------------------


def _start(cmd, cwd, sigint=signal.SIG_DFL):
    return subprocess.Popen(cmd, cwd=cwd, env=cpu_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_at(sigint))


def _signalled(cmd, cwd, sig, wait_for="ready", sigint=signal.SIG_DFL):
    """Start ``cmd`` (SIGINT at ``sigint``), send ``sig`` once it printed
    ``wait_for``; (process, stdout, stderr, seconds from the signal to its
    end)."""
    proc = _start(cmd, cwd, sigint)
    assert proc.stdout.readline().strip() == wait_for
    time.sleep(0.2)
    t0 = time.monotonic()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    return proc, out, err, time.monotonic() - t0


def _both_signalled(tmp_path, source, sig, at_once=True, sigint=signal.SIG_DFL):
    """_signalled under python and under run: the two at the same time
    (``at_once``: where the time a signal takes to end it is measured, one
    after the other)."""
    script = write_script(tmp_path, "sig.py", source)
    commands = ([sys.executable, str(script)],
                [sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", str(tmp_path / "run"), str(script)])
    if not at_once:
        return tuple(_signalled(cmd, tmp_path, sig, sigint=sigint) for cmd in commands)
    with ThreadPoolExecutor(2) as pool:
        return tuple(pool.map(lambda cmd: _signalled(cmd, tmp_path, sig, sigint=sigint), commands))


def test_sigterm_is_not_swallowed_by_a_retry_loop(tmp_path):
    (py, py_out, py_err, _), (jm, jm_out, jm_err, _) = _both_signalled(tmp_path, """
        import time
        import jax.numpy as jnp
        x = jnp.ones((1000,))
        print("ready", flush=True)
        while True:
            try:
                time.sleep(0.05)
            except:
                print("swallowed", flush=True)
    """, signal.SIGTERM)
    assert py.returncode == jm.returncode == -signal.SIGTERM
    assert py_out == jm_out == "" and jm_err == py_err == ""
    run = load_run(tmp_path / "run")
    assert run.finished and run.manifest["ended_by"] == "SIGTERM" and run.manifest["exit_status"] == 143
    last = run.snapshots.iloc[-1]
    assert (last["trigger"], last["label"], last["live_bytes"]) == ("signal", "SIGTERM", 4000)


def test_sigterm_during_a_long_xla_call_ends_at_once(tmp_path):
    source = """
        import time
        import jax, jax.numpy as jnp
        @jax.jit
        def slow(m, v):  # about 10 s on one core
            return jax.lax.fori_loop(0, 4_000_000, lambda i, v: jnp.tanh(m @ v), v)
        m, v = jnp.ones((256, 256)) / 256, jnp.ones((256,))
        slow.lower(m, v).compile()
        print("ready", flush=True)
        t0 = time.time()
        slow(m, v).block_until_ready()
        print("call took", time.time() - t0, flush=True)
    """
    (py, _, _, py_s), (jm, jm_out, jm_err, jm_s) = _both_signalled(tmp_path, source, signal.SIGTERM, at_once=False)
    assert py.returncode == jm.returncode == -signal.SIGTERM, jm_err
    assert jm_out == ""  # the call never returned
    assert py_s < 2.0 and jm_s < 3.0, (py_s, jm_s)
    run = load_run(tmp_path / "run")
    assert run.finished and run.snapshots.iloc[-1]["label"] == "SIGTERM"


def test_scripts_own_signal_handlers_run_as_under_python(tmp_path):
    (py, py_out, py_err, _), (jm, jm_out, jm_err, _) = _both_signalled(tmp_path, """
        import signal, sys, time
        import jax.numpy as jnp
        def on_term(signum, frame):
            print("term handler", signum, flush=True)
            sys.exit(5)
        signal.signal(signal.SIGTERM, on_term)
        x = jnp.ones((10,))
        print("ready", flush=True)
        while True:
            time.sleep(0.05)
    """, signal.SIGTERM)
    assert py.returncode == jm.returncode == 5
    assert py_out == jm_out == "term handler 15\n" and py_err == jm_err
    assert load_run(tmp_path / "run").manifest["ended_by"] == "exit"


def test_ctrl_c_ends_as_under_python(tmp_path):
    (py, py_out, py_err, _), (jm, jm_out, jm_err, _) = _both_signalled(tmp_path, """
        import atexit, time
        import jax.numpy as jnp
        atexit.register(print, "atexit ran")
        x = jnp.ones((10,))
        print("ready", flush=True)
        time.sleep(60)
    """, signal.SIGINT)
    assert py.returncode == jm.returncode == -signal.SIGINT
    assert py_out == jm_out == "atexit ran\n"
    assert py_err == jm_err and py_err.endswith("KeyboardInterrupt\n")
    assert load_run(tmp_path / "run").manifest["ended_by"] == "SIGINT"


def test_ctrl_c_started_ignored_is_ignored_as_under_python(tmp_path):
    # A program started with SIGINT ignored (`nohup cmd &` from a script) keeps
    # it ignored under python; under run too, and the run ends as the script.
    (py, py_out, py_err, _), (jm, jm_out, jm_err, _) = _both_signalled(tmp_path, """
        import signal, time
        import jax.numpy as jnp
        x = jnp.ones((10,))
        print("ready", flush=True)
        time.sleep(2)
        print("ended by itself", signal.getsignal(signal.SIGINT) is signal.SIG_IGN)
    """, signal.SIGINT, sigint=signal.SIG_IGN)
    assert py.returncode == jm.returncode == 0, jm_err
    assert py_out == jm_out == "ended by itself True\n" and py_err == jm_err == ""
    run = load_run(tmp_path / "run")
    assert run.finished and run.manifest["ended_by"] == "exit"


def test_warnings_are_recorded_without_the_script_seeing_a_hook(tmp_path):
    py, jm, run_dir = both(tmp_path, """
        import warnings
        import jax.numpy as jnp
        x = jnp.ones(10)
        print(warnings.showwarning.__module__, warnings.showwarning.__name__)
        warnings.warn("shown")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warnings.warn("caught")
        print(len(caught), caught[0].message)
    """)
    assert py.returncode == 0, py.stderr
    assert_same(py, jm)
    messages = list(load_run(run_dir).events.query("kind == 'warning'")["message"])
    assert len(messages) == 1 and messages[0].startswith("UserWarning: shown"), messages


def test_asyncio_signal_handlers(tmp_path):
    # asyncio takes the wakeup descriptor for its own signals: SIGTERM, not
    # one of them, still ends the process at once, after the last snapshot.
    (py, py_out, py_err, _), (jm, jm_out, jm_err, _) = _both_signalled(tmp_path, """
        import asyncio, signal
        import jax.numpy as jnp
        x = jnp.ones((1000,))
        async def main():
            asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, print, "usr1")
            print("ready", flush=True)
            await asyncio.sleep(60)
        asyncio.run(main())
    """, signal.SIGTERM)
    assert py.returncode == jm.returncode == -signal.SIGTERM
    assert py_out == jm_out == "" and py_err == jm_err == ""
    run = load_run(tmp_path / "run")
    assert run.finished and run.snapshots.iloc[-1]["label"] == "SIGTERM"


def test_asyncio_handler_for_sigterm(tmp_path):
    (py, py_out, py_err, _), (jm, jm_out, jm_err, _) = _both_signalled(tmp_path, """
        import asyncio, signal
        import jax.numpy as jnp
        x = jnp.ones((1000,))
        async def main():
            stop = asyncio.Event()
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
            print("ready", flush=True)
            await stop.wait()
            print("stopped cleanly")
        asyncio.run(main())
    """, signal.SIGTERM)
    assert py.returncode == jm.returncode == 0
    assert py_out == jm_out == "stopped cleanly\n" and py_err == jm_err
    assert load_run(tmp_path / "run").manifest["ended_by"] == "exit"


def test_sigwait_in_the_main_thread_gets_the_signal(tmp_path):
    # jaxmemprof's own threads never take a signal meant for the program: one
    # that comes while the main thread blocks it waits for its sigwait.
    (py, py_out, py_err, _), (jm, jm_out, jm_err, _) = _both_signalled(tmp_path, """
        import signal, time
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
        import jax.numpy as jnp
        x = jnp.ones((10,))
        print("ready", flush=True)
        time.sleep(1)
        print("got", int(signal.sigwait([signal.SIGTERM])), flush=True)
    """, signal.SIGTERM)
    assert py.returncode == jm.returncode == 0, jm_err
    assert py_out == jm_out == "got 15\n" and py_err == jm_err


@pytest.mark.parametrize("module", ["pkg.main", "pkg.missing", "pkg"])
def test_module_runs_as_python_dash_m(tmp_path, module):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    source = '''
import sys
main = sys.modules["__main__"]
print(sys.argv, sys.path[0], __name__, __spec__.name, main is sys.modules[__name__])
print(sorted(k for k in globals() if k not in ("sys", "main")))
raise ValueError("from the module")
'''
    (pkg / "main.py").write_text(source)
    (pkg / "__main__.py").write_text(source)
    py = subprocess.run([sys.executable, "-m", module, "x"], cwd=tmp_path, env=cpu_env(), capture_output=True,
                        text=True, timeout=120)
    jm = subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", str(tmp_path / "run"),
                         "-m", module, "x"], cwd=tmp_path, env=cpu_env(), capture_output=True, text=True, timeout=120)
    assert py.returncode == 1
    assert_same(py, jm)


# -- every way a program ends, and every way python runs one ----------------------
#
# Each case is a pair of processes (python, then `run`); the pairs run a few
# at a time, so that the many cases cost about as much as a few.

_ADDRESS = re.compile(r"0x[0-9a-f]+")


def _pair(tmp_path, name, argv, stdin=None):
    """(python's result, run's result, the run directory) for ``python ARGV``."""
    out = tmp_path / f"run-{name}"
    kw = dict(cwd=tmp_path, env=cpu_env(), capture_output=True, timeout=120, input=stdin or b"")
    py = subprocess.run([sys.executable, *argv], **kw)
    jm = subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", str(out), *argv], **kw)
    return py, jm, out


def _pairs(tmp_path, cases):
    """Every case of ``cases`` (name -> (argv, stdin)), 4 pairs at a time."""
    with ThreadPoolExecutor(4) as pool:
        futures = {name: pool.submit(_pair, tmp_path, name, *case) for name, case in cases.items()}
        return {name: f.result() for name, f in futures.items()}


def _same_as_python(name, py, jm):
    """Byte for byte, but for the addresses python prints (they differ from
    one process to the next) and any line of jaxmemprof's own."""
    ours = [line for line in jm.stderr.splitlines(keepends=True) if line.startswith(b"jaxmemprof: ")]
    assert not ours, (name, ours)
    assert b"internal error" not in jm.stderr
    assert jm.returncode == py.returncode, (name, jm.stderr.decode())
    assert jm.stdout == py.stdout, name
    assert _ADDRESS.sub("0x?", jm.stderr.decode()) == _ADDRESS.sub("0x?", py.stderr.decode()), name


def _finished_as(run_dir, status):
    """The run is finalised as the process ended: its end fields, no lock."""
    run = load_run(run_dir)
    assert run.finished and run.manifest["exit_status"] == status and run.manifest["end_time"], run_dir
    assert not (run_dir / ".jaxmemprof.lock").exists()
    return run


_ENDINGS_PRELUDE = """
import atexit, sys
class BadStr(Exception):
    def __str__(self): raise RuntimeError("no str")
class BadRepr(Exception):
    def __repr__(self): raise RuntimeError("no repr")
class BadNotes(Exception):
    @property
    def __notes__(self): raise RuntimeError("no notes")
class Unprintable:
    def __str__(self): raise RuntimeError("no str")
class Formatted:
    def __str__(self): return "str"
    def __format__(self, spec): return "format"
class OwnInt(int):
    def __int__(self): return 99
    def __index__(self): return 98
class CodeFails(SystemExit):
    @property
    def code(self): raise RuntimeError("no code")
class Base(BaseException): pass
class Interrupt(KeyboardInterrupt): pass
main = sys.modules["__main__"]
atexit.register(lambda: print("atexit:", main.__dict__.get("__file__", "-"), repr(getattr(sys, "last_value", None))))
"""

_ENDINGS = {
    "str-fails": "raise BadStr('x')",
    "repr-fails": "raise BadRepr('x')",
    "notes-fail": "raise BadNotes('x')",
    "notes-not-a-list": "e = ValueError('x'); e.__notes__ = 'abc'; raise e",
    "cause-str-fails": "raise ValueError('outer') from BadStr('inner')",
    "group-str-fails": "raise ExceptionGroup('group', [BadStr('a'), ValueError('b')])",
    "base-exception": "raise Base('b')",
    "interrupt-subclass": "raise Interrupt('not a signal')",
    "generator-exit": "raise GeneratorExit",
    "exit-unprintable": "sys.exit(Unprintable())",
    "exit-str-not-format": "sys.exit(Formatted())",
    "exit-huge": "sys.exit(2 ** 70)",
    "exit-negative": "sys.exit(-1)",
    "exit-300": "sys.exit(300)",
    "exit-int-subclass": "sys.exit(OwnInt(7))",
    "exit-code-fails": "raise CodeFails(3)",
    "exit-no-stderr": "sys.stderr = None; sys.exit('to the process stderr')",
    "exit-text": "sys.exit('bye')",
    "hook-exits": "sys.excepthook = lambda *a: sys.exit(5)\nraise ValueError('v')",
    "hook-exits-unprintable": "sys.excepthook = lambda *a: sys.exit(Unprintable())\nraise ValueError('v')",
    "hook-exits-on-interrupt": "sys.excepthook = lambda *a: sys.exit(4)\nraise KeyboardInterrupt",
    "hook-none": "sys.excepthook = None\nraise ValueError('v')",
    "hook-missing": "del sys.excepthook\nraise ValueError('v')",
    "hook-interrupted": "def h(*a): raise KeyboardInterrupt\nsys.excepthook = h\nraise ValueError('v')",
    "atexit-raises": "def h(): raise ValueError('in atexit')\natexit.register(h)",
    "atexit-exits": "atexit.register(sys.exit, 7)",
    "normal-end": "print('done')",
}


def test_every_way_a_program_ends_is_pythons(tmp_path):
    cases = {}
    for name, body in _ENDINGS.items():
        write_script(tmp_path, f"{name}.py", _ENDINGS_PRELUDE + body + "\n")
        cases[name] = ([f"{name}.py"], None)
    results = _pairs(tmp_path, cases)
    statuses = {}
    for name, (py, jm, run_dir) in results.items():
        _same_as_python(name, py, jm)
        _finished_as(run_dir, py.returncode)
        statuses[name] = py.returncode
    # What python does, so that a case that stopped testing anything shows.
    assert statuses["hook-exits"] == 5 and statuses["hook-exits-on-interrupt"] == 4
    assert statuses["exit-huge"] == statuses["exit-negative"] == 255 and statuses["exit-300"] == 44
    assert statuses["exit-int-subclass"] == 7 and statuses["atexit-exits"] == statuses["normal-end"] == 0
    assert statuses["interrupt-subclass"] == statuses["str-fails"] == 1
    py = results["str-fails"][0]
    assert b"BadStr: <exception str() failed>" in py.stderr and b"atexit: -" in py.stdout
    assert results["exit-no-stderr"][0].stderr == b"to the process stderr\n"
    assert b"atexit: " + str(tmp_path / "exit-text.py").encode() in results["exit-text"][0].stdout


def test_non_daemon_threads_and_atexit_are_part_of_the_run(tmp_path):
    source = """
        import atexit, sys, threading, time
        import jax.numpy as jnp
        import jaxmemprof
        def late():
            time.sleep(0.5)
            global y
            y = jnp.ones((25_000,))  # 100 kB, made once the main module is done
            jaxmemprof.mark("thread late")
            print("thread: main alive", threading.main_thread().is_alive(), flush=True)
        def at_exit():
            jaxmemprof.mark("in atexit")
            print("atexit: y made", "y" in globals())
        atexit.register(at_exit)
        x = jnp.ones((1000,))
        threading.Thread(target=late).start()
        print("main done", flush=True)
        if sys.argv[1] == "fail":
            raise ValueError("main failed")
        sys.exit(int(sys.argv[1]))
    """
    write_script(tmp_path, "threads.py", source)
    results = _pairs(tmp_path, {f"t{arg}": (["threads.py", arg], None) for arg in ("3", "fail")})
    for name, (py, jm, run_dir) in results.items():
        assert py.stdout == b"main done\nthread: main alive False\natexit: y made True\n", py.stderr
        _same_as_python(name, py, jm)
        run = _finished_as(run_dir, py.returncode)
        assert list(run.markers["label"]) == ["thread late", "in atexit"]
        last = run.snapshots.iloc[-1]
        assert (last["trigger"], int(last["live_bytes"])) == ("exit", 104_000)
    assert results["t3"][0].returncode == 3 and results["tfail"][0].returncode == 1
    assert load_run(results["tfail"][2]).manifest["ended_by"] == "exception"


def test_every_way_python_runs_a_program(tmp_path):
    import py_compile
    import zipfile

    main_source = textwrap.dedent("""
        import sys
        main = sys.modules["__main__"]
        print(sys.argv, repr(sys.path[0]), __name__, repr(main.__dict__.get("__file__")),
              __spec__ and __spec__.name, type(__loader__).__name__, __package__, sorted(globals()))
        print(type(sys.path_importer_cache.get(sys.path[0])).__name__)
        if sys.argv[-1] == "fail":
            raise ValueError("from " + sys.argv[0])
    """)
    app = tmp_path / "app"
    app.mkdir()
    (app / "__main__.py").write_text(main_source)
    (tmp_path / "empty").mkdir()
    with zipfile.ZipFile(tmp_path / "app.zip", "w") as z:
        z.writestr("__main__.py", main_source)
    (tmp_path / "zip-named.py").write_bytes((tmp_path / "app.zip").read_bytes())
    (tmp_path / "link").symlink_to(app)
    (tmp_path / "compiled.py").write_text(main_source)
    py_compile.compile(str(tmp_path / "compiled.py"), cfile=str(tmp_path / "compiled.pyc"), doraise=True)
    (tmp_path / "compiled.py").unlink()
    source = main_source.encode()
    cases = {
        "dir": (["app", "a"], None), "dir-dot-slash": (["./app/", "fail"], None), "zip": (["app.zip", "a"], None),
        "zip-named-py": (["zip-named.py"], None), "dir-link": (["link", "x"], None),
        "dir-without-main": (["empty"], None), "pyc": (["compiled.pyc", "fail"], None),
        "stdin": (["-", "a"], source), "stdin-fails": (["-", "fail"], source),
        "command": (["-c", main_source, "a"], None), "command-fails": (["-c", main_source, "fail"], None),
    }
    results = _pairs(tmp_path, cases)
    for name, (py, jm, run_dir) in results.items():
        _same_as_python(name, py, jm)
        _finished_as(run_dir, py.returncode)
    out = {name: r[0].stdout.decode() for name, r in results.items()}
    assert out["dir"].startswith(f"['app', 'a'] {str(app)!r} __main__ {str(app / '__main__.py')!r}")
    assert "zipimporter" in out["zip"] and "['-', 'a'] '' __main__ '<stdin>'" in out["stdin"]
    assert out["command"].startswith("['-c', 'a'] '' __main__ None")
    assert results["pyc"][0].returncode == results["stdin-fails"][0].returncode == 1
    assert b"can't find '__main__' module" in results["dir-without-main"][0].stderr
    assert b'File "<stdin>", line' in results["stdin-fails"][0].stderr


def test_run_help_names_every_target_form():
    proc = subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "--help"], env=cpu_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    for example in ("jaxmemprof run app/", "jaxmemprof run - < train.py", 'jaxmemprof run -c "import train',
                    "-c CODE", "__main__.py"):
        assert example in text, example
    both = subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "-m", "x", "-c", "pass"], env=cpu_env(),
                          capture_output=True, text=True, timeout=60)
    assert both.returncode == 2 and "Traceback" not in both.stderr


def test_recording_imports_nothing_that_starts_threads_before_the_program():
    """What run imports before the program starts: no numpy (its BLAS threads,
    started then, would take the signals the program blocks later: the
    sigwait test above) and no jax (the program's own imports come first)."""
    code = ("import sys; import jaxmemprof.capture.runner, jaxmemprof.capture.session; "
            "print(sorted(m for m in ('numpy', 'jax', 'jaxlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], env=cpu_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"

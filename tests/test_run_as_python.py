"""`jaxmemprof run` is python: each script runs under plain python and under
`run`, and what the script can observe (exit status, stdout, stderr) must
be the same."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import cpu_env, write_script

from jaxmemprof.store.reader import load_run


def _python(script, *args, cwd):
    return subprocess.run([sys.executable, str(script), *map(str, args)], cwd=cwd, env=cpu_env(),
                          capture_output=True, text=True, timeout=120)


def _jaxmemprof(script, *args, cwd, out, extra=()):
    return subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", str(out), *extra,
                           str(script), *map(str, args)], cwd=cwd, env=cpu_env(), capture_output=True,
                          text=True, timeout=120)


def both(tmp_path, source, *args, name="s.py", script=None, cwd=None, extra=(), out="run"):
    """(python's result, run's result, the run directory) for one script."""
    if script is None:
        script = write_script(tmp_path, name, source)
    cwd = cwd or tmp_path
    out = tmp_path / out
    return _python(script, *args, cwd=cwd), _jaxmemprof(script, *args, cwd=cwd, out=out, extra=extra), out


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
    py, jm, run_dir = both(tmp_path, """
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


def _start(cmd, cwd):
    return subprocess.Popen(cmd, cwd=cwd, env=cpu_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _signalled(cmd, cwd, sig, wait_for="ready"):
    """Start ``cmd``, send ``sig`` once it printed ``wait_for``; (process,
    stdout, stderr, seconds from the signal to its end)."""
    proc = _start(cmd, cwd)
    assert proc.stdout.readline().strip() == wait_for
    time.sleep(0.2)
    t0 = time.monotonic()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    return proc, out, err, time.monotonic() - t0


def _both_signalled(tmp_path, source, sig):
    script = write_script(tmp_path, "sig.py", source)
    py = _signalled([sys.executable, str(script)], tmp_path, sig)
    jm = _signalled([sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", str(tmp_path / "run"), str(script)],
                    tmp_path, sig)
    return py, jm


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
    (py, _, _, py_s), (jm, jm_out, jm_err, jm_s) = _both_signalled(tmp_path, source, signal.SIGTERM)
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

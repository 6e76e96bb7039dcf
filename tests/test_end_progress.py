"""The end phase's progress in a real terminal (tmux): a `run --plan
--target` of a large step shows, while its compiles run after the script,
one line saying which compile runs (what, its number, the seconds since the
script ended), rewritten in place and cleared before the closing lines."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time

import pytest

from conftest import cpu_env, write_script

from jaxmemprof.facts import tpus

pytestmark = pytest.mark.skipif(tpus.libtpu_missing(), reason="libtpu is not installed (pip install 'jaxmemprof[tpu]')")

WIDE = """
import jax
import jax.numpy as jnp

WIDTH = 1 << 20  # 4 MiB of float32 an example


def step(w, x):
    return w + 1e-3 * jnp.sum(jnp.tanh(x * w), axis=0)


if __name__ == "__main__":
    f = jax.jit(step)
    w = jnp.ones((WIDTH,))
    for i in range(3):
        x = jnp.full((4, WIDTH), float(i))
        w = f(w, x)
    print("done", float(w[0]))
"""

PROGRESS = re.compile(r"jaxmemprof: the script has ended; now: XLA's figures and the compiles: "
                      r"(compiling step for v5e:2x2|planning step|libtpu's devices for v5e:2x2)( at batch \d+)?"
                      r"( in bfloat16)? \(compile (\d+); (\d+) s\) \(Ctrl-C skips the rest\)\.\.\.")


def test_a_plan_and_targets_compiles_show_their_progress_in_a_terminal(tmp_path, tmux):
    write_script(tmp_path, "wide.py", WIDE)
    env = " ".join(shlex.quote(f"{k}={v}") for k, v in cpu_env().items()
                   if k.startswith(("JAX", "XLA", "PYTHON", "TPU")))
    command = (f"cd {tmp_path} && env {env} ALLOW_MULTIPLE_LIBTPU_LOAD=1 {sys.executable} -m jaxmemprof run "
               f"--plan --plan-scales 2 --target v5e:2x2 -o run wide.py; echo RUN-EXIT=$?; sleep 120")
    tmux("new-session", "-d", "-s", "end", "-x", "220", "-y", "50", "sh", "-c", command)

    def pane() -> str:
        return tmux("capture-pane", "-p", "-J", "-t", "end", check=False).stdout

    seen: list = []
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        text = pane()
        seen += [m.groups() for m in PROGRESS.finditer(text) if m.groups() not in seen]
        if "RUN-EXIT=" in text:
            break
        time.sleep(0.1)
    final = pane()
    assert "RUN-EXIT=0" in final, final
    assert seen, final  # the compiles' line was on the screen while they ran
    numbers = [int(g[3]) for g in seen]
    assert numbers == sorted(numbers) and max(numbers) >= 2, seen  # compile after compile, counted
    assert any(g[0] == "planning step" for g in seen), seen
    assert any(g[0] != "planning step" for g in seen), (seen, final)  # then the slice's: libtpu, its compiles
    assert "done" in final and "run: " in final  # the program's line, then the closing lines
    assert not PROGRESS.search(final), final  # cleared before them


TINY = """
import jax.numpy as jnp

kept = [jnp.ones((256, 256)) for _ in range(4)]
print("done")
"""

CLOSING = re.compile(r"jaxmemprof (report|export): \d+\.\d s \(reading the run \d+\.\d s, attributing its arrays "
                     r"\d+\.\d s, the analyses \d+\.\d s, writing \d+\.\d s\)\n")


def _on_a_pty(argv, env) -> tuple[bytes, bytes]:
    """(stdout, stderr) of ``argv`` with stderr a terminal, stdout a pipe."""
    import pty
    import select

    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    got = b""
    while True:
        ready, _, _ = select.select([master], [], [], 120)
        assert ready, "no end"
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the other side is closed
            break
        if not chunk:
            break
        got += chunk
    os.close(master)
    out = proc.stdout.read()
    assert proc.wait(timeout=60) == 0, got
    return out, got


def test_a_reading_commands_long_work_is_said_on_a_terminal_and_closed_on_a_pipe(tmp_path):
    """report and export past the threshold (set to 0 here: a large run's
    seconds, without recording one): on a pipe, one closing line on stderr
    with each phase's seconds, stdout as without it; on a terminal, the
    line of the phase (n of 4, the seconds) drawn and cleared, no closing
    line; under the threshold (the default 2 s of CPU, which a small run's
    report is far under), nothing on stderr."""
    write_script(tmp_path, "tiny.py", TINY)
    rec = subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", str(tmp_path / "run"),
                          str(tmp_path / "tiny.py")], env=cpu_env(), capture_output=True, text=True, timeout=300)
    assert rec.returncode == 0, rec.stderr
    report = [sys.executable, "-m", "jaxmemprof", "report", str(tmp_path / "run")]
    plain = subprocess.run(report, env=cpu_env(COLUMNS="120"), capture_output=True, text=True, timeout=300)
    said = subprocess.run(report, env=cpu_env(COLUMNS="120", JAXMEMPROF_PROGRESS_AFTER="0"), capture_output=True,
                          text=True, timeout=300)
    assert plain.returncode == said.returncode == 0, said.stderr
    assert plain.stderr == "" and said.stdout == plain.stdout
    assert CLOSING.fullmatch(said.stderr), said.stderr
    export = subprocess.run([sys.executable, "-m", "jaxmemprof", "export", str(tmp_path / "run"), "--csv",
                             str(tmp_path / "csv")], env=cpu_env(JAXMEMPROF_PROGRESS_AFTER="0"), capture_output=True,
                            text=True, timeout=300)
    assert export.returncode == 0 and CLOSING.search(export.stderr), export.stderr
    out, err = _on_a_pty(report, cpu_env(COLUMNS="120", JAXMEMPROF_PROGRESS_AFTER="0"))
    assert out.decode() == plain.stdout
    assert re.search(rb"\r\x1b\[Kjaxmemprof report: (reading the run|attributing its arrays|the analyses|writing) "
                     rb"\([1-4] of 4; \d+ s\)\.\.\.", err), err
    assert err.endswith(b"\r\x1b[K") and b"(reading the run " not in err, err  # cleared; no closing line

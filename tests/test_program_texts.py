"""The program's objects and texts are data (issue 62, items 6 and 7): its
exceptions' text is read without running its code and never lets
SystemExit through; numbers read off its text are bounded (past 2**53:
damaged, never a traceback); control characters in its text never reach
the terminal raw. Each run is set beside python's own."""

from __future__ import annotations

import io
import json
import sqlite3
import subprocess
import sys

import pytest
from rich.text import Text

from conftest import cpu_env, run_cli, write_script

from jaxmemprof.capture.tracebacks import described, message
from jaxmemprof.render import text as render_text
from jaxmemprof.units import format_bytes
from jaxmemprof.xla.oom import read

# An exception whose __str__ prints and exits: python prints its traceback with "<exception str() failed>", exit 1.
EXITING = """
import jax
import jax.numpy as jnp

class Bad(ValueError):
    def __str__(self):
        print("str called")
        raise SystemExit(9)

x = jnp.ones((1000,))
{raise_it}
"""
AT_TOP = 'raise Bad("RESOURCE_EXHAUSTED: boom")'
IN_JIT = '''
@jax.jit
def step(x):
    if x.shape[0] > 2:
        raise Bad("RESOURCE_EXHAUSTED: boom")
    return x * 2

step(jnp.ones((2,)))
step(jnp.ones((3,)))
'''

# A program whose out-of-memory text is hostile: a 400-digit size, a size past any memory, control characters.
HOSTILE = """
import sys
import jax.numpy as jnp

x = jnp.ones((1000,))
form = sys.argv[1]
if form == "digits":
    raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate " + "9" * 400 + " bytes.")
if form == "temps":
    raise RuntimeError("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO "
                       "temporaries (" + "9" * 30 + "G) exceeds available HBM (15.75G).")
if form == "controls":
    raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory \\x1b[2J\\x1b[31mred \\u202egnp.exe\\u2066 while trying to "
                       "allocate 12 bytes.")
"""
RAW = ("\x1b[", "\u202e", "\u2066")  # what must never reach the terminal from the program's text


def _python(script, *args):
    return subprocess.run([sys.executable, str(script), *map(str, args)], env=cpu_env(), capture_output=True,
                          text=True, timeout=300)


def _finished(run_dir) -> dict:
    """The run's manifest, after checking it ended whole: no lock, no WAL left."""
    assert not (run_dir / ".jaxmemprof.lock").exists()
    assert not (run_dir / "journal.sqlite-wal").exists()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["end_time"] is not None
    return manifest


@pytest.mark.parametrize("where", ["top", "jit"])
def test_an_exception_whose_str_exits_ends_the_run_as_under_python(tmp_path, where):
    """Python calls the __str__ once, as it prints the traceback, and exits
    1; under run (which read it with str() before: exit 9, the run left
    unfinished) the program's stdout and exit status are python's, and the
    run is finished."""
    script = write_script(tmp_path, "exits.py", EXITING.format(raise_it=AT_TOP if where == "top" else IN_JIT))
    py = _python(script)
    assert py.returncode == 1 and "<exception str() failed>" in py.stderr, py.stderr
    run = run_cli("run", "-o", tmp_path / "run", script)
    assert run.returncode == py.returncode, run.stderr
    assert run.stdout == py.stdout == "str called\n"
    assert "<exception str() failed>" in run.stderr
    manifest = _finished(tmp_path / "run")
    assert manifest["exit_status"] == 1
    with sqlite3.connect(tmp_path / "run" / "journal.sqlite") as con:
        said = [m for (m,) in con.execute("SELECT message FROM events WHERE kind IN ('exception', 'oom')")]
    assert said == ["Bad (its text is made by the program's own code: not read)"]


class _Counted:
    calls = 0

    def __str__(self):
        type(self).calls += 1
        raise SystemExit(3)

    __repr__ = __str__


def test_an_exceptions_text_is_read_as_python_reads_it_or_not_at_all():
    """Where reading the text runs none of the program's code (Python's own
    __str__ over plain arguments), it is str()'s, to the character;
    otherwise it is not read, and nothing it would raise gets through."""
    plain = [ValueError("plain"), KeyError("k"), OSError(2, "No such file", "f.txt"), RuntimeError(),
             ValueError("a", 2, (3, b"x")), MemoryError(), SyntaxError("bad", ("f.py", 1, 2, "x = ")),
             ImportError("no module")]
    for e in plain:
        assert message(e) == str(e)
    class Own(ValueError):
        def __str__(self):
            raise SystemExit(9)
    hostile = [Own("x"), ValueError(_Counted()), OSError(2, "No such file", _Counted()), KeyError(_Counted()),
               ValueError((1, _Counted())), SyntaxError(_Counted()), ImportError(_Counted())]
    for e in hostile:
        assert message(e) is None
        assert described(e).endswith("(its text is made by the program's own code: not read)")
    assert _Counted.calls == 0
    assert described(ValueError("plain")) == "ValueError: plain" and described(RuntimeError()) == "RuntimeError"


def test_a_figure_no_memory_has_is_damage_never_a_traceback():
    """XLA's sizes read bounded: 400 digits, or a 30-digit G, is no size
    (named as damaged); a real size reads as before; format_bytes never
    raises on a figure no memory has."""
    r = read("RESOURCE_EXHAUSTED: Out of memory while trying to allocate " + "9" * 400 + " bytes.")
    assert r is not None and r.request_bytes is None
    assert r.damaged == ["the allocation: a number of 400 digits"]
    assert "<a number of 400 digits>" in r.reason and len(r.reason) < 100
    r = read("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries ("
             + "9" * 30 + "G) exceeds available HBM (15.75G).")
    assert r.needed_bytes is None and r.available_bytes == round(15.75 * 2**30)
    assert r.damaged == ["the need: a number of 30 digits"]
    r = read("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries "
             "(8388608.00G) exceeds available HBM (15.75G).")  # 2**53 bytes exactly: past any memory
    assert r.needed_bytes is None and r.damaged == ["the need: 8388608.00G"]
    assert read("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 6291456 bytes.").request_bytes == 6291456
    for n in (10**400, float("inf"), float("nan"), -(2**70)):
        assert format_bytes(n) == "(not a size)"
    assert format_bytes(1536) == "1.50 KiB" and format_bytes(-5) == "-5 B"


@pytest.fixture(scope="module")
def hostile_runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    script = write_script(d, "hostile.py", HOSTILE)
    out = {}
    for form in ("digits", "temps", "controls"):
        proc = run_cli("run", "-o", d / form, script, form, env=cpu_env(COLUMNS="400"))
        assert proc.returncode == 1, proc.stderr
        out[form] = (d / form, proc)
    return out


def test_a_huge_number_in_an_oom_text_gives_a_report_and_a_one_line_check(hostile_runs):
    """report: exit 0, no traceback, the figure said as damaged; check:
    exit 1 (the run ran out of memory), one FAIL line naming the damage.
    Before: OverflowError in units.format_bytes, exit 1 read as FAIL."""
    for form, damaged in (("digits", "the allocation: a number of 400 digits"),
                          ("temps", "the need: a number of 30 digits")):
        run_dir, proc = hostile_runs[form]
        assert f"XLA's message gives figures that are no size: {damaged}" in proc.stderr
        rep = run_cli("report", run_dir, env=cpu_env(COLUMNS="400"))
        assert rep.returncode == 0 and "Traceback" not in rep.stderr, rep.stderr
        assert damaged in rep.stdout
        chk = run_cli("check", run_dir, "--max-peak", "1GiB")
        assert chk.returncode == 1 and "Traceback" not in chk.stderr, chk.stderr
        fails = [line for line in chk.stdout.splitlines() if line.startswith("FAIL")]
        assert len(fails) == 1 and fails[0].startswith("FAIL out-of-memory") and damaged in fails[0]
        doc = json.loads(run_cli("check", run_dir, "--max-peak", "1GiB", "--json").stdout)
        assert doc["checks"][0]["check"] == "out-of-memory" and doc["checks"][0]["damaged"] == [damaged]


def test_control_characters_never_reach_the_terminal_raw(hostile_runs):
    """The OOM text's escape sequences and bidi controls are shown escaped
    in run's closing lines, report and check (python's own traceback, which
    run leaves as python prints it, aside)."""
    run_dir, proc = hostile_runs["controls"]
    ours = [line for line in proc.stderr.splitlines() if line.startswith("jaxmemprof:")]
    assert any("\\x1b[2J\\x1b[31mred \\u202egnp.exe\\u2066" in line for line in ours), ours
    assert not any(raw in line for line in ours for raw in RAW)
    for argv in (("report", run_dir), ("check", run_dir, "--max-peak", "1GiB")):
        out = run_cli(*argv, env=cpu_env(COLUMNS="400"))
        assert "\\x1b[2J\\x1b[31mred \\u202egnp.exe\\u2066" in out.stdout, out.stdout
        assert not any(raw in out.stdout + out.stderr for raw in RAW)


def test_a_console_escapes_what_a_call_site_left_raw_and_keeps_its_own_colours():
    """rich's console (render/text.py), on a colour terminal: the text of
    each segment escaped, line breaks kept, rich's style codes written."""
    buf = io.StringIO()
    con = render_text.EscapingConsole(file=buf, force_terminal=True, color_system="standard", width=200)
    con.print(Text("a\x1b[2J\u202eb\nnext", style="red"))
    out = buf.getvalue()
    assert "\\x1b[2J\\u202eb" in out and out.count("\n") == 2 and "next" in out
    assert "\x1b[31m" in out and "\x1b[2J" not in out and "\u202e" not in out

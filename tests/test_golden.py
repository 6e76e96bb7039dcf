"""Outputs held by golden files, and the README's and docs' examples held to them.

The scheme:

* ``GOLDENS`` below lists every held output: what runs (from the repository
  root, paths relative to it), in which environment, the exit status
  expected, and the ``$`` line its example shows. ``tests/golden/NAME.txt``
  holds what the command writes (stdout, or stderr for ``run``'s summary),
  byte for byte: ``test_output_matches_golden`` runs the command now and
  compares.
* An example block in README.md or docs/*.md is held by a marker, an HTML
  comment on the line just before its fence (invisible once rendered)::

      <!-- golden: NAME -->
      ```
      $ the command
      its output
      ```

  The block must be exactly what ``_block`` renders from the golden file:
  ``$ `` and the shown command, the file named by ``before`` (held as
  recorded: what the script itself printed), the output (or the excerpt
  ``excerpt`` names: each ``(start, n)`` is the first line from there on
  whose text, leading spaces aside, starts with ``start``, and the ``n``
  lines from it (``None``: to the end); ``...`` stands for each part left
  out), then ``$ echo $?`` and the exit status where ``echo_status``. Lines
  are shown without their trailing spaces (the tables pad them).
* ``python -m pytest tests/test_golden.py --update-golden`` (as pprof's
  ``-update``) rewrites the golden files and every marked block from the
  real output; ``git diff`` then shows what changed. The bundled runs
  themselves are re-recorded by ``sh sample_runs/record.sh``, which ends by
  running that.

What is compared is deterministic: the reports are of the bundled runs in
sample_runs/runs/ (their timings are the recorded ones), run's summary is
rendered again from the bundled run's directory (jaxmemprof/cli/record.py's
``closing_lines``: what ``run`` printed when it recorded it), every command
runs from the repository root with relative paths, and the environment is
fixed (no COLUMNS unless given, TERM=dumb, NO_COLOR=1, TZ=UTC, UTF-8).

``test_bundled_stacks_name_no_own_frame_as_user`` holds the bundled runs to
what they must show: no file of jaxmemprof itself as the user's code.
"""

from __future__ import annotations

import dataclasses
import difflib
import gzip
import json
import os
import re
import shlex
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, cpu_env, go_pprof

GOLDEN = REPO / "tests" / "golden"
RUNS = "sample_runs/runs"
BUNDLED = ("mlp-donated", "mlp-leak", "mlp-no-donation")
DOCS = ("README.md", *sorted(f"docs/{p.name}" for p in (REPO / "docs").glob("*.md")))

# `run`'s summary, rendered again from a recorded run directory (argv[1]) as
# `run` printed it when the script ended: the target as the manifest recorded it.
SUMMARY = """
import json, sys
from pathlib import Path
from jaxmemprof.capture.runner import Target
from jaxmemprof.cli.record import closing_lines
directory = Path(sys.argv[1])
argv = json.loads((directory / "manifest.json").read_text())["argv"]
closing_lines(Target(path=argv[0], module=None, args=tuple(argv[1:])), directory)
"""


@dataclasses.dataclass(frozen=True)
class Golden:
    name: str  # tests/golden/NAME.txt
    shown: str | None  # the `$` line of its example; leading NAME=VALUE words are its environment
    argv: tuple = ()  # what runs, when not the shown command itself
    env: tuple = ()  # (NAME, VALUE) pairs the example does not show
    rc: int = 0
    stream: str = "stdout"
    doc: str | None = None  # the file whose example it is (a marker must be there)
    excerpt: tuple = ()  # ((start, n), ...): what the example shows; () all of it
    before: str | None = None  # a file of tests/golden shown before the output, held as recorded
    echo_status: bool = False  # the example ends with `$ echo $?` and the exit status
    needs_go: bool = False

    @property
    def path(self) -> Path:
        return GOLDEN / f"{self.name}.txt"

    def command(self) -> tuple[list[str], dict]:
        """The argv and the environment it runs in."""
        words = shlex.split(self.shown) if self.shown else []
        env = dict(self.env)
        while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
            key, value = words.pop(0).split("=", 1)
            env[key] = value
        argv = list(self.argv) or words
        if argv[0] == "jaxmemprof":
            argv = [sys.executable, "-m", "jaxmemprof", *argv[1:]]
        elif argv[:2] == ["go", "tool"]:
            argv = [*go_pprof(), *argv[3:]]
        base = cpu_env(TERM="dumb", NO_COLOR="1", TZ="UTC", PYTHONIOENCODING="utf-8")
        return argv, {**base, **env}


def _peak_file(run: str) -> str:
    """The raw JAX profile of a run's peak snapshot (the first of the most live bytes)."""
    con = sqlite3.connect(f"file:{REPO / run / 'journal.sqlite'}?mode=ro", uri=True)
    try:
        (name,) = con.execute("SELECT file FROM snapshots ORDER BY live_bytes DESC, snapshot LIMIT 1").fetchone()
    finally:
        con.close()
    return f"{run}/{name}"


LEAK = f"{RUNS}/mlp-leak"
GOLDENS = [
    # The report of each bundled run, at 100 columns; the README's is mlp-leak's.
    Golden("report-mlp-leak", f"jaxmemprof report {LEAK}", env=(("COLUMNS", "100"),), doc="README.md"),
    Golden("report-mlp-donated", f"COLUMNS=100 jaxmemprof report {RUNS}/mlp-donated", doc="docs/advice.md",
           excerpt=(("Memory inside jitted functions", 4),)),
    Golden("report-mlp-no-donation", f"COLUMNS=100 jaxmemprof report {RUNS}/mlp-no-donation"),
    # The README's first example: the command that recorded mlp-leak, what the
    # script printed then (as recorded), and run's summary of it.
    Golden("run-mlp-leak",
           f"JAX_PLATFORMS=cpu jaxmemprof run --interval 0.1 -o {LEAK} sample_runs/train_mlp.py --leak --steps 120",
           argv=(sys.executable, "-c", SUMMARY, LEAK), env=(("COLUMNS", "100"),), stream="stderr",
           doc="README.md", before="run-mlp-leak.script-stdout"),
    Golden("pprof-top-mlp-leak-peak", f"go tool pprof -top {_peak_file(LEAK)}", doc="README.md",
           excerpt=(("flat  flat%", 5),), needs_go=True),
    Golden("report-mlp-leak-top3", f"COLUMNS=100 jaxmemprof report {LEAK} --top 3", doc="docs/reports.md"),
    Golden("report-mlp-leak-explain-top3", f"COLUMNS=100 jaxmemprof report {LEAK} --explain --top 3",
           doc="docs/reports.md", excerpt=(("Findings", 12),)),
    Golden("report-mlp-no-donation-fit",
           f"jaxmemprof report {RUNS}/mlp-no-donation --device-memory 16GiB --explain", doc="docs/advice.md",
           excerpt=(("Memory inside jitted functions", 4), ("Findings", None))),
    # The MLP compiled for two TPU slices it never saw (run --plan --target: docs/targets.md).
    Golden("report-mlp-target", f"COLUMNS=100 jaxmemprof report {RUNS}/mlp-target", doc="docs/targets.md",
           excerpt=(("Compiled for TPU slices", 14),)),
    Golden("check-mlp-target", f"jaxmemprof check {RUNS}/mlp-target --target-fits v5e:2x2 --target-fits v6e:2x2",
           doc="docs/targets.md", echo_status=True),
    Golden("check-mlp-leak",
           f"jaxmemprof check {LEAK} --max-peak 12MiB --max-growth 1KiB/step --fail-on leak "
           f"--baseline {RUNS}/mlp-donated --max-increase 5", rc=1, doc="docs/ci.md", echo_status=True),
]
BY_NAME = {g.name: g for g in GOLDENS}
MARKER = re.compile(r"^<!-- golden: (?P<name>[\w.-]+) -->\n```\n(?P<body>.*?)^```$", re.M | re.S)

_produced: dict[str, bytes] = {}


def _produce(g: Golden) -> bytes:
    """What the command writes now (once per process)."""
    if g.name not in _produced:
        if g.needs_go and go_pprof() is None:
            if os.environ.get("CI"):
                pytest.fail("go tool pprof is missing: .ci/run must install golang-go")
            pytest.skip("go tool pprof not installed (apt-get install golang-go)")
        argv, env = g.command()
        proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, timeout=300)
        assert proc.returncode == g.rc, (
            f"{g.shown}: exit {proc.returncode}, expected {g.rc}\n"
            f"stdout:\n{proc.stdout.decode(errors='replace')}\nstderr:\n{proc.stderr.decode(errors='replace')}"
        )
        _produced[g.name] = proc.stdout if g.stream == "stdout" else proc.stderr
    return _produced[g.name]


def _held(g: Golden, update: bool) -> str:
    """The golden output as text: the real one when updating."""
    return (_produce(g) if update else g.path.read_bytes()).decode("utf-8")


def _block(g: Golden, output: str) -> str:
    """The example block of ``g``: see the module's docstring."""
    lines = [f"$ {g.shown}"] if g.shown else []
    if g.before:
        lines += (GOLDEN / f"{g.before}.txt").read_text(encoding="utf-8").splitlines()
    out = output.splitlines()
    if g.excerpt:
        at = 0
        for start, n in g.excerpt:
            i = next((i for i in range(at, len(out)) if out[i].lstrip().startswith(start)), None)
            assert i is not None, f"{g.name}: no line starting {start!r} after line {at}: the excerpt needs updating"
            if i > at:
                lines.append("...")
            at = len(out) if n is None else min(i + n, len(out))
            lines += out[i:at]
        if at < len(out):
            lines.append("...")
    else:
        lines += out
    if g.echo_status:
        lines += ["$ echo $?", str(g.rc)]
    return "".join(line.rstrip() + "\n" for line in lines)


def _diff(expected: str, actual: str, what: str) -> str:
    return "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True), what, "now")) + (
        "\nIf the change is meant: python -m pytest tests/test_golden.py --update-golden"
    )


@pytest.mark.parametrize("g", GOLDENS, ids=lambda g: g.name)
def test_output_matches_golden(g, update_golden):
    """The real command's output now, byte for byte the golden file."""
    out = _produce(g)
    if update_golden:
        g.path.parent.mkdir(exist_ok=True)
        g.path.write_bytes(out)
        return
    held = g.path.read_bytes()
    assert out == held, _diff(held.decode(errors="replace"), out.decode(errors="replace"), str(g.path.relative_to(REPO)))


def _marked(name: str) -> list[str]:
    """The goldens a Markdown file marks, in order."""
    return [m["name"] for m in MARKER.finditer((REPO / name).read_text(encoding="utf-8"))]


@pytest.mark.parametrize("doc", [d for d in DOCS if _marked(d) or any(g.doc == d for g in GOLDENS)])
def test_examples_are_their_golden_files(doc, update_golden):
    """Each marked block of README.md and docs/*.md is its golden output as
    ``_block`` shows it; every golden meant for the file is marked there."""
    path = REPO / doc
    text = path.read_text(encoding="utf-8")
    names = _marked(doc)
    assert names, f"{doc}: no <!-- golden: NAME --> marker before an example block"
    unknown = sorted(set(names) - set(BY_NAME))
    assert not unknown, f"{doc}: markers name no golden in GOLDENS: {unknown}"
    missing = sorted(g.name for g in GOLDENS if g.doc == doc and g.name not in names)
    assert not missing, f"{doc}: no marked block for {missing}"

    def body(m):
        return f"<!-- golden: {m['name']} -->\n```\n{_block(BY_NAME[m['name']], _held(BY_NAME[m['name']], update_golden))}```"

    want = MARKER.sub(body, text)
    if update_golden:
        if want != text:
            path.write_text(want, encoding="utf-8")
        return
    assert text == want, _diff(text, want, doc)


def test_no_stale_golden_file():
    """Every file of tests/golden is one GOLDENS names (a removed output leaves none behind)."""
    named = {g.path.name for g in GOLDENS} | {f"{g.before}.txt" for g in GOLDENS if g.before}
    assert sorted(p.name for p in GOLDEN.iterdir()) == sorted(named)


def _manifest(run: str) -> dict:
    return json.loads((REPO / RUNS / run / "manifest.json").read_text())


def test_readme_run_command_recorded_the_bundled_run():
    """The README's `run` example is the command that recorded sample_runs/runs/mlp-leak."""
    g = BY_NAME["run-mlp-leak"]
    words = shlex.split(g.shown)
    env = dict(w.split("=", 1) for w in words[:1])
    manifest = _manifest("mlp-leak")
    assert Path(manifest["command"][0]).name == words[1] == "jaxmemprof"
    assert manifest["command"][1:] == words[2:]
    assert env == {"JAX_PLATFORMS": "cpu"} and manifest["environment"].get("JAX_PLATFORMS") == "cpu"
    assert manifest["backend"] == "cpu" and manifest["exit_status"] == 0


def test_pprof_example_is_the_reports_peak():
    """The README's `go tool pprof -top` example reads the snapshot its report names as the peak."""
    report = BY_NAME["report-mlp-leak"].path.read_text(encoding="utf-8")
    peak = int(re.search(r"^What held the live peak \(snapshot (\d+)[;)]", report, re.M).group(1))
    assert BY_NAME["pprof-top-mlp-leak-peak"].shown.endswith(f"/snapshots/{peak:06d}.prof.gz")


def _own(path: str, cwd: str) -> str | None:
    """A recorded file's path from jaxmemprof/ down when it is a file of
    jaxmemprof itself (the recording checkout's jaxmemprof/, or an installed
    copy), else None."""
    p = path.replace("\\", "/")
    root = cwd.replace("\\", "/").rstrip("/") + "/"
    if p.startswith(root + "jaxmemprof/"):
        return p[len(root):]
    m = re.search(r"/(?:site|dist)-packages/(jaxmemprof/.*)$", p)
    return m.group(1) if m else None


def _recorded_files(d: Path) -> dict[str, set]:
    """Every file the run's stacks name: from the journal's stacks table, and
    from each snapshot's profile (its locations' functions), with where."""
    from jaxmemprof.pprof import profile_pb2

    files: dict[str, set] = {}
    con = sqlite3.connect(f"file:{d / 'journal.sqlite'}?mode=ro", uri=True)
    try:
        for (frames,) in con.execute("SELECT frames FROM stacks"):
            for file, _line, _function in json.loads(frames):
                files.setdefault(file, set()).add("journal stacks")
    finally:
        con.close()
    profiles = sorted((d / "snapshots").glob("*.prof.gz"))
    assert profiles, d
    for prof in profiles:
        p = profile_pb2.Profile.FromString(gzip.decompress(prof.read_bytes()))
        for f in p.function:
            name = p.string_table[f.filename]  # bytes in jaxmemprof's copy of profile.proto
            files.setdefault(name.decode("utf-8", "replace") if isinstance(name, bytes) else name, set()).add(prof.name)
    return files


@pytest.mark.parametrize("run", BUNDLED)
def test_bundled_stacks_name_no_own_frame_as_user(run):
    """No frame of a bundled run's stacks (journal and .prof files) that
    names a file of jaxmemprof itself counts as the user's code, wherever the
    clone reporting it lives: each is judged by jaxmemprof.facts.paths' rule as a
    checkout at another path would see it (a run recorded by an older layout,
    jaxmemprof/cli.py, once showed as `jaxmemprof/cli.py:457 (main)`)."""
    from jaxmemprof.facts.paths import is_builtin_library

    d = REPO / RUNS / run
    cwd = _manifest(run)["cwd"]
    files = _recorded_files(d)
    elsewhere = "/another/checkout/"  # neither the recording checkout nor this one
    user = {f for f in files if not is_builtin_library(f)}
    # The rule tells the script's own file from the library's here ...
    assert any(f.endswith("/sample_runs/train_mlp.py") for f in user), sorted(user)
    assert any("/jax/_src/" in f for f in files) and not any("/jax/_src/" in f for f in user)
    own = {f: _own(f, cwd) for f in files if _own(f, cwd)}
    # ... and seen from another checkout, the script is still the user's.
    script = next(f for f in files if f.endswith("/sample_runs/train_mlp.py"))
    assert not is_builtin_library(elsewhere + os.path.relpath(script, cwd))
    shown_as_user = sorted(
        f"{rel} (in {', '.join(sorted(files[f])[:3])}{' ...' if len(files[f]) > 3 else ''})"
        for f, rel in own.items()
        if not is_builtin_library(f) or not is_builtin_library(elsewhere + rel)
    )
    assert not shown_as_user, f"{run}: jaxmemprof's own files as user frames: {shown_as_user}"

"""export --format perfetto (a run as a Chrome trace event JSON) and run
--xprof (a jax.profiler trace of the same program, merged on one clock).

The trace is read back by the format's rules, strictly (every event's phase,
ids, timestamps, the metadata naming every process and thread), its figures
checked against the run's own journal and report; merged with JAX's trace,
the run's markers, snapshots and counters are checked against JAX's own op
events by their timestamps. Where chromium and the ``xprof`` package are
installed, XProf's own trace viewer (its catapult importer, from the
package's static files) loads it in headless Chromium. Perfetto's
TraceProcessor (PyPI ``perfetto``) is not used: it downloads its binary at
first use, which this machine cannot (docs/trace-export.md).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from _browser import Browser, chromium
from conftest import REPO, run_cli, write_script

SAMPLE = REPO / "sample_runs" / "runs" / "mlp-leak"
GROW_ROWS = 16  # grow()'s output: 16 times its 1 MiB input

SCRIPT = '''
import sys

import jax
import jax.numpy as jnp
import jaxmemprof


@jax.jit
def grow(x):
    return jnp.tile(x, (16, 1)) * 2.0


x = jnp.ones((1024, 256), jnp.float32)
grow(x).block_until_ready()  # compiled
jaxmemprof.snapshot("before")
jaxmemprof.mark("before")
y = grow(x).block_until_ready()
jaxmemprof.mark("after")
jaxmemprof.snapshot("after")
print("NBYTES", y.nbytes)
# the program's own trace while run --xprof's runs: ours stops first, the program's goes on
with jax.profiler.trace(sys.argv[1]):
    jaxmemprof.mark("own before")
    z = grow(x).block_until_ready()
    jaxmemprof.mark("own after")
print("OWN DONE")
'''

PHASES = {"C", "X", "i", "I", "M", "B", "E", "b", "e", "n", "s", "t", "f", "P", "O", "N", "D", "R", "(", ")"}
METADATA = {"process_name", "process_labels", "process_sort_index", "thread_name", "thread_sort_index"}


def check_trace(doc: dict, *, ours_only: bool = True) -> dict:
    """The Trace Event Format's rules, strictly, on the JSON Object Format:
    returns {pid: {tid: thread name}} of the run's process."""
    assert set(doc) <= {"traceEvents", "displayTimeUnit", "otherData", "metadata"}, set(doc)
    assert doc["displayTimeUnit"] in ("ms", "ns")
    events = doc["traceEvents"]
    assert isinstance(events, list) and events
    named_processes, named_threads, used = set(), {}, set()
    for e in events:
        assert e["ph"] in PHASES, e
        assert isinstance(e["pid"], int) and not isinstance(e["pid"], bool), e
        assert isinstance(e.get("name"), str), e
        if e["ph"] == "M":
            assert e["name"] in METADATA, e
            assert isinstance(e["args"], dict)
            if e["name"] == "process_name":
                named_processes.add(e["pid"])
            if e["name"] == "thread_name":
                named_threads[(e["pid"], e["tid"])] = e["args"]["name"]
            continue
        ts = e["ts"]
        assert isinstance(ts, (int, float)) and not isinstance(ts, bool) and ts >= 0, e
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
        if e["ph"] == "C":
            assert e["args"] and all(isinstance(v, (int, float)) for v in e["args"].values()), e
        if e["ph"] in ("i", "I"):
            assert e.get("s", "t") in ("g", "p", "t"), e
        if e["ph"] != "C":
            used.add((e["pid"], e["tid"]))
    ours = {e["pid"] for e in events if e.get("cat") in ("memory", "snapshot")}
    assert len(ours) == 1
    pid = ours.pop()
    assert pid in named_processes
    for p, t in used:
        if ours_only or p == pid:
            assert (p, t) in named_threads, f"thread {p}/{t} has no thread_name"
    return {t: name for (p, t), name in named_threads.items() if p == pid}


def load(path: Path) -> dict:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def counter(doc: dict, name: str) -> list:
    return sorted((e["ts"], e["args"]["bytes"]) for e in doc["traceEvents"] if e["ph"] == "C" and e["name"] == name)


def at(series: list, ts: float) -> int:
    """A counter's value at ``ts`` (its last sample at or before it)."""
    return [v for t, v in series if t <= ts][-1]


def named(doc: dict, cat: str, name: str) -> dict:
    (e,) = [e for e in doc["traceEvents"] if e.get("cat") == cat and e["name"] == name]
    return e


def test_a_run_as_a_trace_follows_the_format_and_the_run(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(SAMPLE, run)
    plain, packed = tmp_path / "t.json", tmp_path / "t.json.gz"
    p = run_cli("export", run, "--format", "perfetto", "-o", plain, "--top", "5", check=0)
    assert f"wrote {plain}" in p.stderr and "ui.perfetto.dev" in p.stderr
    run_cli("export", run, "--format", "perfetto", "-o", packed, "--top", "5", check=0)
    assert packed.read_bytes()[:2] == b"\x1f\x8b"
    doc = load(plain)
    assert load(packed) == doc
    threads = check_trace(doc)
    assert set(threads.values()) >= {"steps and markers", "findings", "compiles"}

    # the journal's own figures: each snapshot's live bytes at its moment (microseconds from the run's start)
    con = sqlite3.connect(run / "journal.sqlite")
    snaps = con.execute("SELECT snapshot, t_wall, live_bytes, wall_s FROM snapshots ORDER BY snapshot").fetchall()
    marks = con.execute("SELECT label, t_wall FROM markers ORDER BY marker").fetchall()
    con.close()
    start = json.loads((run / "manifest.json").read_text())["start_epoch"]
    assert doc["otherData"]["origin_epoch_s"] == pytest.approx(start, abs=1e-6)
    live = counter(doc, "live bytes, all devices")
    assert [v for _, v in live] == [b for _, _, b, _ in snaps]
    assert [t for t, _ in live] == pytest.approx([(w - start) * 1e6 for _, w, _, _ in snaps], abs=1.0)
    slices = sorted((e["args"]["snapshot"], e["ts"], e["dur"]) for e in doc["traceEvents"] if e.get("cat") == "snapshot")
    assert [(s, d) for s, _, d in slices] == [(s, pytest.approx(w * 1e6, abs=1.0)) for s, _, _, w in snaps]
    got = sorted((e["ts"], e["name"]) for e in doc["traceEvents"] if e.get("cat") == "marker")
    assert [n for _, n in got] == [lab for lab, _ in marks]
    assert [t for t, _ in got] == pytest.approx([(w - start) * 1e6 for _, w in marks], abs=1.0)

    # the report's table: the same sites, holding the same bytes at the live peak
    rep = json.loads(run_cli("report", run, "--json", "--top", "5", check=0).stdout)
    peak = rep["summary"]["peak_snapshot"]
    peak_ts = [t for s, t, _ in slices if s == peak][0]
    sites = {e["name"][len("site "):] for e in doc["traceEvents"] if e["ph"] == "C" and e["name"].startswith("site ")}
    assert sites == {r["site"] for r in rep["peak_sites"]}
    for r in rep["peak_sites"]:
        if r["bytes"] >= 1024:  # a scalar's 4 B against its shard's 8: the profile and the array records
            assert at(counter(doc, f"site {r['site']}"), peak_ts) == r["bytes"]
    # every finding once, at a moment of the run
    findings = [e for e in doc["traceEvents"] if e.get("cat") == "finding"]
    assert sorted(e["args"]["rule"] for e in findings) == sorted(f["rule"] for f in rep["findings"])
    assert all(e["ts"] == peak_ts for e in findings if e["args"]["at"] == "the live peak")

    # never over a file without --force
    p = run_cli("export", run, "--format", "perfetto", "-o", plain, check=2)
    assert len(p.stderr.strip().splitlines()) == 1 and "--force" in p.stderr
    run_cli("export", run, "--format", "perfetto", "-o", plain, "--force", check=0)


def test_the_chips_own_counters_as_recorded_on_a_tpu(tmp_path):
    """A run recorded on a TPU v5e chip (tests/fixtures/tpu/gpt8): its memory_stats() as counters, each
    value the journal's at that snapshot."""
    run = REPO / "tests" / "fixtures" / "tpu" / "gpt8"
    out = tmp_path / "t.json.gz"
    run_cli("export", run, "--format", "perfetto", "-o", out, check=0)
    doc = load(out)
    check_trace(doc)
    con = sqlite3.connect(f"file:{run / 'journal.sqlite'}?mode=ro", uri=True)
    start = json.loads((run / "manifest.json").read_text())["start_epoch"]
    for key in ("bytes_in_use", "peak_bytes_in_use", "bytes_limit"):
        rows = con.execute("SELECT s.t_wall, m.value FROM memory_stats m JOIN snapshots s USING (snapshot) "
                           "WHERE m.key = ? ORDER BY s.snapshot", (key,)).fetchall()
        got = counter(doc, f"{key} tpu:0")
        assert rows and [v for _, v in got] == [v for _, v in rows]
        assert [t for t, _ in got] == pytest.approx([(w - start) * 1e6 for w, _ in rows], abs=1.0)
        assert all(e["cat"] == "memory_stats" for e in doc["traceEvents"] if e.get("name") == f"{key} tpu:0")
    con.close()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """The script recorded with run --xprof: (its run, the program's own trace's log directory, y's bytes)."""
    d = tmp_path_factory.mktemp("xprof")
    script = write_script(d, "grow.py", SCRIPT)
    run, own = d / "run", d / "own"
    p = run_cli("run", "--xprof", "-q", "-o", run, script, own, check=0)
    assert "OWN DONE" in p.stdout
    nbytes = int(p.stdout.split("NBYTES")[1].split()[0])
    assert nbytes == GROW_ROWS * 1024 * 256 * 4
    return run, own, nbytes


def op_between(doc: dict, first: dict, last: dict, function: str) -> dict:
    """The one outermost ``PjitFunction(function)`` slice of JAX's that
    starts between two of the run's instants; each of JAX's nested pairs
    counts once (the outer)."""
    ops = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("name") == f"PjitFunction({function})"]
    outer = [e for e in ops if not any(o is not e and o["ts"] <= e["ts"] and e["ts"] + e["dur"] <= o["ts"] + o["dur"]
                                       and o["tid"] == e["tid"] for o in ops)]
    inside = [e for e in outer if first["ts"] <= e["ts"] <= last["ts"]]
    assert len(inside) == 1, (first["ts"], last["ts"], sorted((e["ts"], e["dur"]) for e in outer))
    return inside[0]


def in_its_mark_call(doc: dict, marker: dict) -> None:
    """The moment the run recorded for a marker lies inside JAX's own record
    of the ``jaxmemprof.mark()`` call that placed it (JAX's Python tracer's
    slice of it: tens of microseconds), on the merged trace's one clock."""
    calls = [e for e in doc["traceEvents"] if e.get("ph") == "X" and str(e.get("name", "")).endswith(" mark")
             and "api.py" in e["name"]]
    assert calls, "no jaxmemprof.mark() call in JAX's trace"
    near = min(calls, key=lambda e: abs(e["ts"] - marker["ts"]))
    assert near["ts"] <= marker["ts"] <= near["ts"] + near["dur"], (marker["ts"], near["ts"], near["dur"])


def test_run_xprof_records_jaxs_trace_and_export_merges_it_on_one_clock(recorded, tmp_path):
    run, own, nbytes = recorded
    xprof = json.loads((run / "manifest.json").read_text())["xprof"]
    assert xprof["stopped_by"] == "the program's own jax.profiler trace"  # ours ended there, not the program
    session = run / "xprof" / "plugins" / "profile" / xprof["session"]
    source = [e for e in load(next(session.glob("*.trace.json.gz")))["traceEvents"] if e]  # less JAX's closing {}
    out = tmp_path / "merged.json.gz"
    p = run_cli("export", run, "--format", "perfetto", "-o", out, check=0)
    assert f"merged with {session}" in p.stderr
    doc = load(out)
    check_trace(doc, ours_only=False)
    other = doc["otherData"]
    assert other["jax_start_epoch_s"] >= other["origin_epoch_s"]
    ours = named(doc, "marker", "before")["pid"]
    assert ours not in {e["pid"] for e in source}  # JAX's pids are its own; the run's process is another
    assert len([e for e in doc["traceEvents"] if e["pid"] != ours]) == len(source)  # every event of JAX's, once
    # the marks the program placed around its call hold JAX's slice of that call between them, on one clock
    before, after = named(doc, "marker", "before"), named(doc, "marker", "after")
    op = op_between(doc, before, after, "grow")
    assert before["ts"] <= op["ts"] and op["ts"] + op["dur"] <= after["ts"]
    assert after["ts"] - before["ts"] < 0.5e6  # a call of a few ms, not a clock seconds off
    in_its_mark_call(doc, before)
    in_its_mark_call(doc, after)
    # the snapshot before ends before the op; the one after starts after it; the live bytes rise by y's bytes
    snap = {e["args"]["label"]: e for e in doc["traceEvents"] if e.get("cat") == "snapshot" and "label" in e["args"]}
    assert snap["before"]["ts"] + snap["before"]["dur"] <= op["ts"]
    assert snap["after"]["ts"] >= op["ts"] + op["dur"]
    live = counter(doc, "live bytes cpu:0")
    assert at(live, snap["after"]["ts"]) - at(live, snap["before"]["ts"]) == nbytes


def test_a_trace_the_program_wrote_itself_merged_with_with(recorded, tmp_path):
    run, own, _ = recorded
    out = tmp_path / "own.json"
    p = run_cli("export", run, "--format", "perfetto", "--with", own, "-o", out, check=0)
    assert "warning" not in p.stderr
    # another run's trace: merged on the wall clock all the same, and said
    other = tmp_path / "other"
    shutil.copytree(SAMPLE, other)
    p = run_cli("export", other, "--format", "perfetto", "--with", own, "-o", tmp_path / "other.json", check=0)
    assert "share no moment: a trace of another run?" in p.stderr
    doc = load(out)
    check_trace(doc, ours_only=False)
    before, after = named(doc, "marker", "own before"), named(doc, "marker", "own after")
    op = op_between(doc, before, after, "grow")
    assert before["ts"] <= op["ts"] and op["ts"] + op["dur"] <= after["ts"]
    in_its_mark_call(doc, before)
    in_its_mark_call(doc, after)


def test_run_xprof_stops_jaxs_trace_at_the_runs_end(tmp_path):
    script = write_script(tmp_path, "steps.py", """
        import jax
        import jax.numpy as jnp
        import jaxmemprof

        f = jax.jit(lambda x: x @ x)
        x = jnp.ones((256, 256))
        for i in range(3):
            x = f(x).block_until_ready()
            jaxmemprof.mark(f"step {i}")
        """)
    run = tmp_path / "run"
    run_cli("run", "--xprof", "-q", "-o", run, script, check=0)
    xprof = json.loads((run / "manifest.json").read_text())["xprof"]
    assert xprof["stopped_by"] == "the run's end" and "error" not in xprof
    session = run / "xprof" / "plugins" / "profile" / xprof["session"]
    assert len(list(session.glob("*.xplane.pb"))) == 1 and len(list(session.glob("*.trace.json.gz"))) == 1
    from jaxmemprof.store.jax_trace import read_jax_trace

    trace = read_jax_trace(session)  # JAX's own start: just after ours asked for it, before it stopped
    assert xprof["start_wall"] <= trace.start_ns / 1e9 <= xprof["start_wall"] + max(1.0, xprof["start_s"])
    assert trace.start_ns / 1e9 < xprof["stop_wall"]
    out = tmp_path / "t.json"
    run_cli("export", run, "--format", "perfetto", "-o", out, check=0)
    doc = load(out)
    check_trace(doc, ours_only=False)
    for i in range(3):
        in_its_mark_call(doc, named(doc, "marker", f"step {i}"))


def test_bad_jax_traces_are_one_line_and_exit_2(recorded, tmp_path):
    run, own, _ = recorded
    (trace,) = own.glob("plugins/profile/*/*.trace.json.gz")
    (xplane,) = own.glob("plugins/profile/*/*.xplane.pb")
    cases = []
    empty = tmp_path / "empty"
    empty.mkdir()
    cases.append(("holds no JAX trace", empty))
    for name, what, keep, half in (("t1", "truncated", (xplane,), trace), ("t2", "missing", (), None),
                                   ("t3", "truncated", (trace,), xplane)):
        d = tmp_path / name
        d.mkdir()
        for f in keep:
            shutil.copy(f, d)
        if half is not None:  # the other file cut short
            (d / half.name).write_bytes(half.read_bytes()[: half.stat().st_size // 2])
        elif what == "missing":  # the trace without its xplane: no start, no clock
            shutil.copy(trace, d)
        cases.append((what, d / trace.name))
    cases.append(("not a JAX trace", xplane))
    for problem, path in cases:
        p = run_cli("export", run, "--format", "perfetto", "--with", path, "-o", tmp_path / "x.json", check=2)
        assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr, p.stderr
        assert problem in p.stderr, (problem, p.stderr)
        assert not (tmp_path / "x.json").exists()
    p = run_cli("export", run, "--format", "csv", "--with", own, "-o", tmp_path / "csv", check=2)
    assert "--with" in p.stderr


def test_damaged_xplanes_and_traces_are_refused_never_crash(recorded, tmp_path):
    """Every cut and a few hundred random changes of a real XPlane and trace: a start, or an InputError."""
    import random

    from jaxmemprof.errors import InputError
    from jaxmemprof.store.jax_trace import profile_start_ns, read_jax_trace

    run, own, _ = recorded
    (xplane,) = own.glob("plugins/profile/*/*.xplane.pb")
    (trace,) = own.glob("plugins/profile/*/*.trace.json.gz")
    real, start = xplane.read_bytes(), profile_start_ns(xplane)
    rng = random.Random(65)
    d = tmp_path / "s"
    d.mkdir()
    bad = d / xplane.name
    shutil.copy(trace, d)
    cases = [real[:n] for n in sorted(rng.sample(range(len(real)), 60))]
    for _ in range(300):
        b = bytearray(real)
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        cases.append(bytes(b))
    refused = 0
    for data in cases:
        bad.write_bytes(data)
        try:
            got = profile_start_ns(bad)
        except InputError as exc:
            assert str(bad) in str(exc)
            refused += 1
        else:
            assert isinstance(got, int) and got > 0
    assert refused >= 60  # every cut short, at least
    packed = trace.read_bytes()
    shutil.copy(xplane, d / xplane.name)
    for n in (0, 1, 2, 10, len(packed) // 3, len(packed) - 1):
        (d / trace.name).write_bytes(packed[:n])
        with pytest.raises(InputError):
            read_jax_trace(d / trace.name)
    assert read_jax_trace(trace).start_ns == start


def trace_viewer() -> Path | None:
    """XProf's trace viewer page (the ``xprof`` package's static files), if installed."""
    spec = importlib.util.find_spec("xprof")
    if spec is None or not spec.submodule_search_locations:
        return None
    page = Path(list(spec.submodule_search_locations)[0]) / "static" / "trace_viewer_index.html"
    return page if page.is_file() else None


IMPORT = """(() => { try {
  const m = new tr.Model(); new tr.importer.Import(m).importTraces([window.TRACE]);
  return JSON.stringify({warnings: m.importWarnings.map(w => w.message),
    processes: Object.values(m.processes).map(p => ({pid: p.pid, name: p.name,
      counters: Object.values(p.counters).map(c => [c.name, c.series[0].samples.length,
                                                   Math.max(...c.series[0].samples.map(s => s.value))]),
      threads: Object.values(p.threads).map(t => [t.name, t.sliceGroup.length])}))});
} catch (e) { return "error: " + e; } })()"""


DRAW = """(() => { try {
  const m = new tr.Model(); new tr.importer.Import(m).importTraces([window.TRACE]);
  const box = document.createElement('track-view-container'); box.id = 'track_view_container';
  const view = document.createElement('tr-ui-timeline-view');
  view.track_view_container = box; Polymer.dom(view).appendChild(box);
  Polymer.dom(document.body).appendChild(view);
  view.model = m;
  return 'ok';
} catch (e) { return 'error: ' + e; } })()"""


@pytest.mark.skipif(chromium() is None, reason="chromium is not installed (CI installs it: .ci/run)")
@pytest.mark.skipif(trace_viewer() is None, reason="the xprof package (XProf's trace viewer) is not installed")
def test_xprofs_trace_viewer_loads_it(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(SAMPLE, run)
    out = tmp_path / "t.json"
    run_cli("export", run, "--format", "perfetto", "-o", out, "--top", "5", check=0)
    doc = load(out)
    with Browser() as b:
        page = b.open(trace_viewer())
        page.evaluate(f"window.TRACE = {json.dumps(out.read_text())}; 1")
        got = page.evaluate(IMPORT)
        drawn = page.evaluate(DRAW)  # and drawn, as the viewer draws a trace
        time.sleep(1)
        errors = page.errors
    assert drawn == "ok" and errors == [], (drawn, errors)
    assert not got.startswith("error"), got
    model = json.loads(got)
    assert model["warnings"] == []
    (proc,) = model["processes"]
    assert proc["name"] == f"jaxmemprof: {run}"
    n = len([e for e in doc["traceEvents"] if e.get("cat") == "snapshot"])
    counters = {name: (samples, peak) for name, samples, peak in proc["counters"]}
    assert counters["live bytes, all devices"] == (n, max(v for _, v in counter(doc, "live bytes, all devices")))
    assert len(counters) == len({e["name"] for e in doc["traceEvents"] if e["ph"] == "C"})
    threads = dict(proc["threads"])
    assert threads["snapshots (each as long as it took)"] == n
    assert threads["steps and markers"] == len([e for e in doc["traceEvents"] if e.get("cat") == "marker"])

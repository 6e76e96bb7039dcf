"""XProf profiles (jax.profiler.trace's .xplane.pb) read into the run model:
real profiles of the bundled MLP's step on the CPU, recorded under `jaxmemprof
run` at once, so the profile's figures are checked against the step's own
compiled.memory_analysis() and against `run`'s tables of the same program."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import cpu_env, in_parallel, run_cli

from jaxmemprof.store.reader import load_run
from jaxmemprof.store.xprof import load_profile_run, profile_files

SCRIPT = Path(__file__).parent / "fixtures" / "xprof" / "profile_mlp.py"


def _record(tmp: Path, name: str, *options) -> tuple[Path, Path, dict]:
    """(the trace directory, the run directory, memory_analysis()'s figures)."""
    import subprocess

    trace, run = tmp / name, tmp / f"{name}-run"
    proc = subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", str(run), str(SCRIPT), str(trace),
                           *options], env=cpu_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return trace, run, json.loads((tmp / f"{name}.json").read_text())


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    import os

    if os.environ.get("XPROF_TEST_CACHE"):  # development only: profiles recorded once, kept there
        tmp = Path(os.environ["XPROF_TEST_CACHE"])
        if (tmp / "plain.json").exists() and (tmp / "donated.json").exists():
            return {n: (tmp / n, tmp / f"{n}-run", json.loads((tmp / f"{n}.json").read_text()))
                    for n in ("plain", "donated")}
        tmp.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tmp_path_factory.mktemp("xprof")
    plain, donated = in_parallel(lambda: _record(tmp, "plain"), lambda: _record(tmp, "donated", "--donate"))
    return {"plain": plain, "donated": donated}


def _step(run):
    fn = run.jit.functions
    fid = int(fn.loc[fn["name"] == "train_step", "function_id"].iloc[0])
    programs = run.jit.programs
    return fid, programs[programs["function_id"] == fid].iloc[0]


def _by_line(run, fid) -> dict:
    """XLA's buffers at the program's peak: (kind, innermost frame or op) -> bytes."""
    b = run.jit.buffers
    b = b[(b["function_id"] == fid) & (b["at_peak"] == 1)]
    out: dict = {}
    for r in b.itertuples():
        frames = json.loads(r.frames)
        key = (r.kind, tuple(frames[0][:2]) if frames else r.op)
        out[key] = out.get(key, 0) + int(r.bytes)
    return out


@pytest.mark.parametrize("which", ["plain", "donated"])
def test_the_step_read_from_the_profile_is_the_compiled_step(profiles, which):
    trace, run_dir, ma = profiles[which]
    files, _ = profile_files(trace)
    assert len(files) == 1 and files[0].name.endswith(".xplane.pb")
    prof = load_profile_run(trace)
    fid, p = _step(prof)
    # XLA's figures of the same compile, from memory_analysis()
    assert (int(p["argument_bytes"]), int(p["output_bytes"]), int(p["alias_bytes"]), int(p["temp_bytes"])) == (
        ma["argument"], ma["output"], ma["alias"], ma["temp"])
    # and run's own account of the program: the same peak, the same buffers at it by line
    run = load_run(run_dir)
    rfid, rp = _step(run)
    assert int(p["peak_bytes"]) == int(rp["peak_bytes"])
    assert _by_line(prof, fid) == _by_line(run, rfid)
    # the arguments by the names JAX gave them, the donated ones aliased
    call = json.loads(prof.jit.calls.loc[prof.jit.calls["function_id"] == fid, "inputs"].iloc[0])
    assert [leaf["owner"] for leaf in call[:2]] == ["params[0][0]", "params[0][1]"]
    assert {leaf["name"] for leaf in call} == {"params", "momentum", "x", "y"}
    donated = {leaf["name"] for leaf in call if leaf["donated"]}
    assert donated == ({"params", "momentum"} if which == "donated" else set())
    # the step ran three times in the capture
    counts = prof.jit.counts
    assert int(counts.loc[counts["function_id"] == fid, "calls"].iloc[0]) == 3


def test_report_on_a_profile_names_the_step_and_the_donation(profiles):
    trace, run_dir, ma = profiles["plain"]
    out = run_cli("report", trace, "--json", check=0)
    doc = json.loads(out.stdout)
    # a CPU profile has no memory events: said in one line
    said = [line for line in out.stderr.splitlines() if "no memory events" in line]
    assert len(said) == 1
    donate = [f for f in doc["findings"] if f["rule"] == "donate"]
    assert len(donate) == 1
    text = json.dumps(donate[0])
    assert "params" in text and "momentum" in text
    # the saving, not compiled from a profile: the arguments' bytes that outputs can take (an upper bound),
    # which is what XLA aliased when the same step was compiled donated (its memory_analysis())
    assert donate[0]["saving_bytes"] == profiles["donated"][2]["alias"] > 0
    # the run of the same step finds the same arguments to donate
    run_doc = json.loads(run_cli("report", run_dir, "--json", check=0).stdout)
    run_donate = [f for f in run_doc["findings"] if f["rule"] == "donate"]
    assert "params" in json.dumps(run_donate) and "momentum" in json.dumps(run_donate)
    # the donated step's profile: nothing left to donate, its aliasing read
    donated = json.loads(run_cli("report", profiles["donated"][0], "--json", check=0).stdout)
    assert not [f for f in donated["findings"] if f["rule"] == "donate"]


def test_show_and_diff_of_two_profiles(profiles):
    plain, donated = profiles["plain"][0], profiles["donated"][0]
    shown = json.loads(run_cli("show", plain, "--json", check=0).stdout)
    fid, p = _step(load_profile_run(plain))
    assert shown["totals"]["bytes"] == int(p["peak_bytes"])  # the largest program's buffers at its peak
    # two profiles diff as two runs: the true peak (a profile without memory events: its largest program's call
    # peak, XLA's own figures) and the findings resolved
    out = run_cli("diff", plain, donated, "--json", check=0)
    doc = json.loads(out.stdout)
    ma_plain, ma_donated = profiles["plain"][2], profiles["donated"][2]

    def call_peak(ma):
        return ma["argument"] + ma["output"] - ma["alias"] + ma["temp"]

    summary = doc["summary"]
    assert summary["base_true_peak_bytes"] >= call_peak(ma_plain) and "at least" in summary["base_where"]
    assert summary["delta_true_peak_bytes"] == summary["new_true_peak_bytes"] - summary["base_true_peak_bytes"] < 0
    assert summary["base_true_peak_bytes"] - summary["new_true_peak_bytes"] == call_peak(ma_plain) - call_peak(ma_donated)
    resolved = [r for r in doc["rows"] if r["section"] == "finding" and r["change"] == "resolved"]
    assert [r["kind"] for r in resolved] == ["donate"]


def test_check_on_a_profile_without_memory_events(profiles):
    # a CPU profile has programs but no snapshot: the checks on its programs are made, those on the snapshots
    # say so in one line (exit 2), never pass
    plain, ma = profiles["plain"][0], profiles["plain"][2]
    call_peak = ma["argument"] + ma["output"] - ma["alias"] + ma["temp"]  # the step's, from memory_analysis()
    held = run_cli("check", plain, "--max-true-peak", str(call_peak))
    assert held.returncode == 0 and "estimated true peak" in held.stdout and "at least" in held.stdout, held.stderr
    failed = run_cli("check", plain, "--max-true-peak", str(call_peak - 1))
    assert failed.returncode == 1 and failed.stdout.startswith("FAIL --max-true-peak"), failed.stdout
    donate = run_cli("check", plain, "--fail-on", "donate")
    assert donate.returncode == 1 and "FAIL --fail-on donate" in donate.stdout and "train_mlp.py" in donate.stdout
    assert run_cli("check", plain, "--fail-on", "leak").returncode == 0
    for limit in (("--max-peak", "1GiB"), ("--max-peak", "1GiB", "--fail-on", "donate"), ("--max-growth", "1MiB/s")):
        _one_line_exit_2(run_cli("check", plain, *limit), "holds no memory events", notes=2)


def test_the_report_of_a_profile_without_memory_events_says_so_once(profiles):
    out = run_cli("report", profiles["plain"][0], check=0)
    both = out.stdout + out.stderr
    assert both.count("no memory events") == 1, both
    assert "a CPU profile: XProf records allocations only on a TPU or GPU" in both
    assert "never put an array" not in both
    doc = json.loads(run_cli("report", profiles["plain"][0], "--json", check=0).stdout)
    assert doc["summary"]["no_snapshot_why"] == "no-memory-events"


def test_export_csv_of_a_profile(profiles, tmp_path):
    trace, _, ma = profiles["plain"]
    run_cli("export", trace, "--csv", tmp_path / "t", check=0)
    rows = (tmp_path / "t" / "jit_peak.csv").read_text().splitlines()
    assert any("train_mlp.py" in r for r in rows)


def test_one_xplane_file_is_a_profile(profiles):
    files, _ = profile_files(profiles["plain"][0])
    doc = json.loads(run_cli("report", files[0], "--json", check=0).stdout)
    assert any(f["rule"] == "donate" for f in doc["findings"])


def _one_line_exit_2(proc, name: str, notes: int = 0):
    """Exit 2 and one line naming ``name`` (after the profile's ``notes``)."""
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 + notes and name in lines[-1] and "Traceback" not in proc.stderr, proc.stderr


def test_damaged_profiles_are_one_line_exit_2(profiles, tmp_path):
    whole = profile_files(profiles["plain"][0])[0][0].read_bytes()
    cut = tmp_path / "cut" / "host.xplane.pb"
    cut.parent.mkdir()
    cut.write_bytes(whole[: len(whole) // 2])
    empty = tmp_path / "empty.xplane.pb"
    empty.write_bytes(b"")
    junk = tmp_path / "junk.xplane.pb"
    junk.write_bytes(b"\xff" * 64)
    capture = tmp_path / "log" / "plugins" / "profile" / "2026_01_01_00_00_00"
    capture.mkdir(parents=True)
    for path, cmd in ((cut.parent, "report"), (cut, "show"), (empty, "report"), (junk, "report"),
                      (tmp_path / "log", "report"), (tmp_path / "log", "show")):
        _one_line_exit_2(run_cli(cmd, path), path.name)


# -- a memory profile: the events a TPU's profile holds, written into a copy of a real one (memory_profile.py)

sys.path.insert(0, str(SCRIPT.parent))
import memory_profile  # noqa: E402  (tests/fixtures/xprof/memory_profile.py)

MiB = 1 << 20


@pytest.fixture(scope="module")
def two_hosts(profiles, tmp_path_factory):
    """A capture of two hosts of four chips each; chip 3 of host b holds 64 MiB more."""
    real = profile_files(profiles["plain"][0])[0][0]
    capture = tmp_path_factory.mktemp("pod") / "plugins" / "profile" / "2026_01_01_00_00_00"
    series = {"a": memory_profile.write(real, capture / "a.xplane.pb"),
              "b": memory_profile.write(real, capture / "b.xplane.pb", extra={3: 64 * MiB})}
    return capture.parents[2], series


def _sum_peak(series) -> int:
    """The most bytes in use over all chips at one moment, from the events as written."""
    import bisect

    chips = [s for host in series.values() for s in host.values()]
    times = sorted({t for s in chips for t, _ in s})

    def at(s, t):
        i = bisect.bisect_right([u for u, _ in s], t) - 1
        return s[i][1] if i >= 0 else 0

    return max(sum(at(s, t) for s in chips) for t in times)


def _chip_peaks(series) -> dict:
    return {f"{h}/tpu:{c}": max(b for _, b in s) for h, host in series.items() for c, s in host.items()}


def test_a_memory_profile_per_host_and_chip(two_hosts):
    log, peaks = two_hosts
    run = load_profile_run(log)
    assert run.manifest["backend"] == "tpu" and len(run.manifest["devices"]) == 8
    stats = run.memory_stats
    got = {d: int(v) for d, v in stats[stats["key"] == "peak_bytes_in_use"].groupby("device")["value"].max().items()}
    assert got == _chip_peaks(peaks)
    # the live peak: the sum over the chips at the moment it is highest (chip b/3's events run one behind)
    assert int(run.snapshots["live_bytes"].max()) == _sum_peak(peaks)
    # the chip above the others, named
    (line,) = run.imbalance
    assert line.startswith("chip tpu:3 of host b peaks 64.00 MiB above the median")


def test_what_held_the_peak_by_line(two_hosts):
    log, peaks = two_hosts
    out = run_cli("show", log, "--process", "0", "--json", check=0)
    doc = json.loads(out.stdout)
    assert doc["totals"]["bytes"] == _sum_peak({"a": peaks["a"]})
    sites = {r["site"]: r["bytes"] for r in doc["rows"]}
    # each step's new params and momentum, made at train_mlp.py's lines 58 and 59, twice over at the peak
    assert any("train_mlp.py:59" in s for s in sites) and any("train_mlp.py:58" in s for s in sites)
    report = run_cli("report", log, check=0)
    assert "peaks 64.00 MiB above the median" in report.stderr and "no memory events" not in report.stderr


def test_check_on_a_memory_profile(two_hosts):
    log, peaks = two_hosts
    total = _sum_peak(peaks)
    assert run_cli("check", log, "--max-peak", f"{total + 1}").returncode == 0
    assert run_cli("check", log, "--max-peak", f"{total - 1}").returncode == 1


def test_a_two_process_job_one_xplane_each(tmp_path):
    """Two jax.distributed processes on 127.0.0.1, each profiling its step
    (one .xplane.pb each); on one machine both would be named after it, so
    each writes its own trace and the capture directory holds them as two
    hosts would."""
    import shutil
    import subprocess

    from test_multiprocess import free_port

    port = free_port()
    procs = [subprocess.Popen([sys.executable, str(SCRIPT), str(tmp_path / f"p{i}"), "--process", str(i), "--of", "2",
                               "--port", str(port), *(["--donate"] if i == 1 else [])], env=cpu_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
    capture = tmp_path / "job" / "plugins" / "profile" / "2026_01_01_00_00_00"
    capture.mkdir(parents=True)
    for i in range(2):
        shutil.copy(profile_files(tmp_path / f"p{i}")[0][0], capture / f"host{i}.xplane.pb")
    job = tmp_path / "job"
    whole = load_profile_run(job)
    assert [d["name"] for d in whole.manifest["devices"]] == ["host0/cpu:0", "host1/cpu:0"]
    assert whole.chips["host"].tolist() == ["host0", "host1"]
    for i in range(2):
        ma = json.loads((tmp_path / f"p{i}.json").read_text())
        run = load_profile_run(job, host=i)
        fid, p = _step(run)
        assert (int(p["argument_bytes"]), int(p["output_bytes"]), int(p["alias_bytes"]), int(p["temp_bytes"])) == (
            ma["argument"], ma["output"], ma["alias"], ma["temp"])
        # each chip's peak without a memory profile: the largest program that ran in the capture, its step's
        assert int(whole.chips.loc[i, "peak_bytes"]) == int(p["peak_bytes"])
        doc = json.loads(run_cli("report", job, "--process", i, "--json", check=0).stdout)
        donate = [f for f in doc["findings"] if f["rule"] == "donate"]
        assert bool(donate) == (i == 0)  # process 1 donated its step
    out = run_cli("report", job, check=0)
    assert "host0/cpu:0" in out.stdout or "train_step" in out.stdout
    assert sum("no memory events" in line for line in out.stderr.splitlines()) == 1


def test_a_run_directory_with_a_trace_inside_is_a_run(profiles, tmp_path):
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(profiles["plain"][1], run_dir)
    shutil.copytree(profiles["plain"][0] / "plugins", run_dir / "plugins")
    doc = json.loads(run_cli("report", run_dir, "--json", check=0).stdout)
    assert doc["summary"]["snapshots"] > 0  # the run's own snapshots: read as the run, not as the trace in it


def test_a_damaged_memory_event_is_one_line_exit_2(tmp_path):
    """A stat that is no XStat inside a memory event (bytes made by hand: the damage)."""
    from jaxmemprof.xprof import xplane_pb2 as pb

    space = pb.XSpaceLean()
    plane = space.planes.add(id=1, name="/host:CPU")
    plane.event_metadata[1].CopyFrom(pb.XEventMetadata(id=1, name="MemoryAllocation"))
    plane.stat_metadata[1].CopyFrom(pb.XStatMetadata(id=1, name="bytes_allocated"))
    event = plane.lines.add(id=1, name="allocations").events.add(metadata_id=1, offset_ps=1)
    event.stats.append(pb.XStat(metadata_id=1, int64_value=8).SerializeToString())
    event.stats.append(b"\x0a\xff")  # a field that says 255 bytes follow, and none do
    bad = tmp_path / "host.xplane.pb"
    bad.write_bytes(space.SerializeToString())
    _one_line_exit_2(run_cli("report", bad), "is damaged")

"""A profile recorded on a TPU v5e chip (the lane's GPT step, undonated and
donated: tests/fixtures/xprof/README.md), read without a chip: its programs,
XLA's figures of the step against `jaxmemprof run`'s of the same program on
the same chip, the donation finding, and the chip's counters."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from conftest import run_cli

from jaxmemprof.store.xprof import load_profile_run

FIXTURES = Path(__file__).parent / "fixtures" / "xprof"


@pytest.fixture(scope="module")
def tpu(tmp_path_factory):
    out = {}
    for name in ("gpt8", "gpt8-donated"):
        capture = tmp_path_factory.mktemp(name) / "plugins" / "profile" / "2026_12_07_06_16_55"
        capture.mkdir(parents=True)
        (capture / "runsc.xplane.pb").write_bytes(gzip.decompress((FIXTURES / f"tpu-{name}.xplane.pb.gz").read_bytes()))
        out[name] = (capture.parents[2], json.loads((FIXTURES / f"tpu-{name}.run.json").read_text()))
    return out


def _step(run):
    fn = run.jit.functions
    fid = int(fn.loc[fn["name"] == "train_step", "function_id"].iloc[0])
    return fid, run.jit.programs[run.jit.programs["function_id"] == fid].iloc[0]


@pytest.mark.parametrize("name", ["gpt8", "gpt8-donated"])
def test_the_step_on_the_chip_is_runs(tpu, name):
    path, ran = tpu[name]
    run = load_profile_run(path)
    assert run.manifest["backend"] == "tpu" and [d["name"] for d in run.manifest["devices"]] == ["tpu:0"]
    fid, p = _step(run)
    # XLA's allocations of the step, as `run` read them from the executable on the same chip
    assert {k: int(p[k]) for k in ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes")} == {
        k: ran[k] for k in ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes")}
    counts = run.jit.counts
    assert int(counts.loc[counts["function_id"] == fid, "calls"].iloc[0]) == 3  # the device plane's XLA Modules line
    # the step's call peak (XLA's allocations, the donated ones once) against the chip's own peak after `run`
    # (peak_bytes_in_use + peak_bytes_reserved, docs/tpu.md): 1.8 % and 2.2 % above it (docs/xprof.md)
    call = int(p["argument_bytes"]) + int(p["output_bytes"]) - int(p["alias_bytes"]) + int(p["temp_bytes"])
    chip = ran["counters"]["peak_bytes_in_use"] + ran["counters"]["peak_bytes_reserved"]
    assert 0 <= call - chip < 0.03 * chip
    # XLA's swept peak of the step: run's (read from XLA:TPU's own live ranges in its dump), to the byte; the
    # program wraps 161 slices in async computations (async-start/async-done) that the reader follows
    assert (int(p["peak_bytes"]), int(p["length"])) == (ran["peak_bytes"], ran["length"])


def test_the_donation_finding_on_the_chip(tpu):
    plain = json.loads(run_cli("report", tpu["gpt8"][0], "--json", check=0).stdout)
    (donate,) = [f for f in plain["findings"] if f["rule"] == "donate"]
    assert "params" in json.dumps(donate) and "opt_state" in json.dumps(donate)
    # the bytes an output can take, by JAX's matching: what XLA aliased when the same step was compiled donated
    # on the chip, to 12,796 bytes of 1.1 GB (XLA aliased a few small leaves more than JAX's matching pairs)
    aliased = tpu["gpt8-donated"][1]["alias_bytes"]
    assert abs(donate["saving_bytes"] - aliased) < 1e-4 * aliased
    donated = json.loads(run_cli("report", tpu["gpt8-donated"][0], "--json", check=0).stdout)
    assert not [f for f in donated["findings"] if f["rule"] == "donate"]


def test_the_step_by_line_on_the_chip(tpu):
    out = json.loads(run_cli("show", tpu["gpt8"][0], "--json", check=0).stdout)
    sites = " ".join(r["site"] for r in out["rows"])
    assert "gpt.py" in sites and "params" in sites  # the user's lines, the arguments by JAX's names


@pytest.fixture(scope="module")
def tpu_memory(tmp_path_factory):
    capture = tmp_path_factory.mktemp("gpt8-memory") / "plugins" / "profile" / "2026_12_07_06_11_53"
    capture.mkdir(parents=True)
    (capture / "runsc.xplane.pb").write_bytes(gzip.decompress((FIXTURES / "tpu-gpt8-memory.xplane.pb.gz").read_bytes()))
    return capture.parents[2], json.loads((FIXTURES / "tpu-gpt8-memory.memory_stats.json").read_text())


def test_the_chips_peak_from_its_memory_events_is_memory_stats(tpu_memory):
    path, stats = tpu_memory
    run = load_profile_run(path)
    chip = stats["peak_bytes_in_use"] + stats["peak_bytes_reserved"]  # the chip's peak (docs/tpu.md)
    assert int(run.snapshots["live_bytes"].max()) == chip  # the runtime's bytes_allocated + bytes_reserved, at its top
    ms = run.memory_stats
    assert int(ms.loc[ms["key"] == "peak_bytes_in_use", "value"].max()) == chip
    out = run_cli("report", path, check=0)
    assert "no memory events" not in out.stderr
    # the live peak's bytes are the profile's memory events' (no arrays in a profile), not queued steps
    line = next(x for x in out.stdout.splitlines() if "at the live peak" in x and "memory events" in x)
    assert "queued" not in line and "unattributed" not in line
    doc = json.loads(run_cli("report", path, "--json", check=0).stdout)
    assert doc["summary"]["peak_unattributed_what"] == "profile"
    assert run_cli("check", path, "--max-peak", str(chip)).returncode == 0
    assert run_cli("check", path, "--max-peak", str(chip - 1)).returncode == 1

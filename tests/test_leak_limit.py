"""A leak's projection stops where the run's devices are full: "runs out in
about N steps" from the device's size (the counters' ``bytes_limit``, or
``report --device-memory``), and for a run that ran out, what the leak held
then (issue 64: "saves 250.00 GiB over 1000 more steps" on a 15.75 GiB chip
that ran out at step 61)."""

from __future__ import annotations

import json
import math

from conftest import REPO, run_cli

TPU = REPO / "tests" / "fixtures" / "tpu"
MLP = REPO / "sample_runs" / "runs" / "mlp-leak"


def _leak(doc: dict) -> dict:
    return next(f for f in doc["findings"] if f["rule"] == "leak")


def test_a_run_that_ran_out_saves_what_the_leak_held_then_not_a_projection_past_the_chip():
    doc = json.loads(run_cli("report", TPU / "leak-until-oom", "--json", check=0).stdout)
    leak = _leak(doc)
    facts = leak["facts"]
    stats = json.loads((TPU / "leak-until-oom-python.json").read_text())
    assert facts["device_limit_bytes"] == stats["bytes_limit"]
    assert facts["steps_to_limit"] == 0
    per_step = facts["growth_bytes_per_step"]
    assert per_step == 256 * 2**20
    # The program kept one 256 MiB output a step and ran out with 61 kept: fixing it frees all but one.
    assert leak["saving_bytes"] == 61 * per_step - per_step
    assert leak["saving_bytes"] < stats["bytes_limit"]
    text = run_cli("report", TPU / "leak-until-oom", check=0).stdout
    assert "over 1000 more steps" not in text
    assert "when the device ran out" in text


def test_the_projection_stops_at_the_device_memory_and_says_in_how_many_steps():
    free = json.loads(run_cli("report", MLP, "--json", check=0).stdout)
    unbounded = _leak(free)
    per_step = unbounded["facts"]["growth_bytes_per_step"]
    assert unbounded["facts"]["steps_to_limit"] is None  # a CPU run: no device size known
    assert unbounded["saving_bytes"] == round(per_step * 1000)
    device = 15 * 2**20
    doc = json.loads(run_cli("report", MLP, "--json", "--device-memory", str(device), check=0).stdout)
    leak = _leak(doc)
    room = device - doc["summary"]["peak_bytes"]
    assert leak["facts"]["device_limit_bytes"] == device
    assert leak["facts"]["steps_to_limit"] == math.ceil(room / per_step)
    assert leak["saving_bytes"] == room
    text = run_cli("report", MLP, "--device-memory", str(device), check=0).stdout
    assert "until the device's 15.00 MiB runs out" in text

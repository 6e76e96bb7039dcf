"""analysis/counters.py on runs recorded on a real TPU v5e chip
(tests/fixtures/tpu/): the chip's counters read by the run's backend beside
the true peak, checked against the memory_stats() the program itself read
(NAME.json) and XLA's figures of the call (the oracle: the run's Peaks)."""

from __future__ import annotations

import json

from conftest import REPO

from jaxmemprof.analysis.counters import chip_counters
from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.options import Options
from jaxmemprof.store.reader import load_run

TPU = REPO / "tests" / "fixtures" / "tpu"


def _counters(name: str):
    run = load_run(TPU / name)
    ar = attribute(run, Options())
    p = ar.peaks
    return chip_counters(ar, p.call, p.device_bytes, p.busiest_live_bytes), p.call, p.device_bytes


def test_gpt8_counters_and_the_generations_of_queued_outputs():
    c, inside, need = _counters("gpt8")
    stats = json.loads((TPU / "gpt8.json").read_text())
    assert c["chip_peak_bytes"] == stats["peak_bytes_in_use"] + stats["peak_bytes_reserved"] == 16_902_839_296
    assert c["needed_bytes"] == need and c["over_needed_bytes"] == c["chip_peak_bytes"] - need
    f = inside.figures
    assert c["temporaries_bytes"] == f["temp_bytes"] + f["generated_code_bytes"]
    assert c["outputs_per_call_bytes"] == f["output_bytes"] - f["alias_bytes"] == 1_956_153_344
    assert c["queued_generations"] == 2 and c["queued_function"] == "train_step"
    assert c["arrays_needed_bytes"] + c["queued_bytes"] + c["other_bytes"] == c["peak_in_use_bytes"]


def test_donated_state_has_no_generation_to_count():
    c, inside, need = _counters("gpt16-donated")
    assert inside.figures["alias_bytes"] > 0.95 * inside.figures["output_bytes"]
    assert c["queued_generations"] == 0 and c["queued_bytes"] == 0 and c["outputs_per_call_bytes"] == 0
    assert abs(c["over_needed_share"]) < 0.002


def test_a_cpu_run_has_no_counters():
    run = load_run(REPO / "sample_runs" / "runs" / "mlp-leak")
    assert chip_counters(attribute(run), None, None) is None

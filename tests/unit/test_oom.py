"""analysis/oom.py on runs recorded on a real TPU v5e chip
(tests/fixtures/tpu/): the out-of-memory answer of a step XLA:TPU refused
at its first call, read from the run's events, against the message the
chip gave (its README quotes it); and no answer for a run that fitted."""

from __future__ import annotations

from pathlib import Path

from jaxmemprof import load_run
from jaxmemprof.analysis.oom import out_of_memory, target_refusals

TPU = Path(__file__).resolve().parent.parent / "fixtures" / "tpu"


def test_a_step_the_chip_refused_is_answered_with_xlas_figures():
    run = load_run(TPU / "gpt32-oom-fit")
    answer = out_of_memory(run)
    assert answer is not None and answer.readable
    # the chip's own words: HLO temporaries (30.01G) exceed available HBM (15.75G)
    assert "30.01G" in answer.message and "15.75G" in answer.message
    assert answer.reason.needed_bytes > answer.reason.available_bytes
    assert answer.function == "train_step"
    # what fits, compiled on the chip at the end of the run: a batch under the 32 that failed
    assert answer.fit is not None and answer.batch == 32
    assert target_refusals(run) == []


def test_a_run_that_fitted_has_no_answer():
    assert out_of_memory(load_run(TPU / "gpt16-donated")) is None

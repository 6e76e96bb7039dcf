"""The TPU rules on runs recorded on a real TPU v5e chip (tests/fixtures/tpu/,
its README.md: JAX 0.10.2, bytes_limit 16,909,336,064 B; each NAME.json the
chip's own memory_stats() read by the program after its last step). CI has no
TPU: these runs, read by the real reader and report, hold fit, the plan, the
chip's counters and the TPU advice to what the chip did. The fixture runs are
only read (report writes nothing into a run; the HTML page goes to tmp)."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from conftest import REPO, run_cli

TPU = REPO / "tests" / "fixtures" / "tpu"
LIMIT = 16_909_336_064  # the v5e chip's bytes_limit
GiB = 1024**3


def _report(name: str, *args) -> dict:
    proc = run_cli("report", TPU / name, "--json", *args, check=0)
    return json.loads(proc.stdout)


def _text(name: str, *args) -> str:
    return run_cli("report", TPU / name, *args, check=0).stdout


def _stats(name: str) -> dict:
    return json.loads((TPU / f"{name}.json").read_text())


def _fit(doc: dict) -> dict:
    return next(f for f in doc["findings"] if f["rule"] == "fit")


@pytest.mark.parametrize("name", ["gpt8", "gpt16-donated"])
def test_the_chips_counters_are_shown_equal_to_what_the_program_read(name):
    """summary['chip'] is the chip's own memory_stats(): peak_bytes_in_use +
    peak_bytes_reserved, the very figures the program read after its last
    step (NAME.json), of its bytes_limit."""
    chip = _report(name)["summary"]["chip"]
    stats = _stats(name)
    assert chip["backend"] == "tpu" and chip["device"] == "tpu:0"
    assert chip["peak_in_use_bytes"] == stats["peak_bytes_in_use"]
    assert chip["peak_reserved_bytes"] == stats["peak_bytes_reserved"]
    assert chip["chip_peak_bytes"] == stats["peak_bytes_in_use"] + stats["peak_bytes_reserved"]
    assert chip["bytes_limit"] == stats["bytes_limit"] == LIMIT
    assert chip["upper_bound"] is True
    text = _text(name)
    total = stats["peak_bytes_in_use"] + stats["peak_bytes_reserved"]
    assert f"chip's counters {total / GiB:.2f} GiB of 15.75 GiB ({100 * total / LIMIT:.2f} %) on tpu:0" in text
    assert "(peak_bytes_in_use)" in text and "(peak_bytes_reserved), an upper bound" in text


def test_gpt8_names_the_outputs_of_queued_steps():
    """Undonated, not synced: the counters reach 99.96 % of the chip while the
    step needs 12.09 GiB; the difference is 2 more generations of
    train_step's outputs (1.82 GiB each) kept for queued steps, and the TPU
    advice (donation, an in-flight cap, a sync) says what bounds it."""
    doc = _report("gpt8")
    s, chip = doc["summary"], doc["summary"]["chip"]
    assert round(s["true_peak_bytes"] / GiB, 2) == 12.09
    assert chip["needed_bytes"] == s["true_peak_bytes"]
    assert chip["share_of_limit"] >= 0.999
    assert chip["queued_function"] == "train_step" and chip["queued_generations"] == 2
    assert chip["queued_bytes"] == 2 * chip["outputs_per_call_bytes"]
    assert round(chip["outputs_per_call_bytes"] / GiB, 2) == 1.82
    # the step's arrays + 2 generations + padding = what the chip's arrays counter reached
    assert chip["arrays_needed_bytes"] + chip["queued_bytes"] + chip["other_bytes"] == chip["peak_in_use_bytes"]
    assert abs(chip["other_bytes"]) < 0.05 * chip["outputs_per_call_bytes"]
    queued = [f for f in doc["findings"] if f["rule"] == "queued-steps"]
    assert len(queued) == 1 and queued[0]["severity"] == "medium"
    assert "max_inflight_computations" in queued[0]["fix"] and "Donate train_step" in queued[0]["fix"]
    assert "block_until_ready" in queued[0]["fix"]
    text = _text("gpt8")
    assert re.search(r"beyond the step's need \(the true peak 12\.09 GiB\): \+3\.65 GiB: 2 more generations of "
                     r"train_step's outputs, 3\.64 GiB \(1\.82 GiB each\), kept for steps queued ahead of the chip "
                     r"\(async dispatch\)", text), text
    assert "queued-steps" in text
    # no GPU allocator rule, variable or pool on the chip
    assert not [f for f in doc["findings"] if f["rule"].startswith("allocator-")]
    assert "XLA_PYTHON_CLIENT" not in text and "XLA_CLIENT_MEM_FRACTION" not in text and "pool" not in text


def test_gpt16_donated_fits_and_the_needed_peak_is_within_2_percent_of_the_counters():
    """Donated at batch 16 the step ran (15.82 of 16.91 GB by the chip's
    counters): it fits the chip's bytes_limit (the GPU's pool rule said
    "cannot fit" at 99 %), and the true peak is within 2 % of the counters
    (+0.13 %); no generation of queued outputs (donated)."""
    doc = _report("gpt16-donated", "--device-memory", LIMIT)
    chip = doc["summary"]["chip"]
    need = doc["summary"]["true_peak_bytes"]
    assert abs(need - chip["chip_peak_bytes"]) / chip["chip_peak_bytes"] < 0.02
    assert abs(need - chip["chip_peak_bytes"]) / chip["chip_peak_bytes"] < 0.002  # measured: +0.13 %
    assert chip["queued_generations"] == 0
    assert not [f for f in doc["findings"] if f["rule"] == "queued-steps"]
    fit = _fit(doc)
    assert fit["severity"] == "info"
    assert "fits a 15.75 GiB device" in fit["message"] and "no pool" in fit["message"]
    assert "pool" not in fit["message"].replace("no pool", "")
    text = _text("gpt16-donated", "--device-memory", LIMIT)
    assert "is 0.13 % above them" in text
    assert "cannot fit" not in text and "XLA_CLIENT_MEM_FRACTION" not in text
    # and a smaller chip does not hold it: the same rule says so
    small = _fit(_report("gpt16-donated", "--device-memory", "14GiB"))
    assert small["severity"] == "high" and "cannot fit" in small["message"]


def test_the_plan_on_the_chip_uses_the_whole_chip_not_a_pool():
    """mlp-no-donation was recorded with --plan on the chip: its plan is found
    for the chip's own bytes_limit (no --device-memory asked), by the TPU's
    rule; a device between two compiled batches' peaks splits them where the
    GPU's pool would not (40 MiB: 0.75 x 40 < any peak + 64 MiB)."""
    doc = _report("mlp-no-donation")
    plan = doc["plan"]
    assert plan["device_bytes"] == LIMIT
    text = _text("mlp-no-donation")
    assert "(the chip's own bytes_limit)" in text and "within the whole chip" in text
    assert "default pool" not in text and "5 % and 64 MiB" not in text
    text40 = _text("mlp-no-donation", "--device-memory", "40MiB")
    assert re.search(r"for a 40\.00 MiB device \(tpu:0\): largest batch 4,096 \(compiled, and fits; 8,192", text40)


def test_a_batch_xla_tpu_refuses_in_the_plan_does_not_fit_and_is_no_failure():
    """plan-chip was recorded with --plan --plan-device-memory 15.75GiB on the
    chip (a 2-layer GPT, donated): XLA:TPU refused the search's compiles at
    batches 68 and 73 (RESOURCE_EXHAUSTED). That is the chip's answer, "it
    does not fit", not a failed compile: plan.csv's rows say XLA's words and
    fits false, the JSON's refused_at names the batches, and the report says
    they were refused, never that a compile failed. The largest batch is the
    largest that compiled below them, and the next is the refused one. The
    chip then agreed: the program at that batch ran (plan-chip-at-best.json,
    its counters within bytes_limit), and at the next the chip refused it
    (plan-chip-next.txt, XLA's words on the chip)."""
    doc = _report("plan-chip")
    plan = doc["plan"]
    points = [p for p in plan["points"] if p["variant"] == "recorded"]
    refused = [p for p in points if p["error"]]
    assert [p["batch"] for p in refused] == [68, 73], refused
    assert all("RESOURCE_EXHAUSTED" in p["error"] and p["fits"] is False for p in refused)
    (f,) = plan["functions"]
    assert f["refused_at"] == [68, 73] and f["failed"] == 0, f
    fitting = [p["batch"] for p in points if p["fits"]]
    best = max(fitting)
    assert best == 67 and all(p["peak_bytes"] <= LIMIT for p in points if p["fits"])
    (model,) = [m for m in plan["models"] if m["variant"] == "recorded"]
    assert (model["largest_batch"], model["next_batch"]) == (best, 68)
    text = _text("plan-chip")
    assert "refused by XLA as too large for the device at batches 68, 73: they do not fit" in text
    assert "failed" not in text.split("Plan by batch", 1)[1].split("\n\n", 1)[0]
    assert f"largest batch {best} (compiled, and fits; 68, the next one, XLA refused as too large" in text
    # What the chip did with the answer and the batch after it.
    ran = json.loads((TPU / "plan-chip-at-best.json").read_text())
    assert ran["peak_bytes_in_use"] + ran["peak_bytes_reserved"] <= ran["bytes_limit"] == LIMIT
    assert "RESOURCE_EXHAUSTED" in (TPU / "plan-chip-next.txt").read_text()


def test_the_html_page_shows_the_counters(tmp_path):
    page = tmp_path / "gpt8.html"
    run_cli("report", TPU / "gpt8", "--html", page, check=0)
    html = page.read_text()
    assert "chip's counters 15.74 GiB of 15.75 GiB (99.96 %) on tpu:0" in html
    assert "2 more generations of train_step's outputs" in html


def test_the_out_of_memory_run_still_reads(tmp_path):
    """gpt32-oom (XLA:TPU refused the step at compile): the counters are read; no queued-steps finding."""
    doc = _report("gpt32-oom")
    chip = doc["summary"]["chip"]
    assert chip["peak_in_use_bytes"] <= chip["bytes_limit"] == LIMIT
    assert not [f for f in doc["findings"] if f["rule"] == "queued-steps"]


def test_a_copy_reads_the_same(tmp_path):
    """The fixtures are only read: a copy gives the same counters."""
    copy = tmp_path / "gpt8"
    shutil.copytree(TPU / "gpt8", copy)
    doc = json.loads(run_cli("report", copy, "--json", check=0).stdout)
    assert doc["summary"]["chip"] == _report("gpt8")["summary"]["chip"]


def test_the_tpu_findings_facts_are_their_rules():
    """queued-steps (gpt8) and the TPU's fit (gpt16-donated, both cases) write
    their Rule's facts, in order, each with a meaning (docs/columns.md)."""
    from test_columns_doc import same_facts

    from jaxmemprof.analysis.advice.capacity import will_it_fit
    from jaxmemprof.analysis.attributed import attribute
    from jaxmemprof.analysis.options import Options
    from jaxmemprof.analysis.rules.allocator import queued_findings
    from jaxmemprof.analysis.rules.capacity import fit_findings
    from jaxmemprof.store.reader import load_run

    ar = attribute(load_run(TPU / "gpt8"), Options())
    [queued] = queued_findings(ar)
    same_facts(queued)
    assert queued.facts["generations"] == 2 and queued.saving_bytes is None  # the need is not lowered by it
    ar = attribute(load_run(TPU / "gpt16-donated"), Options())
    for device, case in ((LIMIT, "fits"), (14 * GiB, "cannot")):
        fit = will_it_fit(ar, device, 15_844_778_496)
        assert fit.case == case and fit.backend == "tpu" and fit.settings == {}
        f = fit_findings(fit)[0]
        same_facts(f, ("fit", ""))


def test_runs_closing_lines_show_the_counters():
    """run's closing lines (render/text.py render_closing, given the report's
    answer as cli/record.py gives it) carry the counters and the queued steps."""
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from jaxmemprof.analysis.attributed import attribute
    from jaxmemprof.analysis.options import Options
    from jaxmemprof.analysis.report import build_report
    from jaxmemprof.render.text import render_closing
    from jaxmemprof.store.reader import load_run

    rep = build_report(attribute(load_run(TPU / "gpt8"), Options()))
    s = rep.headline
    ov = SimpleNamespace(duration_s=s["duration_s"], sampling_s=s["sampling_cpu_s"], ended_by="exit", exit_status=0,
                         holder_search_s=0.0, holder_searches=0, snapshots=s["snapshots"], stretched=None,
                         peak_snapshot=s["peak_snapshot"], peak_sites=rep.peak_sites, peak_bytes=s["peak_bytes"],
                         peak_t=s["peak_t"], peak_holders={}, peak_holders_at=None, program_thread=None,
                         holders_unread=None, outside_jit="")
    out = io.StringIO()
    render_closing(ov, Console(file=out, width=400, no_color=True), target="gpt.py", run_dir="gpt8", warnings=[],
                   answer=rep.answer)
    text = out.getvalue()
    assert "true peak 12.09 GiB" in text
    assert "chip's counters 15.74 GiB of 15.75 GiB (99.96 %) on tpu:0" in text
    assert "2 more generations of train_step's outputs" in text


def test_the_unattributed_bytes_are_said_to_be_the_queued_steps():
    """gpt8's live peak: 5.35 GiB in use by the chip beyond the arrays Python sees: the runtime's, for queued steps."""
    assert ("unattributed at the live peak (in use by the allocator, not by live arrays): 5.35 GiB: buffers the "
            "runtime holds for steps queued ahead of the chip") in _text("gpt8")
    assert "steps queued ahead of the chip" not in _text("gpt16-donated")


@pytest.mark.parametrize("name, spelling", [
    ("nnx_optimizer", 'nnx.jit(donate_argnames=("model", "optimizer"))'),
    ("equinox_optax", 'donate="all-except-first"'),
    ("linen_trainstate", "donate_argnums=(0,)"),
])
def test_the_libraries_steps_on_the_chip(name, spelling):
    # flax nnx, equinox and flax linen with optax, run on the chip (the lane's
    # sample_runs/libraries/*.py --width 65536 --steps 40): the chip's own
    # peak is the step's need plus whole generations of the step's outputs
    # queued ahead of the chip, within 1 % (a wrong need or a wrong count of
    # generations, 204.75 MiB each, would leave far more); the donation fix
    # is spelled as the library writes it.
    doc = _report(name)
    chip = doc["summary"]["chip"]
    assert chip["backend"] == "tpu" and chip["bytes_limit"] == LIMIT
    generations = chip["queued_generations"]
    assert chip["queued_bytes"] == generations * chip["outputs_per_call_bytes"]
    rest = chip["chip_peak_bytes"] - chip["needed_bytes"] - chip["queued_bytes"]
    assert abs(rest) < 0.01 * chip["chip_peak_bytes"], chip
    donate = next(f for f in doc["findings"] if f["rule"] == "donate")
    assert spelling in donate["fix"], donate["fix"]


def test_a_fast_loop_after_the_chips_slow_start_shows_its_leak():
    # train_mlp.py --leak --steps 1500 on the chip: the chip opens in about
    # 9 s, then 1,500 steps run in about 9 s, each keeping its losses (1,024
    # float32: 4 KiB) in a list. The snapshots keyed to its steps (44 in all)
    # find the line and its 4 KiB a step.
    doc = _report("mlp-leak-1500")
    assert len(doc["timeline"]) >= 30
    leak, = doc["leaks"]
    assert leak["line"] == 82 and leak["file"].endswith("train_mlp.py")
    assert leak["growth_bytes_per_step"] == 4096


@pytest.mark.parametrize("name", ["mlp-leak-1500", "gpt8", "equinox_optax"])
def test_no_part_exceeds_its_whole(name):
    # One measure of bytes: the sites that held the live peak are the
    # profile's buffers, as the live bytes are; the executables' code (3.57
    # MiB at mlp-leak-1500's peak, attributed to the line that compiled it)
    # once made the step's line 20,190,208 B of a 20,137,472 B whole.
    doc = _report(name, "--top", "50")
    peak = doc["summary"]["peak_snapshot"]
    [row] = [r for r in doc["timeline"] if r["snapshot"] == peak]
    sites = doc["peak_sites"]
    assert sum(s["bytes"] for s in sites) == row["live_bytes"] == doc["summary"]["peak_bytes"]
    assert sum(s["count"] for s in sites) == row["buffers"]


def test_the_report_says_how_much_the_step_snapshots_slowed_a_fast_loop():
    """mlp-leak-1500 (1,500 steps of about 1 ms on the chip, 36 snapshots at its steps): the snapshots taken in
    the program's thread at its steps took about half of the loop's time. The figure is their wall time over
    the time from the first marker to the last, as the journal has them, and the report says it; gpt16-donated
    took none at its steps (recorded before they were keyed to steps) and says nothing of it."""
    import sqlite3

    with sqlite3.connect(f"file:{TPU / 'mlp-leak-1500' / 'journal.sqlite'}?mode=ro", uri=True) as db:
        (at_steps,) = db.execute("SELECT sum(wall_s) FROM snapshots WHERE trigger = 'step'").fetchone()
        (span,) = db.execute("SELECT max(t_mono) - min(t_mono) FROM markers").fetchone()
    share = _report("mlp-leak-1500")["summary"]["step_snapshots_share"]
    assert share == pytest.approx(at_steps / span, abs=1e-4) and share > 0.4, (share, at_steps, span)
    said = f"the snapshots at its steps took {share:.0%} of the time between its first and last marked step"
    assert said in _text("mlp-leak-1500")
    assert _report("gpt16-donated")["summary"]["step_snapshots_share"] is None
    assert "the snapshots at its steps took" not in _text("gpt16-donated")


def _chip_peak(stats_file) -> int:
    stats = json.loads(stats_file.read_text())
    return stats["peak_bytes_in_use"] + stats["peak_bytes_reserved"]


def test_the_donated_vits_saving_is_the_chips_fall():
    """The flax linen ViT (benchmarks/tpu/vit.py --batch 24: nn.scan, a
    TrainState, the module-level `params` its first state shares) recorded
    under run on the chip, and the chip's own counters of the program under
    python undonated and donated (vit-chip/, the lane's vit parts). The
    undonated program's peak varies from run to run (the runtime frees a
    step's inputs after the next step's outputs may be allocated); given
    0.5 s after each synced step (--settle 0.5) it is one figure in every
    run. The donation's saving run says is within 5 % of the chip's fall
    from that figure (issue 64's Done-when), and no plain run peaked
    below it."""
    chips = TPU / "vit-chip"
    settled = {_chip_peak(f) for f in chips.glob("vit-settled-python*.json")}
    plain = [_chip_peak(f) for f in chips.glob("vit-python*.json")]
    assert len(settled) == 1 and len(plain) == 3
    [before] = settled
    assert min(plain) >= before and max(plain) > before
    fall = before - _chip_peak(chips / "vit-donated-python.json")
    doc = _report("vit")
    donate = next(f for f in doc["findings"] if f["rule"] == "donate")
    assert "(compiled)" in donate["saves"]
    assert abs(donate["saving_bytes"] - fall) <= 0.05 * fall, (donate["saving_bytes"], fall)
    # under run, the chip's peak was the settled figure: the step's snapshots gave the frees their time
    assert doc["summary"]["chip"]["chip_peak_bytes"] == before == _chip_peak(TPU / "vit.json")


def test_the_rest_beyond_the_need_is_first_the_operations_outside_jit_where_they_ran():
    """On the chip, jax's mnist_classifier (its accuracy unjitted, between the epochs' steps) peaked at
    1.85 GiB in use while the true peak, a snapshot's, was 255.93 MiB: the 1.60 GiB beyond it was what
    the accuracy pass held, not padding. Where the report names operations outside jit, the rest beyond
    the need is said to be theirs first (the ViT's own residue, 12.10 MiB, stands in for it here)."""
    from jaxmemprof.analysis.attributed import attribute
    from jaxmemprof.analysis.options import Options
    from jaxmemprof.analysis.report import build_report
    from jaxmemprof.render.answer import counters_lines
    from jaxmemprof.store.reader import load_run

    a = build_report(attribute(load_run(TPU / "vit"), Options())).answer
    plain = counters_lines(a)[-1]
    assert plain.endswith("(-12.10 MiB): padding and small buffers"), plain
    named = counters_lines(a, "dot, add at mnist.py:20 (accuracy)")[-1]
    assert named.endswith("(-12.10 MiB): what operations outside jit held (named below), padding and small buffers")

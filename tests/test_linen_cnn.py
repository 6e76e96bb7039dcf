"""A flax linen CNN whose ``variables`` the program keeps (tests/scripts/
linen_cnn.py; issue 64, items 2 and 3): the donation's saving is the fixed
program's fall however the first call's inputs were told, and the plan's
bytes outside the call hold the kept ``variables`` (the program prints
their bytes: the oracle)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from conftest import cli_batch

from jaxmemprof.analysis.advice.plan import build_plan, fits_by_default
from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.store.reader import load_run
from jaxmemprof.units import parse_size

SCRIPT = Path(__file__).parent / "scripts" / "linen_cnn.py"


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    """The CNN at batch 32 recorded as it is (with --plan at its own batch)
    and with the donation the advice names (``--donate``), at once."""
    d = tmp_path_factory.mktemp("cnn")
    # (--verify-seconds: the donation's compiles of both signatures, however loaded the machine)
    runs = cli_batch([["run", "-q", "--plan", "--plan-scales", "1", "--verify-seconds", "300", "-o", d / "as-is",
                       SCRIPT, "32", "8"],
                      ["run", "-q", "-o", d / "donated", SCRIPT, "32", "8", "--donate"]], d)
    assert all(r.returncode == 0 for r in runs), [r.stderr[-2000:] for r in runs]
    oracle = json.loads(runs[0].stdout.strip().splitlines()[-1])
    return d, oracle


def _report(d: Path, *names) -> list[dict]:
    procs = cli_batch([["report", d / name, "--json"] for name in names], d, workers=1)
    assert all(p.returncode == 0 for p in procs), [p.stderr for p in procs]
    return [json.loads(p.stdout) for p in procs]


def _saving(doc: dict) -> int:
    (donate,) = [f for f in doc["findings"] if f["rule"] == "donate"]
    return int(donate["saving_bytes"])


def test_the_saving_is_the_fixed_programs_fall_however_the_first_calls_inputs_were_told(cnn, tmp_path):
    d, _ = cnn
    # A run whose first call's fates were not told at the second call (the sampler held an array the program
    # dropped then: the cause of a saving that differed from run to run)
    told = tmp_path / "untold"
    shutil.copytree(d / "as-is", told)
    with sqlite3.connect(told / "journal.sqlite") as con:
        con.execute("UPDATE jit_calls SET inputs_alive = NULL WHERE call_index = 1")
    shutil.copytree(told, d / "untold", dirs_exist_ok=True)
    as_is, donated, untold = _report(d, "as-is", "donated", "untold")
    fall = as_is["summary"]["true_peak_bytes"] - donated["summary"]["true_peak_bytes"]
    assert fall > 0
    assert _saving(as_is) == fall
    assert _saving(untold) == fall


def test_the_plans_bytes_outside_the_call_hold_the_kept_variables(cnn):
    d, oracle = cnn
    plan = build_plan(attribute(load_run(d / "as-is")))
    recorded = plan.points[plan.points["variant"] == "recorded"]
    assert len(recorded)
    # the first parameters, kept by ``variables`` outside every call after the first (the step's own
    # arguments are XLA's; a few bytes of the loop's own beside them: its key)
    outside = recorded["live_outside_bytes"].astype(int)
    assert (outside >= oracle["variables_bytes"]).all(), outside.tolist()
    assert (outside <= oracle["variables_bytes"] + 1024).all(), outside.tolist()
    # donated, the first call deletes them (``variables`` holds the arrays it was passed): the donated row
    # takes them off, and nothing else; its peak is the donated program's, run at that batch
    donated = plan.points[(plan.points["variant"] == "donated") & (plan.points["batch"] == 32)].iloc[0]
    assert int(donated["live_outside_bytes"]) == int(outside.iloc[0]) - oracle["variables_bytes"]
    (fixed,) = _report(d, "donated")
    assert int(donated["peak_bytes"]) == fixed["summary"]["true_peak_bytes"]


DEVICE = "112MiB"  # by the fit rule (less 5 % and 64 MiB) 19.05 MiB: a batch of about 75 for this CNN


def test_the_plans_largest_batch_run_fits_by_the_rule_and_the_next_does_not(tmp_path):
    """The plan's search on a device the program's kept ``variables`` share
    with the step: the largest batch it names, run, has a true peak that
    fits the device by the rule, and the next batch it compiled does not
    (before, the bytes outside the call were those of the first call only,
    none: the plan named a batch whose run did not fit)."""
    planned = cli_batch([["run", "-q", "--plan", "--plan-device-memory", DEVICE, "-o", tmp_path / "plan", SCRIPT,
                          "16", "4"]], tmp_path)[0]
    assert planned.returncode == 0, planned.stderr[-2000:]
    plan = build_plan(attribute(load_run(tmp_path / "plan")))
    model = plan.models[plan.models["variant"] == "recorded"].iloc[0]
    best = int(model["largest_batch"])
    rec = plan.points[plan.points["variant"] == "recorded"]
    over = int(rec.loc[(rec["batch"] > best) & rec["peak_bytes"].notna(), "batch"].min())
    assert 16 < best < over
    runs = cli_batch([["run", "-q", "-o", tmp_path / "at-best", SCRIPT, str(best), "4"],
                      ["run", "-q", "-o", tmp_path / "at-over", SCRIPT, str(over), "4"]], tmp_path)
    assert all(r.returncode == 0 for r in runs), [r.stderr[-2000:] for r in runs]
    at_best, at_over = _report(tmp_path, "at-best", "at-over")
    device = parse_size(DEVICE)
    assert fits_by_default(at_best["summary"]["true_peak_bytes"], device)
    assert not fits_by_default(at_over["summary"]["true_peak_bytes"], device)


def test_the_other_arrays_are_named_by_what_holds_them(cnn):
    """The arrays live beside the step's call that are not its inputs (the
    role "other arrays") are the program's kept ``variables``: named as the
    program holds them, their bytes those the program counts."""
    from jaxmemprof.analysis.roles import OTHER, roles

    d, oracle = cnn
    r = roles(attribute(load_run(d / "as-is")))
    other = r.owners[(r.owners["role"] == OTHER) & (r.owners["owner"].str.startswith("variables["))]
    assert int(other["bytes"].sum()) == oracle["variables_bytes"]
    assert set(other["owner"]) >= {"variables['params']['Dense_0']['kernel']", "variables['params']['Conv_0']['bias']"}
    row = r.by_role[r.by_role["role"] == OTHER].iloc[0]
    assert row["largest_owner"] == "variables['params']['Dense_0']['kernel']"
    # the owners of each role add up to it, the named and the rest
    assert int(r.owners[r.owners["role"] == OTHER]["bytes"].sum()) == int(row["bytes"])

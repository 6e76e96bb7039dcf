"""The end's verifying compiles and the findings they back, on the shape of
issue 52's item 7: a flax.nnx model whose weights are replicated over a mesh
of 2 CPU devices (data parallelism), trained with optax through an
nnx.Optimizer, and evaluated through a jitted method of the model (its
weights are ``self.*`` there, ``model.*`` in the step).

- The compiles go to what could save most first (capture/jit/budget.py): the
  step's donation and its sharding before the method's sharding, and the
  method's donation, whose calls do not hold the run's true peak (it could
  save nothing of it: ``info``), last.
- The optimizer's step counter is made on one device (uncommitted) and the
  first call takes it so: that signature compiles (compiles.placed), so the
  sharding is not "refused" and each finding's saving is the fall that the
  fixed program shows (recorded with the fix applied as printed).
- One finding per array, named as the caller names it (``model.*``).
- An unverified finding never ranks above a verified one of its severity,
  and a sharding whose compile of the signature at the peak ran over the
  budget is said as not verified, not dropped.

One recording of the program (every compile made: --verify-seconds 300),
then the two fixed programs side by side."""

from __future__ import annotations

import json
import shutil
import sqlite3
from dataclasses import replace

import pytest

from conftest import cpu_env, in_parallel, run_cli, write_script

from jaxmemprof.analysis.advice.sharding import by_rule
from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.cells import leaves as leaves_of
from jaxmemprof.analysis.findings import ranked
from jaxmemprof.analysis.report import build_report
from jaxmemprof.analysis.rules.sharding import replication_findings
from jaxmemprof.render.findings import words
from jaxmemprof.store.reader import load_run

ENV = cpu_env(XLA_FLAGS="--xla_force_host_platform_device_count=2")

# FIX.json: {"shard": {owner: spec}} shards those weights where they are made; {"donate": [...]} donates.
PROGRAM = """
import json, os
import jax
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

mesh = Mesh(jax.devices(), ("data",))
fix = json.load(open("FIX.json")) if os.path.exists("FIX.json") else {}


class MLP(nnx.Module):
    def __init__(self, rngs):
        self.l1 = nnx.Linear(512, 1024, rngs=rngs)
        self.l2 = nnx.Linear(1024, 1024, rngs=rngs)
        self.l3 = nnx.Linear(1024, 16, rngs=rngs)

    def __call__(self, x):
        return self.l3(jax.nn.relu(self.l2(jax.nn.relu(self.l1(x)))))

    @nnx.jit
    def loss(self, x, y):
        return optax.softmax_cross_entropy_with_integer_labels(self(x), y).mean()


def owner(keys):  # a variable's path as jaxmemprof names it: model.l1.kernel
    names = [k.key for k in keys if isinstance(k, jax.tree_util.DictKey)]
    return "model" + "".join(f"[{n}]" if isinstance(n, int) else f".{n}" for n in names)


def replicate(model):  # data parallelism: each weight whole on each device, or as FIX.json shards it
    specs = fix.get("shard", {})
    state = jax.tree_util.tree_map_with_path(
        lambda k, v: jax.device_put(v, NamedSharding(mesh, eval(specs.get(owner(k), "P()")))), nnx.state(model))
    nnx.update(model, state)


model = MLP(nnx.Rngs(0))
replicate(model)
optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)


def train_step(model, optimizer, x, y):
    def loss_fn(model):
        return optax.softmax_cross_entropy_with_integer_labels(model(x), y).mean()

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


train_step = nnx.jit(train_step, **({"donate_argnames": tuple(fix["donate"])} if "donate" in fix else {}))
rng = np.random.default_rng(0)
batch = NamedSharding(mesh, P("data"))
for step in range(4):
    x = jax.device_put(rng.normal(size=(64, 512)).astype(np.float32), batch)
    y = jax.device_put(rng.integers(0, 16, (64,)), batch)
    loss = train_step(model, optimizer, x, y)
    evaluated = model.loss(x, y)
print(float(loss), float(evaluated))
"""


def _record(directory, fix: dict | None, *options):
    directory.mkdir()
    script = write_script(directory, "train.py", PROGRAM)
    if fix is not None:
        (directory / "FIX.json").write_text(json.dumps(fix))
    run_cli("run", "-q", *options, "-o", directory / "run", script, cwd=directory, env=ENV, check=0)
    return directory / "run"


def _peak(run_dir) -> int:
    return int(build_report(attribute(load_run(run_dir))).headline.true_peak_bytes)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The program recorded with every compile made, and each fix applied as
    the findings print it, recorded without compiles."""
    root = tmp_path_factory.mktemp("budget")
    before = _record(root / "before", None, "--verify-seconds", "300")
    ar = attribute(load_run(before))
    findings = build_report(ar).findings
    donate = [f for f in findings if f.rule == "donate" and f.fact("function") == "train_step"]
    shard = {}  # every array the finding shards (it names 3 and counts the rest): the step's weights as the rule has them
    calls, functions = ar.run.jit.calls, ar.run.jit.functions
    fid = int(functions.loc[functions["name"] == "train_step", "function_id"].iloc[0])
    latest = calls[calls["function_id"] == fid].sort_values("call_index").iloc[-1]
    for a in by_rule([leaf for leaf in leaves_of(latest["inputs"]) if isinstance(leaf, dict)], set()):
        if a["owner"].startswith("model."):
            shard[a["owner"]] = a["spec"]
    sharded, donated = in_parallel(
        lambda: _record(root / "sharded", {"shard": shard}, "--verify-seconds", "0"),
        lambda: _record(root / "donated", {"donate": donate[0].fact("arguments") if donate else []},
                        "--verify-seconds", "0"))
    return {"before": before, "ar": ar, "findings": findings, "sharded": sharded, "donated": donated}


def _whatif(run_dir) -> list:
    """(function name, donate or shard, error) of each jit_whatif row, in the order the end compiled them."""
    con = sqlite3.connect(run_dir / "journal.sqlite")
    try:
        names = dict(con.execute("SELECT function_id, name FROM jit_functions"))
        rows = con.execute("SELECT function_id, change, error FROM jit_whatif ORDER BY rowid").fetchall()
    finally:
        con.close()
    return [(names[fid], "donate" if "donate" in json.loads(change) else "shard", error)
            for fid, change, error in rows]


def test_the_compiles_go_to_what_could_save_most_first(runs):
    """The step's donation (its arguments' bytes) and its sharding, then the
    method's sharding; the method's donation last: its calls do not hold the
    true peak, and the report says donating there saves nothing of it."""
    order = [(name, kind) for name, kind, _ in _whatif(runs["before"])]
    assert order == [("train_step", "donate")] * 2 + [("train_step", "shard")] * 2 + [("loss", "shard"),
                                                                                      ("loss", "donate")], order
    (info,) = [f for f in runs["findings"] if f.rule == "donate" and f.fact("function") == "loss"]
    assert info.severity == "info" and info.saving_bytes == 0


def test_the_first_calls_signature_compiles_with_its_step_counter_on_one_device(runs):
    """The first call took the optimizer's step on one device (uncommitted):
    compiled as the program's call placed it, not refused as
    "incompatible devices"."""
    rows = _whatif(runs["before"])
    assert all(error is None for _, _, error in rows), rows
    (shard,) = [f for f in runs["findings"] if f.rule == "replicated"]
    assert shard.fact("verified") and shard.fact("signatures_verified") == 2


def test_one_finding_per_array_named_as_the_caller_names_it(runs):
    """The step's ``model.*`` and the method's ``self.*`` are the same
    weights: one finding, the step's, and no array named through ``self``
    (the rule before: a second finding of the method's, ``self.l2.kernel``
    and ``self.l1.kernel``, saving the same)."""
    ar = runs["ar"]
    findings = replication_findings(ar)
    assert len(findings) == 1, [(f.fact("function"), [a["owner"] for a in f.fact("arrays")]) for f in findings]
    f = findings[0]
    assert f.fact("function") == "train_step" and f.fact("array_count") == 6
    assert [a["owner"] for a in f.fact("arrays")] == ["model.l2.kernel", "optimizer.opt_state[0].mu.l2.kernel",
                                                      "optimizer.opt_state[0].nu.l2.kernel"]
    from jaxmemprof.analysis.advice.sharding import same_arrays  # new with this rule

    functions = ar.run.jit.functions
    ids = {name: int(functions.loc[functions["name"] == name, "function_id"].iloc[0]) for name in ("train_step", "loss")}
    named = same_arrays(ar.run, [ids["train_step"], ids["loss"]])
    assert named[ids["loss"]][("self.l2.kernel", (1024, 1024), "float32")][0] == "model.l2.kernel"
    # the method first (as where its calls held more): still named as the caller names them
    named = same_arrays(ar.run, [ids["loss"], ids["train_step"]])
    assert named[ids["loss"]][("self.l1.kernel", (512, 1024), "float32")][0] == "model.l1.kernel"
    assert not any(o.startswith("self.") for o, _, _ in named[ids["train_step"]].values())


def test_each_saving_is_the_fall_the_fixed_program_shows(runs):
    """Applied as printed, sharding the weights where they are made and
    donating the step's arguments lower the run's true peak by what each
    finding says (within 1 % of the peak)."""
    before = _peak(runs["before"])
    (shard,) = [f for f in runs["findings"] if f.rule == "replicated"]
    (donate,) = [f for f in runs["findings"] if f.rule == "donate" and f.fact("function") == "train_step"]
    assert shard.severity == donate.severity == "medium" and shard.fact("verified") and donate.fact("verified")
    for f, run_dir in ((shard, runs["sharded"]), (donate, runs["donated"])):
        fall = before - _peak(run_dir)
        said = f.fact("saving_bytes_per_device", f.saving_bytes)
        assert fall > 0 and abs(fall - said) <= 0.01 * before, (f.rule, fall, said)


def test_an_unverified_finding_never_ranks_above_a_verified_one(runs):
    """Within a severity the measured saving comes first, however large the
    unverified bound."""
    shard, donate = (next(f for f in runs["findings"] if f.rule == rule) for rule in ("replicated", "donate"))
    assert shard.saving_bytes > donate.saving_bytes  # measured, the sharding saves more: it ranks first
    assert ranked([donate, shard])[0] is shard
    bound = replace(donate, saving_bytes=2 * shard.saving_bytes,
                    facts={**donate.facts, "verified": False, "not_verified": "not verified: over the compile budget"})
    assert ranked([bound, shard]) == [shard, bound]


def test_a_sharding_over_the_budget_at_the_peak_is_not_verified_and_kept(runs, tmp_path):
    """Where the budget ran out before the step's signature that holds the
    peak was compiled sharded (its row as the recorder writes it then), the
    finding stays, said as not verified, and ranks below the verified
    donation of its severity."""
    run_dir = tmp_path / "run"
    shutil.copytree(runs["before"], run_dir)
    con = sqlite3.connect(run_dir / "journal.sqlite")
    try:
        fid = con.execute("SELECT function_id FROM jit_functions WHERE name = 'train_step'").fetchone()[0]
        rows = con.execute("SELECT rowid, change FROM jit_whatif WHERE function_id = ? ORDER BY rowid",
                           (fid,)).fetchall()
        for rowid, _ in [r for r in rows if "shard" in json.loads(r[1])]:
            con.execute("UPDATE jit_whatif SET argument_bytes = NULL, output_bytes = NULL, alias_bytes = NULL, "
                        "temp_bytes = NULL, generated_code_bytes = NULL, compile_s = 0, error = ? WHERE rowid = ?",
                        ("not verified: over the compile budget (10 s; run --verify-seconds)", rowid))
            break  # the first: the signature with the largest call peak
        con.commit()
    finally:
        con.close()
    findings = build_report(attribute(load_run(run_dir))).findings
    (shard,) = [f for f in findings if f.rule == "replicated"]
    assert shard.fact("verified") is False and "over the compile budget" in shard.fact("not_verified")
    assert words(shard).saves == "saves up to 9.00 MiB (not verified)"
    assert findings.index(shard) > findings.index(next(f for f in findings if f.rule == "donate"))

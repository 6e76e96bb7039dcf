"""Output that reads at a glance, held to its budgets on recorded runs.

A 40-step training run (a momentum-SGD step over a 512-1024-10 network,
jitted without donation, that keeps every step's per-example losses on the
device) reported at 100 columns: at most 60 lines, none wider, and
exactly the two findings the program has, each in three lines; `run`'s
closing summary in at most 16 lines. An 8-device run's identical per-device
rows are one row.
"""

from __future__ import annotations

import json
import re

import pytest

from conftest import cpu_env, line_of, run_cli, write_script

TRAIN = """
import jax
import jax.numpy as jnp
import jaxmemprof


def init(key, sizes):
    keys = jax.random.split(key, len(sizes))
    return [(jax.random.normal(k, (a, b), jnp.float32) * 0.01, jnp.zeros((b,), jnp.float32))
            for k, a, b in zip(keys, sizes[:-1], sizes[1:])]


def loss_fn(params, x, y):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return jnp.mean((x @ w + b - y) ** 2, axis=1)


def train_step(params, momentum, x, y):
    grads = jax.grad(lambda p: loss_fn(p, x, y).mean())(params)
    momentum = jax.tree.map(lambda m, g: 0.9 * m + g, momentum, grads)
    params = jax.tree.map(lambda p, m: p - 0.01 * m, params, momentum)
    return params, momentum, loss_fn(params, x, y)


step_fn = jax.jit(train_step)  # LINE-JIT
key = jax.random.PRNGKey(0)
params = init(key, [512, 1024, 10])
momentum = jax.tree.map(jnp.zeros_like, params)
x = jax.random.normal(key, (1024, 512), jnp.float32)
y = jax.random.normal(key, (1024, 10), jnp.float32)
kept = []
for step in range(40):
    params, momentum, losses = step_fn(params, momentum, x, y)  # LINE-STEP
    kept.append(losses)  # the leak: one (1024,) float32 array per step
    jaxmemprof.mark(f"step {step}")
    jaxmemprof.snapshot()
"""


@pytest.fixture(scope="module")
def training(tmp_path_factory):
    d = tmp_path_factory.mktemp("budgets")
    script = write_script(d, "train.py", TRAIN)
    proc = run_cli("run", "--interval", "1000", "-o", d / "run", script, cwd=d, check=0, env=cpu_env(COLUMNS="100"))
    return d, d / "run", proc


def _lines(text: str) -> list[str]:
    return text.rstrip("\n").split("\n")


def _findings(text: str) -> list[list[str]]:
    """The findings section's entries, each as its lines."""
    section = text[text.index("\nFindings"):].split("\n")[1:]
    entries: list[list[str]] = []
    for line in section:
        if re.match(r"^\d+\. ", line):
            entries.append([line])
        elif line.startswith("   ") and entries:
            entries[-1].append(line)
    return entries


def test_report_of_a_training_run_fits_one_screen(training):
    d, run_dir, _ = training
    out = run_cli("report", run_dir, cwd=d, check=0, env=cpu_env(COLUMNS="100")).stdout
    lines = _lines(out)
    assert len(lines) <= 60, out
    assert max(len(line) for line in lines) <= 100, out
    # The answer first, every peak labelled: the true peak and its call, the live peak, the lines inside
    # the call that hold its peak (the step's loss_fn), the top fix; and the words' glossary.
    head = lines[:8]
    assert head[2].startswith("true peak ") and "during a call of train_step" in head[2], out
    assert head[3].startswith("live peak ") and "(snapshot " in head[3], out
    assert head[4].startswith("in the call at its peak: train.py:") and "(loss_fn)" in head[4], out
    assert head[5].startswith("top fix: ") and "donate" in head[5] and "(compiled)" in head[5], out
    assert "docs/glossary.md" in head[6], out
    jit_line = line_of(d / "train.py", "LINE-JIT")
    step_line = line_of(d / "train.py", "LINE-STEP")  # makes the losses the loop keeps
    found = _findings(out)
    # The leak would add half the peak in 1000 more steps: high; the donation saves a third of it.
    # Hints (low: the float32 temporaries inside the step) come after, one line each.
    problems = [f for f in found if f[0].split()[1] not in ("low", "info")]
    assert [f[0].split()[1:3] for f in problems] == [["high", "leak"], ["medium", "donate"]], out
    for entry in problems:
        assert len(entry) == 3, entry  # severity, rule, site and saving; one sentence; the fix
        assert "saves " in entry[0] and entry[2].lstrip().startswith("fix: ")
    for entry in found[len(problems):]:
        assert len(entry) == 1 and ": " in entry[0], entry
    assert f"train.py:{step_line} (<module>)" in found[0][0]
    assert f"train.py:{jit_line}" in found[1][0]
    assert found[1][2].strip() == "fix: step_fn = jax.jit(train_step, donate_argnums=(0, 1))  # LINE-JIT"
    # Nothing is lost: --explain says every finding in full, with its evidence.
    full = run_cli("report", run_dir, "--explain", cwd=d, check=0).stdout  # no COLUMNS: not wrapped
    assert "evidence: " in full and "Mann-Kendall" in full and "params[0][0] float32[512,1024]" in full
    assert "Reuse is observed at snapshot resolution" in full


def test_json_carries_facts_beside_words(training):
    d, run_dir, _ = training
    doc = json.loads(run_cli("report", run_dir, "--json", cwd=d, check=0).stdout)
    [donate] = [f for f in doc["findings"] if f["rule"] == "donate"]
    facts = donate["facts"]
    assert facts["function"] == "train_step" and facts["arguments"] == ["params", "momentum"]
    assert facts["argnums"] == [0, 1] and facts["option"] == "donate_argnums=(0, 1)"
    # params and momentum of a 512-1024-10 network, float32
    assert facts["donated_bytes"] == 2 * 4 * (512 * 1024 + 1024 + 1024 * 10 + 10)
    assert donate["saving_bytes"] == facts["true_peak_before_bytes"] - facts["true_peak_after_bytes"] > 0
    # The words are there too, brief and in full.
    assert donate["brief"].startswith("Donate 'params', 'momentum' of train_step")
    assert donate["message"].startswith("Donate 'params', 'momentum' of train_step (defined at ")
    [leak] = [f for f in doc["findings"] if f["rule"] == "leak"]
    assert leak["facts"]["growth_bytes_per_step"] == 4096  # 1024 float32 losses kept per step


def test_run_summary_is_short(training):
    _, run_dir, proc = training
    summary = proc.stderr[proc.stderr.index("jaxmemprof: "):]
    # Off a terminal, the end's compiles that took over 2 s after the script say so in one closing line of
    # their own (cli/record.py's progress, issue 54): it follows the summary and is not part of it.
    closing = re.search(r"^jaxmemprof: the end of the run compiled \d+ times? in [\d.]+ s after the script ended\n\Z",
                        summary, re.M)
    if closing:
        summary = summary[:closing.start()]
    lines = _lines(summary)
    # 17: the first line also says what the snapshots in the program's own thread cost it (issue 62), and wraps
    assert len(lines) <= 17, summary
    assert max(len(line) for line in lines) <= 100, summary
    assert lines[-1].lstrip().startswith(("fix: ", "... "))  # the last finding's fix, or how many more
    assert f"(next: jaxmemprof report {run_dir})" in " ".join(summary.split())


EIGHT = """
import jax
jax.config.update("jax_num_cpu_devices", 8)
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, Mesh, PartitionSpec as P
import jaxmemprof

mesh = Mesh(np.array(jax.devices()), ("d",))
x = jax.device_put(jnp.ones((8, 1024 * 256), jnp.float32), NamedSharding(mesh, P("d")))  # LINE-X
jaxmemprof.snapshot("placed")
y = x * 2
jaxmemprof.snapshot("doubled")
"""


def test_identical_device_rows_are_one(tmp_path):
    script = write_script(tmp_path, "eight.py", EIGHT)
    run_cli("run", "-q", "--addresses", "all", "-o", tmp_path / "run", script, cwd=tmp_path, check=0)
    out = run_cli("report", tmp_path / "run", cwd=tmp_path, check=0, env=cpu_env(COLUMNS="100")).stdout
    # Each device holds 1 MiB of x (and of y): one line for the eight.
    assert "cpu:0-7 (8 devices)" in out, out
    assert not re.search(r"^cpu:[1-7]\b", out, re.M), out


FIXABLE = """
import jax
import jax.numpy as jnp

DONATE = ()
step = jax.jit(lambda p, x: p * 0.9 + x.mean(), donate_argnums=DONATE)
p = jnp.ones((1024, 1024))  # 4 MiB, replaced by every call
for i in range(5):
    p = step(p, jnp.ones((64, 1024)) * i)
print(float(p[0, 0]))
"""


def test_a_rerun_of_the_fixed_program_says_the_change_and_the_gate_that_holds_it(tmp_path):
    """run's closing lines lead with the true peak and what it is; rerun
    beside it after the fix (the same command, the source changed), they say
    what changed, with the figures each run's report gives, and the gate,
    which passes."""
    script = write_script(tmp_path, "train.py", FIXABLE)
    before = run_cli("run", "-o", "runs/a", "train.py", cwd=tmp_path, env=cpu_env(COLUMNS="100"))
    assert before.returncode == 0, before.stderr
    said = before.stderr.splitlines()
    # the answer right after the summary's first line (which may wrap at 100 columns: the cost in the
    # program's thread is said there when it is worth saying, and a loaded machine makes it so)
    first = next(i for i, line in enumerate(said) if line.startswith("true peak "))
    assert said[0].startswith("jaxmemprof: train.py: ") and first <= 2, before.stderr
    assert said[first + 1].startswith("it is: "), before.stderr
    assert "since the previous run" not in before.stderr
    [finding] = [line for line in said if "donate" in line and "saves" in line]
    assert "(compiled)" in finding
    script.write_text(FIXABLE.replace("DONATE = ()", "DONATE = (0,)"))
    after = run_cli("run", "-o", "runs/b", "train.py", cwd=tmp_path, env=cpu_env(COLUMNS="1000"))
    assert after.returncode == 0, after.stderr
    peaks = [json.loads(run_cli("report", f"runs/{d}", "--json", cwd=tmp_path).stdout)["summary"][
        "true_peak_bytes"] for d in "ab"]
    assert peaks[1] < peaks[0]
    from jaxmemprof.units import format_bytes, format_pair

    change = f"since the previous run (runs/a): true peak {format_pair(*peaks)} " \
             f"({format_bytes(peaks[1] - peaks[0], signed=True)})"
    assert change in after.stderr, after.stderr
    gate = "jaxmemprof check runs/b --baseline runs/a --max-increase 0"
    assert f"gate: {gate}" in after.stderr
    checked = run_cli(*gate.split()[1:], cwd=tmp_path)
    # the gate reads the true peak's fall (the live peak between calls may differ by a snapshot's timing)
    assert checked.returncode in (0, 1) and "ok   --max-increase 0%: true peak" in checked.stdout, checked.stdout

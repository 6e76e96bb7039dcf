"""The README's first command, on whatever Python and JAX run the tests: its
findings, holders and lines are those the README shows, each checked against
the script's own sizes. CI runs this on the oldest JAX and the newest Python
declared (``-m compat``, .ci/run): a version that drops a finding fails.
(3.13 once lost the donation finding: its bytecode stores the step's results
with STORE_FAST_STORE_FAST; JAX 0.6.0 the lines inside the step.)"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from conftest import REPO, cpu_env, line_of, run_cli

pytestmark = pytest.mark.compat

SCRIPT = REPO / "sample_runs" / "train_mlp.py"
LAYERS = [512, 1024, 1024, 10]  # train_mlp.py's init_params
BATCH = 1024  # its default --batch
STEPS = 120
MiB = 1 << 20


def _mib(text: str) -> float:
    value, unit = text.split()
    return float(value) * {"MiB": 1.0, "KiB": 1 / 1024, "B": 1 / MiB}[unit]


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory):
    """The README's command (`run`, then `report`, then `check --fail-on
    donate`), from the repository root as the README runs it."""
    out = tmp_path_factory.mktemp("readme") / "mlp-run"
    env = cpu_env(COLUMNS="200")
    # 8 s idle; a machine shared with other suites took over run_cli's 300 s
    ran = subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "--interval", "0.1", "-o", str(out),
                          "sample_runs/train_mlp.py", "--leak", "--steps", str(STEPS)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    assert ran.returncode == 0, ran.stderr[-3000:]
    report = run_cli("report", out, cwd=REPO, env=env, check=0)
    gate = run_cli("check", out, "--fail-on", "donate", cwd=REPO, env=env)
    return ran, report, gate


def test_the_donation_is_found_compiled_and_fails_the_gate(readme_run):
    ran, report, gate = readme_run
    text = ran.stderr
    step_line = line_of(SCRIPT, "step_fn = jax.jit(")
    m = re.search(rf"donate  sample_runs/train_mlp\.py:{step_line}  saves ([\d.]+ \w+) \(compiled\)\n"
                  rf"   Donate 'params', 'momentum' of train_step: true peak ([\d.]+) -> ([\d.]+) MiB", text)
    assert m, text
    saving, before, after = _mib(m.group(1)), float(m.group(2)), float(m.group(3))
    assert abs(saving - (before - after)) <= 0.011
    # what it donates is the state, params and momentum: what the step replaces each call; XLA's compile
    # with them donated saves a part of it (4.02 MiB on jax 0.8-0.12, 4.01 on 0.6.1-0.6.2)
    state = 2 * sum((a * b + b) * 4 for a, b in zip(LAYERS, LAYERS[1:])) / MiB
    assert 3.9 <= saving <= state / 2
    assert "fix: jit train_step with donate_argnums=(0, 1)" in text
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert f"FAIL --fail-on donate: [medium] donate at sample_runs/train_mlp.py:{step_line}" in gate.stdout + gate.stderr
    assert "supported" not in text  # inside the range: no line of versions.py's


def test_the_leak_is_found_at_its_line_with_its_holder(readme_run):
    ran, _, _ = readme_run
    text = ran.stderr
    loop_line = line_of(SCRIPT, "params, momentum, losses = step_fn(")
    list_line = line_of(SCRIPT, "loss_history = []")
    per_step = BATCH * 4  # one float32 (batch,) array of losses a step
    m = re.search(rf"leak  sample_runs/train_mlp\.py:{loop_line} \(main\)  saves [\d.]+ \w+ over 1000 more steps\n"
                  rf"   Grows ([\d.]+ \w+) per step; kept alive by `loss_history\[…\]` \(a local of main; list, "
                  rf"sample_runs/train_mlp\.py:{list_line}\): (\d+) arrays, ([\d.]+ \w+)\.", text)
    assert m, text
    assert _mib(m.group(1)) * MiB == per_step
    # counted at one moment, the search's (in the program's thread, at a step): the list's length then
    held = int(m.group(2))
    assert STEPS // 2 <= held <= STEPS and _mib(m.group(3)) * MiB == held * per_step
    # the live peak's holders: the step's new state, a local of main
    assert f"sample_runs/train_mlp.py:{loop_line} (main)  (kept alive by params[…][0] (local of main)" in text


def test_memory_inside_the_step_is_attributed_to_its_lines(readme_run):
    """XLA's buffers by line (the executable's buffer assignment): the
    predict function's activations, (batch, 1024) float32, 4 MiB each."""
    _, report, _ = readme_run
    assert "warning" not in report.stdout, report.stdout
    m = re.search(r"in the call at its peak: (.*)", report.stdout)
    assert m, report.stdout
    act = BATCH * 1024 * 4 / MiB
    hidden = line_of(SCRIPT, "x = jax.nn.relu(x @ w + b)")
    sites = re.findall(r"sample_runs/train_mlp\.py:(\d+) \(predict\) ([\d.]+ \w+) (temporary|output)", m.group(1))
    assert sites, m.group(1)
    assert all(_mib(size) % act == 0 for _, size, _ in sites), sites
    assert str(hidden) in {line for line, _, _ in sites}, sites

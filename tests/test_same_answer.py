"""Same program, same answer: a program recorded again and again at a fast
interval (the sampler busy around every call), with a busy process on each
core beside it, gives the same findings, the same XLA figures and the same
roles and owners of the step's memory every time.
The sampler's list of live arrays once made a sampled call's inputs look
held, and the donation advice vanished in about one run in four."""

from __future__ import annotations

import collections
import os
import subprocess
import sys

from conftest import REPO, cpu_env, line_of

from jaxmemprof.analysis.advice.donation import jit_memory
from jaxmemprof.analysis.rules.donation import donation_findings
from jaxmemprof.store.reader import load_run
from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.roles import roles

SCRIPT = REPO / "tests" / "scripts" / "same_answer.py"
RUNS = 5  # per program; benchmarks/bench_same_answer.py counts 20 runs of `jaxmemprof run`


def _answer(run_dir):
    run = load_run(run_dir)
    findings = tuple(sorted((f.rule, f.site, f.saving_bytes, f.fact("donated_bytes"))
                            for f in donation_findings(attribute(run))))
    jm = jit_memory(attribute(run))
    figures = tuple(map(tuple, jm[sorted(c for c in jm.columns if c.endswith("_bytes"))].values.tolist()))
    what = roles(attribute(run))
    by_role = tuple(map(tuple, what.by_role[["device", "role", "bytes", "arrays", "largest_owner",
                                             "largest_owner_bytes"]].astype(str).values.tolist()))
    owners = tuple(map(tuple, what.owners[["device", "role", "owner", "bytes", "function"]].astype(str)
                       .values.tolist()))
    return findings, figures, by_role, owners


def test_repeated_recordings_at_a_fast_interval_agree(tmp_path):
    # The busy processes start once the script has imported its libraries (it says so on stdout) and
    # run until it ends: beside every recording, not beside the imports.
    busy: list = []
    with open(tmp_path / "stderr", "w+") as stderr:
        proc = subprocess.Popen([sys.executable, str(SCRIPT), str(RUNS), str(tmp_path / "runs")], cwd=REPO,
                                env=cpu_env(), stdout=subprocess.PIPE, stderr=stderr, text=True)
        try:
            proc.stdout.readline()
            busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
            proc.communicate(timeout=600)
        finally:
            for b in busy:
                b.kill()
                b.wait()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        stderr.seek(0)
        assert proc.returncode == 0, stderr.read()
    answers = collections.defaultdict(collections.Counter)
    for d in sorted((tmp_path / "runs").iterdir()):
        answers[d.name.split("-")[0]][_answer(d)] += 1
    assert sorted(answers) == ["eqx", "jit", "nnx"]
    lines = {"jit": line_of(SCRIPT, "JIT-STEP"), "nnx": line_of(SCRIPT, "NNX-STEP"),
             "eqx": line_of(SCRIPT, "EQX-STEP")}
    for name, counts in answers.items():
        assert len(counts) == 1, f"{name}: {len(counts)} different answers over {RUNS} runs: {dict(counts)}"
        [(findings, figures, by_role, owners)] = counts
        assert {r[1] for r in by_role} >= {"parameters", "optimizer state"} and owners, (name, by_role)
        [(rule, site, saving, donated)] = [f for f in findings if f[0] == "donate"]
        assert site.endswith(f"same_answer.py:{lines[name]}"), site
        assert figures and all(v is not None for v in figures[0])
    # The plain step's state: params and opt, float32 [256,256] and [256] each.
    [jit_findings] = [f for (f, *_), in [tuple(answers["jit"])]]
    assert [d for r, _, _, d in jit_findings if r == "donate"] == [2 * (256 * 256 + 256) * 4]

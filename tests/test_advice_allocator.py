"""Allocator advice and will-it-fit, on runs recorded through the real CLI.

The CPU backend has no allocator statistics and no GPU settings, so the GPU
rules get GPU-like runs: a real recorded CPU run whose manifest is edited
(backend, devices, jaxlib version, allocation environment) and whose journal
gets ``memory_stats`` rows in its own format, as a GPU run would have them.
That is input for the advice rules, not a stand-in for JAX.

The script holds exactly one 64 MiB array (16 Mi float32), so its recorded
peak is 67108864 bytes; with the headroom (+5 %, rounded up, + 64 MiB) it
needs 67108864 + 3355444 + 67108864 = 137573172 bytes (131.20 MiB).
"""

from __future__ import annotations

import importlib.metadata

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from conftest import cpu_env, run_cli, write_script

from jaxmemprof.analysis.advice.allocator import DOCS_URL, FRACTION, OLD_FRACTION, fraction_config, fraction_env_name, needed_bytes, parse_version, processes_per_device
from jaxmemprof.analysis.rules.allocator import allocator_findings
from jaxmemprof.analysis.advice.capacity import Fit, will_it_fit
from jaxmemprof.analysis.rules.capacity import fit_findings
from jaxmemprof.store.reader import load_run
from jaxmemprof.units import parse_size
from jaxmemprof.analysis.findings import Finding
from jaxmemprof.render.findings import words
from jaxmemprof.analysis.attributed import attribute


def said(x):
    """A finding's words; a Fit's are those of its finding."""
    return words(x if isinstance(x, Finding) else fit_findings(x)[0])


MiB = 1024**2
GiB = 1024**3
PEAK = 64 * MiB
NEED = 137573172

HOLD = """
import numpy as np
import jax
import jaxmemprof

x = jax.device_put(np.ones((16 * 1024 * 1024,), np.float32))
x.block_until_ready()
jaxmemprof.snapshot("held")
"""


def record(directory: Path, env=None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    script = write_script(directory, "hold.py", HOLD)
    out = directory / "run"
    run_cli("run", "-q", "--interval", "1000", "-o", out, script, cwd=directory, env=env, check=0)
    return out


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory) -> Path:
    return record(tmp_path_factory.mktemp("cpu"))


H100 = {"id": 0, "name": "cuda:0", "kind": "NVIDIA H100 80GB HBM3", "process_index": 0}


def bfc(limit, in_use, peak, pool=None, largest=None) -> dict:
    """BFC statistics; by default a preallocated pool (pool = limit) with no
    fragmentation (the free part is one block)."""
    pool = limit if pool is None else pool
    return {"bytes_limit": limit, "bytes_in_use": in_use, "peak_bytes_in_use": peak, "pool_bytes": pool,
            "largest_free_block_bytes": pool - in_use if largest is None else largest}


def gpu_like(base: Path, dest: Path, *, jaxlib="0.10.2", env=None, stats=(), devices=None, events=(),
             **manifest) -> object:
    """A copy of the recorded run ``base`` as a GPU run would have recorded
    it. ``stats``: one {key: value} per snapshot, for cuda:0, given for the
    last snapshots in order (the run's own snapshot numbers: how many the
    sampler took depends on timing). ``events``: (kind, message) at the last
    snapshot."""
    shutil.copytree(base, dest)
    mpath = dest / "manifest.json"
    man = json.loads(mpath.read_text())
    man.update(backend="gpu", jaxlib_version=jaxlib, environment=env or {}, devices=devices or [H100], **manifest)
    mpath.write_text(json.dumps(man))
    snapshots = last_snapshots(base, len(stats))
    con = sqlite3.connect(dest / "journal.sqlite")
    con.execute("UPDATE array_kinds SET devices = replace(devices, 'cpu:0', 'cuda:0')")
    for snapshot, values in zip(snapshots, stats):
        con.executemany("INSERT INTO memory_stats (snapshot, device, key, value) VALUES (?, ?, ?, ?)",
                        [(snapshot, "cuda:0", k, int(v)) for k, v in values.items()])
    for kind, message in events:
        con.execute("INSERT INTO events (t_wall, kind, message, snapshot) VALUES (?, ?, ?, ?)",
                    (man["start_epoch"] + 1, kind, message, last_snapshots(base, 1)[0]))
    con.commit()
    con.close()
    return load_run(dest)


def last_snapshots(base: Path, n: int) -> list[int]:
    numbers = load_run(base).snapshots["snapshot"].tolist()
    assert len(numbers) >= n
    return numbers[len(numbers) - n:]


def rules(findings) -> list[str]:
    return sorted(f.rule for f in findings)


def only(findings, rule):
    got = [f for f in findings if f.rule == rule]
    assert len(got) == 1, findings
    return got[0]


# A 16 GiB GPU under the default fraction: a 12 GiB preallocated pool.
LIMIT = 12 * GiB
COMFORTABLE = [bfc(LIMIT, 5 * GiB, 6 * GiB), bfc(LIMIT, 5 * GiB, 6 * GiB)]


# -- (a) a CPU run gets no GPU settings --------------------------------------------


def test_cpu_run_gets_no_allocator_findings(cpu_run):
    run = load_run(cpu_run)
    assert run.manifest["backend"] == "cpu"
    assert run.memory_stats.empty
    assert int(run.snapshots["live_bytes"].max()) == PEAK
    assert allocator_findings(attribute(run)) == []
    assert allocator_findings(attribute(run), true_peak_bytes=100 * GiB) == []


def test_cpu_run_with_both_fraction_variables_is_warned(tmp_path):
    # Recorded for real with both variables set: the manifest keeps them, and
    # with the jaxlib installed (0.10.2, 0.12.0.1: xla_client.py raises) a GPU run with this environment loses its
    # CUDA backend.
    out = record(tmp_path, env=cpu_env(XLA_CLIENT_MEM_FRACTION=".5", XLA_PYTHON_CLIENT_MEM_FRACTION=".6"))
    run = load_run(out)
    assert run.manifest["environment"][FRACTION] == ".5"
    assert run.manifest["environment"][OLD_FRACTION] == ".6"
    [f] = allocator_findings(attribute(run))
    assert (f.rule, f.severity) == ("allocator-env", "high")
    assert said(f).message == (
        f"Both XLA_CLIENT_MEM_FRACTION=.5 and XLA_PYTHON_CLIENT_MEM_FRACTION=.6 are set: jaxlib "
        f"{importlib.metadata.version('jaxlib')} raises ValueError when both are, and JAX then starts without its "
        "CUDA backend.")
    assert "JAX_PLATFORMS=cpu" in said(f).evidence
    assert said(f).fix.startswith("Unset XLA_PYTHON_CLIENT_MEM_FRACTION (deprecated) and keep XLA_CLIENT_MEM_FRACTION=.5.")
    # The fit of that run carries the same warning.
    assert rules(fit_findings(will_it_fit(attribute(run), 16 * GiB))) == ["allocator-env", "fit"]


# -- (b) will it fit: a 64 MiB peak against devices of three sizes -------------------


def test_fits_by_default(cpu_run):
    fit = will_it_fit(attribute(load_run(cpu_run)), parse_size("1GiB"))
    assert isinstance(fit, Fit)
    assert (fit.device_bytes, fit.peak_bytes, fit.needed_bytes) == (GiB, PEAK, NEED)
    assert fit.default_fraction == 0.75
    assert fit.default_pool_bytes == 768 * MiB
    assert fit.fits_by_default and fit.fits_at_all
    assert fit.fraction_needed == 0.13  # 137573172 / 1 GiB = 12.8 %, rounded up
    assert fit.settings == {}
    assert said(fit).message.startswith(
        "A peak of 64.00 MiB (131.20 MiB with the allocator's headroom, +5 % + 64 MiB) fits a 1.00 GiB device under default preallocation "
        "(pool 768.00 MiB = 0.75 of it).")
    assert "library workspaces (cuDNN, cuBLAS, NCCL)" in said(fit).message
    assert "allocator fragmentation" in said(fit).message
    assert "XLA's temporaries" in said(fit).message  # the peak came from live arrays
    [f] = fit_findings(fit)
    assert (f.rule, f.severity, f.site) == ("fit", "info", "")
    assert "default pool 0.75 x device = 768.00 MiB (805306368 bytes)" in said(f).evidence
    assert "137573172 bytes" in said(f).evidence
    # 64 MiB is under a quarter of the 768 MiB pool: the fix says how to leave the rest.
    assert said(f).fix.startswith("Nothing to set. To leave the rest of the GPU to other processes: "
                            "XLA_PYTHON_CLIENT_PREALLOCATE=false, or XLA_CLIENT_MEM_FRACTION=.13.")
    assert DOCS_URL in said(f).fix


def test_needs_a_higher_fraction(cpu_run):
    run = load_run(cpu_run)
    fit = will_it_fit(attribute(run), parse_size("170MiB"))
    # Default pool 0.75 x 170 MiB = 127.50 MiB < 131.20 MiB; 137573172 / 178257920 = 77.2 % -> .78
    assert fit.default_pool_bytes == 133693440
    assert not fit.fits_by_default and fit.fits_at_all
    assert fit.fraction_needed == 0.78
    assert fit.settings == {"XLA_CLIENT_MEM_FRACTION": ".78"}
    assert said(fit).message.startswith(
        "A peak of 64.00 MiB (131.20 MiB with the allocator's headroom, +5 % + 64 MiB) does not fit the default pool of a 170.00 MiB device "
        "(127.50 MiB = 0.75 of it); it fits with XLA_CLIENT_MEM_FRACTION=.78.")
    [f] = fit_findings(fit)
    assert f.severity == "medium"
    assert said(f).fix.startswith("Set XLA_CLIENT_MEM_FRACTION=.78.")
    # The same question for a GPU machine with an older jaxlib names the old variable.
    old = will_it_fit(attribute(run), parse_size("170MiB"), jaxlib_version="0.4.31")
    assert old.settings == {"XLA_PYTHON_CLIENT_MEM_FRACTION": ".78"}
    assert FRACTION not in said(old).message.replace(OLD_FRACTION, "")


def test_cannot_fit(cpu_run):
    fit = will_it_fit(attribute(load_run(cpu_run)), parse_size("128MiB"))
    # 137573172 / 134217728 = 102.5 % -> 103 %, over the .95 that may go to a pool
    assert not fit.fits_by_default and not fit.fits_at_all
    assert fit.fraction_needed == 1.03
    assert fit.settings == {}
    assert said(fit).message.startswith("A peak of 64.00 MiB (131.20 MiB with the allocator's headroom, +5 % + 64 MiB) needs 103 % of a "
                                  "128.00 MiB device: it cannot fit")
    [f] = fit_findings(fit)
    assert f.severity == "high"
    assert said(f).fix.startswith("Lower the peak")


def test_fit_with_a_true_peak_and_several_processes(cpu_run):
    run = load_run(cpu_run)
    # The caller's true peak (temporaries included) replaces the live bytes.
    fit = will_it_fit(attribute(run), parse_size("80GB"), true_peak_bytes=70 * GiB)
    need = needed_bytes(70 * GiB)
    assert (fit.peak_bytes, fit.needed_bytes) == (70 * GiB, need)
    assert fit.fraction_needed == 0.99 and not fit.fits_at_all  # 79.1 GB of 80 GB
    assert "XLA's temporaries" not in said(fit).message
    # Two processes of 64 MiB on a 1 GiB GPU: 13 % each fits, default preallocation does not.
    two = will_it_fit(attribute(run), GiB, processes=2)
    assert not two.fits_by_default and two.fits_at_all
    assert two.settings == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    assert "fits 2 processes on a 1.00 GiB device (0.13 of it each)" in said(two).message
    assert "XLA_CLIENT_MEM_FRACTION=.13 in each process" in said(two).message
    [f] = fit_findings(two)
    assert said(f).fix.startswith("Set XLA_PYTHON_CLIENT_PREALLOCATE=false. Memory is then allocated on demand")
    # Eight of them need 8 x 13 % > 95 %.
    assert not will_it_fit(attribute(run), GiB, processes=8).fits_at_all


# -- (c) the GPU rules on GPU-like runs ---------------------------------------------


def test_no_finding_when_the_pool_fits_comfortably(cpu_run, tmp_path):
    run = gpu_like(cpu_run, tmp_path / "ok", stats=COMFORTABLE)
    assert allocator_findings(attribute(run)) == []


def test_fraction_raised_named_for_the_jaxlib(cpu_run, tmp_path):
    hwm = 11 * GiB + 800 * MiB  # 12650020864
    stats = [bfc(LIMIT, 11 * GiB, hwm), bfc(LIMIT, 11 * GiB, hwm)]
    run = gpu_like(cpu_run, tmp_path / "new", stats=stats)
    found = allocator_findings(attribute(run))
    assert rules(found) == ["allocator-fraction", "allocator-platform"]
    f = only(found, "allocator-fraction")
    # need = 12650020864 + 632501044 + 67108864 = 13349630772 bytes = 12.43 GiB; device = 12 GiB / 0.75 = 16 GiB;
    # 13349630772 / 17179869184 = 77.7 % -> .78
    assert f.severity == "medium"  # the peak itself was under the limit
    assert said(f).message == ("The peak needs 12.43 GiB with headroom but the allocator's limit on gpu:0 is "
                         "12.00 GiB: raise the memory fraction to .78.")
    assert "13349630772 bytes" in said(f).evidence and "bytes_limit on gpu:0 12.00 GiB (12884901888 bytes)" in said(f).evidence
    assert "0.75 (the default 0.75) x about 16.00 GiB" in said(f).evidence
    assert said(f).fix.startswith("Set XLA_CLIENT_MEM_FRACTION=.78. Trade-off:")
    assert OLD_FRACTION not in said(f).fix
    assert DOCS_URL in said(f).fix
    info = only(found, "allocator-platform")
    assert info.severity == "info"
    assert "XLA_PYTHON_CLIENT_ALLOCATOR=platform" in said(info).message
    assert "very slow" in said(info).fix

    # jaxlib 0.4.31 reads only the old name.
    old = only(allocator_findings(attribute(gpu_like(cpu_run, tmp_path / "old", jaxlib="0.4.31", stats=stats))),
               "allocator-fraction")
    assert said(old).fix.startswith("Set XLA_PYTHON_CLIENT_MEM_FRACTION=.78. Trade-off:")
    assert FRACTION not in said(old).fix.replace(OLD_FRACTION, "")

    # The deprecated name already set under a new jaxlib: name the new one, unset the old.
    env = {OLD_FRACTION: ".75"}
    dep = only(allocator_findings(attribute(gpu_like(cpu_run, tmp_path / "dep", env=env, stats=stats))), "allocator-fraction")
    assert said(dep).fix.startswith("Set XLA_CLIENT_MEM_FRACTION=.78 and unset XLA_PYTHON_CLIENT_MEM_FRACTION "
                              "(jaxlib raises ValueError when both are set).")
    assert "0.75 (XLA_PYTHON_CLIENT_MEM_FRACTION=.75)" in said(dep).evidence


def test_fraction_from_a_true_peak_that_cannot_fit(cpu_run, tmp_path):
    run = gpu_like(cpu_run, tmp_path / "big", stats=COMFORTABLE, events=[("oom", "RESOURCE_EXHAUSTED")])
    found = allocator_findings(attribute(run), true_peak_bytes=20 * GiB)
    f = only(found, "allocator-fraction")
    # need = 20 GiB + 1 GiB + 64 MiB = 21.06 GiB = 132 % of the 16 GiB device
    assert f.severity == "high"
    assert said(f).message == ("The peak needs 21.06 GiB with headroom, 132 % of the 16.00 GiB device: no memory "
                         "fraction up to .95 holds it.")
    assert "the estimated true peak (XLA temporaries included)" in said(f).evidence
    assert said(f).fix.startswith("Lower the peak")
    assert "the run ran out of device memory" in said(only(found, "allocator-platform")).evidence
    # A true peak of 11 GiB needs 11.61 GiB: the 12 GiB limit holds it.
    assert "allocator-fraction" not in rules(allocator_findings(attribute(run), true_peak_bytes=11 * GiB))


def test_preallocate_when_the_peak_is_far_below_the_pool(cpu_run, tmp_path):
    stats = [bfc(LIMIT, GiB, GiB), bfc(LIMIT, GiB, GiB)]
    run = gpu_like(cpu_run, tmp_path / "small", stats=stats)
    [f] = allocator_findings(attribute(run))
    need = GiB + 53687092 + 64 * MiB  # 1.11 GiB; 1195710004 / 16 GiB = 7.0 % -> .07
    assert (f.rule, f.severity) == ("allocator-preallocate", "low")
    assert f.saving_bytes == LIMIT - need
    assert said(f).message == ("The peak (1.00 GiB) is 8% of the 12.00 GiB pool preallocated on gpu:0: "
                         "10.89 GiB of it is never needed.")
    assert "threshold: peak below 25% of the pool" in said(f).evidence
    assert "XLA_PYTHON_CLIENT_PREALLOCATE=false" in said(f).fix and "XLA_CLIENT_MEM_FRACTION=.07" in said(f).fix
    assert "more prone to fragmentation" in said(f).fix
    # Not when preallocation is already off, nor at half the pool.
    off = gpu_like(cpu_run, tmp_path / "off", env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, stats=stats)
    assert allocator_findings(attribute(off)) == []
    assert allocator_findings(attribute(gpu_like(cpu_run, tmp_path / "half", stats=COMFORTABLE))) == []


def test_preallocate_when_processes_share_a_gpu(cpu_run, tmp_path):
    run = gpu_like(cpu_run, tmp_path / "shared", stats=COMFORTABLE)
    [f] = allocator_findings(attribute(run), processes_per_gpu=2)
    assert (f.rule, f.severity) == ("allocator-preallocate", "high")
    assert said(f).message == ("2 processes share one GPU and each preallocates 75% of it: together they ask for "
                         "150% of its memory.")
    # .47 of 16 GiB = 7.52 GiB each holds the 6 GiB peak with headroom (6.36 GiB).
    assert said(f).fix.startswith("Set XLA_PYTHON_CLIENT_PREALLOCATE=false in each process")
    assert "or give each process XLA_CLIENT_MEM_FRACTION=.47 (95 % / 2), which holds this process's peak" in said(f).fix
    # Three such processes cannot share 16 GiB either way: the fix says so.
    [three] = allocator_findings(attribute(run), processes_per_gpu=3)
    assert "XLA_CLIENT_MEM_FRACTION=.31 (95 % / 3). Neither is enough if every process peaks like this one: " \
           "3 x 6.36 GiB = 19.09 GiB is more than .95 of the 16.00 GiB GPU" in said(three).fix
    # Fractions that add up to less than the device: nothing to say.
    fitted = gpu_like(cpu_run, tmp_path / "fitted", env={FRACTION: ".45"},
                      stats=[bfc(int(0.45 * 16 * GiB), 5 * GiB, 6 * GiB)] * 2)
    assert allocator_findings(attribute(fitted), processes_per_gpu=2) == []
    off = gpu_like(cpu_run, tmp_path / "off", env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, stats=COMFORTABLE)
    assert allocator_findings(attribute(off), processes_per_gpu=2) == []


def test_processes_sharing_a_gpu_read_from_a_multi_process_run(cpu_run, tmp_path):
    def proc(parent, i, hw):
        dev = dict(H100, id=i, name=f"cuda:{i}", process_index=i, local_hardware_id=hw)
        return gpu_like(cpu_run, parent / f"process-{i}", stats=COMFORTABLE, devices=[dev], hostname="node1",
                        process_index=i, process_count=2)

    shared = [proc(tmp_path / "shared", i, 0) for i in (0, 1)]
    assert processes_per_device(shared[0]) == 2
    assert rules(allocator_findings(attribute(shared[1]))) == ["allocator-preallocate"]
    own = [proc(tmp_path / "own", i, i) for i in (0, 1)]
    assert processes_per_device(own[0]) == 1
    assert allocator_findings(attribute(own[0])) == []


def test_fragmentation(cpu_run, tmp_path):
    frag = [bfc(LIMIT, 5 * GiB, 6 * GiB), bfc(LIMIT, 6 * GiB, 6 * GiB, largest=3 * GiB)]
    run = gpu_like(cpu_run, tmp_path / "frag", stats=frag)
    found = allocator_findings(attribute(run))
    assert rules(found) == ["allocator-fragmentation", "allocator-platform"]
    f = only(found, "allocator-fragmentation")
    # (12 - 6 - 3) / (12 - 6) = 0.5
    assert f.severity == "medium"
    last = last_snapshots(cpu_run, 1)[0]
    assert said(f).message == (f"The allocator pool on gpu:0 was 50% fragmented at snapshot {last}: 6.00 GiB free, "
                         "but the largest free block is 3.00 GiB.")
    assert f.saving_bytes == 3 * GiB
    assert "= 0.50; threshold 0.30 on pools of 1.00 GiB or more" in said(f).evidence
    assert said(f).fix.startswith("Set TF_GPU_ALLOCATOR=cuda_malloc_async")
    assert "Trade-off" in said(f).fix and DOCS_URL in said(f).fix
    # With preallocation off, the fix also says to turn it back on.
    off = gpu_like(cpu_run, tmp_path / "off", env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, stats=frag)
    off_fix = said(only(allocator_findings(attribute(off)), "allocator-fragmentation")).fix
    assert "turning it back on is the first thing to try" in off_fix
    # Not below the threshold (1 GiB of 6 GiB free is split off: 0.17), not on a small pool,
    # not when the async allocator already runs.
    low = [bfc(LIMIT, 6 * GiB, 6 * GiB, largest=5 * GiB)]
    assert allocator_findings(attribute(gpu_like(cpu_run, tmp_path / "low", stats=low))) == []
    small = [bfc(512 * MiB, 200 * MiB, 200 * MiB, largest=100 * MiB)]
    small_run = gpu_like(cpu_run, tmp_path / "small", stats=small)
    assert "allocator-fragmentation" not in rules(allocator_findings(attribute(small_run)))
    asyn = gpu_like(cpu_run, tmp_path / "async", env={"TF_GPU_ALLOCATOR": "cuda_malloc_async"}, stats=frag)
    assert allocator_findings(attribute(asyn)) == []


def test_environment_named_for_the_jaxlib(cpu_run, tmp_path):
    both = {FRACTION: ".8", OLD_FRACTION: ".7"}
    new_run = gpu_like(cpu_run, tmp_path / "new", env=both, stats=COMFORTABLE)
    new = only(allocator_findings(attribute(new_run)), "allocator-env")
    assert new.severity == "high"
    assert said(new).message.startswith("Both XLA_CLIENT_MEM_FRACTION=.8 and XLA_PYTHON_CLIENT_MEM_FRACTION=.7 are set: "
                                  "jaxlib 0.10.2 raises ValueError")
    old_run = gpu_like(cpu_run, tmp_path / "old", jaxlib="0.4.31", env=both, stats=COMFORTABLE)
    old = only(allocator_findings(attribute(old_run)), "allocator-env")
    assert old.severity == "medium"
    assert said(old).message == ("Both XLA_CLIENT_MEM_FRACTION=.8 and XLA_PYTHON_CLIENT_MEM_FRACTION=.7 are set: jaxlib "
                           "0.4.31 reads only XLA_PYTHON_CLIENT_MEM_FRACTION, and jaxlib 0.4.32 and later refuse "
                           "the two together.")
    assert said(old).fix.startswith("Unset XLA_CLIENT_MEM_FRACTION and keep XLA_PYTHON_CLIENT_MEM_FRACTION=.7")
    ignored = only(allocator_findings(attribute(gpu_like(cpu_run, tmp_path / "ign", jaxlib="0.4.30", env={FRACTION: ".9"},
                                               stats=COMFORTABLE))), "allocator-env")
    assert said(ignored).message == ("XLA_CLIENT_MEM_FRACTION=.9 is ignored: jaxlib 0.4.30 reads only "
                               "XLA_PYTHON_CLIENT_MEM_FRACTION, so the pool used the default fraction 0.75.")
    no = only(allocator_findings(attribute(gpu_like(cpu_run, tmp_path / "no", env={"XLA_PYTHON_CLIENT_PREALLOCATE": "no"},
                                          stats=COMFORTABLE))), "allocator-env")
    assert "leaves preallocation on" in said(no).message
    # Nothing to say about a clean environment of either name.
    for jaxlib, name in (("0.10.2", FRACTION), ("0.4.31", OLD_FRACTION)):
        run = gpu_like(cpu_run, tmp_path / f"clean-{jaxlib}", jaxlib=jaxlib, env={name: ".75"}, stats=COMFORTABLE)
        assert allocator_findings(attribute(run)) == []


def test_as_report_rules(cpu_run, tmp_path):
    """The functions plug into build_report's extra_rules as (run, report) -> findings."""
    from jaxmemprof.analysis.report import build_report

    run = gpu_like(cpu_run, tmp_path / "frag", stats=[bfc(LIMIT, 6 * GiB, 6 * GiB, largest=3 * GiB)])
    report = build_report(attribute(run), extra_rules=[
        lambda r, rep: allocator_findings(attribute(r), timeline=rep.timeline),
        lambda r, rep: fit_findings(will_it_fit(attribute(r), 16 * GiB)),
    ])
    assert rules(report.extra_findings) == ["allocator-fragmentation", "allocator-platform", "fit"]
    assert {f.rule for f in report.findings} >= {"allocator-fragmentation", "allocator-platform", "fit"}
    fit = only(report.extra_findings, "fit")
    assert "from the allocator's high-water mark (peak_bytes_in_use) on gpu:0" in said(fit).evidence


def test_versions_and_names():
    assert parse_version("0.4.32") == (0, 4, 32)
    assert parse_version("0.4.32.dev20240901+cuda12") == (0, 4, 32)
    assert parse_version("0.10.2") == (0, 10, 2)
    assert parse_version("1") == (1, 0, 0)
    assert parse_version(None) is None and parse_version("garbage") is None
    assert fraction_env_name("0.4.31") == OLD_FRACTION
    assert fraction_env_name("0.4.32") == FRACTION
    assert fraction_env_name("0.10.2") == FRACTION
    assert fraction_env_name(None) == FRACTION
    # Read as jaxlib reads them: an old jaxlib ignores the new name.
    assert fraction_config({FRACTION: ".9"}, "0.4.31").value == 0.75
    assert fraction_config({FRACTION: ".9"}, "0.4.31").ignored == FRACTION
    assert fraction_config({OLD_FRACTION: ".6"}, "0.10.2").value == 0.6
    assert fraction_config({FRACTION: ".9", OLD_FRACTION: ".6"}, "0.10.2").both_set


def test_a_run_that_does_not_fit_names_the_measured_fix_that_would_make_it_fit():
    """The bundled MLP (true peak 38.23 MiB, donation measured to save 4.02
    MiB) on a device whose default pool holds the donated step but not the
    recorded one: the fit finding names the donate finding, with the peak it
    leaves, which is the donated run's own true peak."""
    from jaxmemprof.analysis.advice.allocator import needed_bytes
    from jaxmemprof.analysis.options import Options
    from jaxmemprof.analysis.report import build_report

    root = Path(__file__).resolve().parent.parent / "sample_runs" / "runs"
    plain = build_report(attribute(load_run(root / "mlp-no-donation")))
    donated = build_report(attribute(load_run(root / "mlp-donated")))
    before = plain.headline.true_peak_bytes
    after = donated.headline.true_peak_bytes
    device = (needed_bytes(before) + needed_bytes(after)) // 2 * 4 // 3  # a default pool (0.75) between the two
    rep = build_report(attribute(load_run(root / "mlp-no-donation"), Options(device_memory=device)))
    [fit] = [f for f in rep.findings if f.rule == "fit"]
    [fix] = fit.fact("fixes_that_fit")
    [donate] = [f for f in rep.findings if f.rule == "donate"]
    assert (fix["rule"], fix["site"]) == ("donate", donate.site)
    assert abs(fix["peak_after_bytes"] - after) <= 0.01 * after, (fix, after)
    assert f"apply the donate finding at {donate.site}: it then fits" in words(fit).brief_fix
    # where the device holds the recorded step by default, no fix is named
    roomy = build_report(attribute(load_run(root / "mlp-no-donation"), Options(device_memory=4 * device)))
    [fit] = [f for f in roomy.findings if f.rule == "fit"]
    assert fit.fact("fixes_that_fit") == []

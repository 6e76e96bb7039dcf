"""Devices are named ``tpu:0``, ``gpu:0``, ``cpu:0`` (platform:id) in every
output: the terminal report, ``show`` and ``diff``, ``export --csv``,
``report --json``, the HTML page and exported pprof labels, whatever the
runtime's ``str(device)`` was when the run was recorded (a TPU's is
``TPU_0(process=0,(0,0,0,0))``: issue 51). A run keeps the names as
recorded; they are shown through jaxmemprof/facts/devices.py.

A real CPU run on two devices (``--xla_force_host_platform_device_count=2``)
reads ``cpu:0`` and ``cpu:1``; its ``--target`` compile's devices, which
libtpu names ``TPU_0(process=0,(0,0,0,0))``, read ``tpu:0``; and the same
run with every device renamed as a TPU names them (its journal, manifest
and profiles rewritten, as a run recorded on a chip would hold them) reads
``tpu:0`` and ``tpu:1`` everywhere, never the runtime's form.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3

import pytest

from conftest import cpu_env, run_cli, write_script

from jaxmemprof.facts import tpus
from jaxmemprof.facts.devices import display, display_all, displayed

TWO = """
import jax
import jax.numpy as jnp


def step(w, x):
    return w - 1e-3 * (x.T @ jnp.tanh(x @ w)) / x.shape[0]


if __name__ == "__main__":
    d0, d1 = jax.devices()
    f = jax.jit(step)
    w = jax.device_put(jnp.ones((256, 256)), d0)
    keep = jax.device_put(jnp.ones((512, 256)), d1)  # on the second device, all along
    for i in range(4):
        w = f(w, jax.device_put(jnp.full((128, 256), float(i)), d0))
    print(float(w[0, 0]), float(keep[0, 0]))
"""

TPU_NAMES = {"cpu:0": "TPU_0(process=0,(0,0,0,0))", "cpu:1": "TPU_1(process=0,(1,0,0,0))"}
RUNTIME_FORMS = ("TPU_0(", "TPU_1(", "process=0,", "TFRT_CPU", "CpuDevice(")


def test_display_names_each_runtimes_form_by_platform_and_id():
    assert display("TPU_0(process=0,(0,0,0,0))") == "tpu:0"
    assert display("TPU_13(process=3,(1,2,0,1))") == "tpu:13"
    assert display("TPU_13(process=3,(1,2,0,1))", process=True) == "tpu:13 (process 3)"
    assert display("TpuDevice(id=5, process_index=1, coords=(1,0,0), core_on_chip=0)") == "tpu:5"
    assert display("cuda:1") == display("rocm:1") == display("CudaDevice(id=1)") == "gpu:1"
    assert display("cpu:0") == display("TFRT_CPU_0") == display("CpuDevice(id=0)") == "cpu:0"
    # text that holds names (a call's place, an array's devices), and text that is no device's name
    assert display("during a call of f on TPU_0(process=0,(0,0,0,0))") == "during a call of f on tpu:0"
    assert display("TPU_0(process=0,(0,0,0,0)), TPU_1(process=0,(1,0,0,0))") == "tpu:0, tpu:1"
    for other in ("job", "all", "", "train.py:12 (main)", "TPU v5 lite", 3, None):
        assert display(other) == other
    assert display_all(["TPU_2(process=0,(0,1,0,0))", "job"]) == ["tpu:2", "job"]


def test_displayed_renames_the_device_columns_of_a_frame_and_leaves_it_unchanged():
    import pandas as pd

    df = pd.DataFrame({"device": ["TPU_0(process=0,(0,0,0,0))", "job"], "devices": [1, 2],
                       "site": ["TPU_0(process=0,(0,0,0,0))", "x"]})
    out = displayed(df)
    assert out["device"].tolist() == ["tpu:0", "job"] and out["devices"].tolist() == [1, 2]
    assert out["site"].tolist() == df["site"].tolist()  # only the devices' columns
    assert df["device"].iloc[0].startswith("TPU_0(")  # the frame itself as it was


def _rename_as_tpu(src, dst) -> None:
    """A copy of run ``src`` whose devices are named as a TPU names them."""
    from jaxmemprof.pprof import profile_pb2

    shutil.copytree(src, dst)

    def renamed(text: str) -> str:
        for cpu, tpu in TPU_NAMES.items():
            text = text.replace(f'"{cpu}"', json.dumps(tpu))
        return text

    con = sqlite3.connect(dst / "journal.sqlite")
    changed = 0
    for (table,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
        for col in [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]:
            for cpu, tpu in TPU_NAMES.items():
                changed += con.execute(f'UPDATE "{table}" SET "{col}" = ? WHERE "{col}" = ?', (tpu, cpu)).rowcount
                changed += con.execute(
                    f'UPDATE "{table}" SET "{col}" = replace("{col}", ?, ?) WHERE typeof("{col}") = \'text\' '
                    f'AND instr("{col}", ?) > 0', (f'"{cpu}"', json.dumps(tpu), f'"{cpu}"')).rowcount
    con.commit()
    con.close()
    assert changed
    manifest = dst / "manifest.json"
    manifest.write_text(renamed(manifest.read_text()))
    profiles = sorted((dst / "snapshots").glob("*.prof.gz"))
    assert profiles
    for path in profiles:
        p = profile_pb2.Profile()
        p.ParseFromString(gzip.decompress(path.read_bytes()))
        names = list(p.string_table)
        for i, s in enumerate(names):  # bytes in jaxmemprof's copy of profile.proto
            text = s.decode("utf-8", "replace") if isinstance(s, bytes) else s
            if text in TPU_NAMES:
                p.string_table[i] = TPU_NAMES[text].encode() if isinstance(s, bytes) else TPU_NAMES[text]
        path.write_bytes(gzip.compress(p.SerializeToString()))


@pytest.fixture(scope="module")
def two_devices(tmp_path_factory):
    d = tmp_path_factory.mktemp("names")
    write_script(d, "two.py", TWO)
    target = ["--target", "v5e:1x1"] if not tpus.libtpu_missing() else []
    run_cli("run", *target, "-o", d / "cpu", d / "two.py", check=0,
            env=cpu_env(XLA_FLAGS="--xla_force_host_platform_device_count=2", ALLOW_MULTIPLE_LIBTPU_LOAD="1"))
    _rename_as_tpu(d / "cpu", d / "tpu")
    return d


def _outputs(d, run: str) -> dict:
    """Every output of ``run``, as text."""
    out = {"report": run_cli("report", d / run, "--explain", env=cpu_env(COLUMNS="200"), check=0).stdout,
           "json": run_cli("report", d / run, "--json", check=0).stdout}
    run_cli("report", d / run, "--html", d / f"{run}.html", check=0)
    out["html"] = (d / f"{run}.html").read_text()
    run_cli("export", d / run, "--csv", d / f"{run}-csv", check=0)
    out.update({f"csv/{p.name}": p.read_text() for p in sorted((d / f"{run}-csv").glob("*.csv"))})
    for fmt in ((), ("--json",), ("--csv", d / f"{run}-show.csv")):
        proc = run_cli("show", f"{d / run}@peak", "--by", "device", *fmt, check=0)
        out[f"show {' '.join(map(str, fmt[:1]))}"] = proc.stdout
    out["show csv"] = (d / f"{run}-show.csv").read_text()
    out["show by site"] = run_cli("show", f"{d / run}@peak", check=0).stdout
    out["diff"] = run_cli("diff", f"{d / run}@first", f"{d / run}@peak", "--by", "device", check=0).stdout
    run_cli("export", f"{d / run}@peak", "--format", "pprof", "-o", d / f"{run}.pb.gz", check=0)
    out["pprof"] = gzip.decompress((d / f"{run}.pb.gz").read_bytes()).decode("latin-1")
    return out


def test_a_two_device_cpu_run_reads_cpu_0_and_cpu_1_and_its_target_tpu_0(two_devices):
    out = _outputs(two_devices, "cpu")
    for name, text in out.items():
        assert not any(form in text for form in RUNTIME_FORMS), name
    for name in ("report", "json", "html", "csv/devices.csv", "show ", "show --json", "show csv", "diff"):
        assert "cpu:0" in out[name] and "cpu:1" in out[name], name
    (by,) = [line for line in out["show by site"].splitlines() if line.startswith("by device: ")]
    assert "cpu:0 " in by and "cpu:1 " in by
    if not tpus.libtpu_missing():  # the slice's devices, which libtpu names TPU_0(process=0,(0,0,0,0))
        for name in ("json", "csv/target_points.csv"):
            assert "tpu:0" in out[name], name


def test_a_run_recorded_with_tpu_names_reads_tpu_0_and_tpu_1_in_every_output(two_devices):
    d = two_devices
    con = sqlite3.connect(d / "tpu" / "journal.sqlite")
    assert con.execute("SELECT devices FROM array_kinds WHERE devices LIKE '%TPU_1(%' LIMIT 1").fetchone()
    con.close()
    out = _outputs(d, "tpu")
    for name, text in out.items():
        assert not any(form in text for form in RUNTIME_FORMS), name
    for name in ("report", "json", "html", "csv/devices.csv", "csv/arrays.csv", "show ", "show --json",
                 "show csv", "diff", "pprof"):
        assert "tpu:0" in out[name] and "tpu:1" in out[name], name
    assert "cpu:0" not in out["report"] and "cpu:1" not in out["report"]
    (by,) = [line for line in out["show by site"].splitlines() if line.startswith("by device: ")]
    assert "tpu:0 " in by and "tpu:1 " in by


def test_a_run_recorded_on_a_real_tpu_chip_reads_tpu_0(tmp_path):
    """tests/fixtures/tpu/mlp-no-donation: the bundled MLP recorded on a v5e chip (benchmarks/tpu/),
    whose journal, manifest and profiles name the chip TPU_0(process=0,(0,0,0,0))."""
    from conftest import REPO

    run = REPO / "tests" / "fixtures" / "tpu" / "mlp-no-donation"
    if not run.is_dir():
        pytest.skip("the TPU fixtures are not in this checkout")
    con = sqlite3.connect(f"file:{run / 'journal.sqlite'}?mode=ro", uri=True)
    assert con.execute("SELECT devices FROM array_kinds WHERE devices LIKE '%TPU_0(process=0,%' LIMIT 1").fetchone()
    con.close()
    shutil.copytree(run, tmp_path / "chip")
    out = _outputs(tmp_path, "chip")
    for name, text in out.items():
        assert not any(form in text for form in RUNTIME_FORMS), name
    for name in ("report", "json", "html", "csv/devices.csv", "show ", "show --json", "show csv", "diff", "pprof"):
        assert "tpu:0" in out[name], name

"""`jaxmemprof run`: real scripts with known arrays, run through the CLI."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from conftest import cpu_env, line_of, run_cli, run_script, sigint_at, write_script
from test_fault_injection import cli_batch

import jaxmemprof
from jaxmemprof.store.reader import load_run
from jaxmemprof.analysis.attributed import attribute

MiB = 1024 * 1024


def _run(tmp_path, script_name, source, *args, check=None, out="run", extra=()):
    script = write_script(tmp_path, script_name, source)
    proc = run_cli("run", "-o", tmp_path / out, *extra, script, *args, cwd=tmp_path, check=check)
    return script, proc, tmp_path / out


def test_target_sees_python_semantics_and_its_exit_status(tmp_path):
    script, proc, _ = _run(tmp_path, "args.py", """
        import json, os, sys
        print(json.dumps({"argv": sys.argv, "name": __name__, "file": __file__,
                          "path0": sys.path[0]}))
        sys.exit(int(sys.argv[1]))
    """, "7", "--flag", "x y", check=7)
    seen = json.loads(proc.stdout)  # stdout is the target's alone
    assert seen == {"argv": [str(script), "7", "--flag", "x y"], "name": "__main__",
                    "file": str(script), "path0": str(tmp_path)}
    assert f"run: {tmp_path / 'run'}" in proc.stderr


def test_double_dash_and_module(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(
        "import sys\nprint(__name__, sys.argv[1:])\nraise SystemExit(3)\n"
    )
    proc = run_cli("run", "-q", "-o", tmp_path / "r", "-m", "mypkg.train", "--", "--lr", "0.1", cwd=tmp_path, check=3)
    assert proc.stdout.strip() == "__main__ ['--lr', '0.1']"
    script = write_script(tmp_path, "s.py", "import sys; print(sys.argv[1:])")
    proc = run_cli("run", "-q", "-o", tmp_path / "r2", "--", script, "--interval", "9", cwd=tmp_path, check=0)
    assert proc.stdout.strip() == "['--interval', '9']"


def test_known_arrays_lifetimes_and_sites(tmp_path):
    script, proc, run_dir = _run(tmp_path, "known.py", """
        import jax, jax.numpy as jnp
        import jaxmemprof
        a = jnp.zeros((256, 1024), jnp.float32)  # LINE-A
        jaxmemprof.snapshot("after-a")
        b = jnp.ones((512,), jnp.float32)  # LINE-B
        jaxmemprof.mark("step 1")
        jaxmemprof.snapshot("after-b")
        del a
        jaxmemprof.snapshot("after-del")
    """, check=0, extra=("-q", "--interval", "1000"))  # only the script's own snapshots
    run = load_run(run_dir)
    assert run.finished and run.manifest["exit_status"] == 0
    snaps = run.snapshots.set_index("label")
    n_a, n_b, n_del = (int(snaps.loc[k, "snapshot"]) for k in ("after-a", "after-b", "after-del"))
    assert snaps.loc["after-a", "live_bytes"] == MiB
    assert snaps.loc["after-b", "live_bytes"] == MiB + 2048
    assert snaps.loc["after-del", "live_bytes"] == 2048
    arrays = run.arrays
    a = arrays[arrays["nbytes"] == MiB].iloc[0]
    assert (a["last_snapshot"], a["end_snapshot"], a["how"]) == (n_b, n_del, "freed")
    # first seen by the script's snapshot, or by the sampler's own "first" one (taken as soon as JAX
    # holds an array: on a loaded machine it can come between LINE-A and the script's snapshot)
    first = int(a["first_snapshot"])
    triggers = run.snapshots.set_index("snapshot")["trigger"]
    assert first == n_a or (first < n_a and triggers[first] in ("first", "interval")), (first, n_a)
    assert (a["shape"], a["dtype"], a["devices"], a["shard_bytes"]) == ((256, 1024), "float32", ("cpu:0",), (MiB,))
    b = arrays[arrays["nbytes"] == 2048].iloc[0]
    assert b["first_snapshot"] == n_b and pd_isna(b["end_snapshot"]) and pd_isna(b["how"])
    # The creation stack of each array leads to its line.
    frames_a = run.stacks[int(a["stack_id"])]
    assert any(f == str(script) and ln == line_of(script, "LINE-A") for f, ln, _ in frames_a)
    assert list(run.markers["label"]) == ["step 1"]
    # (the background sampler may take a snapshot of its own in between)
    assert n_a <= int(run.markers["after_snapshot"].iloc[0]) < n_b
    # Each snapshot is the unmodified JAX profile, readable as such.
    prof = run.profile(n_b)
    assert prof.samples.loc[prof.samples["kind"] == "buffer", "bytes"].sum() == MiB + 2048


def pd_isna(v):
    import pandas as pd

    return pd.isna(v)


def test_donated_input_ends_as_deleted(tmp_path):
    _, _, run_dir = _run(tmp_path, "donate.py", """
        import jax, jax.numpy as jnp
        import jaxmemprof
        step = jax.jit(lambda s: s * 2, donate_argnums=0)
        state = jnp.ones((1000,), jnp.float32)
        jaxmemprof.snapshot("before")
        old = state
        state = step(state)
        jaxmemprof.snapshot("after")
        assert old.is_deleted()
    """, check=0, extra=("-q",))
    run = load_run(run_dir)
    arrays = run.arrays[run.arrays["nbytes"] == 4000].sort_values("array_id")
    first, second = arrays.iloc[0], arrays.iloc[1]
    assert first["how"] == "deleted"
    # The output took the donated buffer: the same address.
    assert first["addresses"] == second["addresses"]


def test_uncaught_exception(tmp_path):
    script, proc, run_dir = _run(tmp_path, "boom.py", """
        import jax.numpy as jnp
        x = jnp.ones((1000,))
        def fail():
            raise ValueError("bad batch")  # LINE-RAISE
        fail()
    """, check=1)
    assert proc.stdout == ""
    assert "ValueError: bad batch" in proc.stderr
    assert f'File "{script}", line {line_of(script, "LINE-RAISE")}, in fail' in proc.stderr
    assert "jaxmemprof/capture" not in proc.stderr and "runpy" not in proc.stderr
    run = load_run(run_dir)
    assert run.snapshots["trigger"].iloc[-1] == "exception"
    assert run.manifest["exit_status"] == 1 and run.manifest["ended_by"] == "exception"
    assert "ValueError: bad batch" in run.events["message"].iloc[0]


def test_out_of_memory_snapshot_holds_the_arrays_alive_at_the_failure(tmp_path):
    script, proc, run_dir = _run(tmp_path, "oom.py", """
        import jax.numpy as jnp
        def build():
            activations = jnp.ones((512, 1024), jnp.float32)  # LINE-LOCAL
            huge = jnp.zeros((1 << 44,), jnp.uint8)
            return activations, huge
        build()
    """, check=1)
    assert "RESOURCE_EXHAUSTED" in proc.stderr
    assert "out of device memory" in proc.stderr
    site = f"oom.py:{line_of(script, 'LINE-LOCAL')} (build)"
    assert site in proc.stderr
    run = load_run(run_dir)
    oom = run.snapshots[run.snapshots["trigger"] == "oom"]
    # The 2 MiB local, and JAX's 1-byte fill value for zeros().
    assert len(oom) == 1 and 2 * MiB <= int(oom["live_bytes"].iloc[0]) <= 2 * MiB + 8
    assert run.manifest["ended_by"] == "oom"
    proc = run_cli("show", f"{run_dir}@oom", "--json", cwd=tmp_path, check=0)
    rows = json.loads(proc.stdout)["rows"]
    assert rows[0]["site"] == site and rows[0]["bytes"] == 2 * MiB


def test_script_that_never_uses_jax(tmp_path):
    _, proc, run_dir = _run(tmp_path, "plain.py", "print('hello')", check=0)
    assert proc.stdout == "hello\n"
    assert "no snapshot" in proc.stderr
    run = load_run(run_dir)
    assert run.snapshots.empty and run.finished
    assert "jax" not in json.dumps(run.manifest.get("backend") or "")


# As under python: ended by the signal itself (a shell says 130 and 143).
@pytest.mark.parametrize("sig,status,label", [(signal.SIGINT, -signal.SIGINT, "SIGINT"),
                                              (signal.SIGTERM, -signal.SIGTERM, "SIGTERM")])
def test_signals_end_the_target_and_finalise_the_run(tmp_path, sig, status, label):
    script = write_script(tmp_path, "loop.py", """
        import sys, time
        import jax.numpy as jnp
        x = jnp.ones((1000,))
        print("ready", flush=True)
        while True:
            time.sleep(0.05)
    """)
    proc = subprocess.Popen(
        [sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", str(tmp_path / "run"), str(script)],
        cwd=tmp_path, env=cpu_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=sigint_at(),
    )
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == status, err
    run = load_run(tmp_path / "run")
    assert run.finished and run.manifest["ended_by"] == label
    last = run.snapshots.iloc[-1]
    assert (last["trigger"], last["label"], last["live_bytes"]) == ("signal", label, 4000)


def test_sigkill_mid_run_loses_no_committed_snapshot(tmp_path):
    script = write_script(tmp_path, "grow.py", """
        import time
        import jax.numpy as jnp
        keep = []
        while True:
            keep.append(jnp.ones((256,), jnp.float32))
            time.sleep(0.005)
    """)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "jaxmemprof", "run", "-o", str(run_dir), "--interval", "0.02",
         "--max-overhead", "0", str(script)],
        cwd=tmp_path, env=cpu_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                con = sqlite3.connect(f"file:{run_dir / 'journal.sqlite'}?mode=ro", uri=True)
                n = con.execute("SELECT count(*) FROM snapshots").fetchone()[0]
                con.close()
            except sqlite3.Error:
                n = 0
            if n >= 5:
                break
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    run = load_run(run_dir)
    assert not run.finished
    assert any("did not finish" in w for w in run.warnings)
    assert len(run.snapshots) >= 5
    for n in run.snapshots["snapshot"]:
        prof = run.profile(int(n))
        live = prof.samples.loc[prof.samples["kind"] == "buffer", "bytes"].sum()
        # JAX's profile and the live-array records are read a few microseconds
        # apart while this program keeps allocating: they may differ by one array.
        assert abs(live - run.snapshots.loc[run.snapshots["snapshot"] == n, "live_bytes"].iloc[0]) <= 1024
    # The commands still work on the unfinished run.
    out = run_cli("show", f"{run_dir}@last", cwd=tmp_path, check=0)
    assert "did not finish" in out.stderr and "grow.py" in out.stdout


def test_sharded_array_over_several_cpu_devices(tmp_path):
    script, proc, run_dir = _run(tmp_path, "sharded.py", """
        import jax
        jax.config.update("jax_num_cpu_devices", 4)
        import jax.numpy as jnp
        from jax.sharding import NamedSharding, PartitionSpec as P
        mesh = jax.make_mesh((4,), ("x",))
        x = jax.device_put(jnp.zeros((1024, 256), jnp.float32), NamedSharding(mesh, P("x")))  # LINE-SHARD
        del mesh
    """, check=0, extra=("-q",))
    run = load_run(run_dir)
    assert len(run.manifest["devices"]) == 4
    sharded = run.arrays[run.arrays["nbytes"] == MiB]
    sharded = sharded[sharded["shard_bytes"].map(len) == 4].iloc[0]
    assert sharded["shard_bytes"] == (MiB // 4,) * 4
    assert sorted(sharded["devices"]) == ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]
    assert sharded["sharding"].startswith("NamedSharding(") and "'x'" in sharded["sharding"]
    doc = json.loads(run_cli("show", f"{run_dir}@exit", "--by", "device", "--json", cwd=tmp_path, check=0).stdout)
    per_device = {r["device"]: r["bytes"] for r in doc["rows"] if r["bytes"]}
    assert len(per_device) == 4 and all(v >= MiB // 4 for v in per_device.values())
    site = f"sharded.py:{line_of(script, 'LINE-SHARD')} (<module>)"
    doc = json.loads(run_cli("show", f"{run_dir}@exit", "--json", cwd=tmp_path, check=0).stdout)
    assert {r["site"]: r["bytes"] for r in doc["rows"]}[site] >= MiB


def test_selectors_and_diff_of_a_run(tmp_path):
    script, _, run_dir = _run(tmp_path, "sel.py", """
        import jax.numpy as jnp
        import jaxmemprof
        a = jnp.zeros((1024,), jnp.float32)
        jaxmemprof.snapshot("small")
        b = jnp.zeros((4096,), jnp.float32)  # LINE-BIG
        jaxmemprof.snapshot("big")
        del b
    """, check=0, extra=("-q",))
    run = load_run(run_dir)
    numbers = run.snapshots["snapshot"].tolist()
    by_label = dict(zip(run.snapshots["label"], numbers))
    # The commands, run through the CLI's entry point in one batch (tests/test_fault_injection.py cli_batch).
    commands = {f"show {sel}": ["show", f"{run_dir}{sel}", "--json"]
                for sel in ("@peak", "@big", "@-1", "@first", "", "@final")}
    commands.update({"diff": ["diff", run_dir, "--json"],
                     "diff first final": ["diff", f"{run_dir}@first", f"{run_dir}@final", "--json"],
                     "diff small big": ["diff", f"{run_dir}@small", f"{run_dir}@big", "--json"]})
    bad = ("@nope", "@0", "@99")
    commands.update({f"show {sel}": ["show", f"{run_dir}{sel}"] for sel in bad})
    done = dict(zip(commands, cli_batch(list(commands.values()), tmp_path)))
    for name, proc in done.items():
        assert proc.returncode == (2 if name.split()[-1] in bad else 0), (name, proc.stderr)
    out = {name: json.loads(proc.stdout) for name, proc in done.items() if "--json" in commands[name]}

    def shown(sel):
        return out[f"show {sel}"]

    assert shown("@peak")["inputs"] == [f"{run_dir}@{by_label['big']}"]
    assert shown("@big")["totals"]["bytes"] == 4096 + 16384
    assert shown("@-1")["inputs"] == [f"{run_dir}@{numbers[-1]}"]
    assert shown("@first")["inputs"] == [f"{run_dir}@{numbers[0]}"]
    assert shown("")["inputs"] == shown("@peak")["inputs"]
    whole, explicit = out["diff"], out["diff first final"]
    assert run.snapshots["trigger"].iloc[-1] == "exit"
    assert shown("@final")["inputs"] == [f"{run_dir}@{numbers[-2]}"]
    assert whole["rows"] == explicit["rows"] and whole["totals"] == explicit["totals"]
    grew = out["diff small big"]
    assert grew["rows"][0]["site"] == f"sel.py:{line_of(script, 'LINE-BIG')} (<module>)"
    assert grew["totals"]["delta_bytes"] == 16384
    # Read from another directory, paths stay relative to where the run was recorded.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    doc = json.loads(run_cli("show", f"{run_dir}@big", "--json", cwd=elsewhere, check=0).stdout)
    assert doc["rows"][0]["site"] == f"sel.py:{line_of(script, 'LINE-BIG')} (<module>)"
    for sel in bad:
        proc = done[f"show {sel}"]
        assert proc.stderr.startswith("jaxmemprof: error: ") and str(run_dir) in proc.stderr


def test_plain_directory_of_profiles_is_a_run(tmp_path):
    write_script(tmp_path, "save.py", """
        import time, jax, jax.numpy as jnp
        a = jnp.zeros((1000,))
        jax.profiler.save_device_memory_profile("profs/1.prof")
        time.sleep(0.05)
        b = jnp.zeros((3000,))
        jax.profiler.save_device_memory_profile("profs/2.prof")
    """)
    (tmp_path / "profs").mkdir()
    subprocess.run([sys.executable, "save.py"], cwd=tmp_path, env=cpu_env(), check=True)
    run = load_run(tmp_path / "profs")
    assert not run.has_arrays and list(run.snapshots["live_bytes"]) == [4000, 16000]
    assert any("no per-array data" in w for w in run.warnings)
    doc = json.loads(run_cli("diff", "profs", "--json", cwd=tmp_path, check=0).stdout)
    assert doc["totals"]["delta_bytes"] == 12000


def test_existing_output_needs_force(tmp_path):
    script = write_script(tmp_path, "s.py", "pass")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    proc = run_cli("run", "-o", tmp_path / "out", script, cwd=tmp_path, check=2)
    assert proc.stderr.count("\n") == 1 and "--force" in proc.stderr
    # Not one of our runs: refused even with --force, and nothing is touched.
    proc = run_cli("run", "-o", tmp_path / "out", "--force", script, cwd=tmp_path, check=2)
    assert proc.stderr.count("\n") == 1 and "no jaxmemprof run" in proc.stderr
    assert (tmp_path / "out" / "keep.txt").read_text() == "mine"
    run_cli("run", "-q", "-o", tmp_path / "run", script, cwd=tmp_path, check=0)
    (tmp_path / "run" / "keep.txt").write_text("mine")
    run_cli("run", "-q", "-o", tmp_path / "run", "--force", script, cwd=tmp_path, check=0)
    assert (tmp_path / "run" / "keep.txt").read_text() == "mine"
    proc = run_cli("run", tmp_path / "missing.py", cwd=tmp_path, check=2)
    assert "missing.py: no such script" in proc.stderr


def test_api_profile_context_and_no_ops_outside_a_run(tmp_path):
    assert jaxmemprof.snapshot("x") is None and jaxmemprof.mark("y") is None
    script = write_script(tmp_path, "api.py", """
        import jax.numpy as jnp
        import jaxmemprof
        with jaxmemprof.profile("prof-run"):
            x = jnp.ones((2048,), jnp.float32)
            jaxmemprof.mark("epoch 1")
            jaxmemprof.snapshot("mid")
        print(jaxmemprof.snapshot("outside"))
    """)
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=cpu_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "None"
    run = load_run(tmp_path / "prof-run")
    assert run.finished
    assert list(run.snapshots["label"].dropna()) == ["mid"]
    assert run.snapshots["trigger"].iloc[-1] == "exit"
    assert int(run.snapshots.set_index("label").loc["mid", "live_bytes"]) == 8192
    assert list(run.markers["label"]) == ["epoch 1"]


def test_manifest_records_the_environment(tmp_path):
    script = write_script(tmp_path, "env.py", "import jax.numpy as jnp\nx = jnp.ones(3)\n")
    env = cpu_env(XLA_PYTHON_CLIENT_PREALLOCATE="false", XLA_FLAGS="--xla_dump_to=/nonexistent")
    subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", str(tmp_path / "r"), str(script), "a"],
                   cwd=tmp_path, env=env, check=True, capture_output=True)
    m = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert m["environment"]["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert m["environment"]["XLA_FLAGS"] == "--xla_dump_to=/nonexistent"
    assert m["argv"] == [str(script), "a"]
    assert m["backend"] == "cpu" and m["process_index"] == 0 and m["process_count"] == 1
    assert m["jax_version"] and m["schema_version"] == 2 and m["exit_status"] == 0


def test_a_full_disk_stops_sampling_but_never_the_target(tmp_path):
    import resource

    script = write_script(tmp_path, "busy.py", """
        import time
        import jax.numpy as jnp
        keep = []
        t0 = time.time()
        while time.time() - t0 < 4:
            keep.extend(jnp.full((64,), i) for i in range(20))
            time.sleep(0.01)
        print("done", len(keep))
    """)
    limit = 256 * 1024  # bytes any one file may grow to: the journal soon hits it

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = subprocess.run(
        [sys.executable, "-m", "jaxmemprof", "run", "-o", str(tmp_path / "run"), "--interval", "0.05",
         "--max-overhead", "0", str(script)],
        cwd=tmp_path, env=cpu_env(), capture_output=True, text=True, preexec_fn=small_files, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("done ")
    assert proc.stderr.count("sampling stopped: cannot write the run") == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "cannot rollback" not in proc.stderr, proc.stderr
    # How the script ended is what run saw, whatever the journal could keep.
    assert re.search(r"^jaxmemprof: busy\.py: [\d.]+ s, exit 0;", proc.stderr, re.M), proc.stderr
    run = load_run(tmp_path / "run")
    # How many snapshots fit before the limit depends on timing (1 at least: the first).
    assert len(run.snapshots) >= 1
    for n in run.snapshots["snapshot"]:
        run.profile(int(n))  # every committed snapshot is whole


def test_a_journal_that_refuses_the_holder_search_stops_sampling_once(tmp_path):
    """The search for Python holders writes its rows after the snapshot's:
    when the journal refuses them (here every file held at the size it has,
    as a full disk would, between the snapshot's write and the search), the
    snapshot stands, sampling stops with the one warning any failed write
    gives, and nothing escapes the sampling thread. The control, the same
    program without the limit, writes the holders' rows."""
    script = write_script(tmp_path, "refused.py", """
        import json, resource, signal, sys
        import jax.numpy as jnp
        from jaxmemprof.capture.py_holders import Searches
        from jaxmemprof.capture.sampler import Sampler
        from jaxmemprof.store.writer import RunWriter
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, as a full disk's ENOSPC
        s = Sampler(RunWriter(sys.argv[1], {"argv": []}), interval=60, max_overhead=0.02)
        s.py_holders = Searches(s.writer)
        kept = [jnp.full((256,), i) for i in range(4)]
        if sys.argv[2] == "limit":
            s.hooks.append(lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0)))
        index = s.snapshot("first")
        print(json.dumps({"index": index, "failed": s.failed, "holders": s.py_holders is not None}))
    """)
    limited = run_script(script, tmp_path / "limited", "limit")
    control = run_script(script, tmp_path / "control", "none")
    out, ok = json.loads(limited.stdout), json.loads(control.stdout)
    assert out["index"] == 1 and out["failed"].startswith("cannot write the run"), limited.stderr
    assert limited.stderr.count("sampling stopped: cannot write the run") == 1, limited.stderr
    assert "Traceback" not in limited.stderr and not out["holders"], limited.stderr
    assert ok == {"index": 1, "failed": None, "holders": True}, control.stderr
    assert sqlite3.connect(tmp_path / "control" / "journal.sqlite").execute(
        "SELECT count(*) FROM py_holders").fetchone()[0] >= 4


def test_a_run_that_cannot_start_writing_leaves_no_run(tmp_path):
    """No room for even the manifest: one line naming the run, exit 2, and
    no half-made run behind (no journal, no manifest, no snapshots/, no lock)."""
    import resource
    import signal

    script = write_script(tmp_path, "one.py", "print('ran')\n")

    def tiny_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, as a full disk's ENOSPC
        resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))

    proc = subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "-o", str(tmp_path / "run"), str(script)],
                          cwd=tmp_path, env=cpu_env(), capture_output=True, text=True, preexec_fn=tiny_files,
                          timeout=120)
    assert proc.returncode == 2 and proc.stdout == "", (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stderr == f"jaxmemprof: error: {tmp_path / 'run'}: cannot write the run: File too large\n"
    assert list((tmp_path / "run").iterdir()) == []


def test_shard_views_are_not_counted_twice(tmp_path):
    """Touching a shard's buffer makes JAX list a per-shard view as an array of
    its own; live bytes must still equal JAX's own profile."""
    _, _, run_dir = _run(tmp_path, "views.py", """
        import numpy as np
        import jax
        jax.config.update("jax_num_cpu_devices", 2)
        from jax.sharding import NamedSharding, PartitionSpec as P
        import jaxmemprof
        a = jax.device_put(np.zeros(4096, np.float32))
        a.unsafe_buffer_pointer()
        jaxmemprof.snapshot("one")
        c = jax.device_put(np.zeros(4096, np.float32), NamedSharding(jax.make_mesh((2,), ("x",)), P("x")))
        [s.data for s in c.addressable_shards]
        jaxmemprof.snapshot("two")
    """, check=0, extra=("-q", "--interval", "1000"))
    run = load_run(run_dir)
    for n, live, _arrays in zip(run.snapshots["snapshot"], run.snapshots["live_bytes"], run.snapshots["arrays"]):
        prof = run.profile(int(n))
        assert live == prof.samples.loc[prof.samples["kind"] == "buffer", "bytes"].sum()
    by_label = run.snapshots.set_index("label")
    assert (by_label.loc["one", "live_bytes"], by_label.loc["one", "arrays"]) == (16384, 1)
    assert (by_label.loc["two", "live_bytes"], by_label.loc["two", "arrays"]) == (32768, 2)
    assert sorted(map(tuple, run.arrays["shard_bytes"])) == [(8192, 8192), (16384,)]


ADDRESS_SCRIPT = """
    import json
    import numpy as np
    import jax
    jax.config.update("jax_num_cpu_devices", 2)
    from jax.sharding import NamedSharding, PartitionSpec as P
    import jaxmemprof
    put = [jax.device_put(np.full(1024, i, np.float32)) for i in range(3)]  # LINE-PUT
    sharded = jax.device_put(np.zeros(4096, np.float32), NamedSharding(jax.make_mesh((2,), ("x",)), P("x")))
    computed = jax.jit(lambda: jax.numpy.ones(512))()
    jaxmemprof.snapshot("one")
    live = len(jax.live_arrays())
    shards = [s.data.unsafe_buffer_pointer() for s in sharded.addressable_shards]  # the program's own views
    jaxmemprof.snapshot("two")
    print(json.dumps({"live": live, "sharded": shards, "computed": computed.unsafe_buffer_pointer()}))
"""


@pytest.mark.parametrize("mode, views", [("auto", 1), ("none", 0), ("all", 3 + 2)])
def test_addresses_modes_and_the_views_they_make(tmp_path, mode, views):
    """Reading an address makes JAX keep a per-shard view of device_put and
    sharded arrays. auto reads only where that makes no new view (one
    device_put per line pays one) and never those of arrays on several
    devices; views the program makes itself of those are recognised by their
    traceback object, device and size, in every mode."""
    _, proc, run_dir = _run(tmp_path, "addr.py", ADDRESS_SCRIPT, check=0, extra=("-q", "--addresses", mode, "--interval", "1000"))
    seen = json.loads(proc.stdout)
    assert seen["live"] == 5 + views  # 3 device_put + 1 sharded + 1 computed, and the views made
    run = load_run(run_dir)
    assert run.manifest["settings"]["addresses"] == mode
    by_label = run.snapshots.set_index("label")
    assert by_label.loc["one", "arrays"] == 5
    assert by_label.loc["two", "arrays"] == 5
    arrays = run.arrays[run.arrays["first_snapshot"] <= by_label.loc["one", "snapshot"]]
    assert len(arrays) == 5
    put = arrays[arrays["shape"] == (1024,)]
    known = put["addresses"].map(lambda a: a[0] is not None).sum()
    assert known == {"auto": 1, "none": 0, "all": 3}[mode]
    computed = arrays[arrays["shape"] == (512,)].iloc[0]
    assert computed["addresses"] == ((seen["computed"],) if mode != "none" else (None,))
    sharded = arrays[arrays["shape"] == (4096,)].iloc[0]
    assert sharded["shard_bytes"] == (8192, 8192)
    assert sharded["addresses"] == (tuple(seen["sharded"]) if mode == "all" else (None, None))
    # The reuse analysis says how many buffers it could not match.
    from jaxmemprof.analysis.reuse import reuse
    from jaxmemprof.render.notes import REUSE, unknown_addresses

    r = reuse(attribute(run))
    unknown = {"all": 0, "auto": 2 + 2, "none": 3 + 2 + 1}[mode]  # auto: two device_put arrays, the sharded one's two shards
    assert (r.buffers, r.unknown_addresses) == (6, unknown)
    why = unknown_addresses(run.manifest)
    assert ("--addresses all" if mode == "auto" else "--addresses none" if mode == "none" else "later snapshot") in why
    assert REUSE.startswith("Reuse is observed at snapshot resolution")


def test_sampling_budget_holds_since_the_last_snapshot_and_since_the_start(tmp_path):
    """The background sampler's schedule: never sooner than --interval after
    the last snapshot; sampling takes at most half of --max-overhead (the
    rest is for start-up, the jit probe and the end of the run) of the time
    since the last snapshot (the next one at its recent cost) and since
    sampling began (all snapshots so far and the next one) —
    so a costly first snapshot, which describes every array, is paid back
    before the next."""
    import itertools

    from jaxmemprof.capture.sampler import Sampler
    from jaxmemprof.store.writer import RunWriter

    s = Sampler(RunWriter(tmp_path / "run", {"argv": []}), interval=0.5, max_overhead=0.02)
    share = 0.01
    costs = (1e-4, 0.003, 0.05, 0.4, 2.0)
    for cost, spent, since_start, _since_last in itertools.product(costs, (0.0, 0.01, 0.3, 5.0),
                                                                  (1.0, 60.0, 3600.0), (0.0, 0.2, 10.0)):
        s._t0, s._cost, s._spent = 1000.0, cost, spent
        s._last_mono = s._t0 + since_start
        due = s.next_due()
        assert due >= s._last_mono + s.interval
        assert cost <= share * (due - s._last_mono + cost) + 1e-9  # its own time counts in the period
        assert spent + cost <= share * (due - s._t0) + 1e-9
        # and not later than one of the three rules requires
        assert min(abs(due - (s._last_mono + 0.5)), abs(due - (s._last_mono + cost * (1 / share - 1))),
                   abs(due - (s._t0 + (spent + cost) / share))) < 1e-6
    s.adaptive = False
    assert s.next_due() == s._last_mono + 0.5


def test_a_burst_of_new_arrays_is_described_once_after_it(tmp_path):
    """An interval snapshot waits until the since-start budget affords
    describing every array made since the last one: the arrays of a burst
    (a model being built, here 10,000 arrays) are described by a few
    snapshots, each within the budget, not a part by each snapshot that the
    interval and the cost of the last snapshot alone would let fall within
    it. The budget is a share of the wall time and a description costs CPU
    time: on an idle machine the burst makes arrays faster than the budget
    affords describing them and one snapshot after it describes most; on a
    loaded one the burst's wall time stretches, the budget with it, and it
    is rightly described in a few larger parts (seen: 13 snapshots, the
    largest 3,265 arrays). What holds on both is asserted."""
    n = 10_000
    script, proc, run_dir = _run(tmp_path, "burst.py", f"""
        import sqlite3, sys, time
        import jax, jax.numpy as jnp
        import jaxmemprof
        seed = jnp.zeros((1000,), jnp.float32)
        time.sleep(0.2)
        burst = []
        for i in range({n}):
            burst.append(jnp.full((3,), i, jnp.float32))  # LINE-BURST
        jaxmemprof.mark("burst made")
        # The budget affords describing them about 5 s after the start (more
        # on a busy machine): wait for that snapshot in the journal, 90 s at most.
        journal = f"file:{{sys.argv[1]}}?mode=ro"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            time.sleep(0.2)
            db = sqlite3.connect(journal, uri=True)
            described = db.execute("SELECT count(*) FROM snapshots WHERE arrays > {n}").fetchone()[0]
            db.close()
            if described:
                break
    """, tmp_path / "run" / "journal.sqlite", check=0, extra=("-q", "--interval", "0.05", "--max-overhead", "0.05"))
    run = load_run(run_dir)
    snaps = run.snapshots.set_index("snapshot")
    burst = run.arrays[run.arrays["nbytes"] == 12]
    assert len(burst) == n
    by_snapshot = burst.groupby("first_snapshot").size()
    # All described while the script slept, none left to its last snapshot
    # (checking the budget costs too, and must not put the snapshot off for ever) ...
    assert set(snaps["trigger"][by_snapshot.index]) == {"interval"}, by_snapshot.to_dict()
    # ... by a few snapshots: far fewer than the interval alone would take in
    # the time they span (it would describe a part every 0.05 s) ...
    first, last = int(by_snapshot.index.min()), int(by_snapshot.index.max())
    span = float(snaps.at[last, "t_mono"] - snaps.at[first, "t_mono"])
    assert len(by_snapshot) <= max(3, span / 0.05 / 4), (span, by_snapshot.to_dict())
    # ... each within the budget: sampling's CPU up to each of them is at most
    # half of --max-overhead of the run's time so far (with a snapshot's worth
    # of slack: the budget counts the next snapshot by estimate).
    spent = snaps["cost_s"].cumsum()
    slack = float(snaps["cost_s"].max())
    for s in by_snapshot.index:
        assert spent[s] <= 0.025 * float(snaps.at[s, "t"]) + slack, (s, spent[s], snaps.at[s, "t"])
    frames = run.stacks[int(burst["stack_id"].iloc[0])]
    assert (str(script), line_of(script, "LINE-BURST")) in [(f, ln) for f, ln, _ in frames]


def test_sampling_never_keeps_an_array_alive(tmp_path):
    """An array the program drops is freed under the sampler as under
    python: a loop that replaces a 1 MiB array never has more than the
    current one and the one being computed alive at a snapshot."""
    # Until ten interval snapshots are in the journal (however slow the
    # machine is), 60 s at most.
    _, proc, run_dir = _run(tmp_path, "churn.py", """
        import sqlite3, sys, time
        import jax.numpy as jnp
        x = jnp.zeros((256, 1024), jnp.float32)
        journal = f"file:{sys.argv[1]}?mode=ro"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for _ in range(50):
                x = x + 1
                time.sleep(0.005)
            db = sqlite3.connect(journal, uri=True)
            n = db.execute("SELECT count(*) FROM snapshots WHERE trigger = 'interval'").fetchone()[0]
            db.close()
            if n >= 10:
                break
    """, tmp_path / "run" / "journal.sqlite", check=0, extra=("-q", "--interval", "0.05"))
    run = load_run(run_dir)
    assert (run.snapshots["trigger"] == "interval").sum() >= 10
    assert run.snapshots["live_bytes"].max() <= 2 * MiB
    assert (run.arrays["how"] == "freed").sum() == len(run.arrays) - 1


def test_the_burst_check_counts_its_cost_and_serves_the_snapshot(tmp_path):
    """The check before an interval snapshot lists the live arrays: it finds
    the new ones, says the budget affords describing them only when 1% of
    the time since sampling began covers it, counts its own CPU time in the
    budget and in the next snapshot's cost, and its list is the one that
    snapshot describes."""
    script = write_script(tmp_path, "burst_check.py", """
        import json, sys, time
        import jax, jax.numpy as jnp
        from jaxmemprof.capture.sampler import Sampler
        from jaxmemprof.store.writer import RunWriter
        s = Sampler(RunWriter(sys.argv[1], {"argv": []}), interval=0.05, max_overhead=0.02)
        seed = jnp.zeros(1000)
        s.snapshot("first")
        burst = [jnp.full((3,), i, jnp.float32) for i in range(5000)]
        spent = s._spent
        at, live = s._affordable_at()
        out = {"listed": sorted(map(id, live)) == sorted(map(id, jax.live_arrays())),
               "after_start": at - s._t0, "charged": s._spent - spent, "check": s._check_cost,
               "journalled": s._checks}
        out["snapshot"] = s.snapshot("interval", live=live)
        out["checks_after"] = s._checks
        s.writer.finish()
        print(json.dumps(out))
    """)
    out = json.loads(run_script(script, tmp_path / "run").stdout)
    assert out["listed"]
    assert out["after_start"] >= 5000 * 10e-6 / 0.01  # describing them (10 us each, at first) is 1% of that
    assert out["check"] > 0 and out["check"] == out["journalled"]
    assert out["charged"] == pytest.approx(out["check"], rel=1e-9, abs=1e-12)
    run = load_run(tmp_path / "run")
    snap = run.snapshots.set_index("snapshot").loc[out["snapshot"]]
    assert (run.arrays["first_snapshot"] == out["snapshot"]).sum() == 5000
    assert snap["cost_s"] >= out["check"] and out["checks_after"] == 0


@pytest.mark.parametrize("budget, stretched", [("0.0001", True), ("0", False)])
def test_summary_says_when_the_budget_spaced_the_snapshots(tmp_path, budget, stretched):
    _, proc, run_dir = _run(tmp_path, "sleepy.py", """
        import time, jax.numpy as jnp
        x = jnp.ones((1000,))
        time.sleep(1.5)
    """, check=0, extra=("--interval", "0.05", "--max-overhead", budget))
    snaps = load_run(run_dir).snapshots
    if stretched:  # a snapshot costs ~1 ms: 2 / 0.0001 (the least --max-overhead above 0) times that apart is 20 s
        assert list(snaps["trigger"]) == ["first", "exit"]
        assert "not every 0.05 s: --max-overhead 0.0001 keeps them to 0.005% of the run" in proc.stderr
    else:  # 0: never stretched
        assert len(snaps) >= 10
        assert "--max-overhead" not in proc.stderr


def test_own_options_after_the_script_go_to_it_with_a_warning(tmp_path):
    """`run tiny.py -o tiny-run --interval 0.1`: the options are the script's
    (python passes them so); run says so once, and how to give them to
    jaxmemprof. After `--` they are meant for the script: no warning; a script
    option that is not run's: none either."""
    script = write_script(tmp_path, "tiny.py", "import sys\nprint(sys.argv[1:])\n")
    cases = [(["-o", "tiny-run", "--interval", "0.1"], "-o tiny-run"), (["--interval=0.1"], "--interval=0.1"),
             (["--quiet", "x"], "--quiet"), (["--", "-o", "x"], None), (["--epochs", "2"], None)]
    for args, given in cases:
        plain = run_script(script, *args, cwd=tmp_path)
        proc = run_cli("run", "-o", tmp_path / f"run{len(args)}{given}".replace("/", ""), "--force", script, *args,
                       cwd=tmp_path, check=0)
        assert proc.stdout == plain.stdout, args
        warned = [line for line in proc.stderr.splitlines() if "goes to" in line]
        if given is None:
            assert warned == [], proc.stderr
        else:
            assert warned == [f"jaxmemprof: warning: {given} goes to {script}, as python passes it; jaxmemprof's "
                              f"own options go before the script: jaxmemprof run {given} {script} ..."], proc.stderr
    assert not (tmp_path / "tiny-run").exists()

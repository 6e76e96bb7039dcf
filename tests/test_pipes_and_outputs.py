"""Closed pipes, output files that are not plain files, and damaged runs.

Every case runs the real command in a subprocess:

- a reader that goes away (`| head`) never changes an exit status: show,
  diff, report and export exit 0, quietly; `run` keeps the script's status
  when its own summary cannot be written;
- an output path is replaced only when it is a regular file; a FIFO or a
  device is written into; a directory, a dangling link, a read-only place or
  a full disk is a one-line error naming the path (exit 2), no traceback;
- untrusted run directories (JSON nested 100,000 deep) are read as damaged,
  never with a RecursionError.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import REPO, cpu_env, read_only_dir, run_cli, write_script
from test_fault_injection import cli_batch

RUN = REPO / "sample_runs" / "schema-1" / "mlp-leak"  # a run of known figures (its peak: snapshot 67)
LINUX_ONLY = pytest.mark.skipif(sys.platform != "linux", reason="needs Linux's /dev/full and /sys")


def jaxmemprof(*args) -> list[str]:
    return [sys.executable, "-m", "jaxmemprof", *map(str, args)]


def assert_one_line_error(proc, path, problem: str = ""):
    """Exit 2, nothing on stdout, one line on stderr naming ``path``."""
    out = f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.returncode == 2, out
    assert "Traceback" not in proc.stderr, out
    assert proc.stderr.endswith("\n") and proc.stderr.count("\n") == 1, out
    assert proc.stderr.startswith(f"jaxmemprof: error: {path}: "), out
    assert problem in proc.stderr, out


@pytest.fixture(scope="module")
def peak_profile(tmp_path_factory):
    """One real snapshot of the bundled run, as a file of its own."""
    d = tmp_path_factory.mktemp("profile")
    proc = run_cli("show", f"{RUN}@peak", "--json", check=0)
    n = json.loads(proc.stdout)["inputs"][0].rsplit("@", 1)[1]
    path = d / "peak.prof.gz"
    shutil.copy(RUN / "snapshots" / f"{int(n):06d}.prof.gz", path)
    return path


# --------------------------------------------------------------------------
# Closed pipes

READERS = {
    "show": ["show", RUN],
    "show-csv": ["show", RUN, "--csv", "-"],
    "show-json": ["show", RUN, "--json"],
    "diff": ["diff", RUN],
    "diff-csv": ["diff", RUN, "--csv", "-"],
    "report": ["report", RUN],
    "report-json": ["report", RUN, "--json"],
    "export-pprof": ["export", f"{RUN}@peak", "--format", "pprof", "-o", "-"],
    "help": ["--help"],
    "show-help": ["show", "--help"],
}


@pytest.mark.parametrize("args", list(READERS.values()), ids=list(READERS))
def test_a_closed_pipe_is_not_an_error(args):
    """The reader closes the pipe before the command writes a byte: every
    write fails with EPIPE. The command stops writing and exits 0, and says
    nothing (rich's own handler would exit 1; Python's flush at exit would
    print 'Exception ignored')."""
    proc = subprocess.Popen(jaxmemprof(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cpu_env())
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert (proc.returncode, err.decode()) == (0, "")


@pytest.mark.parametrize("command", ["show", "report", "diff"])
def test_head_of_a_long_output_exits_0(command):
    """As a user types it: `jaxmemprof report RUN | head -1`."""
    proc = subprocess.run(["bash", "-c", '"$@" | head -1; exit "${PIPESTATUS[0]}"', "sh",
                           *jaxmemprof(command, RUN, *(["--top", "0"] if command == "show" else []))],
                          capture_output=True, text=True, env=cpu_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and len(proc.stdout.splitlines()) == 1


SCRIPT_EXIT_3 = """
import sys
print("the script's own output")
sys.exit(3)
"""

SCRIPT_WITH_JAX = """
import sys
import jax.numpy as jnp
x = jnp.ones((64, 64))
print(float(x.sum()))
sys.exit(3)
"""


@pytest.mark.parametrize("source", [SCRIPT_EXIT_3, SCRIPT_WITH_JAX], ids=["plain", "jax"])
@pytest.mark.parametrize("stderr_to", ["closed-pipe", "head-1", "dev-full", "closed-fd"])
def test_run_keeps_the_script_status_when_its_summary_cannot_be_written(tmp_path, source, stderr_to):
    """`(jaxmemprof run s.py 2>&1 1>/dev/null) | head -1` and the like: the
    summary on stderr fails to be written, the exit status stays the
    script's own (3), never 1 (an exception) or 120 (a failed flush)."""
    script = write_script(tmp_path, "s.py", source)
    cmd = jaxmemprof("run", "--interval", "0.05", "-o", tmp_path / "run", script)
    if stderr_to == "closed-pipe":
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=cpu_env(), cwd=tmp_path)
        proc.stderr.close()
        status = proc.wait(timeout=300)
    elif stderr_to == "head-1":
        status = subprocess.run(["bash", "-c", '("$@" 2>&1 1>/dev/null) | head -1 >/dev/null; exit "${PIPESTATUS[0]}"',
                                 "sh", *cmd], env=cpu_env(), cwd=tmp_path, timeout=300).returncode
    elif stderr_to == "dev-full":
        with open("/dev/full", "w") as full:
            status = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=full, env=cpu_env(), cwd=tmp_path,
                                    timeout=300).returncode
    else:
        status = subprocess.run(["bash", "-c", '"$@" 2>&-', "sh", *cmd], stdout=subprocess.DEVNULL,
                                env=cpu_env(), cwd=tmp_path, timeout=300).returncode
    assert status == 3


def test_stdout_on_a_full_disk_is_a_one_line_error():
    """`show RUN --csv - > /dev/full`: stdout cannot be written."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    with open("/dev/full", "w") as full:
        proc = subprocess.run(jaxmemprof("show", RUN, "--csv", "-"), stdout=full, stderr=subprocess.PIPE,
                              text=True, env=cpu_env(), timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == "jaxmemprof: error: stdout: cannot write: No space left on device\n"


# --------------------------------------------------------------------------
# Output paths

def output_args(command, path, profile) -> list:
    if command == "show":
        return ["show", profile, "--csv", path]
    if command == "diff":
        return ["diff", profile, profile, "--csv", path]
    return ["export", profile, "--format", "pprof", "-o", path]


OUTPUT_COMMANDS = ["show", "diff", "export"]


def full_device(tmp_path, force: bool) -> str:
    """A device that answers every write with ENOSPC: a node of /dev/full's
    own device made in tmp_path where this process may (root), so that a
    reader that wrongly renames over it replaces only a scratch node; else
    /dev/full itself, only where nothing may be replaced (no --force)."""
    node = tmp_path / "full"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 7))
        return str(node)
    except (OSError, AttributeError):
        if force or not os.path.exists("/dev/full"):
            pytest.skip("cannot make a scratch /dev/full, and the real one must not be put at risk")
        return "/dev/full"


@LINUX_ONLY
@pytest.mark.parametrize("force", [False, True], ids=["", "force"])
@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_dev_full_is_written_into_and_fails_cleanly(tmp_path, peak_profile, command, force):
    """/dev/full is a device: written into (never renamed over), and the
    full disk it reports is a one-line error naming it."""
    full = full_device(tmp_path, force)
    args = output_args(command, full, peak_profile) + (["--force"] if force else [])
    assert_one_line_error(run_cli(*args, cwd=tmp_path), full, "cannot write: No space left on device")
    assert stat.S_ISCHR(os.stat(full).st_mode)


@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_a_fifo_is_written_into(tmp_path, peak_profile, command):
    """A FIFO (`--csv >(gzip > x.gz)`, or mkfifo) receives the output, as a
    shell redirection would; it stays a FIFO."""
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    run_cli(*output_args(command, fifo, peak_profile), cwd=tmp_path, check=0)
    reader.join(30)
    assert received and received[0]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    if command == "export":
        assert received[0][:2] == b"\x1f\x8b"
    else:
        assert received[0].startswith(b"site,file,line,function,")


@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_a_symlink_is_followed_and_stays_a_link(tmp_path, peak_profile, command):
    """A symlink to a regular file: refused without --force; with it, the
    file it points to is replaced and the link is kept (never renamed over)."""
    target = tmp_path / "real.out"
    target.write_bytes(b"precious\n")
    target.chmod(0o640)
    link = tmp_path / "link.out"
    link.symlink_to(target)
    assert_one_line_error(run_cli(*output_args(command, link, peak_profile), cwd=tmp_path), link, "--force")
    assert target.read_bytes() == b"precious\n"
    run_cli(*output_args(command, link, peak_profile), "--force", cwd=tmp_path, check=0)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes() != b"precious\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_a_dangling_symlink_is_refused(tmp_path, peak_profile, command):
    link = tmp_path / "dangling.out"
    link.symlink_to(tmp_path / "nowhere" / "x")
    for extra in ([], ["--force"]):
        assert_one_line_error(run_cli(*output_args(command, link, peak_profile), *extra, cwd=tmp_path), link,
                              "symlink to a file that does not exist")
    assert link.is_symlink()


@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_a_directory_is_refused(tmp_path, peak_profile, command):
    d = tmp_path / "outdir"
    d.mkdir()
    assert_one_line_error(run_cli(*output_args(command, d, peak_profile), "--force", cwd=tmp_path), d,
                          "it is a directory")
    assert d.is_dir() and not any(d.iterdir())


@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_a_missing_directory_is_a_one_line_error(tmp_path, peak_profile, command):
    out = tmp_path / "no" / "such" / "dir" / "out"
    assert_one_line_error(run_cli(*output_args(command, out, peak_profile), cwd=tmp_path), out,
                          "cannot write: No such file or directory")


@LINUX_ONLY
@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_a_read_only_place_is_a_one_line_error(tmp_path, peak_profile, command):
    out = read_only_dir(tmp_path) / "out.csv"
    assert_one_line_error(run_cli(*output_args(command, out, peak_profile), cwd=tmp_path), out, "cannot write: ")


@LINUX_ONLY
def test_export_csv_into_a_read_only_place_is_a_one_line_error(tmp_path):
    out = read_only_dir(tmp_path) / "tables"
    assert_one_line_error(run_cli("export", RUN, "--csv", out, cwd=tmp_path), out, "cannot create the directory: ")


def test_a_replaced_file_keeps_its_mode_and_leaves_no_temporary(tmp_path, peak_profile):
    out = tmp_path / "sites.csv"
    out.write_text("old\n")
    out.chmod(0o600)
    run_cli("show", peak_profile, "--csv", out, "--force", cwd=tmp_path, check=0)
    assert out.read_text().startswith("site,")
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sites.csv"]


@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_a_name_as_long_as_the_file_system_allows_is_written(tmp_path, peak_profile, command):
    """255 bytes is a legitimate name: its temporary name must not be longer."""
    out = tmp_path / ("x" * 251 + ".out")
    run_cli(*output_args(command, out, peak_profile), cwd=tmp_path, check=0)
    assert out.stat().st_size > 0
    assert [p.name for p in tmp_path.iterdir()] == [out.name]


def test_export_csv_to_stdout_is_refused(tmp_path):
    """`export --csv -` would make a directory named '-': it is refused."""
    proc = run_cli("export", RUN, "--csv", "-", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "writes a directory of files" in proc.stderr
    assert not (tmp_path / "-").exists()


def test_export_pprof_to_stdout(tmp_path):
    proc = subprocess.run(jaxmemprof("export", f"{RUN}@peak", "--format", "pprof", "-o", "-"),
                          capture_output=True, env=cpu_env(), cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout[:2] == b"\x1f\x8b" and proc.stderr == b""
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory"])
def test_export_csv_never_replaces_what_is_not_a_regular_file(tmp_path, kind):
    """In an export directory only regular files are replaced: a link, a
    FIFO (which would block) or a directory named like a table is refused,
    even with --force, before anything is written."""
    out = tmp_path / "tables"
    out.mkdir()
    entry = out / "timeline.csv"
    precious = tmp_path / "precious.txt"
    precious.write_text("mine\n")
    if kind == "symlink":
        entry.symlink_to(precious)
    elif kind == "fifo":
        os.mkfifo(entry)
    else:
        entry.mkdir()
    proc = run_cli("export", RUN, "--csv", out, "--force", cwd=tmp_path)  # a FIFO opened would block: its timeout
    assert_one_line_error(proc, entry, "not a regular file")
    assert precious.read_text() == "mine\n"
    assert sorted(p.name for p in out.iterdir()) == ["timeline.csv"]


def test_export_csv_replaces_regular_files_with_force(tmp_path):
    out = tmp_path / "tables"
    run_cli("export", RUN, "--csv", out, cwd=tmp_path, check=0)
    first = sorted(p.name for p in out.iterdir())
    assert_one_line_error(run_cli("export", RUN, "--csv", out, cwd=tmp_path), out, "--force")
    run_cli("export", RUN, "--csv", out, "--force", cwd=tmp_path, check=0)
    assert sorted(p.name for p in out.iterdir()) == first


def test_export_csv_into_a_file_is_refused(tmp_path, peak_profile):
    assert_one_line_error(run_cli("export", RUN, "--csv", peak_profile, cwd=tmp_path), peak_profile,
                          "exists and is not a directory")


# --------------------------------------------------------------------------
# Inputs in the wrong place, and damaged runs


@pytest.mark.parametrize("args, source, problem", [
    (["show", f"{RUN}@999"], RUN, "has no snapshot 999"),
    (["show", f"{RUN}@-999"], RUN, "has no snapshot -999"),
    (["show", f"{RUN}@no-such-label"], RUN, "no snapshot matches"),
    (["diff", f"{RUN}@first", f"{RUN}@999"], RUN, "has no snapshot 999"),
    (["export", f"{RUN}@999", "--format", "pprof", "-o", "x.pb.gz"], RUN, "has no snapshot 999"),
    (["report", RUN / "snapshots" / "000001.prof.gz"], RUN / "snapshots" / "000001.prof.gz", "is not a directory"),
    (["export", RUN / "manifest.json", "--csv", "t"], RUN / "manifest.json", "is not a directory"),
    (["report", "no-such-run"], "no-such-run", "no such run directory"),
    (["show", RUN / "journal.sqlite"], RUN / "journal.sqlite", "not a pprof profile"),
    (["report", f"{RUN}@peak"], f"{RUN}@peak", "take a whole run"),
    (["export", f"{RUN}@peak", "--csv", "t"], f"{RUN}@peak", "take a whole run"),
    # An empty argument (an unset variable) would otherwise mean the current directory.
    (["show", ""], "''", "an empty path"),
    (["report", ""], "''", "an empty path"),
    (["diff", "", RUN], "''", "an empty path"),
    (["export", "", "--csv", "t"], "''", "an empty path"),
    (["show", RUN, "--csv", ""], "''", "an empty path"),
    (["export", RUN, "--csv", ""], "''", "an empty path"),
    (["export", f"{RUN}@peak", "--format", "pprof", "-o", ""], "''", "an empty path"),
    (["run", ""], "''", "an empty path"),
])
def test_wrong_input_is_a_one_line_error(tmp_path, args, source, problem):
    assert_one_line_error(run_cli(*args, cwd=tmp_path), source, problem)
    assert not (tmp_path / "x.pb.gz").exists() and not (tmp_path / "t").exists()


DEEP = "[" * 100_000


def damaged_copy(tmp_path, sql=(), manifest=None) -> Path:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    if manifest is not None:
        (run / "manifest.json").write_text(manifest)
    con = sqlite3.connect(run / "journal.sqlite")
    with con:
        for statement, params in sql:
            con.execute(statement, params)
    con.close()
    return run


DAMAGE = {
    "manifest": dict(manifest=DEEP),
    "manifest-object": dict(manifest='{"argv": ' + DEEP),
    "stack-frames": dict(sql=[("UPDATE stacks SET frames = ?", (DEEP,))]),
    "array-shape": dict(sql=[("UPDATE arrays SET shape = ? WHERE array_id IN "
                              "(SELECT array_id FROM arrays LIMIT 5)", (DEEP,))]),
    "jit-call-inputs": dict(sql=[("UPDATE jit_calls SET inputs = ?, outputs = ?", (DEEP, DEEP))]),
    "jit-function-params": dict(sql=[("UPDATE jit_functions SET params = ?, donate_argnums = ?", (DEEP, DEEP))]),
    "jit-buffer-frames": dict(sql=[
        ("CREATE TABLE IF NOT EXISTS jit_buffers (function_id INTEGER, name TEXT, bytes INTEGER, shape TEXT, "
         "kind TEXT, op TEXT, frames TEXT, live_start INTEGER, live_end INTEGER, at_peak INTEGER)", ()),
        ("INSERT INTO jit_buffers SELECT function_id, 'x', 1024, 'f32[256]', 'temporary', 'jit(f)/add', ?, 0, 1, 1 "
         "FROM jit_functions", (DEEP,)),
        ("CREATE TABLE IF NOT EXISTS jit_programs (function_id INTEGER, signature TEXT, module TEXT, "
         "length INTEGER, peak_position INTEGER, peak_bytes INTEGER, argument_bytes INTEGER, "
         "output_bytes INTEGER, alias_bytes INTEGER, temp_bytes INTEGER, dump_s REAL)", ()),
        ("INSERT INTO jit_programs SELECT function_id, '', 'jit_f', 2, 1, 1024, 0, 0, 0, 1024, 0.1 "
         "FROM jit_functions", ())]),
}


def _nested_commands(run: Path, out: Path) -> list[list]:
    return [["report", run], ["show", run], ["diff", run], ["export", run, "--csv", out / "t"],
            ["report", run, "--json"]]


@pytest.fixture(scope="module")
def nested_results(tmp_path_factory):
    """Each DAMAGE case made in a directory of its own, and its five
    commands run, every case's in one batch: {case: [(args, process)]}."""
    root = tmp_path_factory.mktemp("nested")
    jobs, owners = [], []
    for damage, edits in DAMAGE.items():
        d = root / damage
        d.mkdir()
        for argv in _nested_commands(damaged_copy(d, **edits), d):
            jobs.append(argv)
            owners.append(damage)
    results: dict = {}
    # Through the CLI's entry point, two processes for them all (an exception main() let through is a
    # traceback on the command's stderr there, as it would be in a process of its own).
    for damage, args, proc in zip(owners, jobs, cli_batch(jobs, root)):
        results.setdefault(damage, []).append((args, proc))
    return results


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_json_nested_100000_deep_is_damage_not_a_crash(nested_results, damage):
    """A manifest or journal cell of 100,000 '[' (Python's parser would
    raise RecursionError) is read as damaged, with a warning, like any
    other damaged record: report, show, diff and export still work."""
    assert len(nested_results[damage]) == 5
    for args, proc in nested_results[damage]:
        assert proc.returncode == 0, (args, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr and "RecursionError" not in proc.stderr
        assert "nested" in proc.stdout + proc.stderr, (args, proc.stderr)


def test_a_manifest_that_is_a_fifo_is_not_opened(tmp_path):
    """A FIFO named manifest.json would block a reader that opened it."""
    run = damaged_copy(tmp_path)
    (run / "manifest.json").unlink()
    os.mkfifo(run / "manifest.json")
    proc = subprocess.run(jaxmemprof("show", run), capture_output=True, text=True, env=cpu_env(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "manifest.json missing" in proc.stderr


@pytest.mark.parametrize("args, writes_stdout", [
    (["show", RUN], True), (["show", RUN, "--csv", "-"], True), (["report", RUN, "--json"], True),
    (["diff", RUN], True), (["show", RUN, "--csv", "{tmp}/sites.csv"], False),
], ids=["show", "show-csv", "report-json", "diff", "show-csv-file"])
def test_a_closed_stdout_is_an_error_only_when_written_to(tmp_path, args, writes_stdout):
    """`jaxmemprof show RUN >&-`: Python starts with sys.stdout None."""
    argv = [str(a).format(tmp=tmp_path) for a in args]
    proc = subprocess.run(["bash", "-c", '"$@" >&-', "sh", *jaxmemprof(*argv)], capture_output=True, text=True,
                          env=cpu_env(), cwd=tmp_path, timeout=120)
    if writes_stdout:
        assert (proc.returncode, proc.stderr) == (2, "jaxmemprof: error: stdout: cannot write: it is closed\n")
    else:
        assert proc.returncode == 0, proc.stderr
        assert (tmp_path / "sites.csv").is_file()


@pytest.mark.parametrize("loop", ["snapshots-dir", "peak-file"])
def test_a_symlink_loop_in_a_run_is_a_missing_file(tmp_path, loop):
    """A link to itself (Path.resolve raises RuntimeError on it before Python
    3.13) is a snapshot file that is not there: skipped, with a warning. A
    symlinked snapshots/ (a loop here) is refused: a reader never follows a
    link out of a run (tests/test_symlinks.py)."""
    run = damaged_copy(tmp_path)
    if loop == "snapshots-dir":
        shutil.rmtree(run / "snapshots")
        (run / "snapshots").symlink_to("snapshots")
        proc = run_cli("report", run, cwd=tmp_path, check=2)
        assert proc.stderr.count("\n") == 1 and f"{run / 'snapshots'}: is a symlink" in proc.stderr, proc.stderr
        return
    peak = run / "snapshots" / "000067.prof.gz"
    peak.unlink()
    peak.symlink_to(peak.name)
    commands = [["report", run], ["show", run], ["diff", run], ["export", run, "--csv", tmp_path / "t"]]
    for args, proc in zip(commands, cli_batch(commands, tmp_path)):
        assert proc.returncode == 0, (args, proc.stderr[-2000:])
        assert "snapshot file(s) missing" in proc.stdout + proc.stderr


@LINUX_ONLY
@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_a_write_that_fails_midway_leaves_the_old_file_as_it_was(tmp_path, peak_profile, command):
    """The disk fills up while writing (here: RLIMIT_FSIZE makes every write
    past 64 bytes fail with EFBIG, as ENOSPC would): a one-line error, the
    file that was there is intact, and no temporary file is left behind."""
    import resource
    import signal

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of being killed
        resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))

    out = tmp_path / "out.data"
    out.write_bytes(b"precious\n")
    proc = subprocess.run(jaxmemprof(*output_args(command, out, peak_profile), "--force"), capture_output=True,
                          text=True, env=cpu_env(PYTHONDONTWRITEBYTECODE="1"), cwd=tmp_path, timeout=120,
                          preexec_fn=small_files)
    assert_one_line_error(proc, out, "cannot write: File too large")
    assert out.read_bytes() == b"precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.data"]


def test_at_signs_in_run_names_labels_and_files(tmp_path):
    """`RUN@SEL` splits at the last '@' whose left side is a directory, so a
    run named a@b and a label step@10 both work; a file that exists as it is
    (runs@1.prof beside a directory runs) is that file."""
    run = tmp_path / "a@b"
    shutil.copytree(RUN, run)
    con = sqlite3.connect(run / "journal.sqlite")
    with con:
        con.execute("UPDATE snapshots SET label = 'step@10' WHERE snapshot = 9")
    con.close()
    (tmp_path / "runs").mkdir()
    shutil.copy(RUN / "snapshots" / "000067.prof.gz", tmp_path / "runs@1.prof")
    expected = {f"{run}@peak": f"{run}@67", str(run): f"{run}@67", f"{run}@step@10": f"{run}@9",
                "runs@1.prof": "runs@1.prof"}
    *shown, missing = cli_batch([["show", spec, "--json"] for spec in expected] + [["show", f"{run}@step@11"]],
                                tmp_path)
    for (spec, name), proc in zip(expected.items(), shown):
        assert proc.returncode == 0, (spec, proc.stderr)
        assert json.loads(proc.stdout)["inputs"] == [name]
    assert_one_line_error(missing, run, "no snapshot matches 'step@11'")


@LINUX_ONLY
@pytest.mark.parametrize("args, status", [
    (["show", "missing.prof"], 2), (["show", "{damaged}"], 0), (["report", "{damaged}"], 0),
    (["export", "{damaged}", "--csv", "{tmp}/t", "--force"], 0), (["report", "{damaged}@peak"], 2),
], ids=["error", "show-warnings", "report-warnings", "export-warnings", "usage"])
def test_a_stderr_that_cannot_be_written_does_not_change_the_status(tmp_path, args, status):
    """Errors and warnings go to a stderr on a full disk, or one closed:
    the exit status is what it would have been, and no traceback follows."""
    damaged = damaged_copy(tmp_path, manifest="{")  # a warning: manifest.json unreadable
    argv = [a.format(damaged=damaged, tmp=tmp_path) for a in args]

    def with_stderr(redirect):
        return subprocess.run(["bash", "-c", f'"$@" {redirect}', "sh", *jaxmemprof(*argv)], stdout=subprocess.DEVNULL,
                              env=cpu_env(), cwd=tmp_path, timeout=120)

    redirects = ("2>/dev/full", "2>&-")
    if "--force" in argv:  # the second writes over the first's output: one after the other
        procs = [with_stderr(r) for r in redirects]
    else:
        with ThreadPoolExecutor(2) as pool:
            procs = list(pool.map(with_stderr, redirects))
    for redirect, proc in zip(redirects, procs):
        assert proc.returncode == status, redirect

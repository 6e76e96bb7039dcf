"""What fills a jitted function's own peak, by line: XLA's dump of each
function's largest signature, read and attributed to the user's lines.

Programs with known buffers at known lines run under `jaxmemprof run`; the
buffers live at each program's peak must be found at those lines with those
sizes, add up to XLA's own peak, and the dump's allocations by kind must
equal memory_analysis() of the same signature.
"""

from __future__ import annotations

import sqlite3

import pandas as pd
import pytest

from conftest import line_of, run_cli, write_script

from jaxmemprof.analysis.inside_jit import largest_buffers, peak_by_line
from jaxmemprof.analysis.rules.inside_jit import inside_jit_findings
from jaxmemprof.analysis.sites import Attribution
from jaxmemprof.store.reader import load_run
from jaxmemprof.render.findings import words
from jaxmemprof.analysis.attributed import attribute

MiB = 1024 * 1024

PROGRAM = """
import sys
import jax, jax.numpy as jnp
from jax import lax

CHANGED = "--changed" in sys.argv


def sorted_copy(x, w):
    a = x @ w  # LINE-A
    b = jnp.sort(a, axis=1)  # LINE-B
    return b, a


def reduced(x, w):
    a = x @ w  # LINE-RA
    b = a if CHANGED else jnp.sort(a, axis=1)  # LINE-RB
    return b.sum(axis=0), a


def scanned(h0, w):
    def body(h, _):
        h = jnp.tanh(h @ w)  # LINE-BODY
        return h, h
    h, hs = lax.scan(body, h0, None, length=8)  # LINE-SCAN
    return h, hs.sum(axis=0)


def loss(params, x):
    h = x
    for w in params:
        h = jnp.tanh(h @ w)  # LINE-ACT
    return (h ** 2).mean()


def grad_step(params, x):
    g = jax.grad(loss)(params, x)
    return [p - 0.1 * gi for p, gi in zip(params, g)]


x = jnp.ones((512, 512))
w = jnp.ones((512, 512)) * 0.01
f, r, s, g = jax.jit(sorted_copy), jax.jit(reduced), jax.jit(scanned), jax.jit(grad_step)
params = [jnp.ones((512, 512)) * 0.01 for _ in range(4)]
batch = jnp.ones((1024, 512))
for i in range(3):
    out = f(x, w)
    out = r(x, w)
    h = s(x[:256, :256], w[:256, :256])
    params = g(params, batch)
import time

time.sleep(float(sys.argv[sys.argv.index("--linger") + 1]) if "--linger" in sys.argv else 0)
"""


def _record(tmp_path, *args, name="run", options=()):
    script = write_script(tmp_path, "inside.py", PROGRAM)
    run_cli("run", "-q", *options, "-o", tmp_path / name, script, *args, cwd=tmp_path, check=0)
    run = load_run(tmp_path / name)
    return script, run, Attribution(roots=(run.manifest["cwd"],))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    # A run long enough, and a budget large enough, that every dump is made even on a busy machine
    # (the dumps may take half of the run's time).
    return _record(tmp_path_factory.mktemp("inside"), "--linger", "2", options=("--max-overhead", "1"))


def _function_id(run, name):
    fns = run.jit.functions
    return int(fns.loc[fns["name"] == name, "function_id"].item())


def _rows(table, run, name):
    return table[table["function_id"] == _function_id(run, name)]


def test_totals_are_xlas_own(recorded):
    _, run, att = recorded
    assert run.events.empty or not (run.events["kind"] == "probe-error").any()
    programs = run.jit.programs.set_index("function_id")
    compiles = run.jit.compiles.drop_duplicates("function_id").set_index("function_id")
    peaks = peak_by_line(attribute(run))
    assert set(programs.index) == {_function_id(run, n) for n in ("sorted_copy", "reduced", "scanned", "grad_step")}
    for fid, p in programs.iterrows():
        # The dump's allocations by kind are memory_analysis()'s figures, to the byte.
        c = compiles.loc[fid]
        assert (p["argument_bytes"], p["output_bytes"], p["alias_bytes"], p["temp_bytes"]) == (
            c["argument_bytes"], c["output_bytes"], c["alias_bytes"], c["temp_bytes"])
        # The lines' bytes at the peak add up to XLA's live-range peak.
        assert peaks.loc[peaks["function_id"] == fid, "bytes"].sum() == p["peak_bytes"]


def test_a_matmul_and_its_sorted_copy_at_their_lines(recorded):
    script, run, att = recorded
    rows = _rows(peak_by_line(attribute(run)), run, "sorted_copy").set_index("site")
    a = f"inside.py:{line_of(script, 'LINE-A')} (sorted_copy)"
    b = f"inside.py:{line_of(script, 'LINE-B')} (sorted_copy)"
    assert rows.loc[a, "bytes"] == rows.loc[b, "bytes"] == MiB  # float32[512,512] each, both live at the peak
    assert rows.loc["argument x", "bytes"] == rows.loc["argument w", "bytes"] == MiB
    assert rows.loc[a, "kind"] == rows.loc[b, "kind"] == "output"


def test_a_scan_carries_its_stacked_activations(recorded):
    script, run, att = recorded
    rows = _rows(peak_by_line(attribute(run)), run, "scanned")
    stacked = rows[rows["line"] == line_of(script, "LINE-SCAN")]
    assert stacked["bytes"].sum() >= 8 * 256 * 256 * 4  # the scan's stacked outputs, made at the scan's line
    buffers = _rows(largest_buffers(attribute(run)), run, "scanned")
    top = buffers.iloc[0]
    assert top["bytes"] == 8 * 256 * 256 * 4 and top["shape"] == "f32[8,256,256]"
    assert top["live_start"] < top["live_end"] <= top["program_length"]


def test_kept_activations_get_no_remat_finding_where_the_compiled_wrap_does_not_lower_the_peak(recorded):
    script, run, att = recorded
    rows = _rows(peak_by_line(attribute(run)), run, "grad_step")
    act = f"inside.py:{line_of(script, 'LINE-ACT')} (loss)"
    # tanh outputs of the layers, float32[1024,512] each, kept for the backward pass (XLA reuses one
    # buffer for two of them: each buffer counts once)
    assert rows.loc[rows["site"] == act, "bytes"].sum() >= 2 * 1024 * 512 * 4
    # The layers are inline in loss's Python loop: wrapping loss in jax.checkpoint was compiled at the end of the
    # run and does not lower the peak on CPU (XLA computes the recomputation early), so there is no remat finding
    # (issue 53: a remat that does not lower the peak is not a finding; tests/test_remat.py has those that do).
    found = [f for f in inside_jit_findings(attribute(run)) if f.rule == "remat"]
    w = run.jit.whatif
    tried = w[w["change"].str.contains('"remat"')]
    assert len(tried) and all('"function": "loss"' in c for c in tried["change"])
    over = tried["error"].astype(str).str.contains("budget").any()  # a loaded machine: past the compile budget
    assert found == [] or (over and "(compiled)" not in words(found[0]).saves)


def test_changing_one_line_changes_what_the_call_needs(recorded, tmp_path):
    """Without the sort (b = a), the program loses exactly the sorted copy's
    temporary buffer (XLA's temporaries, as memory_analysis() counts them),
    and its line makes no buffer any more."""
    script, before, att = recorded
    _, after, att_after = _record(tmp_path, "--changed", name="changed")
    line = line_of(script, "LINE-RB")
    temps = [r.jit.programs.set_index("function_id").loc[_function_id(r, "reduced"), "temp_bytes"]
             for r in (before, after)]
    assert temps[0] - temps[1] == MiB
    old = _rows(largest_buffers(attribute(before)), before, "reduced")
    new = _rows(largest_buffers(attribute(after)), after, "reduced")
    sorted_buffer = old[(old["site"] == f"inside.py:{line} (reduced)") & (old["kind"] == "temporary")]
    assert sorted_buffer["bytes"].tolist() == [MiB] and sorted_buffer["shape"].tolist() == ["f32[512,512]"]
    assert not ((new["site"] == f"inside.py:{line} (reduced)") & (new["kind"] == "temporary")).any()


def test_at_its_peak_a_program_holds_no_more_than_its_allocations(recorded):
    """Values that share one buffer (an op's output and what it is passed on
    as) count once: what the lines hold at the peak is never more than XLA's
    allocations for the call (arguments + outputs - aliased + temporaries)."""
    _, run, att = recorded
    programs = run.jit.programs
    for p in programs.itertuples():
        allocated = p.argument_bytes + p.output_bytes - p.alias_bytes + p.temp_bytes
        assert p.peak_bytes <= allocated
    # sorted_copy on float32[512,512]: x, w, a and its sorted copy, 4 MiB, none counted twice.
    rows = _rows(peak_by_line(attribute(run)), run, "sorted_copy")
    assert rows["program_peak_bytes"].iloc[0] <= 4 * MiB + 64


def test_xla_strings_are_read_as_xla_writes_them():
    """Quoted names with C escapes (a non-ASCII path's UTF-8 bytes in octal)
    and op names holding braces and quotes."""
    from jaxmemprof.xla.dump import METADATA, unquote, instructions

    assert unquote(r'"/tmp/\303\274n\303\257 dir/p.py"') == "/tmp/ünï dir/p.py"
    line = ('  %sine.1 = f32[4]{0} sine(%x), metadata={op_name="jit(f)/we}ird\\"sc{ope/sin" stack_frame_id=3}, '
            'backend_config={}')
    assert METADATA.search(line).group(1).endswith("stack_frame_id=3")
    assert instructions(line)["sine.1"] == ("f32[4]", "sine", 'jit(f)/we}ird"sc{ope/sin', 3)


IN_MAIN = """
import jax
import jax.numpy as jnp


def step(x, w):
    return jnp.sort(x @ w, axis=1)  # LINE-SORT


def main():
    f = jax.jit(step)  # dropped when main() returns, before the run ends
    x = jnp.ones((256, 256), jnp.float32)
    for _ in range(3):
        x = f(x, x)
    print(float(x[0, 0]))


main()
"""


def test_a_function_jitted_in_main_has_its_dump(tmp_path):
    script = write_script(tmp_path, "in_main.py", IN_MAIN)
    run_cli("run", "-q", "--max-overhead", "1", "-o", tmp_path / "run", script, cwd=tmp_path, check=0)
    run = load_run(tmp_path / "run")
    assert len(run.jit.programs) == 1
    rows = peak_by_line(attribute(run))
    assert f"in_main.py:{line_of(script, 'LINE-SORT')} (step)" in set(rows["site"])


SIGNATURES = """
import jax
import jax.numpy as jnp


def step(x):
    return jnp.sort(x @ x, axis=1)  # LINE-SIG


f = jax.jit(step)
for n in (256, 512, 128):  # three signatures, the middle one the largest
    x = jnp.ones((n, n), jnp.float32)
    for _ in range(2):
        x = f(x)
print(float(x[0, 0]))
"""


SHARDINGS = """
import jax
jax.config.update("jax_num_cpu_devices", 4)
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

mesh = jax.make_mesh((4,), ("d",))
f = jax.jit(lambda x: jnp.sin(x) * 2 + x.sum())
rows = jax.device_put(jnp.ones((64, 64)), NamedSharding(mesh, P("d", None)))
whole = jax.device_put(jnp.ones((64, 64)), NamedSharding(mesh, P()))
for i in range(3):  # calls alternating between two shardings of the same shape: two executables
    f(rows).block_until_ready()
    f(whole).block_until_ready()
"""


def test_calls_alternating_between_shardings_analyse_each_executable_once(tmp_path):
    script = write_script(tmp_path, "shardings.py", SHARDINGS)
    run_cli("run", "-q", "-o", tmp_path / "run", script, cwd=tmp_path, check=0)
    run = load_run(tmp_path / "run")
    compiles = run.jit.compiles
    assert sorted(compiles["signature"]) == ["float32[64,64]@[16,64]x4", "float32[64,64]@[64,64]x4"]
    programs = run.jit.programs
    assert sorted(programs["signature"]) == sorted(compiles["signature"])  # each read once
    assert int(run.jit.counts["compiles"].iloc[0]) == 2


LEFTOVER = """
import functools
import jax
import jax.numpy as jnp

@functools.partial(jax.jit, donate_argnums=(0,))
def step(w, x):
    return w - 0.1 * jnp.mean(x @ w) * w

w = jnp.ones((256, 256))
data = jnp.ones((104, 256))
for i in range(0, 104, 32):  # three batches of 32, then the leftover 8: its own executable
    w = step(w, data[i:i + 32])
print(float(w[0, 0]))
"""


def test_a_donated_steps_leftover_last_batch_is_analysed_too(tmp_path):
    """The last call compiles anew (a smaller batch) and deletes its donated
    argument: its executable is still analysed, from the arguments' shapes."""
    script = write_script(tmp_path, "leftover.py", LEFTOVER)
    run_cli("run", "-q", "-o", tmp_path / "run", script, cwd=tmp_path, check=0)
    run = load_run(tmp_path / "run")
    compiles = run.jit.compiles.set_index("signature")
    assert sorted(compiles.index) == ["float32[256,256], float32[32,256]", "float32[256,256], float32[8,256]"]
    assert (compiles["alias_bytes"] == 256 * 256 * 4).all()  # each donates w
    assert sorted(run.jit.programs["signature"]) == sorted(compiles.index)


def test_every_signature_is_read_from_its_executable(tmp_path):
    """Each signature of a function gets XLA's figures when it is compiled,
    from the executable (no dump: no "xla-dump" event, however small the
    run's share for overhead); the buffers by line are the largest
    signature's, and its line holds XLA's figures for it: x @ x and its
    sorted copy, float32[512,512] each."""
    script = write_script(tmp_path, "sigs.py", SIGNATURES)
    run_cli("run", "-q", "--max-overhead", "0.01", "-o", tmp_path / "run", script, cwd=tmp_path, check=0)
    run = load_run(tmp_path / "run")
    events = run.events
    assert events.empty or not events["kind"].isin(["probe-error", "xla-dump"]).any(), events
    programs = run.jit.programs
    assert sorted(programs["signature"]) == ["float32[128,128]", "float32[256,256]", "float32[512,512]"]
    by_signature = programs.set_index("signature")
    # each signature's peak: its argument, x @ x and its sorted copy (n*n*4 bytes each), at least
    for n in (128, 256, 512):
        assert by_signature.loc[f"float32[{n},{n}]", "peak_bytes"] >= 2 * n * n * 4
    # the reading took a fraction of a second per program
    assert (programs["dump_s"] < 1.0).all()
    rows = peak_by_line(attribute(run))
    # Every signature's buffers, each at its own program's peak, the largest first and marked.
    assert {s: set(g["program_peak_bytes"]) for s, g in rows.groupby("signature")} == {
        s: {int(by_signature.loc[s, "peak_bytes"])} for s in by_signature.index}
    assert list(dict.fromkeys(rows["signature"]))[0] == "float32[512,512]"
    assert set(rows.loc[rows["largest_signature"], "signature"]) == {"float32[512,512]"}
    for n in (128, 256, 512):
        mine = rows[rows["signature"] == f"float32[{n},{n}]"]
        line = mine[mine["site"] == f"sigs.py:{line_of(script, 'LINE-SIG')} (step)"]
        assert line["bytes"].sum() >= n * n * 4
        assert mine["bytes"].sum() <= by_signature.loc[f"float32[{n},{n}]", "peak_bytes"]
    # The exports carry every signature's rows, each signature once, though the journal held one twice.
    con = sqlite3.connect(tmp_path / "run" / "journal.sqlite")
    with con:
        con.execute("INSERT INTO jit_buffers SELECT * FROM jit_buffers WHERE signature = 'float32[256,256]'")
    con.close()
    run_cli("export", tmp_path / "run", "--csv", tmp_path / "csv", cwd=tmp_path, check=0)
    buffers, curve = (pd.read_csv(tmp_path / "csv" / name) for name in ("jit_buffers.csv", "jit_curve.csv"))
    assert set(buffers["signature"]) == set(curve["signature"]) == set(by_signature.index)
    once = largest_buffers(attribute(load_run(tmp_path / "run")))
    assert len(buffers) == len(once) and not buffers.duplicated(["signature", "name"]).any()

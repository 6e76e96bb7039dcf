"""Bad input files: every one is refused the same clean way.

For ``show X``, ``diff X GOOD`` and ``diff GOOD X``, a bad X must give exit
status 2, exactly one line on stderr that starts ``jaxmemprof: error: `` and
names X, no traceback, and nothing on stdout. Hand-made bytes are built with
``profile_pb2`` so that exactly one thing is wrong with each profile.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import struct
import subprocess
import sys
import textwrap
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import cpu_env, run_cli, run_script, write_script

from jaxmemprof.analysis.sites import Attribution
from jaxmemprof.analysis.groups import summarize
from jaxmemprof.errors import InputError
from jaxmemprof.pprof import profile_pb2 as pb
from jaxmemprof.pprof.reader import DEFAULT_MAX_DECOMPRESSED, Profile, load_profile

KiB, MiB, GiB = 1024, 1024**2, 1024**3


# --------------------------------------------------------------------------
# Inputs


@pytest.fixture(scope="session")
def real_profile(tmp_path_factory):
    """A small device-memory profile recorded by real JAX (gzip, as JAX writes it)."""
    d = tmp_path_factory.mktemp("real")
    script = write_script(
        d,
        "record.py",
        """
        import sys
        import jax
        import jax.numpy as jnp

        x = jnp.ones((256, 256))
        y = jax.jit(lambda a: a * 2.0)(x)
        z = jnp.arange(1000.0)
        with open(sys.argv[1], "wb") as f:
            f.write(jax.profiler.device_memory_profile())
        """,
    )
    run_script(script, "real.prof", cwd=d)
    path = d / "real.prof"
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    return path


STRINGS = [b"", b"allocations", b"count", b"space", b"bytes", b"train_step", b"/home/u/train.py",
           b"kind", b"buffer", b"device", b"cpu:0", b"/lib/libfoo.so"]
S = {s: i for i, s in enumerate(STRINGS)}


def valid_message() -> pb.Profile:
    """A small valid profile: two sample types, one function, one mapped
    location without symbols, two samples with JAX's labels."""
    p = pb.Profile()
    p.string_table.extend(STRINGS)
    p.sample_type.add(type=S[b"allocations"], unit=S[b"count"])
    p.sample_type.add(type=S[b"space"], unit=S[b"bytes"])
    p.default_sample_type = S[b"space"]
    p.mapping.add(id=1, filename=S[b"/lib/libfoo.so"])
    p.function.add(id=1, name=S[b"train_step"], system_name=S[b"train_step"], filename=S[b"/home/u/train.py"])
    p.location.add(id=1, line=[pb.Line(function_id=1, line=12)])
    p.location.add(id=2, mapping_id=1, address=0x1234)
    for locs, value in (([1], 4096), ([2, 1], 1024)):
        s = p.sample.add(location_id=locs, value=[1, value])
        s.label.add(key=S[b"kind"], str=S[b"buffer"])
        s.label.add(key=S[b"device"], str=S[b"cpu:0"])
    p.comment.append(S[b"train_step"])
    return p


def mutated(fn) -> bytes:
    p = valid_message()
    fn(p)
    return p.SerializeToString()


def _set(obj, field, value):
    setattr(obj, field, value)


def _wrong_first_string(p):
    p.string_table[0] = b"oops"


def _no_strings(p):
    del p.string_table[:]


def _values(p, values):
    del p.sample[0].value[:]
    p.sample[0].value.extend(values)


def gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def random_bytes(seed: int, n: int) -> bytes:
    rng = random.Random(seed)
    data = bytes(rng.randrange(256) for _ in range(n))
    assert data[:2] != b"\x1f\x8b"
    return data


ZEROS_1MIB = b"\0" * MiB


def gzip_bomb(mib: int) -> bytes:
    """A valid gzip stream of ``mib`` MiB of zeros, about 1 KiB per MiB,
    built without compressing it all: after a full flush the compressor's
    output for the same input repeats, so one block is repeated."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    c.compress(ZEROS_1MIB)
    c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(ZEROS_1MIB) + c.flush(zlib.Z_FULL_FLUSH)
    end = c.flush()
    crc = 0
    for _ in range(mib):
        crc = zlib.crc32(ZEROS_1MIB, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return header + block * mib + end + struct.pack("<II", crc, (mib * MiB) & 0xFFFFFFFF)


def test_gzip_bomb_helper_is_a_real_gzip_stream():
    assert gzip.decompress(gzip_bomb(3)) == b"\0" * (3 * MiB)


def padded_profile(min_size: int) -> bytes:
    """A valid raw pprof of at least ``min_size`` bytes (long function names)."""
    p = valid_message()
    names = len(p.string_table)
    n = min_size // 1000 + 1
    for i in range(n):
        p.string_table.append(f"fn_{i:06d}_".encode() + b"x" * 990)
        p.function.add(id=100 + i, name=names + i, filename=S[b"/home/u/train.py"])
        p.location.add(id=100 + i, line=[pb.Line(function_id=100 + i, line=i + 1)])
        p.sample.add(location_id=[100 + i], value=[1, 1000 + i])
    data = p.SerializeToString()
    assert len(data) >= min_size
    return data


# Each case: (id, content, extra CLI arguments, a regex the problem must match).
# content: the file's bytes; None: no file; "DIR": a directory; a function:
# the file's bytes made from the real profile's.
CASES = [
    ("missing", None, [], r"no such file"),
    ("directory", "DIR", [], r"directory"),
    ("empty", b"", [], r"empty"),
    ("random-bytes", random_bytes(1, 4096), [], r"not a pprof profile"),
    ("random-bytes-2", random_bytes(2, 100), [], r"not a pprof profile"),
    ("gzip-magic-then-garbage", b"\x1f\x8b" + random_bytes(3, 500), [], r"gzip"),
    ("json-text", json.dumps({"samples": [1, 2, 3], "name": "x"}).encode(), [], r"not a pprof profile"),
    ("gzip-of-json", gz(json.dumps({"samples": [1, 2, 3], "name": "x"}).encode()), [], r"not a pprof profile"),
    ("gzip-of-text", gz(b"this is not a profile\n" * 50), [], r"not a pprof profile"),
    ("gzip-of-nothing", gz(b""), [], r"nothing"),
    ("gzip-of-zero-bytes", gz(b"\0" * 64), [], r"not a pprof profile"),
    ("bare-protobuf-no-strings", b"\x08\x01", [], r"not a pprof profile"),
    ("sample-missing-location", mutated(lambda p: p.sample[0].location_id.__setitem__(0, 99)), [],
     r"sample 0 .*location 99"),
    ("location-missing-function", mutated(lambda p: _set(p.location[0].line[0], "function_id", 77)), [],
     r"location 1 .*function 77"),
    ("location-missing-mapping", mutated(lambda p: _set(p.location[1], "mapping_id", 5)), [],
     r"location 2 .*mapping 5"),
    ("function-name-past-table", mutated(lambda p: _set(p.function[0], "name", 1000)), [], r"string 1000"),
    ("function-name-negative", mutated(lambda p: _set(p.function[0], "name", -1)), [], r"string -1"),
    ("function-file-past-table", mutated(lambda p: _set(p.function[0], "filename", len(STRINGS))), [],
     rf"string {len(STRINGS)}\b"),
    ("mapping-file-past-table", mutated(lambda p: _set(p.mapping[0], "filename", 500)), [], r"string 500"),
    ("label-key-past-table", mutated(lambda p: _set(p.sample[0].label[0], "key", 400)), [], r"label.*string 400"),
    ("label-str-past-table", mutated(lambda p: _set(p.sample[1].label[1], "str", 401)), [], r"label.*string 401"),
    ("sample-type-past-table", mutated(lambda p: _set(p.sample_type[1], "unit", 300)), [], r"string 300"),
    ("default-type-past-table", mutated(lambda p: _set(p, "default_sample_type", 301)), [], r"string 301"),
    ("comment-past-table", mutated(lambda p: p.comment.append(302)), [], r"string 302"),
    ("too-few-values", mutated(lambda p: _values(p, [4096])), [], r"sample 0 has 1 values for 2"),
    ("too-many-values", mutated(lambda p: _values(p, [1, 2, 3])), [], r"sample 0 has 3 values for 2"),
    ("no-values", mutated(lambda p: _values(p, [])), [], r"sample 0 has 0 values for 2"),
    ("string-table-not-starting-empty", mutated(_wrong_first_string), [], r"string table"),
    ("no-string-table", mutated(_no_strings), [], r"string table"),
    ("no-sample-types", mutated(lambda p: p.ClearField("sample_type")), [], r"sample types"),
    ("gzip-bomb-10MiB", gzip_bomb(10), ["--max-decompressed", "1MiB"], r"more than 1048576 bytes"),
    ("gzip-bomb-many-members", gz(b"\0" * (400 * KiB)) * 4, ["--max-decompressed", "1MiB"],
     r"more than 1048576 bytes"),
    ("raw-profile-over-limit", padded_profile(2 * MiB), ["--max-decompressed", "1MiB"], r"1048576"),
]


def _truncations():
    # A gzip stream cut short: inside the header, mid-stream, inside the trailer.
    return [("truncated-gzip-header", 6), ("truncated-gzip-half", 0.5), ("truncated-gzip-trailer", -4),
            ("truncated-gzip-last-byte", -1)]


POSITIONS = ["show", "diff-base", "diff-new"]


def make_input(tmp_path, real_profile, case_id, content):
    path = tmp_path / f"{case_id}.prof"
    if content is None:
        return path
    if content == "DIR":
        path.mkdir()
        return path
    if callable(content):
        content = content(real_profile.read_bytes())
    path.write_bytes(content)
    return path


def args_for(position, bad, good):
    if position == "show":
        return ["show", bad]
    if position == "diff-base":
        return ["diff", bad, good]
    return ["diff", good, bad]


def assert_refused(proc, path, problem: str | None = None):
    """Exit 2, one line on stderr naming ``path``, no traceback, no stdout."""
    out = f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.returncode == 2, out
    assert proc.stdout == "", out
    assert "Traceback" not in proc.stderr + proc.stdout, out
    assert proc.stderr.endswith("\n") and proc.stderr.count("\n") == 1, out
    prefix = f"jaxmemprof: error: {path}: "
    assert proc.stderr.startswith(prefix), out
    if problem is not None:
        assert re.search(problem, proc.stderr[len(prefix):]), out


def _truncated(fraction_or_cut):
    def cut(data: bytes) -> bytes:
        if isinstance(fraction_or_cut, float):
            return data[: int(len(data) * fraction_or_cut)]
        return data[:fraction_or_cut]
    return cut


def _bad_crc(data: bytes) -> bytes:
    b = bytearray(data)
    b[-8] ^= 0x01  # the CRC-32 of the gzip trailer
    return bytes(b)


ALL_CASES = CASES + [
    (name, _truncated(cut), [], r"truncated gzip") for name, cut in _truncations()
] + [
    ("gzip-bad-crc", _bad_crc, [], r"corrupt gzip"),
    ("gzip-then-garbage", lambda data: data + b"garbage!", [], r"after the end of the gzip stream"),
]


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("case_id, content, extra, problem", ALL_CASES, ids=[c[0] for c in ALL_CASES])
def test_bad_input_is_refused_cleanly(tmp_path, real_profile, position, case_id, content, extra, problem):
    bad = make_input(tmp_path, real_profile, case_id, content)
    proc = run_cli(*args_for(position, bad, real_profile), *extra, cwd=tmp_path)
    assert_refused(proc, bad, problem)


def test_hand_built_profile_is_valid_before_mutation(tmp_path, real_profile):
    """The control for the mutations above: the unmutated profile is read."""
    path = tmp_path / "valid.prof"
    path.write_bytes(valid_message().SerializeToString())
    doc = json.loads(run_cli("show", path, "--by", "function", "--json", cwd=tmp_path, check=0).stdout)
    assert doc["totals"] == {"bytes": 4096 + 1024, "count": 2}
    assert {r["function"]: r["bytes"] for r in doc["rows"]} == {"train_step": 4096, "0x1234": 1024}
    run_cli("diff", path, real_profile, cwd=tmp_path, check=0)
    run_cli("diff", real_profile, path, cwd=tmp_path, check=0)


def test_both_inputs_bad_names_the_base(tmp_path):
    a, b = tmp_path / "a.prof", tmp_path / "b.prof"
    a.write_bytes(b"")
    b.write_bytes(b"junk")
    assert_refused(run_cli("diff", a, b, cwd=tmp_path), a, r"empty")


# --------------------------------------------------------------------------
# The decompression limit


def test_max_decompressed_lets_a_large_legitimate_profile_through(tmp_path):
    raw = padded_profile(3 * MiB)
    path = tmp_path / "large.prof"
    path.write_bytes(gz(raw))
    assert path.stat().st_size < MiB  # the limit is met while decompressing, not by the file size
    assert_refused(run_cli("show", path, "--max-decompressed", "1MiB", cwd=tmp_path), path,
                   r"decompresses to more than 1048576 bytes")
    expected = pb.Profile.FromString(raw)
    total = sum(s.value[1] for s in expected.sample)
    for extra in (["--max-decompressed", "8MiB"], []):
        doc = json.loads(run_cli("show", path, "--json", *extra, cwd=tmp_path, check=0).stdout)
        assert doc["totals"]["bytes"] == total
        assert doc["totals"]["count"] == len(expected.sample)
    # Exactly at the limit is allowed; one byte less is not.
    run_cli("show", path, "--max-decompressed", str(len(raw)), "--json", cwd=tmp_path, check=0)
    assert_refused(run_cli("show", path, "--max-decompressed", str(len(raw) - 1), cwd=tmp_path), path,
                   rf"more than {len(raw) - 1} bytes")


_MEASURE = textwrap.dedent(
    """
    import json, resource, subprocess, sys
    limit = int(sys.argv[1])

    def cap():
        if limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    p = subprocess.run([sys.executable, "-m", "jaxmemprof", *sys.argv[2:]],
                       capture_output=True, text=True, preexec_fn=cap, timeout=300)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    print(json.dumps({"rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr, "peak": peak}))
    """
)


def run_cli_measured(*args, cwd, address_space: int) -> tuple[subprocess.CompletedProcess, int]:
    """Run the CLI with its address space capped (0: not capped); return it
    and its peak RSS in bytes (measured by a fresh parent whose only child it is)."""
    env = cpu_env(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", _MEASURE, str(address_space), *map(str, args)],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    return subprocess.CompletedProcess(args, r["rc"], r["stdout"], r["stderr"]), r["peak"]


LINUX_ONLY = pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS and ru_maxrss in KiB are Linux's")


@LINUX_ONLY
@pytest.mark.parametrize("extra", [[], ["--max-decompressed", "64MiB"]])
def test_small_profile_reads_with_capped_address_space(tmp_path, extra):
    """A 300-byte profile needs no more memory because the limit on
    decompressed bytes is large (128 MiB by default): reading must not reserve
    the whole limit up front (machines with `ulimit -v` would fail)."""
    small = tmp_path / "small.prof"
    small.write_bytes(valid_message().SerializeToString())
    proc, _ = run_cli_measured("show", small, *extra, cwd=tmp_path, address_space=1 * GiB)
    assert proc.returncode == 0, proc.stderr
    assert "train.py:12 (train_step)" in proc.stdout


@LINUX_ONLY
def test_gzip_bomb_is_refused_in_bounded_memory(tmp_path):
    """A 2 MiB file that inflates to 2 GiB, read with a 64 MiB limit in a
    process capped at 1.5 GiB of address space: refused cleanly, and the
    peak RSS stays within a few times the limit of that of reading a tiny
    profile (a reader that inflated it all would need 2 GiB or more)."""
    small = tmp_path / "small.prof"
    small.write_bytes(valid_message().SerializeToString())
    bomb = tmp_path / "bomb.prof"
    bomb.write_bytes(gzip_bomb(2048))
    assert bomb.stat().st_size < 4 * MiB
    cap = int(1.5 * GiB)
    ok, baseline = run_cli_measured("show", small, "--max-decompressed", "64MiB", cwd=tmp_path, address_space=0)
    assert ok.returncode == 0, ok.stderr
    for args in (["show", bomb], ["diff", small, bomb]):
        proc, peak = run_cli_measured(*args, "--max-decompressed", "64MiB", cwd=tmp_path, address_space=cap)
        assert_refused(proc, bomb, r"more than 67108864 bytes")
        assert peak - baseline < 4 * 64 * MiB, f"peak RSS {peak / MiB:.0f} MiB vs {baseline / MiB:.0f} MiB"


@LINUX_ONLY
@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_device_is_refused_before_it_is_read(tmp_path, device):
    """A path that is not a regular file has no size to check up front
    (/dev/zero never ends): it is refused from stat() alone, under the
    default limit, in a process that could not hold 4 GiB."""
    proc, peak = run_cli_measured("show", device, cwd=tmp_path, address_space=int(1.5 * GiB))
    assert_refused(proc, device, r"is a character device, not a regular file")
    assert peak < 1 * GiB, peak


@LINUX_ONLY
def test_a_sparse_file_over_the_limit_is_refused_from_its_size(tmp_path):
    """An 8 GiB sparse file (no disk used) is refused from its size, not
    after reading the limit's worth of it."""
    big = tmp_path / "sparse.prof"
    with open(big, "wb") as f:
        f.truncate(8 * GiB)
    proc, peak = run_cli_measured("show", big, cwd=tmp_path, address_space=int(1.5 * GiB))
    assert_refused(proc, big, rf"is {8 * GiB} bytes, larger than the {DEFAULT_MAX_DECOMPRESSED}-byte limit")
    assert peak < 1 * GiB, peak


def test_a_large_file_of_zeros_is_refused_from_its_first_byte(tmp_path):
    """Under the limit but not a profile: a file of zeros starts with no
    protobuf field, so it is refused before the rest is read."""
    zeros = tmp_path / "zeros.prof"
    with open(zeros, "wb") as f:
        f.truncate(DEFAULT_MAX_DECOMPRESSED)
    assert_refused(run_cli("show", zeros, cwd=tmp_path), zeros, r"not a pprof profile \(it starts with byte 0x00")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
@pytest.mark.parametrize("position", POSITIONS)
def test_a_fifo_is_refused_without_blocking(tmp_path, real_profile, position):
    """A FIFO is not read: with no writer, opening it would wait for ever,
    and its size cannot be checked first. `show <(cat a.prof)` is refused
    too (save the profile to a file first)."""
    fifo = tmp_path / "pipe.prof"
    os.mkfifo(fifo)
    proc = subprocess.run([sys.executable, "-m", "jaxmemprof", *args_for(position, fifo, real_profile)],
                          cwd=tmp_path, env=cpu_env(), capture_output=True, text=True, timeout=60)
    assert_refused(proc, fifo, r"is a FIFO, not a regular file: save the profile to a file first")


def test_values_that_overflow_are_not_silently_wrapped(tmp_path):
    """Two samples of 2**63 - 1 bytes: the total does not fit in int64. It
    must be either refused cleanly or added up exactly, never wrapped round
    to a negative total."""
    def huge(p):
        for s in p.sample:
            s.value[1] = 2**63 - 1
    path = tmp_path / "huge.prof"
    path.write_bytes(mutated(huge))
    proc = run_cli("show", path, "--json", cwd=tmp_path)
    if proc.returncode == 2:
        assert_refused(proc, path)
        return
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["totals"]["bytes"] == 2 * (2**63 - 1), doc["totals"]
    assert all(0 <= r["share"] <= 1 for r in doc["rows"]), doc["rows"]


# --------------------------------------------------------------------------
# Output files and options


@pytest.mark.parametrize("command", ["show", "diff"])
def test_csv_never_overwrites_without_force(tmp_path, real_profile, command):
    small = tmp_path / "small.prof"
    small.write_bytes(valid_message().SerializeToString())
    inputs = [real_profile] if command == "show" else [small, real_profile]
    out = tmp_path / "out.csv"
    out.write_bytes(b"precious\n")
    proc = run_cli(command, *inputs, "--csv", out, cwd=tmp_path)
    assert_refused(proc, out, r"already exists.*--force")
    assert out.read_bytes() == b"precious\n"

    proc = run_cli(command, *inputs, "--csv", out, "--force", cwd=tmp_path, check=0)
    assert proc.stdout == ""
    assert proc.stderr == f"jaxmemprof: wrote {out}\n"
    header = out.read_text().splitlines()[0]
    if command == "show":
        assert header == "site,file,line,function,bytes,count,share"
    else:
        assert header == ("site,file,line,function,base_bytes,new_bytes,delta_bytes,"
                          "base_count,new_count,delta_count")
    assert len(out.read_text().splitlines()) > 1


def test_csv_to_a_directory_is_refused(tmp_path, real_profile):
    d = tmp_path / "outdir"
    d.mkdir()
    assert_refused(run_cli("show", real_profile, "--csv", d, "--force", cwd=tmp_path), d, r"cannot write")


@pytest.mark.parametrize("command", ["show", "diff"])
def test_unknown_by_is_a_usage_error(tmp_path, real_profile, command):
    inputs = [real_profile] if command == "show" else [real_profile, real_profile]
    proc = run_cli(command, *inputs, "--by", "bogus", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"Usage: jaxmemprof {command} ")
    assert re.search(r"^Error: Invalid value for '--by': 'bogus' is not one of ", proc.stderr, re.M), proc.stderr


# --------------------------------------------------------------------------
# Property: the reader fails only with InputError


@pytest.fixture(scope="session")
def real_raw(real_profile):
    return gzip.decompress(real_profile.read_bytes())


def _mutate(data: bytes, ops) -> bytes:
    b = bytearray(data)
    for op, pos, byte in ops:
        if not b:
            break
        pos %= len(b)
        if op == "flip":
            b[pos] ^= 1 << (byte % 8)
        elif op == "set":
            b[pos] = byte
        elif op == "truncate":
            del b[pos:]
        elif op == "delete":
            del b[pos]
        elif op == "insert":
            b.insert(pos, byte)
    return bytes(b)


_OPS = st.lists(
    st.tuples(st.sampled_from(["flip", "flip", "set", "truncate", "delete", "insert"]),
              st.integers(0, 1 << 20), st.integers(0, 255)),
    min_size=1, max_size=6,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_reader_raises_only_input_error(real_profile, real_raw, data):
    """Random bytes and mutations (bit flips, byte changes, truncations) of a
    real profile, raw and gzipped: ``load_profile`` returns a Profile or
    raises InputError, and a Profile it returns can be summarised."""
    kind = data.draw(st.sampled_from(["random", "raw", "raw", "gzip"]))
    if kind == "random":
        blob = data.draw(st.binary(max_size=2048))
        if data.draw(st.booleans()):
            blob = b"\x1f\x8b" + blob
    else:
        base = real_raw if kind == "raw" else real_profile.read_bytes()
        blob = _mutate(base, data.draw(_OPS))
    try:
        prof = load_profile(blob, max_decompressed=4 * MiB)
    except InputError as exc:
        assert str(exc).startswith("<bytes>: ")
        assert "\n" not in str(exc)
        return
    assert isinstance(prof, Profile)
    for by in ("site", "stack"):
        summary = summarize(prof, by, Attribution())
        assert summary.total_bytes == int(prof.samples["bytes"].sum())

"""`show` and `diff` without pandas or numpy: the imports they pay, the reader's
fast path over the samples' raw bytes (and its fallback to protobuf for any
other layout), and the plain-Python grouping checked against the pandas
group-by it replaced."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import subprocess
import sys

import pandas as pd
import pytest

from conftest import cpu_env
from jaxmemprof.analysis import groups
from jaxmemprof.analysis.groups import GROUPINGS, KEY_COLUMNS, Table, diff, keyed_samples, summarize, table_of, top
from jaxmemprof.analysis.sites import Attribution, stack_keys, stack_sites
from jaxmemprof.errors import InputError
from jaxmemprof.pprof import profile_pb2 as pb
from jaxmemprof.pprof import reader
from jaxmemprof.pprof.reader import Profile, load_profile

# --- a wrapper that runs the command line, then lists the modules it imported

WRAPPER = """
import sys
from jaxmemprof.cli import main
try:
    main(sys.argv[2:])
except SystemExit as exc:
    code = exc.code
with open(sys.argv[1], "w") as f:
    f.write("\\n".join(sorted(sys.modules)))
"""

NAMES = ["main", "train_step", "=cmd|' /C calc'!A0", "\x1b[31mred", "\u202egnp", "caf\u00e9", "", "+1", "line\nbreak"]
FILES = ["/home/u/train.py", "/usr/lib/python3.11/site-packages/jax/_src/x.py", "rel/model.py", "", "<frozen x>",
         "/home/u/=evil.py"]


def random_message(seed: int, nsamples: int = 200, *, labels=True, neg=False, inline=True, types=None) -> pb.Profile:
    """A valid profile with inlined frames, symbol-less locations, empty
    stacks, repeated samples, JAX's labels and hostile names."""
    rng = random.Random(seed)
    p = pb.Profile()
    strings: dict[str, int] = {}

    def s(x: str) -> int:
        if x not in strings:
            strings[x] = len(strings)
            p.string_table.append(x.encode("utf-8", "surrogateescape"))
        return strings[x]

    s("")
    for t, u in types or (("allocations", "count"), ("space", "bytes")):
        p.sample_type.add(type=s(t), unit=s(u))
    p.mapping.add(id=1, filename=s("/lib/libfoo.so"))
    for i in range(1, 13):
        p.function.add(id=i, name=s(rng.choice(NAMES) + str(i % 3)), filename=s(rng.choice(FILES)))
    for i in range(1, 200):  # ids up to 199: one and two bytes as varints
        if i % 17 == 0:
            p.location.add(id=i, mapping_id=1, address=0x1000 + i)
        else:
            k = rng.choice([1, 1, 2]) if inline else 1
            p.location.add(id=i, line=[pb.Line(function_id=rng.randint(1, 12), line=rng.randint(0, 40)) for _ in range(k)])
    stacks = [[rng.randint(1, 199) for _ in range(rng.randint(0, 9))] for _ in range(40)]
    for _ in range(nsamples):
        vals = [rng.randint(-3 if neg else 0, 9), rng.choice([0, 8, 4096, 1 << 20]) * (rng.choice([1, -1]) if neg else 1)]
        smp = p.sample.add(location_id=rng.choice(stacks), value=vals[: len(p.sample_type)])
        if labels:
            kind = rng.choice(["buffer", "executable", ""])
            if kind:
                smp.label.add(key=s("kind"), str=s(kind))
            dev = rng.choice(["cpu:0", "cpu:1", ""])
            if dev:
                smp.label.add(key=s("device"), str=s(dev))
        if rng.random() < 0.1:
            p.sample.append(smp)
    return p


def write(tmp_path, name: str, msg_or_bytes) -> str:
    data = msg_or_bytes if isinstance(msg_or_bytes, bytes) else msg_or_bytes.SerializeToString()
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def run_listing(tmp_path, *args) -> tuple[subprocess.CompletedProcess, set[str]]:
    wrapper = tmp_path / "wrapper.py"
    wrapper.write_text(WRAPPER)
    listing = tmp_path / "modules.txt"
    proc = subprocess.run([sys.executable, str(wrapper), str(listing), *args], capture_output=True, text=True,
                          cwd=tmp_path, env=cpu_env(), timeout=120)
    return proc, set(listing.read_text().split("\n"))


# --- imports


@pytest.mark.parametrize("extra", [[], ["--csv", "-"], ["--json"], ["--by", "stack"], ["--by", "device", "--top", "1"],
                                   ["--all-frames", "--by", "function"]])
def test_show_and_diff_import_neither_pandas_nor_numpy(tmp_path, extra):
    a = write(tmp_path, "a.prof", random_message(1))
    b = write(tmp_path, "b.prof", random_message(2))
    for args in (["show", a, *extra], ["diff", a, b, *extra]):
        proc, modules = run_listing(tmp_path, *args)
        assert proc.returncode in (0, None), proc.stderr
        assert proc.stdout
        assert not {"pandas", "numpy"} & modules, (args, sorted(m for m in modules if m.split(".")[0] in ("pandas", "numpy"))[:5])


def test_csv_file_and_errors_import_neither(tmp_path):
    a = write(tmp_path, "a.prof", random_message(3))
    proc, modules = run_listing(tmp_path, "show", a, "--csv", str(tmp_path / "out.csv"))
    assert (tmp_path / "out.csv").read_text().startswith("site,file,line,function,bytes,count,share")
    assert not {"pandas", "numpy"} & modules
    proc, modules = run_listing(tmp_path, "show", str(tmp_path / "missing.prof"))
    assert "no such file" in proc.stderr and not {"pandas", "numpy"} & modules


def test_help_imports_neither(tmp_path):
    proc, modules = run_listing(tmp_path, "--help")
    assert "Usage" in proc.stdout
    assert not {"pandas", "numpy", "rich", "google.protobuf"} & modules


def test_show_output_same_in_and_out_of_process(tmp_path):
    """The subprocess's output is the command's: the same JSON as `jaxmemprof show`."""
    a = write(tmp_path, "a.prof", random_message(4))
    proc, _ = run_listing(tmp_path, "show", a, "--json")
    ref = subprocess.run([sys.executable, "-m", "jaxmemprof", "show", a, "--json"], capture_output=True, text=True,
                         env=cpu_env(), cwd=tmp_path, check=True)
    assert json.loads(proc.stdout) == json.loads(ref.stdout)


# --- the reader's fast path and its fallback


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(num: int, payload: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def _fields(msg: pb.Profile) -> tuple[list[bytes], list[bytes]]:
    """The message's top-level fields, serialized one by one: (samples, the rest)."""
    samples = [_field(2, s.SerializeToString()) for s in msg.sample]
    rest_msg = pb.Profile()
    rest_msg.CopyFrom(msg)
    del rest_msg.sample[:]
    return samples, [rest_msg.SerializeToString()]


def reference(raw: bytes, name: str = "x") -> Profile:
    """What the whole-message path reads (each sample's canonical bytes)."""
    msg = pb.Profile.FromString(raw)
    return reader._convert(msg, name, None, reader._scan_messages(msg))


def same_profile(a: Profile, b: Profile) -> None:
    assert a.stacks == b.stacks
    assert a.label_sets == b.label_sets
    assert list(a.label_ids) == list(b.label_ids)
    pd.testing.assert_frame_equal(a.samples, b.samples)
    pd.testing.assert_frame_equal(a.frames, b.frames)
    pd.testing.assert_frame_equal(a.sample_types, b.sample_types)
    assert (a.value_index, a.count_index, a.value_type, a.total_bytes) == (b.value_index, b.count_index, b.value_type, b.total_bytes)
    assert sorted(a.stack_groups()) == sorted(b.stack_groups())


def _unpacked(smp: pb.Sample) -> bytes:
    """A sample with its location ids unpacked (one field each), as older writers may."""
    out = b"".join(b"\x08" + _varint(lid) for lid in smp.location_id)
    rest = pb.Sample()
    rest.CopyFrom(smp)
    del rest.location_id[:]
    return out + rest.SerializeToString()


def _padded(smp: pb.Sample) -> bytes:
    """Location ids as padded varints (valid protobuf, not canonical)."""
    payload = b"".join(bytes([b | 0x80 for b in _varint(lid)[:-1]]) + bytes([_varint(lid)[-1] | 0x80, 0]) for lid in smp.location_id)
    rest = pb.Sample()
    rest.CopyFrom(smp)
    del rest.location_id[:]
    return (_field(1, payload) if smp.location_id else b"") + rest.SerializeToString()


def _values_first(smp: pb.Sample) -> bytes:
    b = smp.SerializeToString()
    if not b.startswith(b"\x0a"):
        return b
    end, _ = reader._length(b, 1)
    return b[end:] + b[:end]


def _split_locations(smp: pb.Sample) -> bytes:
    """The location ids in two packed fields."""
    ids = list(smp.location_id)
    rest = pb.Sample()
    rest.CopyFrom(smp)
    del rest.location_id[:]
    half = len(ids) // 2

    def pack(xs):
        return _field(1, b"".join(_varint(x) for x in xs)) if xs else b""

    return pack(ids[:half]) + rest.SerializeToString() + pack(ids[half:])


LAYOUTS = {
    "canonical": None,
    "unpacked": _unpacked,
    "padded": _padded,
    "values_first": _values_first,
    "split_locations": _split_locations,
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fast_path_reads_as_the_whole_message_path(layout, seed, monkeypatch):
    msg = random_message(seed)
    fn = LAYOUTS[layout]
    samples, rest = _fields(msg)
    if fn is not None:
        samples = [_field(2, fn(s)) for s in msg.sample]
    raw = b"".join(samples) + b"".join(rest)
    ref = reference(raw)
    calls = []
    real = reader._scan_messages
    monkeypatch.setattr(reader, "_scan_messages", lambda m: calls.append(1) or real(m))
    got = load_profile(raw)
    same_profile(got, ref)
    # The canonical layout is read from the raw bytes; stacks in any other, through protobuf
    # (values before locations stay on the fast path: the key of a stack is then empty).
    if layout == "canonical":
        assert not calls
    elif layout in ("unpacked", "padded", "split_locations") and any(s.location_id for s in msg.sample):
        assert calls


@pytest.mark.parametrize("where", ["before", "middle", "after"])
def test_samples_anywhere_in_the_message(where):
    msg = random_message(7)
    samples, rest = _fields(msg)
    if where == "before":
        raw = b"".join(samples) + rest[0]
    elif where == "after":
        raw = rest[0] + b"".join(samples)
    else:
        half = len(samples) // 2
        raw = b"".join(samples[:half]) + rest[0] + b"".join(samples[half:])
    same_profile(load_profile(raw), reference(raw))


@pytest.mark.parametrize("depth", [1, 80, 9000])
def test_long_samples(depth):
    """Sample and location-list lengths of one, two and three varint bytes."""
    msg = random_message(8, nsamples=20)
    for smp in msg.sample:
        smp.location_id.extend([(i % 150) + 1 for i in range(depth)])
    raw = msg.SerializeToString()
    got = load_profile(raw)
    same_profile(got, reference(raw))
    assert max(len(s) for s in got.stacks) >= depth


def _error(fn) -> str:
    try:
        fn()
    except InputError as exc:
        return str(exc)
    return "no error"


@pytest.mark.parametrize("damage", ["missing_location", "values", "label_string", "truncated_sample",
                                    "bad_varint_in_stack", "missing_location_late", "bad_function_and_bad_sample"])
def test_errors_as_the_whole_message_path_gives_them(damage):
    msg = random_message(9, nsamples=50)
    if damage == "missing_location":
        msg.sample[3].location_id.append(999)
    elif damage == "missing_location_late":
        msg.sample[40].location_id.append(999)
        msg.sample[45].value.append(1)
    elif damage == "values":
        msg.sample[5].value.append(1)
    elif damage == "label_string":
        msg.sample[7].label.add(key=10_000, str=1)
    raw = msg.SerializeToString()
    if damage == "truncated_sample":
        # A sample whose location ids claim more bytes than the sample has.
        samples, rest = _fields(msg)
        raw = b"".join(samples[:10]) + _field(2, b"\x0a\x05\x01") + b"".join(samples[11:]) + rest[0]
    elif damage in ("bad_varint_in_stack", "bad_function_and_bad_sample"):
        if damage == "bad_function_and_bad_sample":  # a check that would fail, after bytes protobuf refuses
            msg.location[0].line[0].function_id = 999
        samples, rest = _fields(msg)
        body = _field(1, b"\x81\x82") + pb.Sample(value=list(msg.sample[12].value)).SerializeToString()
        raw = b"".join(samples[:12]) + _field(2, body) + b"".join(samples[13:]) + rest[0]

    def whole():
        msg2 = reader._parse(raw, "x")
        return reader._convert(msg2, "x", None, reader._scan_messages(msg2))

    expected = _error(whole)
    assert expected != "no error"
    assert _error(lambda: load_profile(raw, name="x")) == expected


# --- the plain grouping against the pandas group-by it replaced


def _group(samples, keys):
    return samples.groupby(keys, sort=False, dropna=False)[["bytes", "count"]].sum().reset_index()


def pandas_summarize(profile, by, attribution):
    keys = list(KEY_COLUMNS[by])
    rows = _group(keyed_samples(profile, by, attribution), keys)
    rows = rows.sort_values(["bytes", "count"] + keys, ascending=[False, False] + [True] * len(keys))
    rows = rows.reset_index(drop=True)
    total = int(rows["bytes"].sum())
    rows["share"] = rows["bytes"] / total if total else 0.0
    rows["cum_share"] = rows["share"].cumsum()

    def srt(r, k):
        return r.sort_values(k).reset_index(drop=True)

    return rows, srt(_group(profile.samples, ["device"]), ["device"]), srt(_group(profile.samples, ["kind"]), ["kind"])


def _merge(base, new, keys):
    import numpy as np

    both = pd.concat([base.assign(_base=1), new.assign(_base=0)], ignore_index=True)
    is_base = both["_base"].to_numpy() == 1
    for col in ("bytes", "count"):
        v = both[col].to_numpy()
        both[f"base_{col}"] = np.where(is_base, v, 0)
        both[f"new_{col}"] = np.where(is_base, 0, v)
        both[f"delta_{col}"] = np.where(is_base, -v, v)
    cols = ["base_bytes", "new_bytes", "delta_bytes", "base_count", "new_count", "delta_count"]
    return both.groupby(keys, sort=False, dropna=False)[cols].sum().reset_index()


def pandas_diff(base, new, by, attribution):
    keys = list(KEY_COLUMNS[by])
    rows = _merge(keyed_samples(base, by, attribution), keyed_samples(new, by, attribution), keys)
    same = (rows["delta_bytes"] == 0) & (rows["delta_count"] == 0) & (rows["base_bytes"] == rows["new_bytes"])
    rows = rows[~same]
    order = pd.DataFrame({"a": -rows["delta_bytes"].abs(), "b": -rows["delta_count"].abs(), "c": -rows["new_bytes"]})
    rows = rows.loc[pd.concat([order, rows[keys]], axis=1).sort_values(["a", "b", "c"] + keys).index]
    return rows.reset_index(drop=True), int(same.sum())


ATTRIBUTIONS = [Attribution(), Attribution(all_frames=True), Attribution(library=("train",), user=("*jax*",))]


def _profiles():
    msgs = [random_message(s, neg=(s % 2 == 0), labels=(s != 3)) for s in range(1, 6)]
    msgs += [random_message(6, nsamples=0), random_message(7, types=(("space", "bytes"),))]
    return [load_profile(m.SerializeToString()) for m in msgs]


@pytest.fixture(scope="module")
def profiles():
    return _profiles()


@pytest.mark.parametrize("by", GROUPINGS)
def test_summarize_as_the_pandas_group_by(profiles, by):
    for prof in profiles:
        for att in ATTRIBUTIONS:
            s = summarize(prof, by, att)
            rows, devices, kinds = pandas_summarize(prof, by, att)
            pd.testing.assert_frame_equal(s.rows, rows, check_exact=True)
            pd.testing.assert_frame_equal(s.devices, devices, check_exact=True)
            pd.testing.assert_frame_equal(s.kinds, kinds, check_exact=True)
            assert s.total_bytes == int(rows["bytes"].sum()) == prof.total_bytes
            assert s.total_count == int(rows["count"].sum())


@pytest.mark.parametrize("by", GROUPINGS)
def test_diff_as_the_pandas_merge(profiles, by):
    pairs = list(zip(profiles, profiles[1:])) + [(profiles[0], profiles[0]), (profiles[5], profiles[0]),
                                                  (profiles[0], profiles[5])]
    for base, new in pairs:
        d = diff(base, new, by, ATTRIBUTIONS[0])
        rows, unchanged = pandas_diff(base, new, by, ATTRIBUTIONS[0])
        pd.testing.assert_frame_equal(d.rows, rows, check_exact=True)
        assert d.unchanged_rows == unchanged
        devices = _merge(base.samples, new.samples, ["device"]).sort_values("device").reset_index(drop=True)
        pd.testing.assert_frame_equal(d.devices, devices, check_exact=True)
        assert d.totals["delta_bytes"] == new.total_bytes - base.total_bytes


def test_stack_keys_as_stack_sites(profiles):
    for prof in profiles:
        for att in ATTRIBUTIONS:
            for by in ("site", "function", "file", "stack"):
                table = stack_sites(prof, att, with_stacks=(by == "stack"))
                cols = list(KEY_COLUMNS[by])
                expected = list(zip(*(table[c].tolist() for c in cols))) if len(table) else []
                assert stack_keys(prof, att, by) == expected


def test_results_for_other_callers(profiles):
    """What the report, the pytest plugin and job code do with results keeps working:
    dataclasses.replace with DataFrame rows, then top; rows as DataFrames."""
    prof = profiles[0]
    full = summarize(prof, "site", Attribution())
    held = dataclasses.replace(full, rows=full.rows[full.rows["bytes"] > 0].reset_index(drop=True))
    t = top(held, 2)
    assert isinstance(t.rows, pd.DataFrame) and len(t.rows) == 2
    assert t.omitted_rows == len(held.rows) - 2
    assert t.omitted_bytes == int(held.rows["bytes"].iloc[2:].sum())
    assert table_of(t).rows == list(zip(*(t.rows[c].tolist() for c in t.rows.columns)))
    plain = top(full, 3)
    assert isinstance(table_of(plain), Table) and len(plain.rows) == 3
    pd.testing.assert_frame_equal(plain.rows, full.rows.iloc[:3].reset_index(drop=True))
    assert plain.omitted_bytes == int(full.rows["bytes"].iloc[3:].sum())
    assert groups.top(plain, 0) is plain


def test_profile_from_frames_groups_as_the_plain_one(profiles):
    """A Profile made from frames (a job's merged profile) groups the same."""
    for prof in profiles:
        framed = Profile(source=prof.source, samples=prof.samples, frames=prof.frames, stacks=prof.stacks,
                         label_sets=prof.label_sets, label_ids=prof.label_ids, sample_types=prof.sample_types,
                         value_index=prof.value_index, count_index=prof.count_index)
        assert sorted(framed.stack_groups()) == sorted(prof.stack_groups())
        for by in GROUPINGS:
            a, b = summarize(framed, by, Attribution()), summarize(prof, by, Attribution())
            pd.testing.assert_frame_equal(a.rows, b.rows)
            assert table_of(a).rows == table_of(b).rows


def test_many_devices_use_the_sparse_sums():
    """A device of its own for each sample makes as many (kind, device)
    groups as samples: the per-(stack, group) sums then go through a dict."""
    msg = random_message(11, nsamples=300)
    first = len(msg.string_table)
    msg.string_table.extend([b"kind", b"device", b"buffer"] + [f"dev{i}".encode() for i in range(len(msg.sample))])
    for i, smp in enumerate(msg.sample):
        del smp.label[:]
        smp.label.add(key=first, str=first + 2)
        smp.label.add(key=first + 1, str=first + 3 + i)
    prof = load_profile(msg.SerializeToString())
    size = len(prof.stacks) * len(set(prof._parts.label_kd))
    assert size > 4 * prof.sample_count + 4096 or len(prof.stacks) * len(prof.label_sets) > 4 * 300
    for by in ("site", "device"):
        rows, devices, _ = pandas_summarize(prof, by, Attribution())
        s = summarize(prof, by, Attribution())
        pd.testing.assert_frame_equal(s.rows, rows)
        pd.testing.assert_frame_equal(s.devices, devices)


def test_cli_subprocess_matches_in_process(tmp_path):
    """`show --csv -` from the command line is the plain table, byte for byte
    what the DataFrame path wrote."""
    from io import StringIO

    from jaxmemprof.render.csv import write_csv
    from jaxmemprof.render.results import table

    a = write(tmp_path, "a.prof", random_message(12, neg=True))
    out = subprocess.run([sys.executable, "-m", "jaxmemprof", "show", a, "--csv", "-"], capture_output=True,
                         env=cpu_env(), cwd=tmp_path, check=True).stdout.decode()
    buf = StringIO(newline="")
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        write_csv(table(summarize(load_profile(a), "site", Attribution(roots=(str(tmp_path),)))), buf)
    finally:
        os.chdir(old)
    assert out == buf.getvalue()


# --- the terminal table without rich, against rich


ASCII_NAMES = ["main", "[bold]x[/bold]", ":smile:", " lead", "trail ", "a  b", "=1+2", "[link=x]y", "\\[x]", "~", "%s",
               "x" * 300, "", "-", "[", "]", ":", "a:b:c"]


def ascii_message(seed: int, vtype: str = "space") -> pb.Profile:
    rng = random.Random(seed)
    p = random_message(seed, nsamples=120)
    for fn in p.function:
        fn.name = len(p.string_table)
        p.string_table.append(rng.choice(ASCII_NAMES).encode())
        if rng.random() < 0.3:
            fn.filename = len(p.string_table)
            p.string_table.append(("/home/u/" + rng.choice(ASCII_NAMES) + ".py").encode())
    p.sample_type[1].type = len(p.string_table)
    p.string_table.append(vtype.encode())
    return p


def _rich(result, command, title, value_type) -> str:
    from io import StringIO

    from jaxmemprof.render import text

    buf = StringIO()
    render = text.render_breakdown if command == "show" else text.render_diff
    render(result, text.console(buf), title=title, value_type=value_type)
    return buf.getvalue()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("vtype", ["space", "sp[ace]", "a:b:c", "x y"])
def test_plain_tables_are_riches(seed, vtype, monkeypatch):
    from jaxmemprof.render import plain

    monkeypatch.delenv("COLUMNS", raising=False)
    a = load_profile(ascii_message(seed, vtype).SerializeToString(), name=f"[{seed}] a.prof")
    b = load_profile(ascii_message(seed + 10, vtype).SerializeToString(), name="b :x: .prof")
    used = 0
    for by in GROUPINGS:
        for n in (None, 3):
            s = top(summarize(a, by, Attribution()), n)
            title = f"{a.source}: {a.value_type} by {by}"
            lines = plain.breakdown_lines(s, title=title, value_type=a.value_type)
            if lines is not None:
                used += 1
                assert "\n".join(lines) + "\n" == _rich(s, "show", title, a.value_type)
            d = top(diff(a, b, by, Attribution()), n)
            lines = plain.diff_lines(d, title=title, value_type=a.value_type)
            assert lines is not None
            assert "\n".join(lines) + "\n" == _rich(d, "diff", title, a.value_type)
    assert used or any(c in vtype for c in "[]:")


def test_plain_tables_only_off_a_terminal(monkeypatch, tmp_path):
    from jaxmemprof.render import plain

    monkeypatch.delenv("COLUMNS", raising=False)
    with open(tmp_path / "f", "w") as f:
        assert plain.applies(f)
        monkeypatch.setenv("COLUMNS", "80")
        assert not plain.applies(f)
    prof = load_profile(random_message(1).SerializeToString())
    s = summarize(prof, "site", Attribution())
    assert plain.breakdown_lines(s, title="caf\u00e9", value_type="space/bytes") is None  # not ASCII: rich
    lines = plain.breakdown_lines(s, title="t", value_type="space/bytes")
    assert lines is None or all(line.isascii() for line in lines)


def test_cli_text_with_columns_set_uses_rich(tmp_path):
    a = write(tmp_path, "a.prof", ascii_message(3))
    env = cpu_env()
    plain_out = subprocess.run([sys.executable, "-m", "jaxmemprof", "show", a], capture_output=True, text=True,
                               env={k: v for k, v in env.items() if k != "COLUMNS"}, cwd=tmp_path, check=True).stdout
    rich_out = subprocess.run([sys.executable, "-m", "jaxmemprof", "show", a], capture_output=True, text=True,
                              env=dict(env, COLUMNS="100000"), cwd=tmp_path, check=True).stdout
    assert plain_out == rich_out
    _, modules = run_listing(tmp_path, "show", a)
    assert "rich" not in modules

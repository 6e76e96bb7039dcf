"""Coverage-guided fuzzing of the pprof reader: ``load_profile(bytes)`` and
``summarize`` (every grouping) on mutated profiles. Profiles are untrusted
input, so the only exception allowed out is ``InputError``; anything else is
a crash, saved with its input.

Run it (from the repository root)::

    pip install atheris                         # the fuzzing engine; not a jaxmemprof dependency
    python fuzz/fuzz_pprof.py --time 120        # atheris (libFuzzer), two minutes
    python fuzz/fuzz_pprof.py --runs 100000     # atheris, that many executions
    python fuzz/fuzz_pprof.py --plain --runs 20000 --seed 1
                                                # no atheris: plain random mutation (the fallback,
                                                # taken automatically when atheris is missing)
    python fuzz/fuzz_pprof.py --replay fuzz/crashes/crash-*   # rerun saved inputs

Further arguments go to libFuzzer as they are (``-jobs=2``, ``-max_len=65536``, ...).

Seed corpus: real device-memory profiles recorded by JAX, the snapshots of
the bundled runs (``sample_runs/runs/*/snapshots/``), both as written
(gzip) and decompressed (raw protobuf, where most mutations reach the
reader's own code rather than stopping in gzip), copied into the working
corpus ``fuzz/corpus/`` (kept out of git) on the first run. Crashes go to
``fuzz/crashes/``. Coverage is measured on jaxmemprof's own modules only
(pandas, numpy and protobuf are not instrumented: far faster).

Mutations: half are libFuzzer's own byte mutations (or, without atheris,
bit flips, extreme varints, splices, truncations); half are structure-aware:
the input is decoded as a Profile, one field or repeated element is changed
(an id, a string index, a value, a line, a string; an element deleted,
duplicated or swapped) and it is encoded again, gzipped if it was, so that
well-formed but inconsistent profiles reach the reader's own checks.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import random
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CORPUS = HERE / "corpus"
CRASHES = HERE / "crashes"
SEED_RUNS = REPO / "sample_runs" / "runs"
MAX_DECOMPRESSED = 16 * 1024**2  # a fuzzed gzip bomb stops here, sooner than at the 128 MiB default
sys.path.insert(0, str(REPO))

# Heavy libraries first, outside the instrumentation.
import numpy  # noqa: E402,F401
import pandas  # noqa: E402,F401
from google.protobuf import message  # noqa: E402,F401

try:
    import atheris
except ImportError:  # the fallback below needs nothing more
    atheris = None

if atheris is not None and "--plain" not in sys.argv and "--replay" not in sys.argv:
    with atheris.instrument_imports(include=["jaxmemprof"]):
        from jaxmemprof.analysis.groups import GROUPINGS, summarize
        from jaxmemprof.errors import InputError
        from jaxmemprof.pprof import profile_pb2
        from jaxmemprof.pprof.reader import load_profile
else:
    from jaxmemprof.analysis.groups import GROUPINGS, summarize
    from jaxmemprof.errors import InputError
    from jaxmemprof.pprof import profile_pb2
    from jaxmemprof.pprof.reader import load_profile


def fuzz_one_input(data: bytes) -> bool:
    """The property: InputError (one line naming the input), or a profile
    that every grouping can summarise, its totals adding up. Returns whether
    the input was read as a profile."""
    try:
        prof = load_profile(data, max_decompressed=MAX_DECOMPRESSED)
    except InputError as exc:
        text = str(exc)
        if not text.startswith("<bytes>: ") or "\n" in text:
            raise AssertionError(f"an InputError that is not one line naming the input: {text!r}") from None
        return False
    total = int(prof.samples["bytes"].sum())
    for by in GROUPINGS:
        s = summarize(prof, by)
        if s.total_bytes != total:
            raise AssertionError(f"summarize(by={by}) totals {s.total_bytes}, the samples {total}")
    return True


# --------------------------------------------------------------------------
# Seeds


def seeds(limit_per_run: int = 3) -> list[bytes]:
    """A few real profiles (the smallest, one from the middle, the largest
    of each bundled run), gzipped as JAX writes them and raw."""
    out: list[bytes] = []
    for run in sorted(SEED_RUNS.glob("*/snapshots")):
        files = sorted(run.glob("*.prof.gz"), key=lambda p: (p.stat().st_size, p.name))
        if not files:
            continue
        picked = {files[0], files[len(files) // 2], files[-1]}
        for p in sorted(picked)[:limit_per_run]:
            data = p.read_bytes()
            out.append(data)
            try:
                out.append(gzip.decompress(data))
            except OSError:
                pass
    if not out:
        raise SystemExit(f"no seed profiles found under {SEED_RUNS}")
    return out


def prepare_corpus() -> Path:
    CORPUS.mkdir(parents=True, exist_ok=True)
    if not any(CORPUS.iterdir()):
        for data in seeds():
            (CORPUS / hashlib.sha1(data).hexdigest()).write_bytes(data)
    return CORPUS


# --------------------------------------------------------------------------
# Structure-aware mutation: most byte mutations of a protobuf stop in the
# decoder (compiled code, not instrumented). Decoding the input as a Profile,
# changing one field (an id, a string index, a value, a line number, a
# string) or one repeated element, and encoding it again reaches the
# reader's own checks with well-formed but inconsistent profiles.

_INT64 = (-(2**63), 2**63 - 1)
_UINT64 = (0, 2**64 - 1)
_EXTREMES = (0, 1, 2, 3, -1, -2, 7, 127, 128, 255, 2**31 - 1, 2**31, 2**32, 2**53 + 1, 2**62, 2**63 - 1, -(2**63))
_HOSTILE_STRINGS = (b"", b"\x00", b"\xff\xfe", b"=cmd|' /C calc'!A0", b"\x1b[31mred\x1b[0m", b"a\nb\rc",
                    b"/usr/lib/python3/site-packages/jax/x.py", b"<frozen runpy>", b"x" * 5000,
                    "\u202etxt.exe".encode(), b"kind", b"device", b"buffer", b"executable", b"space", b"bytes")


def _is_repeated(fd) -> bool:
    flag = getattr(fd, "is_repeated", None)  # protobuf >= 6; older ones have label
    return bool(flag) if flag is not None else fd.label == fd.LABEL_REPEATED


def _slots(msg, out: list) -> list:
    """(message, field, index or None) for every scalar field, set or not,
    and (message, field, "repeated") for every repeated field."""
    for fd in msg.DESCRIPTOR.fields:
        repeated = _is_repeated(fd)
        if fd.type == fd.TYPE_MESSAGE:
            value = getattr(msg, fd.name)
            if repeated:
                out.append((msg, fd, "repeated"))
                for v in value:
                    _slots(v, out)
            elif msg.HasField(fd.name):
                _slots(value, out)
        elif repeated:
            out.append((msg, fd, "repeated"))
            out.extend((msg, fd, i) for i in range(len(getattr(msg, fd.name))))
        else:
            out.append((msg, fd, None))
    return out


def _new_value(fd, old, rng: random.Random, n_strings: int):
    if fd.type == fd.TYPE_BYTES or fd.type == fd.TYPE_STRING:
        v = rng.choice(_HOSTILE_STRINGS) if rng.random() < 0.7 else rng.randbytes(rng.randrange(0, 40))
        return v if fd.type == fd.TYPE_BYTES else v.decode("utf-8", "replace")
    if fd.type == fd.TYPE_BOOL:
        return not old
    lo, hi = _UINT64 if fd.type in (fd.TYPE_UINT64, fd.TYPE_UINT32, fd.TYPE_FIXED64) else _INT64
    v = rng.choice(_EXTREMES + (n_strings, n_strings - 1, n_strings + 1, (old or 0) + 1, (old or 0) - 1,
                                rng.randrange(-1000, 1000)))
    return min(max(v, lo), hi)


def structured_mutate(data: bytes, rng: random.Random) -> bytes | None:
    """One semantic change to ``data`` decoded as a Profile (gunzipped if it
    is gzip; gzipped again then); None when it does not decode."""
    zipped = data[:2] == b"\x1f\x8b"
    try:
        raw = gzip.decompress(data) if zipped else data
        msg = profile_pb2.Profile.FromString(raw)
    except Exception:
        return None
    n_strings = len(msg.string_table)
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        slots = _slots(msg, [])
        target, fd, index = rng.choice(slots)
        field = getattr(target, fd.name)
        if index == "repeated":
            if not len(field):
                if fd.type != fd.TYPE_MESSAGE:
                    field.append(_new_value(fd, 0, rng, n_strings))
                else:
                    field.add()
                continue
            op = rng.randrange(4)
            i = rng.randrange(len(field))
            if op == 0:
                del field[i]
            elif op == 1:  # a duplicate: the same id twice, a repeated sample
                if fd.type == fd.TYPE_MESSAGE:
                    field.add().CopyFrom(field[i])
                else:
                    field.append(field[i])
            elif op == 2 and len(field) > 1:  # swap two (order matters for strings and stacks)
                j = rng.randrange(len(field))
                if fd.type == fd.TYPE_MESSAGE:
                    a, b = type(field[i])(), type(field[j])()
                    a.CopyFrom(field[i])
                    b.CopyFrom(field[j])
                    field[i].CopyFrom(b)
                    field[j].CopyFrom(a)
                else:
                    field[i], field[j] = field[j], field[i]
            else:
                del field[i:]
        elif index is None:
            setattr(target, fd.name, _new_value(fd, getattr(target, fd.name), rng, n_strings))
        else:
            field[index] = _new_value(fd, field[index], rng, n_strings)
    out = msg.SerializeToString()
    return gzip.compress(out, mtime=0) if zipped and rng.random() < 0.8 else out


def custom_mutator(data: bytes, max_size: int, seed: int) -> bytes:
    """atheris: half the time a structured change, else libFuzzer's own."""
    rng = random.Random(seed)
    if rng.random() < 0.5:
        out = structured_mutate(data, rng)
        if out is not None and len(out) <= max(max_size, 1 << 16):
            return out
    return atheris.Mutate(data, max_size)


# --------------------------------------------------------------------------
# The fallback: random mutation without coverage feedback

INTERESTING = [0x00, 0x01, 0x7F, 0x80, 0xFF, 0x08, 0x0A, 0x12, 0x1A, 0x22, 0x2A, 0x32, 0x3A, 0x42]


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def mutate(data: bytes, rng: random.Random, pool: list[bytes]) -> bytes:
    b = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 3, 4, 8))):
        if not b:
            b = bytearray(rng.randbytes(rng.randrange(1, 64)))
        pos = rng.randrange(len(b))
        op = rng.randrange(11)
        if op == 0:
            b[pos] ^= 1 << rng.randrange(8)
        elif op == 1:
            b[pos] = rng.randrange(256)
        elif op == 2:
            b[pos] = rng.choice(INTERESTING)
        elif op == 3:
            del b[pos:pos + rng.randrange(1, 16)]
        elif op == 4:
            b[pos:pos] = rng.randbytes(rng.randrange(1, 16))
        elif op == 5:  # duplicate a chunk (repeated fields, repeated messages)
            n = rng.randrange(1, 64)
            b[pos:pos] = b[pos:pos + n]
        elif op == 6:  # an extreme varint (ids, indices, values, lengths)
            b[pos:pos + 1] = _varint(rng.choice((0, 1, 127, 128, 2**31 - 1, 2**31, 2**32, 2**63 - 1, 2**64 - 1,
                                                  rng.randrange(2**64))))
        elif op == 7:
            del b[pos:]
        elif op == 8:  # splice with another input
            other = rng.choice(pool)
            cut = rng.randrange(len(other) + 1)
            b = b[:pos] + bytearray(other[cut:])
        elif op == 9:
            b[pos:pos + 8] = rng.randbytes(8)
        else:  # append a random field
            field = rng.randrange(1, 16)
            wire = rng.choice((0, 2))
            payload = _varint(rng.randrange(2**rng.choice((7, 14, 32, 64)))) if wire == 0 else (
                _varint(n := rng.randrange(32)) + rng.randbytes(n))
            b += _varint(field << 3 | wire) + payload
    return bytes(b)


def _signature(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    own = [f for f in tb if "jaxmemprof" in f.filename] or tb
    last = own[-1] if own else None
    where = f"{Path(last.filename).name}:{last.lineno}" if last else "?"
    return f"{type(exc).__name__} at {where}"


def _save_crash(data: bytes, sig: str) -> Path:
    CRASHES.mkdir(parents=True, exist_ok=True)
    path = CRASHES / f"crash-{hashlib.sha1(data).hexdigest()}"
    path.write_bytes(data)
    (CRASHES / f"{path.name}.txt").write_text(sig + "\n")
    return path


def plain_fuzz(runs: int | None, seconds: float | None, seed: int) -> int:
    rng = random.Random(seed)
    pool = [p.read_bytes() for p in sorted(prepare_corpus().iterdir()) if p.is_file()]
    start = time.monotonic()
    execs = input_errors = 0
    crashes: dict[str, Path] = {}
    while (runs is None or execs < runs) and (seconds is None or time.monotonic() - start < seconds):
        parent = rng.choice(pool)
        data = (structured_mutate(parent, rng) if rng.random() < 0.5 else None) or mutate(parent, rng, pool)
        execs += 1
        try:
            accepted = fuzz_one_input(data)
        except Exception as exc:  # a crash
            sig = _signature(exc)
            if sig not in crashes:
                crashes[sig] = _save_crash(data, sig + "\n" + "".join(traceback.format_exception(exc)))
                print(f"crash #{len(crashes)}: {sig} -> {crashes[sig]}", flush=True)
        else:
            if not accepted:
                input_errors += 1
            elif rng.random() < 0.05 and len(pool) < 2000:
                pool.append(data)  # keep some inputs that parse, to mutate further
        if execs % 5000 == 0:
            print(f"#{execs} {execs / (time.monotonic() - start):.0f} exec/s, crashes: {len(crashes)}", flush=True)
    elapsed = time.monotonic() - start
    print(f"done: {execs} executions in {elapsed:.1f} s ({execs / max(elapsed, 1e-9):.0f}/s), "
          f"{execs - input_errors} inputs accepted as profiles, {len(crashes)} distinct crashes", flush=True)
    for sig, path in crashes.items():
        print(f"  {sig}: {path}")
    return 1 if crashes else 0


def replay(paths: list[str]) -> int:
    bad = 0
    for p in paths:
        if p.endswith(".txt"):
            continue
        try:
            accepted = fuzz_one_input(Path(p).read_bytes())
            print(f"{p}: {'read as a profile' if accepted else 'refused with InputError'}")
        except Exception as exc:
            bad += 1
            print(f"{p}: CRASH {_signature(exc)}")
            traceback.print_exc()
    return 1 if bad else 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=None, help="stop after this many executions")
    ap.add_argument("--time", type=float, default=None, help="stop after this many seconds")
    ap.add_argument("--plain", action="store_true", help="plain random mutation, even with atheris installed")
    ap.add_argument("--seed", type=int, default=0, help="random seed (plain mode; libFuzzer: -seed=N)")
    ap.add_argument("--replay", nargs="+", metavar="FILE", help="run these inputs once and report")
    args, rest = ap.parse_known_args(argv[1:])
    if args.replay:
        return replay(args.replay)
    if atheris is None or args.plain:
        if atheris is None and not args.plain:
            print("atheris is not installed: plain random mutation instead (pip install atheris)", file=sys.stderr)
        runs = args.runs if (args.runs is not None or args.time is not None) else 20000
        return plain_fuzz(runs, args.time, args.seed)
    corpus = prepare_corpus()
    CRASHES.mkdir(parents=True, exist_ok=True)
    flags = [f"-artifact_prefix={CRASHES}/", "-rss_limit_mb=4096", "-timeout=30", "-print_final_stats=1",
             "-max_len=65536"]
    if args.runs is not None:
        flags.append(f"-runs={args.runs}")
    if args.time is not None:
        flags.append(f"-max_total_time={int(args.time)}")
    if args.seed:
        flags.append(f"-seed={args.seed}")
    atheris.Setup([argv[0], *flags, *rest, str(corpus)], fuzz_one_input, custom_mutator=custom_mutator)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

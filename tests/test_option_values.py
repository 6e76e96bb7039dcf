"""Every option value checked by click: numbers finite and in range, sizes
positive where they must be; a bad one is a usage error (exit 2, one line
naming the option, no traceback) before any work. And no NaN or infinity in
any JSON the tool writes: every document parsed with a strict parser."""

from __future__ import annotations

import json
import math
from fractions import Fraction
import shutil

import pytest

from conftest import cli_batch, run_cli, write_script

from jaxmemprof.cli import main

HUGE = "9" * 400  # past a float's range: float() gives inf


def invoke(capsys, *args):
    """The command line's own entry point, in this process (option errors
    come before any import of jax): (exit status, stdout, stderr)."""
    with pytest.raises(SystemExit) as exit_:
        main([str(a) for a in args], prog_name="jaxmemprof")
    out, err = capsys.readouterr()
    return exit_.value.code, out, err


BAD = [
    # run: seconds between snapshots, and the share of wall time
    (["run", "--interval", "inf"], "--interval", "'inf' is not a finite number"),
    (["run", "--interval", "-inf"], "--interval", "'-inf' is not a finite number"),
    (["run", "--interval", "nan"], "--interval", "'nan' is not a finite number"),
    (["run", "--interval", "0"], "--interval", "0.001<=x<=1e+09"),
    (["run", "--interval", "-1"], "--interval", "0.001<=x<=1e+09"),
    (["run", "--interval", "1e10"], "--interval", "0.001<=x<=1e+09"),
    (["run", "--interval", "1e400"], "--interval", "not a finite number"),
    (["run", "--interval", "soon"], "--interval", "'soon' is not a valid float"),
    (["run", "--max-overhead", "nan"], "--max-overhead", "'nan' is not a finite number"),
    (["run", "--max-overhead", "inf"], "--max-overhead", "'inf' is not a finite number"),
    (["run", "--max-overhead", "-0.1"], "--max-overhead", "x=0 or 0.0001<=x<=1"),
    (["run", "--max-overhead", "2"], "--max-overhead", "x=0 or 0.0001<=x<=1"),
    (["run", "--max-overhead", "1e-300"], "--max-overhead", "x=0 or 0.0001<=x<=1"),
    # top
    (["top", "RUN", "--interval", "nan"], "--interval", "'nan' is not a finite number"),
    (["top", "RUN", "--interval", "inf"], "--interval", "'inf' is not a finite number"),
    (["top", "RUN", "--interval", "0"], "--interval", "0.1<=x<=1e+09"),
    (["top", "RUN", "--top", "0"], "--top", "x>=1"),
    # check: sizes, growths, percentages
    (["check", "RUN", "--max-peak", "nan"], "--max-peak", "not a size: 'nan'"),
    (["check", "RUN", "--max-peak", "inf"], "--max-peak", "not a size: 'inf'"),
    (["check", "RUN", "--max-peak", "-1"], "--max-peak", "not a size: '-1'"),
    (["check", "RUN", "--max-peak", HUGE], "--max-peak", "(too large)"),
    (["check", "RUN", "--max-peak", "9" * 30], "--max-peak", "is too large (at most 8 EiB)"),
    (["check", "RUN", "--max-true-peak", "nan"], "--max-true-peak", "not a size: 'nan'"),
    (["check", "RUN", "--max-growth", "nan/s"], "--max-growth", "not a size: 'nan'"),
    (["check", "RUN", "--max-growth", "inf/step"], "--max-growth", "not a size: 'inf'"),
    (["check", "RUN", "--max-growth", f"{HUGE}/s"], "--max-growth", "(too large)"),
    (["check", "RUN", "--max-growth", "-1KiB/step"], "--max-growth", "not a size: '-1KiB'"),
    (["check", "RUN", "--baseline", "B", "--max-increase", "nan"], "--max-increase", "not a percentage of 0 or more"),
    (["check", "RUN", "--baseline", "B", "--max-increase", "inf"], "--max-increase", "not a percentage of 0 or more"),
    (["check", "RUN", "--baseline", "B", "--max-increase", "-5"], "--max-increase", "not a percentage of 0 or more"),
    # show, diff, report, export
    (["show", "P", "--max-decompressed", "0"], "--max-decompressed", "is less than 1 B"),
    (["show", "P", "--max-decompressed", "nan"], "--max-decompressed", "not a size: 'nan'"),
    (["diff", "P", "Q", "--max-decompressed", HUGE], "--max-decompressed", "(too large)"),
    (["show", "P", "--top", "-1"], "--top", "0<=x<=1000000000"),
    (["show", "P", "--top", "1" + "0" * 30], "--top", "0<=x<=1000000000"),
    (["report", "RUN", "--device-memory", "0B"], "--device-memory", "is less than 1 B"),
    # A size is read exactly, in ASCII digits; a bare number below 1 MiB of device memory is a unit forgotten.
    (["report", "RUN", "--device-memory", "16"], "--device-memory", "'16' has no unit, so it would be 16 bytes"),
    (["check", "RUN", "--max-peak", "1.5"], "--max-peak", "is a fraction of a byte"),
    (["check", "RUN", "--max-peak", "0.5"], "--max-peak", "is a fraction of a byte"),
    (["check", "RUN", "--max-peak", "1.5B"], "--max-peak", "is a fraction of a byte"),
    (["check", "RUN", "--max-peak", "\u0661\u0662"], "--max-peak", "not a size"),
    (["check", "RUN", "--max-peak", "\uff11\uff12MiB"], "--max-peak", "not a size"),
    (["check", "RUN", "--max-peak", "10"], "--max-peak", "write 10B for bytes"),
    (["check", "RUN", "--max-true-peak", "0"], "--max-true-peak", "write 0B for bytes"),
    (["check", "RUN", "--max-growth", "4/step"], "--max-growth", "write 4B for bytes"),
    (["run", "--plan-device-memory", "16", "x.py"], "--plan-device-memory", "write 16B for bytes"),
    (["report", "RUN", "--device-memory", "inf"], "--device-memory", "not a size: 'inf'"),
    (["report", "RUN", "--steps", "0"], "--steps", "1<=x<=1000000000"),
    (["report", "RUN", "--steps", "1" + "0" * 30], "--steps", "1<=x<=1000000000"),
    (["report", "RUN", "--top", "0"], "--top", "1<=x<=1000000000"),
    (["export", "RUN", "--csv", "D", "--steps", "nan"], "--steps", "'nan' is not a valid integer"),
    (["report", "RUN", "--process", "-1"], "--process", "x>=0"),
]


@pytest.mark.parametrize("args, option, reason", BAD, ids=[" ".join(a)[:60] for a, _, _ in BAD])
def test_a_bad_value_is_a_usage_error(capsys, tmp_path, args, option, reason):
    run_dir = tmp_path / "never"
    if args[0] == "run":
        script = write_script(tmp_path, "s.py", "print('ran')\n")
        args = [*args, "-o", run_dir, script]
    status, out, err = invoke(capsys, *args)
    assert status == 2, err
    assert f"Error: Invalid value for '{option}'" in err and reason in err, err
    assert "Traceback" not in err and out == ""
    assert not run_dir.exists()  # refused before any work


def test_run_refuses_them_before_the_script_runs(tmp_path):
    """As a user types it: the script never runs, no run directory is made."""
    script = write_script(tmp_path, "s.py", "print('ran')\n")
    for value in ("inf", "nan"):
        proc = run_cli("run", "--interval", value, "-o", tmp_path / "r", script, cwd=tmp_path, check=2)
        assert proc.stderr.splitlines()[-1] == f"Error: Invalid value for '--interval': '{value}' is not a finite number"
        assert proc.stdout == "" and not (tmp_path / "r").exists()


def test_profile_refuses_them_too(tmp_path):
    import jaxmemprof

    for settings, message in ((dict(interval=math.nan), "interval must be 0.001 to 1e+09, not nan"),
                              (dict(interval=math.inf), "interval must be 0.001 to 1e+09, not inf"),
                              (dict(max_overhead=math.nan), "max_overhead must be 0 or 0.0001 to 1, not nan"),
                              (dict(interval="1"), "interval must be a number, not '1'")):
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("+", r"\+")):
            with jaxmemprof.profile(tmp_path / "r", **settings):
                pass
        assert not (tmp_path / "r").exists()


# -- no NaN or infinity in any JSON --------------------------------------------------


def strict(text: str):
    """json.loads that refuses NaN, Infinity and -Infinity (which Python's
    json writes and reads by default, and JSON does not have)."""
    def refuse(name):
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_strict_parser_refuses_what_python_writes():
    """The reference: Python's own json.dumps writes NaN, the strict parser refuses it."""
    with pytest.raises(ValueError, match="not JSON: NaN"):
        strict(json.dumps({"x": math.nan}))
    with pytest.raises(ValueError, match="not JSON: Infinity"):
        strict(json.dumps([math.inf]))


def test_every_json_written_is_strict(tmp_path):
    """manifest.json (with the edge settings taken: --max-overhead 0) and
    every --json document, on a run without markers (its growth per step
    is NaN inside: null in JSON), a job of two, and a baseline."""
    script = write_script(tmp_path, "grow.py", """
        import jax
        import jax.numpy as jnp
        import jaxmemprof

        kept = []
        f = jax.jit(lambda x: x * 2)
        for i in range(8):
            kept.append(f(jnp.ones((64, 1024), jnp.float32)))
            jaxmemprof.snapshot()
    """)
    run_cli("run", "-q", "--interval", "1e9", "--max-overhead", "0", "-o", "r", script, cwd=tmp_path, check=0)
    manifest = strict((tmp_path / "r" / "manifest.json").read_text())
    settings = manifest.get("settings", {})
    assert settings.get("interval") == 1e9 and settings.get("max_overhead") == 0, manifest
    for n in (0, 1):
        shutil.copytree(tmp_path / "r", tmp_path / "job" / f"process-{n}")
    docs = {
        "show": ["show", "r@peak", "--json"],
        "diff": ["diff", "r@first", "r@peak", "--json"],
        "report": ["report", "r", "--json", "--device-memory", "1GiB"],
        "report job": ["report", "job", "--json"],
        "check": ["check", "r", "--json", "--max-peak", "1B", "--max-true-peak", "1GiB", "--max-growth", "1B/s",
                  "--fail-on", "leak", "--baseline", "r", "--max-increase", "0"],
    }
    for name, proc in zip(docs, cli_batch(list(docs.values()), tmp_path)):
        assert proc.returncode in (0, 1), (name, proc.stderr)
        doc = strict(proc.stdout)
        assert doc["schema_version"] == 2, name
    for path in sorted((tmp_path / "job").rglob("*.json")):
        strict(path.read_text())


def test_manifest_writer_writes_null_for_what_json_has_not(tmp_path):
    """Whatever reaches the manifest writer (a duration, a statistic), a
    float that is not finite is written as null, never as NaN."""
    from jaxmemprof.store.layout import write_json_atomic

    write_json_atomic(tmp_path / "manifest.json", {"a": math.nan, "b": [math.inf, 1.5], "c": {"d": -math.inf}})
    assert strict((tmp_path / "manifest.json").read_text()) == {"a": None, "b": [None, 1.5], "c": {"d": None}}


def test_plugin_marker_sizes_are_checked_too(pytester, monkeypatch):
    """A marker's size that is not one (NaN, infinity, negative, past a
    float's range) fails its test with one line, no traceback."""
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    pytester.makepyfile(test_sizes=f'''
        import pytest

        SIZES = ["nan", float("nan"), float("inf"), -1, "-1MiB", "{HUGE}"]

        @pytest.mark.parametrize("n", [pytest.param(n, marks=pytest.mark.limit_device_memory(size))
                                       for n, size in enumerate(SIZES)])
        def test_bad(n):
            pass
    ''')
    result = pytester.runpytest_subprocess("-rA", "-p", "no:cacheprovider")
    text = result.stdout.str()
    result.assert_outcomes(failed=6)
    said = [line for line in result.outlines if line.startswith("limit_device_memory: not a size: ")]
    assert len(said) == 6 and said[-1].endswith("(too large)"), text
    assert "Traceback" not in text and "During handling" not in text and "INTERNALERROR" not in text, text


@pytest.mark.parametrize("text, exact", [
    ("1.5MiB", Fraction(3, 2) * 1024**2), ("1.1GiB", Fraction(11, 10) * 1024**3), ("0.3KiB", Fraction(3, 10) * 1024),
    ("12.5GB", Fraction(25, 2) * 1000**3), ("4096B", 4096), ("0B", 0), (" 2 MiB ", 2 * 1024**2),
    ("2000000", 2000000), ("9007199254740993", 2**53 + 1),  # past a float's exact integers
])
def test_a_size_is_read_exactly(text, exact):
    """A decimal size is its exact value in bytes (a fraction of a byte of a
    larger unit rounded down), never a float's; a bare number of 1 MiB or
    more is bytes even of device memory."""
    from fractions import Fraction as F

    from jaxmemprof.units import parse_size

    assert parse_size(text) == parse_size(text, memory=True) == math.floor(F(exact))
    assert parse_size("4096") == 4096  # bytes, where a size is not of device memory (--max-decompressed)


def test_counts_agree_with_their_nouns():
    from jaxmemprof.units import counted

    assert [counted(n, "site") for n in (0, 1, 2)] == ["0 sites", "1 site", "2 sites"]
    assert [counted(n, "more process") for n in (1, 3)] == ["1 more process", "3 more processes"]
    assert counted(1, "call") == "1 call" and counted(50, "call") == "50 calls"
    assert counted(2, "kind", "kinds of process") == "2 kinds of process"

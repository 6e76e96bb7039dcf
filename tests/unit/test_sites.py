"""analysis/sites.py: the site of a recorded stack is the innermost frame of
the user's code; held to the program's own lines (the line that made the
array, and the calls that led to it)."""

from __future__ import annotations

from jaxmemprof.analysis.sites import STACK_SEPARATOR, Attribution, run_stack_sites


def _stack_of(tiny, shape, snapshot):
    a = tiny.arrays
    (sid,) = a.loc[(a["shape"] == shape) & (a["first_snapshot"] == snapshot), "stack_id"]
    return int(sid)


def test_the_site_is_the_users_innermost_line_and_the_stack_its_callers(tiny, labelled, line, site):
    att = Attribution(roots=(tiny.manifest["cwd"],))
    sites = run_stack_sites(tiny.stacks, att)
    w = sites.loc[_stack_of(tiny, (256, 512), labelled["start"])]  # init()'s w, alive at the start
    assert w["site"] == site("w", "init") and (w["file"], w["line"], w["function"]) == ("tiny.py", line("w"), "init")
    assert w["stack"] == STACK_SEPARATOR.join([site("w", "init"), site("init", "main"), site("main", "<module>")])


def test_jax_is_library_code_the_program_is_not_and_user_patterns_say_otherwise(tiny, recorded, labelled):
    att = Attribution()
    frames = tiny.stacks[_stack_of(tiny, (256, 512), labelled["start"])]  # jax.random.normal's, inside jax
    jax_files = {f for f, _, _ in frames if "/jax/" in f}
    assert jax_files and all(att.is_library(f) for f in jax_files)
    assert not att.is_library(str(recorded.script))
    random = next(f for f in jax_files if "jax/_src/random" in f)
    assert not Attribution(user=("jax/_src/random",)).is_library(random)


def test_all_frames_makes_the_innermost_frame_the_site(tiny, labelled):
    sid = _stack_of(tiny, (256, 512), labelled["start"])
    f, ln, fn = tiny.stacks[sid][0]
    att = Attribution(all_frames=True)
    assert run_stack_sites({sid: tiny.stacks[sid]}, att).loc[sid, "site"] == f"{att.display_path(f)}:{ln} ({fn})"

"""analysis/options.py: how paths are shown and what counts as the user's
code, decided once: the tiny run names its sites relative to the directory
it was recorded in, wherever it is read from."""

from __future__ import annotations

import os
from pathlib import Path

from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.options import Options


def test_paths_are_shown_relative_to_where_the_run_was_recorded(tiny, recorded):
    where = str(recorded.script.parent)
    assert os.getcwd() != where and tiny.manifest["cwd"] == where
    att = Options().attribution(tiny)
    assert att.roots[0] == where and att.roots[-1] == os.getcwd()
    assert att.display_path(str(recorded.script)) == "tiny.py"


def test_roots_asked_for_come_before_the_runs_own(tiny, recorded):
    above = recorded.script.parent.parent
    att = Options(roots=(str(above),)).attribution(tiny)
    assert att.display_path(str(recorded.script)) == str(Path(recorded.script.parent.name) / "tiny.py")


def test_a_file_named_as_library_code_names_no_site(tiny, tiny_ar):
    assert any(s.startswith("tiny.py:") for s in tiny_ar.stack_sites["site"])
    hidden = attribute(tiny, Options(library=("tiny.py",))).stack_sites
    assert not any("tiny.py" in s for s in hidden["site"])
    everything = attribute(tiny, Options(all_frames=True)).stack_sites  # the innermost frame, as pprof
    assert not any(s.startswith("tiny.py:") for s in everything["site"])

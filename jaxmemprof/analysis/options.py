"""What the user asked of an analysis, built once (by the CLI from its
options, by the API, by the pytest plugin) and passed down whole.

The user's code and how paths are shown are decided here and nowhere else:
a path is shown relative to the directory the run was recorded in, else to
the current directory, so that one run names its sites alike wherever it is
read from, and a job's processes alike whatever their hosts' directories.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from jaxmemprof.analysis.sites import Attribution
from jaxmemprof.facts.paths import Libraries


@dataclass(frozen=True)
class Options:
    """``library``/``user``/``all_frames``: what counts as the user's code
    (--lib, --user, --all-frames; see :class:`Attribution`). ``top_sites``:
    sites named per table; ``steps``: how far ahead leaks are projected;
    ``device_memory``: a device's bytes, for "will it fit?" (None: not
    asked). ``roots``: directories to show paths relative to before the
    run's own (the pytest plugin's: the test suite's root)."""

    library: tuple[str, ...] = ()
    user: tuple[str, ...] = ()
    all_frames: bool = False
    top_sites: int = 10
    steps: int = 1000
    device_memory: int | None = None
    roots: tuple[str, ...] = ()

    def attribution(self, *runs) -> Attribution:
        """The attribution for these runs (none: a profile file): paths
        relative to each run's recorded directory, then the current one;
        a notebook cell's file named by its label, as each run recorded it."""
        roots = [r.manifest["cwd"] for r in runs
                 if r is not None and isinstance(getattr(r, "manifest", {}).get("cwd"), str) and r.manifest["cwd"]]
        names = {f: label for r in runs if r is not None
                 for f, label in (getattr(r, "source_names", None) or {}).items()}
        return Attribution(library=tuple(self.library), user=tuple(self.user), all_frames=self.all_frames,
                           roots=tuple(dict.fromkeys([*self.roots, *roots, os.getcwd()])),
                           names=tuple(sorted(names.items())),
                           libraries=Libraries.union(Libraries.from_manifest(getattr(r, "manifest", None))
                                                     for r in runs if r is not None))

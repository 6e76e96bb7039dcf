"""Site attribution: which of the user's own lines holds each buffer.

A frame is *library* code when its file belongs to JAX or jaxlib, the Python
standard library, or an installed package (site-packages, dist-packages), or,
for a run that recorded them, to one of the run's own libraries (a directory
on its sys.path outside the program's tree, a distribution installed inside
it: paths.Libraries, decided as it was recorded); everything else is the
user's. The *site* of a stack is its innermost user
frame (its innermost frame when it has none), and its *user stack* is the
stack with library frames removed: the compile path and the fast path of one
jitted call differ only in library frames, so they get one site and one user
stack.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from functools import cached_property

from typing import TYPE_CHECKING

from jaxmemprof.facts.paths import Libraries, place

if TYPE_CHECKING:
    import pandas as pd

    from jaxmemprof.pprof.reader import Profile

_GLOB_CHARS = set("*?[")

STACK_SEPARATOR = " <- "
NO_STACK = "<no stack>"
SITE_COLUMNS = ["site", "file", "line", "function"]  # what names a site in every table


def _matches(path: str, pattern: str) -> bool:
    if _GLOB_CHARS & set(pattern):
        return fnmatch.fnmatchcase(path, pattern)
    return pattern in path


@dataclass(frozen=True)
class FileView:
    """One source file as an attribution has it: ``library`` (library code,
    the user's patterns applied), ``library_by_rule`` (library code by the
    run's rule alone, facts/paths.py, the patterns aside) and ``shown`` (how
    every site shows it)."""

    library: bool
    library_by_rule: bool
    shown: str


@dataclass(frozen=True)
class Attribution:
    """What counts as library code, and how paths are shown.

    ``library`` patterns mark more files as library code (your own framework,
    say); ``user`` patterns mark files as user code even when they would be
    library code (an installed package you want to see into). A pattern with
    ``*``, ``?`` or ``[`` is a glob matched against the whole path; any other
    pattern matches when it occurs anywhere in the path. ``all_frames`` treats
    every frame as user code (the site is then the innermost frame, as in
    ``go tool pprof``). ``roots``: a path inside one of these directories
    (the first that holds it) is shown relative to it; default: the current
    directory. A run adds the directory it was recorded in. ``names``:
    ``(file, label)`` pairs for code whose file is no file to show (a
    notebook cell's temporary file is shown as its label, ``In [7]``, so its
    sites read ``In [7]:3 (<module>)``); a run adds its own. ``libraries``:
    the run's own library code, as it recorded it (None: a run recorded
    before runs kept theirs, today's rule alone).
    """

    library: tuple[str, ...] = ()
    user: tuple[str, ...] = ()
    all_frames: bool = False
    roots: tuple[str, ...] = ()
    names: tuple[tuple[str, str], ...] = ()
    libraries: Libraries | None = None

    @cached_property
    def _labels(self) -> dict:
        return dict(self.names)

    def file(self, path: str) -> FileView:
        """``path`` as attributed: its view, from one question to the rule
        (facts/paths.py ``place``)."""
        at = place(path, self.libraries)
        return FileView(self._library(path, at.library), at.library, self._shown(path, at.installed))

    def views(self, paths) -> dict[str, FileView]:
        """Each of ``paths`` once: path -> its :class:`FileView`."""
        return {p: self.file(p) for p in dict.fromkeys(paths)}

    def is_library(self, path: str) -> bool:
        return self.file(path).library

    def display_path(self, path: str) -> str:
        """How a file is shown in every site: its label (a notebook's cell),
        else relative to the first root that holds it, else from its
        installed package down, else as it is."""
        return self.file(path).shown

    def _library(self, path: str, by_rule: bool) -> bool:
        """The user's patterns first, then the rule's answer ``by_rule``."""
        if self.all_frames:
            return False
        if any(_matches(path, p) for p in self.user):
            return False
        if any(_matches(path, p) for p in self.library):
            return True
        return by_rule

    def _shown(self, path: str, installed: str | None) -> str:
        label = self._labels.get(path) if self.names else None
        if label is not None:
            return label
        for root in self.roots or (os.getcwd(),):
            prefix = root.rstrip("/\\") + os.sep
            if path.startswith(prefix):
                return path[len(prefix):]
        return installed or path


def frame_texts(profile: Profile, attribution: Attribution) -> list[tuple[bool, str, int, str, str]]:
    """Per frame id, in plain form: ``(user, shown file, line, function,
    site text)``, as :func:`frame_labels` has them."""
    keys = profile.frame_keys
    views = attribution.views(f for _, f, _ in keys)
    return [(not views[f].library, views[f].shown, ln, fn, f"{views[f].shown}:{ln} ({fn})") for fn, f, ln in keys]


def stack_classes(profile: Profile, attribution: Attribution, by: str) -> tuple[list[int], list[tuple]]:
    """Per stack_id its class, and per class its key for grouping ``by``
    ``site`` (``(site, file, line, function)`` of the site frame),
    ``function``, ``file`` or ``stack`` (the user stack as text): the values
    :func:`stack_sites` has in those columns, without pandas. A class is the
    site frame (one past the last frame for an empty stack), or for ``stack``
    the stack itself; two classes may have one key."""
    texts = frame_texts(profile, attribution)
    keys: list[tuple]
    if by == "stack":
        keys = []
        for stack in profile.stacks:
            if not stack:
                keys.append((NO_STACK,))
                continue
            user = [texts[f][4] for f in stack if texts[f][0]] or [texts[stack[0]][4]]
            keys.append((STACK_SEPARATOR.join(user),))
        return list(range(len(keys))), keys
    out = profile.first_frames([t[0] for t in texts])  # -1: an empty stack, the last class
    texts.append((False, "", 0, "", NO_STACK))
    if by == "site":
        keys = [(t[4], t[1], t[2], t[3]) for t in texts]
    elif by == "function":
        keys = [(t[3],) for t in texts]
    else:
        keys = [(t[1],) for t in texts]
    return out, keys


def stack_keys(profile: Profile, attribution: Attribution, by: str) -> list[tuple]:
    """Per stack_id, its key for grouping ``by`` (see :func:`stack_classes`)."""
    classes, keys = stack_classes(profile, attribution, by)
    return [keys[c] for c in classes]


def frame_labels(profile: Profile, attribution: Attribution) -> pd.DataFrame:
    """Per frame: ``user`` flag, shown ``file`` and ``site`` text
    (``path:line (function)``), with ``function`` and ``line``."""
    import pandas as pd

    frames = profile.frames
    views = attribution.views(frames["file"].unique())
    is_lib = {f: v.library for f, v in views.items()}
    shown = {f: v.shown for f, v in views.items()}
    out = pd.DataFrame(index=frames.index)
    out["user"] = ~frames["file"].map(is_lib).astype(bool)
    out["file"] = frames["file"].map(shown).astype(object)
    out["line"] = frames["line"].astype("int64")
    out["function"] = frames["function"].astype(object)
    out["site"] = (out["file"] + ":" + out["line"].astype(str) + " (" + out["function"] + ")").astype(object)
    return out


def stack_sites(profile: Profile, attribution: Attribution, *, with_stacks: bool = False) -> pd.DataFrame:
    """Per stack (indexed by ``stack_id``): ``site, file, line, function`` of
    its site frame, and with ``with_stacks`` its user stack as text
    (``stack``, innermost first, joined by `` <- ``)."""
    import numpy as np
    import pandas as pd

    labels = frame_labels(profile, attribution)
    user = labels["user"].to_numpy()
    site_frame = np.empty(len(profile.stacks), dtype=np.int64)
    user_stacks: list[tuple] = []  # with_stacks: per stack
    for sid, stack in enumerate(profile.stacks):
        chosen = -1
        for fid in stack:
            if user[fid]:
                chosen = fid
                break
        if chosen < 0 and stack:
            chosen = stack[0]
        site_frame[sid] = chosen
        if with_stacks:
            ufr = tuple(f for f in stack if user[f]) or stack[:1]
            user_stacks.append(ufr)

    # Stacks without any frame get a placeholder site.
    placeholder = pd.DataFrame(
        {"user": [False], "file": [""], "line": [0], "function": [""], "site": [NO_STACK]}, index=[-1]
    )
    table = pd.concat([labels, placeholder]) if (site_frame < 0).any() else labels
    out = table.loc[site_frame, ["site", "file", "line", "function"]].reset_index(drop=True)
    out.index.name = "stack_id"
    if with_stacks:
        site_text = labels["site"].to_numpy()
        out["stack"] = [STACK_SEPARATOR.join(site_text[list(s)]) if s else NO_STACK for s in user_stacks]
    return out


def user_stacks(profile: Profile, attribution: Attribution) -> list[tuple]:
    """Per stack_id, its user stack as frames ``(function, shown file, line)``,
    innermost first (the innermost frame when none is the user's)."""
    labels = frame_labels(profile, attribution)
    user = labels["user"].to_numpy()
    frames = list(zip(labels["function"], labels["file"], labels["line"].tolist()))
    out = []
    for stack in profile.stacks:
        ids = [f for f in stack if user[f]] or list(stack[:1])
        out.append(tuple(frames[f] for f in ids))
    return out


def run_stack_sites(stacks: dict, attribution: Attribution) -> pd.DataFrame:
    """Sites of a run's recorded creation stacks (``Run.stacks``: stack_id ->
    frames ``[(file, line, function), ...]``, innermost first), with the same
    rules as for profiles. Indexed by ``stack_id``: ``site, file, line,
    function, stack`` (the user stack, as in ``--by stack``)."""
    import pandas as pd

    views = attribution.views(f for frames in stacks.values() for f, _, _ in frames)
    is_lib = {f: v.library for f, v in views.items()}
    shown = {f: v.shown for f, v in views.items()}
    rows = []
    for sid, frames in stacks.items():
        user = [fr for fr in frames if not is_lib[fr[0]]] or list(frames[:1])
        texts = [f"{shown[f]}:{ln} ({fn})" for f, ln, fn in user]
        if user:
            f, ln, fn = user[0]
            rows.append((sid, texts[0], shown[f], ln, fn, STACK_SEPARATOR.join(texts)))
        else:
            rows.append((sid, NO_STACK, "", 0, "", NO_STACK))
    out = pd.DataFrame(rows, columns=["stack_id", "site", "file", "line", "function", "stack"])
    return out.set_index("stack_id")

"""What fills a jitted function's own peak, by the user's lines.

Snapshots never see the buffers a jitted call makes while it runs. XLA's own
account of each compiled signature, read by the jit probe from the program's
executable when it is compiled (``jaxmemprof.xla.executable``; a dump at the end
of the run, ``jaxmemprof.xla.dump``, where the executable lacks it), says which
buffers are live at the program's peak, in program order, and which op and
Python stack made each. Every signature has its row in ``jit_programs`` and
its buffers (each signature once, though the journal may hold one twice);
the tables here hold every signature's, with ``signature`` and
``largest_signature`` (each function's largest by its peak, the one the
report and the page show). Here they
are attributed as every byte is: to the innermost frame of the user's code
(the site rule); an argument's buffer is attributed to the argument's name.

- ``peak_by_line``: per function, user line and kind (argument, output,
  aliased, temporary, constant), the bytes live at the function's peak; they
  add up to the program's peak (the top of its curve: at each position
  each slice of XLA's allocations once, as XLA's heap simulator places the
  values; xla/curve.py). What a call holds on the device is XLA's
  allocations, which ``memory_analysis()`` adds up: its temporaries are one
  block for the whole call, as large as their packing needs, so the
  program's peak is at most that.
- ``largest_buffers``: the largest buffers of each program with their live
  ranges in program order.
- ``program_curves``: each signature in program order (a function's first
  few):
  the bytes live at each position of its sequence by user line (XProf's
  memory viewer in the user's lines), each buffer once as at the peak.
- ``inside_jit_findings``: hints where one applies: rematerialisation
  (``jax.checkpoint``) for activations the forward pass keeps for the
  backward pass (not for a program that uses it already), and a narrower
  dtype for the largest float32 temporaries.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jaxmemprof.analysis.sites import NO_STACK, Attribution, FileView
from jaxmemprof.facts.libraries import BY_NAME

if TYPE_CHECKING:
    from collections.abc import Callable

    from jaxmemprof.analysis.attributed import Attributed

PEAK_COLUMNS = ["function_id", "function", "signature", "largest_signature", "site", "file", "line", "kind", "bytes",
                "buffers", "share_of_peak", "program_peak_bytes"]
BUFFER_COLUMNS = ["function_id", "function", "signature", "largest_signature", "name", "site", "kind", "shape", "bytes",
                  "op", "live_start", "live_end", "program_length", "at_peak"]
_ARG_NAME = re.compile(r"^([^\[.]+)")
CURVE_COLUMNS = ["function_id", "function", "signature", "largest_signature", "position", "site", "bytes",
                 "position_bytes", "program_peak_position", "program_peak_bytes"]
CURVE_LINES = 8  # lines named in a curve; the others are summed
OTHER_LINES = "other lines"


def _json_list(text) -> list:
    """A JSON list from the journal, or []."""
    try:
        v = json.loads(text) if isinstance(text, str) else []
    except ValueError:
        return []
    return v if isinstance(v, list) else []


def _frames(text) -> list:
    return [f for f in _json_list(text) if isinstance(f, list) and len(f) == 3]


def _wrapped_params(functions) -> dict:
    """function_id -> (its wrapper's Library, its parameter names), for each
    function whose wrapper passes jax.jit arguments of its own."""
    out = {}
    if functions is not None and "wrapper" in functions:
        for fid, wrapper, params in zip(functions["function_id"], functions["wrapper"], functions["params"]):
            lib = BY_NAME.get(wrapper)
            if lib is not None and lib.argument_words is not None:
                out[fid] = (lib, [str(p) for p in _json_list(params)])
    return out


def buffer_site(view: Callable[[str], FileView], wrapped: tuple | None, kind, op, frames: list) -> tuple[str, str, int]:
    """(site, file, line) of a buffer XLA made: the innermost frame of the
    user's code; else an argument's name (``wrapped``: the wrapper's Library
    and the function's parameters, for a wrapper that passes jax.jit
    arguments of its own); else its op. ``view``: a file's FileView under
    the run's attribution (the stage's ``Files.view``, or one kept per table)."""
    user = [f for f in frames if isinstance(f[0], str) and not view(f[0]).library]
    if user:
        f, ln, fn = user[0]
        shown = view(f).shown
        return f"{shown}:{ln} ({fn})", shown, int(ln)
    if kind in ("argument", "aliased") and isinstance(op, str) and op:
        words = wrapped[0].argument_words(op, wrapped[1]) if wrapped is not None else None
        if words:  # the wrapper's own parts of the arguments: name the user's
            return words, "", 0
        m = _ARG_NAME.match(op)
        return f"argument {m.group(1) if m else op}", "", 0
    return (NO_STACK if not op else f"({op})"), "", 0


def attributed_buffers(run, attribution: Attribution) -> pd.DataFrame:
    """The buffers read with their function's name and their site (the
    stage's own table: analyses read ``Attributed.jit_buffers``)."""
    buffers = run.jit.buffers
    programs = run.jit.programs
    functions = run.jit.functions
    if buffers is None or buffers.empty or programs is None or programs.empty:
        return pd.DataFrame()
    b = buffers.copy()
    names = dict(zip(functions["function_id"], functions["name"])) if functions is not None else {}
    wrapped = _wrapped_params(functions)
    view = lru_cache(maxsize=None)(attribution.file)  # each file asked once
    sites, shown, lines = [], [], []
    for fid, kind, op, frames in zip(b["function_id"], b["kind"], b["op"], b["frames"]):
        site, file, line = buffer_site(view, wrapped.get(fid), kind, op, _frames(frames))
        sites.append(site)
        shown.append(file)
        lines.append(line)
    b["site"], b["file"], b["line"] = sites, shown, lines
    b["function"] = b["function_id"].map(names).fillna("").astype(str)
    # Every signature's buffers, each signature once (one analysed twice was written twice), marked
    # with the function's largest (by its peak); runs recorded before buffers named their signature
    # hold only the largest's.
    per = _largest_signatures(programs)
    largest = b["function_id"].map(per["signature"])
    if "signature" not in b.columns:
        b["signature"] = largest
    b["signature"] = b["signature"].where(b["signature"].notna(), largest)
    b = b.drop_duplicates(["function_id", "signature", "name", "bytes", "kind", "op", "live_start", "live_end"])
    b["largest_signature"] = (b["signature"] == largest.loc[b.index]).to_numpy()
    each = programs.drop_duplicates(["function_id", "signature"], keep="last").set_index(["function_id", "signature"])
    keys = pd.MultiIndex.from_arrays([b["function_id"], b["signature"]])
    for column, source in (("program_peak_bytes", "peak_bytes"), ("program_length", "length")):
        b[column] = each[source].reindex(keys).fillna(0).astype(np.int64).to_numpy()
    return b.copy()


def peak_by_line(ar: Attributed) -> pd.DataFrame:
    """Per function, user line and kind: the bytes and buffers live at the
    function's own peak, and their share of it. Functions by peak, lines by
    bytes."""
    b = ar.jit_buffers
    if b.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in PEAK_COLUMNS})
    b = b[b["at_peak"] == 1]
    g = b.groupby(["function_id", "function", "signature", "largest_signature", "site", "file", "line", "kind",
                   "program_peak_bytes"], sort=False)
    out = g.agg(bytes=("bytes", "sum"), buffers=("name", "size")).reset_index()
    out["share_of_peak"] = out["bytes"] / out["program_peak_bytes"].where(out["program_peak_bytes"] > 0)
    out = _largest_first(out, ["bytes", "site"], [False, True])
    return out.reset_index(drop=True)[PEAK_COLUMNS]


def largest_buffers(ar: Attributed) -> pd.DataFrame:
    """Each program's buffers (those live at its peak and its largest
    others), largest first, with their live ranges in program order."""
    b = ar.jit_buffers
    if b.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in BUFFER_COLUMNS})
    b = _largest_first(b.assign(at_peak=b["at_peak"] == 1), ["bytes", "live_start"], [False, True])
    return b.reset_index(drop=True)[BUFFER_COLUMNS]


def _largest_first(t: pd.DataFrame, then: list, ascending: list) -> pd.DataFrame:
    """Functions by their largest signature's peak; within one, its largest
    signature first, the others by their peak; then ``then``."""
    top = t[t["largest_signature"]].groupby("function_id")["program_peak_bytes"].max()
    t = t.assign(_top=t["function_id"].map(top).fillna(0), _not_largest=~t["largest_signature"].astype(bool))
    t = t.sort_values(["_top", "function_id", "_not_largest", "program_peak_bytes", "signature", *then],
                      ascending=[False, True, True, False, True, *ascending], kind="stable")
    return t.drop(columns=["_top", "_not_largest"])


def largest_signature_only(t: pd.DataFrame) -> pd.DataFrame:
    """The rows of each function's largest signature: what the report and the page show."""
    return t[t["largest_signature"].astype(bool)] if "largest_signature" in t.columns and len(t) else t


def _largest_signatures(programs: pd.DataFrame) -> pd.DataFrame:
    """Each function's largest program (by its peak), indexed by function_id."""
    return programs.sort_values(["function_id", "peak_bytes"], kind="stable").drop_duplicates(
        "function_id", keep="last").set_index("function_id")


def program_curves(ar: Attributed) -> pd.DataFrame:
    """Each function's largest signature in program order: at each position
    kept of its sequence, the bytes live by user line (the CURVE_LINES lines
    holding most at any position; the rest as "other lines"), adding up to
    the position's bytes (each buffer once, as at the peak). Positions where
    the program holds most are kept (docs/advice.md)."""
    return ar.jit_curves


def attributed_curves(run, attribution: Attribution, lines: int = CURVE_LINES) -> pd.DataFrame:
    """program_curves' table (the stage's own: analyses read
    ``Attributed.jit_curves``)."""
    curves, programs, functions = run.jit.curves, run.jit.programs, run.jit.functions
    empty = pd.DataFrame({c: pd.Series(dtype=object) for c in CURVE_COLUMNS})
    if curves is None or curves.empty or programs is None or programs.empty:
        return empty
    names = dict(zip(functions["function_id"], functions["name"])) if functions is not None else {}
    wrapped = _wrapped_params(functions)
    view = lru_cache(maxsize=None)(attribution.file)  # each file asked once
    per = _largest_signatures(programs)
    each = programs.drop_duplicates(["function_id", "signature"], keep="last").set_index(["function_id", "signature"])
    rows = []
    seen = set()
    for fid, signature, text in zip(curves["function_id"], curves["signature"], curves["curve"]):
        if (fid, signature) not in each.index or (fid, signature) in seen:
            continue
        seen.add((fid, signature))
        if not isinstance(text, str):
            continue  # no curve: as a damaged cell
        try:
            curve = json.loads(text)
            positions, totals = [int(p) for p in curve["positions"]], [int(b) for b in curve["bytes"]]
            by_site: dict[str, list] = {}
            for (kind, frames, op), run_bytes in curve["stacks"]:
                site = buffer_site(view, wrapped.get(fid), kind, op, [f for f in frames if len(f) == 3])[0]
                acc = by_site.setdefault(site, [0] * len(positions))
                for i, v in enumerate(run_bytes[:len(positions)]):
                    acc[i] += int(v)
            rest = [int(v) for v in curve["other"][:len(positions)]]
        except (TypeError, ValueError, KeyError, AttributeError):
            continue  # a damaged cell: the program's other figures stand
        ranked = sorted(by_site.items(), key=lambda kv: (-max(kv[1], default=0), kv[0]))
        for _, run_bytes in ranked[lines:]:
            rest = [a + b for a, b in zip(rest, run_bytes)]
        kept = ranked[:lines] + ([(OTHER_LINES, rest)] if any(rest) else [])
        largest = bool(fid in per.index and per.at[fid, "signature"] == signature)
        peak_at, peak = int(each.at[(fid, signature), "peak_position"]), int(each.at[(fid, signature), "peak_bytes"])
        for site, run_bytes in kept:
            for position, total, v in zip(positions, totals, run_bytes):
                rows.append((fid, names.get(fid, ""), signature, largest, position, site, v, total, peak_at, peak))
    if not rows:
        return empty
    out = pd.DataFrame(rows, columns=CURVE_COLUMNS)
    return _largest_first(out, ["position"], [True]).reset_index(drop=True)



"""Buffer donation and the memory inside jitted calls, from the jit probe.

Donation lets XLA write a jitted function's output into an input's buffer:
without it, old and new values are both alive during the call (the classic
``state = step(state, batch)``). JAX's rule (docs/jax-facts.md, donation): donated
input leaves are matched to output leaves of equal (shape, dtype, memory
kind), each output taking the first unused donor; a donor with no match stays
alive and JAX warns that it was "not usable".

Which arguments to donate is the rule in ``jaxmemprof/facts/donors.py`` (shared
with the jit probe, which compiles the function with them donated at the end
of the run). What a ``donate`` finding saves is that compile's effect on the
run's true peak (``verified_change``, reading ``analysis/peaks.py``), not the
donated bytes; where it was not compiled, the donated bytes, said as an upper
bound.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jaxmemprof.analysis.cells import json_cell as _json
from jaxmemprof.analysis.cells import leaves as _leaves
from jaxmemprof.facts.truepeak import FIGURES, as_passed, call_peak
from jaxmemprof.facts.donors import Call, Donor, donors, label, match
from jaxmemprof.facts.donors import arguments as array_arguments
from jaxmemprof.facts.libraries import BY_NAME
from jaxmemprof.facts.source import closing_bracket, statement_at

if TYPE_CHECKING:
    from jaxmemprof.analysis.attributed import Attributed, Files


JIT_MEMORY_COLUMNS = [
    "function_id", "function", "wrapper", "defined_at", "jitted_at", "calls", "calls_complete", "traced", "compiles",
    "signatures", "donated",
    "argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "generated_code_bytes", "call_peak_bytes",
]


@dataclass(frozen=True)
class Candidate:
    """A function with arguments worth donating (donors.Donor, in its
    calls' order), and the calls sampled that back them."""

    function_id: int
    function: str
    donors: tuple
    calls_sampled: int

    @property
    def donated_bytes(self) -> int:
        return sum(d.donated_bytes for d in self.donors)

    @property
    def devices(self) -> int:
        return max(d.devices for d in self.donors)


def _is_first(call) -> bool:
    """A sampled call is the function's first (its index may be missing in a damaged journal)."""
    v = call["call_index"]
    return not pd.isna(v) and int(v) == 1


def sampled_calls(rows: pd.DataFrame) -> list[Call]:
    """A function's sampled calls (jit_calls rows) as the donation rule reads them."""
    out = []
    for _, call in rows.iterrows():
        fates = call["inputs_alive"]
        out.append(Call(_leaves(call["inputs"]), _leaves(call["outputs"]),
                        _json(fates, []) if isinstance(fates, str) else None, _is_first(call)))
    return out


def functions_of(run) -> pd.DataFrame:
    return run.jit.functions


def _user_function(row, files: Files) -> bool:
    file = row["file"]  # None, or NaN once pandas has merged it, for a damaged row
    return isinstance(file, str) and bool(file) and not files.is_library(file)


def where_of(file: str, line: int, files: Files) -> str:
    return f"{files.display_path(file)}:{line}" if file else "?"


def donation_candidates(ar: Attributed) -> list[Candidate]:
    run, files = ar.run, ar.files
    functions = functions_of(run)
    calls = run.jit.calls
    if functions.empty or calls.empty:
        return []
    out: list[Candidate] = []
    for _, fn in functions.iterrows():
        if not _user_function(fn, files):
            continue
        rows = calls[(calls["function_id"] == fn["function_id"]) & calls["inputs_alive"].notna()]
        if rows.empty:
            continue
        found = donors(sampled_calls(rows))
        if found:
            out.append(Candidate(int(fn["function_id"]), str(fn["name"]), tuple(found), len(rows)))
    return out


def _figures_by_signature(run, function_id) -> dict:
    """signature -> XLA's figures of the function's compile of it."""
    compiles = run.jit.compiles
    if compiles.empty or "signature" not in compiles:
        return {}
    rows = compiles[compiles["function_id"] == function_id]
    return {sig: {col: _int(r.get(col)) for col in FIGURES}
            for sig, r in zip(rows["signature"], rows.to_dict("records")) if isinstance(sig, str)}


def unusable_donations(run) -> list[tuple]:
    """(function row, call, donated leaves with no matching output, outputs).
    Judged by what JAX and XLA did: the leaves at the dtype JAX passed
    (truepeak.as_passed), matched by JAX's rule; and none is lost where XLA's
    compile of the call's signature aliases as many bytes as the donated
    leaves hold (XLA wrote an output into every one of them)."""
    functions = functions_of(run)
    calls = run.jit.calls
    if functions.empty or calls.empty:
        return []
    found = []
    for _, fn in functions.iterrows():
        rows = calls[calls["function_id"] == fn["function_id"]]
        figures = _figures_by_signature(run, fn["function_id"])
        for _, call in rows.iterrows():
            outputs = _leaves(call["outputs"])
            fig = figures.get(call.get("signature"))
            inputs = as_passed(_leaves(call["inputs"]), outputs, fig and fig["argument_bytes"])
            # A donated leaf the program does not read is pruned by jit, not lost: JAX says nothing of it.
            donated = [i for i, leaf in enumerate(inputs) if leaf.get("donated") and not leaf.get("pruned")]
            if not donated:
                continue
            taken = match(inputs, outputs, donated)
            lost = [inputs[i] for i in donated if i not in taken]
            held = sum(int(inputs[i].get("bytes") or 0) // max(int(inputs[i].get("devices") or 1), 1)
                       for i in donated)  # per device, as XLA's figures are
            if lost and fig is not None and fig["alias_bytes"] >= held > 0:
                continue  # XLA aliased every donated leaf (by its own matching)
            if lost:
                found.append((fn, call, lost, outputs))
                break  # one sampled call says it
    return found


def wrapper_of(fn) -> str:
    """How the function was jitted; runs recorded before the probe knew
    wrappers jitted through jax.jit."""
    w = fn.get("wrapper") if hasattr(fn, "get") else None
    return w if isinstance(w, str) and w else "jax.jit"


def donate_option(fn) -> str | None:
    """The wrapper's own donation option (libraries/: its ``DONATE_OPTION``),
    where it has one instead of donate_argnums."""
    lib = BY_NAME.get(wrapper_of(fn))
    return lib.donate_option if lib is not None else None


def suggest(fn, extra: str, wrapper: str) -> str:
    """The statement that applies the wrapper (a line, or the lines its
    brackets span), edited to add ``extra`` (the donation options), when it
    can be read and has a known form: as the program had it (recorded), else,
    for a run recorded before that, as the file has it now. Its lines are
    indented as in the file, less the first line's indent."""
    text = fn.get("jit_source")
    if not isinstance(text, str):  # not kept: a run recorded before the probe kept it
        try:
            text = statement_at(str(fn["jit_file"]), int(fn["jit_line"]))
        except (ValueError, TypeError):  # a damaged journal: a line number that is not one
            return ""
    lib = BY_NAME.get(wrapper)
    if not text.strip() or "donate" in text or lib is None:
        return ""  # unreadable, or donation already set there in a way we would have to rewrite
    spelling, callable_decorator = lib.spelling, lib.decorator_takes_options
    indent = text[: len(text) - len(text.lstrip())]
    m = re.fullmatch(rf"@({spelling})(\s*#.*)?", text.strip())
    if m:
        comment = m.group(2) or ""
        if callable_decorator:
            return f"@{m.group(1)}({extra}){comment}"
        return f"@functools.partial({m.group(1)}, {extra}){comment}"
    # wrapper(f ...), @wrapper(...) or partial(wrapper ...): add the options as the call's last argument.
    m = re.search(rf"(?<![\w.])(?:{spelling})\(|partial\(\s*(?:{spelling})\b", text)
    if not m:
        return ""
    start = text.index("(", m.start())
    close = closing_bracket(text, start)
    edited = _last_argument(text, start, close, extra) if close is not None else ""
    return "\n".join(line[len(indent):] if line.startswith(indent) else line for line in edited.split("\n"))


def _last_argument(text: str, start: int, close: int, extra: str) -> str:
    """``text`` with ``extra`` added as the last argument of the call whose
    brackets are at ``start`` and ``close``: after the others on the line
    they end on, or, when the closing bracket has a line of its own, on a
    line of its own indented as the argument before it (with the trailing
    comma the others have). '' when a comment stands where the comma goes."""
    line_start = text.rfind("\n", 0, close) + 1
    if line_start <= start or text[line_start:close].strip():  # ")" closes the line of an argument
        head = text[:close].rstrip()
        sep = "" if head.endswith("(") else " " if head.endswith(",") else ", "
        return head + sep + extra + text[close:]
    head = text[:line_start].rstrip()
    last = head[head.rfind("\n") + 1:]  # the line of the last argument
    if "#" in last:
        return ""
    if head.rfind("\n") + 1 <= start:  # the arguments all on the opening line: after them there
        sep = "" if head.endswith("(") else " " if head.endswith(",") else ", "
        return head + sep + extra + "\n" + text[line_start:]
    arg_indent = last[: len(last) - len(last.lstrip())]
    if head.endswith(","):
        return f"{head}\n{arg_indent}{extra},\n{text[line_start:]}"
    return f"{head},\n{arg_indent}{extra}\n{text[line_start:]}"


def _tuple(values) -> str:
    """A tuple as code, names in double quotes: ("model", "optimizer")."""
    items = [json.dumps(v) if isinstance(v, str) else str(v) for v in values]
    return f"({items[0]},)" if len(items) == 1 else "(" + ", ".join(items) + ")"


def _array_arguments(run, function_id) -> list[tuple]:
    """(label, position, bytes, dropped) of each argument with array leaves
    in the function's sampled calls (donors.arguments)."""
    calls = run.jit.calls
    return array_arguments(sampled_calls(calls[calls["function_id"] == function_id]))


def fix_change(run, fn, cands: tuple[Donor, ...], unusable=frozenset()) -> dict:
    """The change to make, the way a user of the function's wrapper writes it,
    as facts: ``change`` (``jit``: the option to add, in ``option``;
    ``through-wrapper``: a library's own wrapper, which may or may not pass
    jax.jit's options on; or a library's own kind, from its ``donation``,
    with ``pass_first`` where it has the user pass some arguments first),
    ``edited_line`` (the line that jits the function, with the option added,
    where it can be read), ``also_donates`` (what a wrapper's option that
    donates every array donates besides the candidates) and ``first_kept``
    (arguments whose first call's value stayed referenced). ``unusable``:
    the labels of donated arguments no output can take (the
    ``donation-unusable`` finding's): left out of the option, and named in
    ``stops_donating``, so that the two findings ask for one change."""
    wrapper = wrapper_of(fn)
    lib = BY_NAME.get(wrapper)
    params = [str(p) for p in _json(fn["params"], [])]
    already_nums = [int(x) for x in _json(fn["donate_argnums"], []) if isinstance(x, int)]
    already_names = [str(x) for x in _json(fn["donate_argnames"], [])]
    facts: dict = {"first_kept": [c.argument for c in cands if c.first_kept], "also_donates": []}
    if lib is not None and lib.donation is not None:
        # The wrapper's own option donates more than the chosen (every array argument, or all but the first
        # argument's): what else would go with them, in the library's terms.
        chosen = {c.argument for c in cands}
        own = lib.donation([o for o in _array_arguments(run, fn["function_id"]) if o[0] not in chosen])
        if "edited_line" in own:
            return facts | own
        facts |= own
    else:
        stop = {str(a) for a in unusable}
        kept_names = [n for n in already_names if n not in stop]
        kept_nums = [p for p in already_nums if str(p) not in stop and not (p < len(params) and params[p] in stop)]
        dropped = [n for n in already_names if n not in kept_names] + [
            params[p] if p < len(params) else str(p) for p in already_nums if p not in kept_nums]
        if dropped:
            facts["stops_donating"] = sorted(set(dropped), key=lambda n: params.index(n) if n in params else len(params))
        names, positions = kept_names, kept_nums
        for c in cands:
            by_name = lib is not None and lib.donate_by_name
            if c.keyword or (by_name and c.position is not None and c.position < len(params)):
                names.append(c.argument if c.keyword else params[c.position])
            elif c.position is not None:
                positions.append(c.position)
        if lib is not None and lib.donate_by_name:
            names += [params[p] for p in kept_nums if p < len(params)]  # those it stops donating left out
            positions = [p for p in positions if p >= len(params)]
        names = sorted(set(names), key=lambda n: params.index(n) if n in params else len(params))
        positions = sorted(set(positions))
        option = ", ".join(([f"donate_argnums={_tuple(positions)}"] if positions else [])
                           + ([f"donate_argnames={_tuple(names)}"] if names else []))
        facts |= {"change": "jit" if lib is not None else "through-wrapper", "option": option,
                  "argnums": positions, "argnames": names}
    return facts | {"edited_line": suggest(fn, facts["option"], wrapper).strip()}


# Why a change was not measured: no compile of it at the end of the run (donation and sharding alike).
NOT_COMPILED = ("not compiled at the end of the run (recorded with --verify-seconds 0, or by a jaxmemprof "
                "that did not verify)")


def verified_change(ar: Attributed, function_id: int, arguments) -> dict:
    """What donating ``arguments`` of the function does to the run's true
    peak, from XLA's compiles of its recorded signatures with them donated
    (jit_whatif, made at the end of the run): the true peak with those
    figures in place of the recorded ones (``Peaks.with_change``), before and
    after, on the busiest device and on all devices summed. Facts: where it
    could not be compiled, ``verified`` false and ``not_verified`` (why).
    With the change made, a snapshot that saw two generations of the
    donated arrays holds one (``_seen_twice``)."""
    run = ar.run
    w = run.jit.whatif
    rows = w[w["function_id"] == function_id] if w is not None and not w.empty else None
    if rows is not None:
        rows = rows[[sorted(map(str, _json(c, {}).get("donate") or [])) == sorted(map(str, arguments))
                     for c in rows["change"]]]
    if rows is None or rows.empty:
        return {"verified": False, "not_verified": NOT_COMPILED}
    ok = rows[rows["error"].isna() & rows["argument_bytes"].notna()]
    if ok.empty:
        return {"verified": False, "not_verified": str(rows["error"].dropna().iloc[0]) if rows["error"].notna().any()
                else "XLA gave no figures"}
    changed = {(int(function_id), sig): {col: int(r[col]) for col in FIGURES} for sig, r in
               zip(ok["signature"], ok.to_dict("records"))}
    compiles = run.jit.compiles
    recorded = compiles[compiles["function_id"] == function_id].drop_duplicates("signature")
    by_sig = {sig: {col: _int(r[col]) for col in FIGURES}
              for sig, r in zip(recorded["signature"], recorded.to_dict("records"))}
    peaks = ar.peaks
    before_device, before_total = peaks.device_bytes, peaks.total_bytes
    if before_device is None:  # no snapshot to read (a damaged run): nothing to measure against
        return {"verified": False, "not_verified": "the run's true peak cannot be read (no snapshot)"}
    after = peaks.with_change(changed, _less(ar, function_id, arguments), first_kept(ar, function_id, arguments))
    after_device, after_total, held = after.device_bytes, after.total_bytes, after.call
    # The largest signature verified: its temporaries before and after, and what XLA aliases.
    sig = max(changed, key=lambda k: call_peak(by_sig.get(k[1], changed[k])))[1]
    old, new = by_sig.get(sig, {}), changed[(int(function_id), sig)]
    out = {"verified": True, "signatures_verified": len(changed), "signatures": max(len(by_sig), len(changed)),
           "true_peak_before_bytes": before_device, "true_peak_after_bytes": after_device,
           "saving_bytes_per_device": before_device - after_device, "saving_bytes": before_total - after_total,
           "aliased_bytes": new["alias_bytes"] - int(old.get("alias_bytes", 0)),
           "temp_before_bytes": int(old.get("temp_bytes", 0)), "temp_after_bytes": new["temp_bytes"]}
    missing = [s for s in by_sig if (int(function_id), s) not in changed]
    if missing:
        why = _why_missing(run, function_id, rows, missing)
        if (held is not None and int(held.function_id) == int(function_id) and held.signature in missing
                and held.device_bytes == after_device):
            one = 'it' if len(missing) == 1 else 'one of them'
            why += (f", and the run's true peak with the change is a call of {one}"
                    ", counted as recorded (not donated): the fall shown is a lower bound")
        out["not_verified"] = why
        out["signatures_not_verified"] = missing  # every one, in full (the words name a few, shortened)
    return out


_STORED_CUT = re.compile(r" \.\.\. \(\d+ characters, sha256 [0-9a-f]+\)$")  # a signature stored cut short
SIGNATURE_SAID = 100  # characters of a signature's text a sentence names before '+N more'
SIGNATURES_SAID = 2  # signatures a sentence names before '+N more'


def signature_said(text: str, room: int = SIGNATURE_SAID) -> str:
    """A signature's text as a sentence names it: its leaves up to ``room`` characters, then '+N more'
    (a model's signature names every leaf: thousands of characters); '+more' where the run stored the text
    cut short (capture/jit/programs.py: its leaves past the cut are not counted)."""
    text = str(text)
    cut = _STORED_CUT.search(text)
    parts = text[:cut.start()].split(", ") if cut else text.split(", ")
    shown: list[str] = []
    for p in parts:
        if shown and len(", ".join([*shown, p])) > room:
            break
        shown.append(p)
    rest = len(parts) - len(shown)
    return ", ".join(shown) + (" +more" if cut else f" +{rest} more" if rest else "")


def signatures_said(signatures: list) -> str:
    """The first ``SIGNATURES_SAID`` of ``signatures``, each shortened (``signature_said``), then '+N more';
    all of them are in the finding's facts."""
    n = len(signatures)
    more = f"; +{n - SIGNATURES_SAID} more signatures" if n > SIGNATURES_SAID else ""
    return "; ".join(signature_said(sig) for sig in signatures[:SIGNATURES_SAID]) + more


# How the recorder's row of a signature that no kept call ran begins where its arguments could not be made
# from a kept signature's (capture/jit/unsampled.py).
_NOT_SAMPLED = "not verified: not sampled"


def _why_missing(run, function_id: int, rows: pd.DataFrame, missing: list) -> str:
    """Why the function's signatures ``missing`` have no donated compile:
    over the compile budget, not sampled (no sampled call ran them and
    their arguments could not be made from a sampled call's: the recorder's
    reason, or, in a run recorded before it tried, that their shapes were
    not kept), or the error the compile gave."""
    errors = {sig: str(e) for sig, e in zip(rows["signature"], rows["error"]) if isinstance(e, str) and e}
    calls = run.jit.calls
    sampled = set(calls.loc[calls["function_id"] == function_id, "signature"].dropna()) \
        if calls is not None and not calls.empty and "signature" in calls else set()
    over = [s for s in missing if "over the compile budget" in errors.get(s, "")]
    unsampled = [s for s in missing if s not in errors and s not in sampled]
    unmade = [s for s in missing if errors.get(s, "").startswith(_NOT_SAMPLED)]
    other = [s for s in missing if s not in over and s not in unsampled and s not in unmade]
    parts = []
    if unsampled:
        n = len(unsampled)
        parts.append(f"{n} not sampled ({signatures_said(unsampled)}: no sampled call "
                     f"ran {'it' if n == 1 else 'them'}, so {'its' if n == 1 else 'their'} arguments' shapes "
                     f"were not kept)")
    if unmade:
        n = len(unmade)
        why = errors[unmade[0]][len(_NOT_SAMPLED):].lstrip(": ")
        parts.append(f"{n} not sampled ({signatures_said(unmade)}: no sampled call ran "
                     f"{'it' if n == 1 else 'them'}, and {why[:200]})")
    if over:
        parts.append(f"{len(over)} over the compile budget")
    if other:
        first = errors.get(other[0], "not compiled at the end of the run")
        parts.append(f"{len(other)} not compiled ({first[:200]})")
    return "; ".join(parts)


def _seen_twice(ar: Attributed, function_id: int, arguments) -> dict:
    """{snapshot: {device: bytes}} that a snapshot holds only because the
    function does not donate ``arguments``: where it saw two generations of
    their arrays at once (a call's new outputs, and its inputs, which the
    program drops right after the call: a snapshot taken while a call is in
    flight or before its statement ends), the older one, which the call
    would have deleted had it donated them. A generation: the arrays of a
    donated leaf's shape and dtype made by the statements that call the
    function, or passed as those arguments to a sampled call (the first
    call's are made before the loop). At most one generation is taken off,
    and none where a snapshot holds no more of them than one call returns."""
    run = ar.run
    calls = run.jit.calls
    rows = calls[calls["function_id"] == function_id]
    if rows.empty or not getattr(run, "has_arrays", False) or run.arrays.empty:
        return {}
    wanted = set(map(str, arguments))
    donated: dict = {}  # key -> donated leaves of it per call
    returned: dict = {}  # key -> outputs of it per call
    ids, lines = set(), set()
    for inputs, outputs, file, line in zip(rows["inputs"], rows["outputs"], rows["caller_file"], rows["caller_line"]):
        per: dict = {}
        for leaf in _leaves(inputs):
            if label(leaf) in wanted and not leaf.get("pruned"):
                k = (tuple(leaf.get("shape") or ()), str(leaf.get("dtype")))
                per[k] = per.get(k, 0) + 1
                if isinstance(leaf.get("id"), int):
                    ids.add(leaf["id"])
        for k, n in per.items():
            donated[k] = max(donated.get(k, 0), n)
        per = {}
        for leaf in _leaves(outputs):
            k = (tuple(leaf.get("shape") or ()), str(leaf.get("dtype")))
            per[k] = per.get(k, 0) + 1
        for k, n in per.items():
            returned[k] = max(returned.get(k, 0), n)
        if isinstance(file, str) and pd.notna(line):  # as the arrays' sites name it
            lines.add((ar.files.display_path(file), int(line)))
    a = run.arrays
    sites = ar.arrays.set_index("array_id")[["file", "line"]]
    out: dict = {}
    for row in a.itertuples(index=False):
        k = (tuple(int(x) for x in row.shape), str(row.dtype)) if isinstance(row.shape, tuple) else None
        if k not in donated:
            continue
        file, line = sites.loc[row.array_id] if row.array_id in sites.index else (None, None)
        if row.py_id not in ids and (str(file), int(line) if pd.notna(line) else -1) not in lines:
            continue
        first, last = int(row.first_snapshot), int(row.last_snapshot)
        for snap in range(first, last + 1):
            out.setdefault(snap, {}).setdefault(k, []).append(row)
    less: dict = {}
    for snap, by_key in out.items():
        for k, arrays in by_key.items():
            extra = min(len(arrays) - returned.get(k, 0), donated[k])
            if extra <= 0:
                continue
            for row in sorted(arrays, key=lambda r: int(r.first_snapshot))[:extra]:  # the older generation
                for device, b in zip(row.devices, row.shard_bytes):
                    d = less.setdefault(snap, {})
                    d[device] = d.get(device, 0) + int(b)
    return less


def _less(ar: Attributed, function_id: int, arguments) -> dict:
    """{snapshot: {device: bytes}} the change takes off the snapshots: a
    snapshot taken while a call of the function was in progress is a moment
    of that call, which the call's own peak, compiled with the change,
    stands for (all of it off: its inputs resharded for the call, or its
    outputs beside them, are what the compile counts); elsewhere, the older
    generation of the donated arrays (``_seen_twice``)."""
    less = _seen_twice(ar, function_id, arguments)
    for snap, devices in ar.peaks.during(function_id).items():
        less.setdefault(snap, {}).update(devices)
    return less


def first_kept(ar: Attributed, function_id: int, arguments) -> list:
    """(from, until, {device: bytes}) of the donated arguments' arrays that
    the program still held after the function's first call (set up before
    its loop and still named there: ``params`` of ``state =
    TrainState.create(params=params)``). Donated, the first call deletes
    them: from then until the program would have dropped them (its last
    snapshot of them; the end of the run if none is seen), every later call
    has that much less live before it (``call_peaks``'s ``gone``)."""
    run = ar.run
    calls = run.jit.calls
    first = calls[(calls["function_id"] == function_id) & (pd.to_numeric(calls["call_index"], errors="coerce") == 1)]
    if first.empty:
        return []
    row = first.iloc[0]
    inputs = _leaves(row["inputs"])
    ends: dict = {}
    lived: dict = {}  # py_id -> the last time a snapshot saw the array the first call took
    arrays = run.arrays if getattr(run, "has_arrays", False) else pd.DataFrame()
    t_of = dict(zip(run.snapshots["snapshot"], run.snapshots["t_wall"]))
    if not arrays.empty:
        t1 = float(row["t_wall"])
        for py_id, born, last, end in zip(arrays["py_id"], arrays["first_snapshot"], arrays["last_snapshot"],
                                          arrays["end_snapshot"]):
            if pd.isna(born) or t_of.get(int(born), float("inf")) > t1:
                continue  # another array under the same id, made after the first call
            ends[py_id] = t_of.get(int(end), float("inf")) if pd.notna(end) else float("inf")
            lived[py_id] = t_of.get(int(last), -float("inf")) if pd.notna(last) else -float("inf")
    fates = _json(row["inputs_alive"], [])
    if len(fates) != len(inputs):
        # What became of the first call's inputs was not told at the second (the sampler held an array the
        # program dropped then): the program's own arrays tell it, every run alike. An input a snapshot saw
        # after the second call began was held by the program beside the new state.
        second = calls[(calls["function_id"] == function_id) & (pd.to_numeric(calls["call_index"], errors="coerce") > 1)]
        t2 = float(pd.to_numeric(second["t_wall"], errors="coerce").min()) if not second.empty else float("inf")
        fates = ["held" if lived.get(leaf.get("id"), -float("inf")) >= t2 else "unknown" for leaf in inputs]
        kept_fates = ("held",)
    else:
        kept_fates = ("held", "dropped-later", "unknown", "deleted")
    wanted = set(map(str, arguments))
    kept = [leaf for leaf, fate in zip(inputs, fates)
            if label(leaf) in wanted and fate in kept_fates and not leaf.get("donated")]
    if not kept:
        return []
    out = []
    for leaf in kept:
        on = [str(d) for d in leaf.get("on") or []] or ["?"]
        share = int(leaf.get("bytes") or 0) // len(on)
        out.append((float(row["t_wall"]), ends.get(leaf.get("id"), float("inf")), {d: share for d in on}))
    return out


def _int(v) -> int:
    v = pd.to_numeric(v, errors="coerce")
    return 0 if pd.isna(v) else int(v)



def _donated(fn) -> str:
    """What the function donates, as its wrapper takes it: argument numbers
    and names, or the wrapper's own donation option."""
    name = donate_option(fn)
    if name is not None:
        option = _json(fn.get("wrapper_options"), {}).get(name)
        return f"{name}={option}" if option and option != "none" else ""
    return ", ".join(map(str, _json(fn["donate_argnums"], []) + _json(fn["donate_argnames"], [])))


def jit_memory(ar: Attributed) -> pd.DataFrame:
    """Per jitted function, its largest compiled signature's memory: XLA's
    argument, output, alias (donation that took effect), temporary and code
    bytes, and the call's peak ``argument + output - alias + temp + code``;
    its ``compiles`` (its compile cache's growth) and ``signatures`` (those
    the probe recorded: JAX compiles one signature again for what the
    signature does not tell apart, an argument committed to a device or
    not, a weak type)."""
    run, files = ar.run, ar.files
    functions = functions_of(run)
    compiles = run.jit.compiles
    counts = run.jit.counts
    if functions.empty or compiles.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in JIT_MEMORY_COLUMNS})
    c = compiles.copy()
    for col in FIGURES:
        c[col] = pd.to_numeric(c[col], errors="coerce").fillna(0).astype(np.int64)
    c["call_peak_bytes"] = call_peak(c)
    biggest = c.sort_values("call_peak_bytes", ascending=False).drop_duplicates("function_id")
    merged = biggest.merge(functions, on="function_id", how="inner")
    if merged.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in JIT_MEMORY_COLUMNS})
    if counts is not None and not counts.empty:
        merged = merged.merge(counts, on="function_id", how="left", suffixes=("", "_n"))
    else:
        merged["calls"] = np.nan
        merged["compiles"] = c.groupby("function_id").size().reindex(merged["function_id"]).to_numpy()
    out = pd.DataFrame({
        "function_id": merged["function_id"].astype(np.int64),
        "function": merged["name"],
        "wrapper": [wrapper_of(r) for _, r in merged.iterrows()],
        "defined_at": [where_of(f, int(ln), files) for f, ln in zip(merged["file"], merged["line"])],
        "jitted_at": [where_of(f, int(ln), files) for f, ln in zip(merged["jit_file"], merged["jit_line"])],
        "calls": pd.to_numeric(merged["calls"], errors="coerce").astype("Int64"),
        # Runs recorded before the probe stopped counting counted every call.
        "calls_complete": (pd.to_numeric(merged["calls_complete"], errors="coerce").fillna(1) != 0
                           if "calls_complete" in merged else True),
        # Calls made while a transformation traced (grad, vmap, an outer jit): no device call.
        "traced": (pd.to_numeric(merged["traced"], errors="coerce").astype("Int64")
                   if "traced" in merged else pd.array([pd.NA] * len(merged), dtype="Int64")),
        "compiles": pd.to_numeric(merged["compiles"], errors="coerce").astype("Int64"),
        "signatures": merged["function_id"].map(
            c.dropna(subset=["signature"]).groupby("function_id")["signature"].nunique()).astype("Int64")
        if "signature" in c else pd.array([pd.NA] * len(merged), dtype="Int64"),
        "donated": [_donated(r) for _, r in merged.iterrows()],
        "argument_bytes": merged["argument_bytes"],
        "output_bytes": merged["output_bytes"],
        "alias_bytes": merged["alias_bytes"],
        "temp_bytes": merged["temp_bytes"],
        "generated_code_bytes": merged["generated_code_bytes"],
        "call_peak_bytes": merged["call_peak_bytes"],
    })
    return out.sort_values("call_peak_bytes", ascending=False).reset_index(drop=True)

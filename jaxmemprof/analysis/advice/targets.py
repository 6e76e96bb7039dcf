"""The run's step compiled for TPU slices that were not there (``run
--target v5e:2x2``; ``jit_targets``, capture/jit/targets.py): for each
slice and compiled function, XLA:TPU's per-device figures beside the run's
own backend's, whether they fit one of the slice's chips, each fix's peak
there, and (with ``--plan``) the largest batch that fits, found by
compiling for the slice.

- ``points`` (targets_points in JSON, target_points.csv): plan.csv's
  columns for each compile, and ``target``; the per-device peak is XLA:TPU's
  call peak plus the live bytes outside the call on the run's busiest
  device (the program's other arrays, as it held them; a slice's devices
  are not the run's, so no device of the run maps to one of the slice's).
- ``rows`` (targets.csv): one per slice and function, at the recorded
  batch: the busiest device of the call's figures there, the run's own
  backend's beside them, the chip's HBM and what XLA may use of it
  (jaxmemprof.facts.tpus), ``fits`` (peak <= usable), each fix's peak, and with
  ``--plan`` ``largest_batch`` (the largest *compiled* batch whose peak
  fits, on every device of the call) and ``next_batch`` (the smallest
  compiled batch above it, which does not).
- ``lines`` (target_lines.csv): per slice, function, user line and kind,
  XLA:TPU's buffers in the device's memory live at the peak of the step
  compiled for the slice at the recorded batch (its buffer assignment, from
  its dump; XLA:TPU's on-chip memories left out), largest first: the lines
  to change for that chip, which need not be the run's own. Their sum is
  the program's peak there (``program_peak_bytes``): arguments, outputs
  and the temporaries live together, XLA:TPU's call peak without its code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from jaxmemprof.facts import backends, tpus
from jaxmemprof.analysis.advice.plan import PLAN_COLUMNS, RECORDED, curves, function_names, points_of
from jaxmemprof.analysis.cells import json_cell as _json
from jaxmemprof.analysis.inside_jit import buffer_site
from jaxmemprof.facts.truepeak import FIGURES

# A slice's fit is the TPU backend's rule (backends/tpu.py): the peak within what XLA:TPU may use of a device.
_TPU = backends.get("tpu")
POINT_COLUMNS = ["target", *PLAN_COLUMNS]
LINE_COLUMNS = ["target", "function_id", "function", "site", "file", "line", "kind", "bytes", "buffers",
                "share_of_peak", "program_peak_bytes"]
TARGET_COLUMNS = ["target", "chip", "function_id", "function", "devices", "batch", "peak_bytes", "call_peak_bytes",
                  "live_outside_bytes", *FIGURES, "run_backend", "run_peak_bytes", "run_call_peak_bytes",
                  *(f"run_{f}" for f in FIGURES), "hbm_bytes", "usable_bytes", "fits", "donated_peak_bytes",
                  "bfloat16_peak_bytes", "largest_batch", "next_batch", "compiles", "compile_s", "error"]


@dataclass(frozen=True)
class Targets:
    asked: list  # the slices run --target named, in its order
    rows: pd.DataFrame  # TARGET_COLUMNS
    points: pd.DataFrame  # POINT_COLUMNS
    events: list  # what the recorder could not compile, and why
    lines: pd.DataFrame  # LINE_COLUMNS
    cut: str = ""  # why the compiles at the run's end may not all have been made ('': they were; Run.end_cut)

    @property
    def compiles(self) -> int:
        return int((self.points.drop_duplicates(["target", "function_id", "variant", "batch"])["compile_s"] > 0).sum())

    @property
    def compile_s(self) -> float:
        p = self.points.drop_duplicates(["target", "function_id", "variant", "batch"])
        return float(p["compile_s"].sum())

    def not_compiled(self, name: str) -> str | None:
        """Why the slice ``name`` lacks figures for a function the run
        chose (None: every one has them, or XLA:TPU refused it as too large
        for the slice, which is an answer): a gate passes only a slice whose
        every chosen function was compiled, by compiles that ran to their end
        (``cut``: a function may be missing, its search for the largest batch
        stopped part way)."""
        why = self.missing(name)
        return slice_cut_words(self.cut) if why is None and self.cut else why

    def missing(self, name: str) -> str | None:
        """not_compiled's reason from the figures and what the recorder
        said alone (None: every chosen function has figures)."""
        mine = self.rows[self.rows["target"] == name]
        missing = mine[mine["peak_bytes"].isna() & mine["fits"].isna()]
        if len(mine) and missing.empty:
            return None
        if len(missing):
            r = missing.iloc[0]
            return f"{r['function']}: not compiled: {r['error'] or 'no figures recorded'}"
        said = [e for e in self.events if e.startswith(f"{name}: ")]
        return said[0][len(name) + 2:] if said else "not compiled: the run recorded no figures for it"


def slice_cut_words(cut: str) -> str:
    """A slice's compiles cut short (``cut``: why, Run.end_cut), in words."""
    return (f"the run's end was cut short ({cut}): its compiles for the slice may not all have been made, and a "
            "largest batch is the largest compiled before, not the answer of the search")


def _recorded_figures(run) -> dict:
    """(function_id, signature) -> the run's own figures (jit_compiles)."""
    compiles = run.jit.compiles
    if compiles.empty:
        return {}
    out = {}
    for r in compiles.itertuples(index=False):
        out[(int(r.function_id), str(r.signature))] = {f: int(getattr(r, f) or 0) for f in FIGURES}
    return out


def _int(v):
    return None if v is None or pd.isna(v) else int(v)


def _lines(ar, names: dict) -> pd.DataFrame:
    """XLA:TPU's buffers at each slice's program peak, by user line and kind."""
    b = ar.run.jit.target_buffers
    if b.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in LINE_COLUMNS})
    b = b.copy()
    frames = [[f for f in _json(x, []) if isinstance(f, list) and len(f) == 3] for x in b["frames"]]
    where = [buffer_site(ar.files.view, None, k, op, f) for k, op, f in zip(b["kind"], b["op"], frames)]
    b["site"], b["file"], b["line"] = [w[0] for w in where], [w[1] for w in where], [w[2] for w in where]
    b["function"] = [names.get(int(f), str(f)) for f in b["function_id"]]
    out = b.groupby(["target", "function_id", "function", "site", "file", "line", "kind", "program_peak_bytes"],
                    sort=False).agg(bytes=("bytes", "sum"), buffers=("name", "size")).reset_index()
    out["share_of_peak"] = out["bytes"] / out["program_peak_bytes"].where(out["program_peak_bytes"] > 0)
    out = out.sort_values(["target", "function_id", "bytes", "site"], ascending=[True, True, False, True],
                          kind="stable")
    return out.reset_index(drop=True)[LINE_COLUMNS]


def build_targets(ar) -> Targets | None:
    """The slices of a run recorded with ``run --target`` (None: without)."""
    run = ar.run
    table = run.jit.targets
    asked = ((run.manifest or {}).get("settings") or {}).get("targets") or []
    asked = [str(a) for a in asked] if isinstance(asked, list) else []
    if table.empty and not asked:
        return None
    ev = run.events
    said = [] if ev is None or ev.empty else [str(m) for m in ev.loc[ev["kind"] == "target", "message"]]
    names = function_names(run)
    parts = []
    for name, g in ([] if table is None else table.groupby("target", sort=False)):
        p = points_of(g, names, busiest=True)
        p.insert(0, "target", str(name))
        if tpus.problem(str(name)) is None:
            usable = tpus.usable_bytes(str(name))
            ok = p["peak_bytes"].notna()
            p.loc[ok, "fits"] = [_TPU.fits(int(v), usable) for v in p.loc[ok, "peak_bytes"]]
            p.loc[p["error"].map(tpus.out_of_memory), "fits"] = False  # XLA:TPU's own "it does not fit"
        parts.append(p)
    points = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=POINT_COLUMNS)
    own = _recorded_figures(run)
    rows = []
    for name in list(dict.fromkeys(asked + [str(t) for t in points["target"]])):
        if tpus.problem(name) is not None:
            continue
        _, kind, hbm, _, _, _ = tpus.chip(name)
        usable = tpus.usable_bytes(name)
        mine = points[points["target"] == name]
        for fid, g in mine.groupby("function_id", sort=False):
            src = table[(table["target"] == name) & (table["function_id"] == fid)]
            recorded_batch = _int(src["recorded_batch"].iloc[0]) or None
            sig = str(src["signature"].iloc[0])
            at = g[g["batch"] == (recorded_batch or 0)] if recorded_batch else g
            base = at[at["variant"] == RECORDED]
            if recorded_batch:
                base = base[base["source"] == "target"]
            ok = base[base["peak_bytes"].notna()]
            top = ok.loc[ok["peak_bytes"].astype("int64").idxmax()] if len(ok) else None
            run_fig = own.get((int(fid), sig))
            detail = _json(src["detail"].iloc[0], {})
            run_call = _int(detail.get("signature_call_peak_bytes"))
            largest = nxt = None

            def fits(p, usable=usable):  # the TPU's rule: the whole device, no pool
                return _TPU.fits(p, usable)

            cs = {k: c for k, c in curves(g).items() if k[1] == RECORDED}
            refused = sorted({int(b) for b, e, v in zip(g["batch"], g["error"], g["variant"])
                              if v == RECORDED and tpus.out_of_memory(e)})  # XLA:TPU: too large for the device
            if any(len(c.b) > 1 for c in cs.values()) or (cs and refused):  # --plan: the bracket, every device
                largest = min(c.largest(fits) for c in cs.values())
                above = [c.above(largest, fits) for c in cs.values()] + [b for b in refused if b > largest]
                nxt = min((a for a in above if a is not None), default=None)

            def fix(variant, at=at):
                v = at[(at["variant"] == variant) & at["peak_bytes"].notna()]
                return int(v["peak_bytes"].max()) if len(v) else None

            compiled = g.drop_duplicates(["variant", "batch"])
            errors = base["error"].dropna()
            too_large = top is None and any(tpus.out_of_memory(e) for e in errors)
            rows.append({
                "target": name, "chip": kind, "function_id": int(fid), "function": str(g["function"].iloc[0]),
                "devices": int(base["device"].nunique()) if len(base) else None, "batch": recorded_batch,
                **({c: _int(top[c]) for c in ("peak_bytes", "call_peak_bytes", "live_outside_bytes",
                                               *FIGURES)} if top is not None else
                   {c: None for c in ("peak_bytes", "call_peak_bytes", "live_outside_bytes",
                                      *FIGURES)}),
                "run_backend": str((run.manifest or {}).get("backend") or ""),
                "run_peak_bytes": None if run_call is None else run_call + (_int(top["live_outside_bytes"]) or 0
                                                                            if top is not None else 0),
                "run_call_peak_bytes": run_call,
                **{f"run_{f}": None if run_fig is None else run_fig[f] for f in FIGURES},
                "hbm_bytes": hbm, "usable_bytes": usable,
                "fits": False if too_large else None if top is None else bool(_TPU.fits(int(top["peak_bytes"]), usable)),
                "donated_peak_bytes": fix("donated"), "bfloat16_peak_bytes": fix("bfloat16"),
                "largest_batch": largest, "next_batch": nxt,
                "compiles": int((compiled["compile_s"] > 0).sum()), "compile_s": float(compiled["compile_s"].sum()),
                "error": str(errors.iloc[0]) if top is None and len(errors) else None,
            })
    # the functions a slice could not compile (their reason: the recorder's event), beside those it did
    for name in asked:
        done = {r["function"] for r in rows if r["target"] == name}
        for e in said:
            m = re.match(rf"^{re.escape(name)}: (.+?): not compiled: (.*)$", e, re.S)
            if m and not m.group(1).startswith("not compiled") and m.group(1) not in done:
                done.add(m.group(1))
                _, kind, hbm, _, _, _ = tpus.chip(name) if tpus.problem(name) is None else (0, "", None, 0, 0, 0)
                rows.append({"target": name, "chip": kind, "function": m.group(1), "hbm_bytes": hbm,
                             "usable_bytes": None if hbm is None else tpus.usable_bytes(name), "fits": None,
                             "compiles": 0, "compile_s": 0.0, "error": m.group(2)})
    out = pd.DataFrame(rows, columns=TARGET_COLUMNS)
    for c in TARGET_COLUMNS:
        if c.endswith("_bytes") or c in ("devices", "batch", "largest_batch", "next_batch", "compiles"):
            out[c] = out[c].astype("Int64")
    out["fits"] = out["fits"].astype("boolean")
    cut = str(getattr(run, "end_cut", "") or "") if asked else ""
    if cut:  # said where the slices' figures are (JSON's events too)
        said = said + [f"{name}: {slice_cut_words(cut)}" for name in asked]
    return Targets(asked=asked, rows=out, points=points.reindex(columns=POINT_COLUMNS), events=said,
                   lines=_lines(ar, names), cut=cut)

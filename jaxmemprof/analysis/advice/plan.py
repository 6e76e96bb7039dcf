"""The plan of a run recorded with ``run --plan``: the per-device peak of the
planned steps against the batch, measured by XLA's compiles of the step at
other batch sizes (``jit_plans``, capture/jit/plan.py), a model of it, and,
for a device of a given size, the largest batch that fits and what each fix
buys there.

- ``points`` (plan.csv): per function, variant, batch and device of the
  call, XLA's figures for that compile and the per-device peak: the live
  bytes outside the call (live before the recorded call, less its
  arguments) plus XLA's call peak (argument + output - alias + temp + code).
- ``models`` (plan_models.csv): per function, variant and device, the
  least-squares line through its points (``intercept_bytes``,
  ``bytes_per_example``) and whether every point lies within
  ``AFFINE_TOLERANCE`` of it (``affine``): a description, never an answer.
  With a device size: the largest *compiled* batch whose peak fits, by the
  fit rule of the run's backend (jaxmemprof/facts/backends/; a GPU's, and a CPU
  run's, the peak plus 5 % and 64 MiB within XLA's default pool, 0.75 of the
  device, ``largest_batch_with_settings`` within 0.95 with the fraction set;
  a TPU's, the peak within the whole chip, no pool: the device a TPU run
  plans for, unless asked, is the chip's own ``bytes_limit``), and
  ``next_batch``, the next compiled batch, which does not fit (none: every
  compiled batch fits, and ``run --plan-device-memory`` searches further by
  compiling); for each fix (a variant other than ``recorded``) its peak
  and what it saves at the recorded variant's largest batch, where that
  variant was compiled there. With several devices, the
  ``job`` rows: the largest batch that fits every device of the call.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from jaxmemprof.facts import backends, tpus
from jaxmemprof.facts.backends import Backend
from jaxmemprof.analysis.cells import json_cell as _json
from jaxmemprof.facts.backends.gpu import fraction_env_name, fraction_setting, needed_bytes, percent_needed
from jaxmemprof.facts.truepeak import peak_of, peak_on_device

PLAN_COLUMNS = ["function_id", "function", "variant", "batch", "scale", "device", "peak_bytes", "call_peak_bytes",
                "live_outside_bytes", "argument_bytes", "output_bytes", "alias_bytes", "temp_bytes",
                "generated_code_bytes", "source", "compile_s", "backend", "fits", "error"]
MODEL_COLUMNS = ["function_id", "function", "variant", "device", "points", "batch_min", "batch_max",
                 "intercept_bytes", "bytes_per_example", "affine", "max_residual_bytes", "largest_batch",
                 "largest_batch_with_settings", "next_batch", "at_batch", "peak_at_batch_bytes",
                 "saving_at_batch_bytes"]
RECORDED = "recorded"
VARIANTS = (RECORDED, "donated", "bfloat16")  # the order they are shown in
# A line fits the points when each lies within this share of its own peak from it.
AFFINE_TOLERANCE = 0.01
JOB = "job"  # the device of the models' rows for all devices of the call together


@dataclass(frozen=True)
class Planned:
    """One planned function: how its batch was found and what planning it cost."""

    function_id: int
    function: str
    signature: str
    recorded_batch: int
    axis: int
    batch_inputs: list  # the inputs scaled, by owner (x, y; batch['image'])
    batch_flow: str  # per-step (new at every call) or held (the same array at every call)
    backend: str  # the platform that compiled the plan (cpu, gpu, tpu)
    compiles: int
    compile_s: float
    failed: int  # compiles that failed (their rows say why), other than those refused as too large
    refused_at: list  # batches XLA refused as too large for the device (XLA:TPU: an answer, "it does not fit")
    call_peak_bytes: int | None  # the largest XLA call peak of the run that chose it
    rank: int
    not_planned: list  # [function, its call peak] of the others the run compiled
    donated: list  # the arguments the donated variant donated (names, else positions)
    advised: list | None  # what the report's donation finding donates (None: no finding)
    notes: list = field(default_factory=list)  # fixes not compiled from outside, and why


@dataclass(frozen=True)
class Plan:
    points: pd.DataFrame
    models: pd.DataFrame
    functions: list  # Planned
    device_bytes: int | None
    events: list  # what the recorder said it could not plan
    fraction_variable: str
    searched_bytes: int | None = None  # the device run --plan-device-memory searched the largest batch for
    cut: str = ""  # why the compiles at the run's end may not all have been made ('': they were; Run.end_cut)
    backend: str = "cpu"  # the backend whose fit rule the largest batch is found by (jaxmemprof/facts/backends/)
    device_from: str = ""  # where device_bytes came from: asked, searched, bytes_limit (the chip's own); '' none

    @property
    def compile_s(self) -> float:
        return float(sum(f.compile_s for f in self.functions))

    @property
    def compiles(self) -> int:
        return int(sum(f.compiles for f in self.functions))

    @property
    def backends(self) -> list:
        return sorted({f.backend for f in self.functions if f.backend})


def _int(v) -> int | None:
    try:
        return None if v is None or pd.isna(v) else int(v)
    except (TypeError, ValueError):
        return None


def fits_by_default(peak: int, device_bytes: int, backend: str | None = None) -> bool:
    """The fit rule of ``backend`` (capacity.will_it_fit; None: the GPU's, as
    a CPU run's): a GPU's, the pool the peak needs within XLA's default pool;
    a TPU's, the peak within the whole device."""
    return backends.get(backend).fits(peak, device_bytes)


def largest_fitting_peak(device_bytes: int, backend: str | None = None) -> int:
    """The largest per-device peak that fits a device by the fit rule
    (``fits_by_default``): what ``run --plan-device-memory`` searches for."""
    return backends.get(backend).largest_fitting_peak(device_bytes)


def fits_at_all(peak: int, device_bytes: int, backend: str | None = None) -> bool:
    """Within the largest pool the rule advises (a GPU: 0.95 of the device, the
    fraction set; a TPU: the whole device, as ``fits_by_default``)."""
    return backends.get(backend).fits_at_all(peak, device_bytes)


class Curve:
    """A variant's per-device peak against the batch: its compiled points,
    the line through them, and the peak read off them at any batch."""

    def __init__(self, batches, peaks):
        order = np.argsort(np.asarray(batches, dtype=np.int64), kind="stable")
        self.b = np.asarray(batches, dtype=np.float64)[order]
        self.p = np.asarray(peaks, dtype=np.float64)[order]
        if len(self.b) >= 2 and np.ptp(self.b) > 0:
            slope, intercept = np.polyfit(self.b, self.p, 1)
        else:
            slope, intercept = 0.0, float(self.p[0]) if len(self.p) else 0.0
        self.slope, self.intercept = float(slope), float(intercept)
        resid = np.abs(self.p - (self.intercept + self.slope * self.b)) if len(self.b) else np.zeros(0)
        self.max_residual = float(np.max(resid)) if len(resid) else 0.0
        self.affine = bool(len(self.b) >= 2 and np.all(resid <= AFFINE_TOLERANCE * np.maximum(self.p, 1.0)))

    def at(self, batch: int) -> int | None:
        """The peak compiled at ``batch``; None where it was not compiled."""
        hit = np.flatnonzero(self.b == batch)
        return int(self.p[hit[0]]) if len(hit) else None

    def largest(self, fits) -> int:
        """The largest compiled batch whose peak ``fits`` below the smallest
        compiled one that does not (0 where even the smallest does not): an
        answer is always a batch XLA compiled, never one read off a line."""
        best = 0
        for x, y in zip(self.b, self.p):
            if not fits(int(y)):
                break
            best = int(x)
        return best

    def above(self, batch: int, fits) -> int | None:
        """The smallest compiled batch above ``batch`` whose peak does not
        ``fits``: the other end of the answer's bracket (None: none compiled)."""
        return next((int(x) for x, y in zip(self.b, self.p) if x > batch and not fits(int(y))), None)


def points_of(plans: pd.DataFrame, names: dict, busiest: bool = False) -> pd.DataFrame:
    """jit_plans' rows (or a target's jit_targets rows) as points: each
    compile's figures on each device of its call, and the per-device peak,
    its live bytes outside the call added: the device's own, or with
    ``busiest`` (a target, whose devices are not the run's) the run's
    busiest device's."""
    rows = []
    for r in plans.itertuples(index=False):
        devices = [str(d) for d in _json(r.devices, [])] or ["?"]
        outside = _json(r.live_outside, {}) if isinstance(r.live_outside, str) else None
        if busiest and isinstance(outside, dict):
            most = max((v for v in (_int(x) for x in outside.values()) if v is not None), default=None)
            outside = {d: most for d in devices}
        detail = _json(r.detail, {})
        error = r.error if isinstance(r.error, str) and r.error else None
        figures = [_int(getattr(r, c)) for c in ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes",
                                                 "generated_code_bytes")]
        call = None if error is not None else peak_of(figures)
        for d in devices:
            live = _int(outside.get(d)) if isinstance(outside, dict) else None
            rows.append({
                "function_id": int(r.function_id), "function": names.get(int(r.function_id), str(r.function_id)),
                "variant": str(r.variant), "batch": int(r.batch), "scale": _num(detail.get("scale")),
                "device": d, "peak_bytes": None if call is None else peak_on_device(live, figures),
                "call_peak_bytes": call, "live_outside_bytes": live,
                **dict(zip(("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "generated_code_bytes"),
                           [None if error is not None else f for f in figures])),
                "source": str(detail.get("source") or ""), "compile_s": float(r.compile_s),
                "backend": str(r.backend or ""), "fits": None, "error": error,
            })
    out = pd.DataFrame(rows, columns=PLAN_COLUMNS)
    for c in ("peak_bytes", "call_peak_bytes", "live_outside_bytes", "argument_bytes", "output_bytes", "alias_bytes",
              "temp_bytes", "generated_code_bytes"):
        out[c] = out[c].astype("Int64")
    out["fits"] = out["fits"].astype("boolean")
    out["_order"] = out["variant"].map(lambda v: VARIANTS.index(v) if v in VARIANTS else len(VARIANTS))
    out = out.sort_values(["function_id", "_order", "variant", "batch", "device"], kind="stable")
    return out.drop(columns="_order").reset_index(drop=True)


def _num(v):
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None


def curves(points: pd.DataFrame) -> dict:
    """(function_id, variant, device) -> its Curve (compiled points only)."""
    out = {}
    ok = points[points["peak_bytes"].notna()]
    for key, g in ok.groupby(["function_id", "variant", "device"], sort=False):
        out[key] = Curve(g["batch"].astype(np.int64).to_numpy(), g["peak_bytes"].astype(np.int64).to_numpy())
    return out


def batch_models(points: pd.DataFrame, device_bytes: int | None, rule: Backend) -> pd.DataFrame:
    """Per function, variant and device, its curve's line and, with a device size, its largest batch by
    the backend's fit rule (``rule``: the run's, ``Attributed.backend``)."""
    fits = None if device_bytes is None else (lambda p: rule.fits(p, device_bytes))
    rows = []
    by_key = curves(points)
    names = dict(zip(points["function_id"], points["function"]))
    functions = list(dict.fromkeys(points["function_id"]))
    refused = {} if rule.has_pool else _refused(points)
    for fid in functions:
        keys = [k for k in by_key if k[0] == fid]
        devices = list(dict.fromkeys(k[2] for k in keys))
        variants = list(dict.fromkeys(k[1] for k in keys))  # in the points' order: recorded first
        target: dict = {}  # device -> the recorded variant's largest batch there
        for variant in variants:
            for device in devices + ([JOB] if len(devices) > 1 else []):
                if device == JOB:
                    parts = [by_key[(fid, variant, d)] for d in devices if (fid, variant, d) in by_key]
                    row = _job_row(parts, device_bytes, rule)
                else:
                    c = by_key.get((fid, variant, device))
                    if c is None:
                        continue
                    row = _curve_row(c, device_bytes, rule)
                    if fits is not None and refused.get((fid, variant)):  # a TPU's compile refused some
                        _bound_by_refusals(row, refused[(fid, variant)], c, fits)
                at = None
                if device_bytes is not None:
                    at = target.setdefault(device, row["largest_batch"]) if variant == RECORDED else target.get(device)
                peak_at = saving = None
                if at:  # what the variant holds at the recorded variant's largest batch, and what it saves there
                    mine = _peak_at(by_key, fid, variant, device, devices, at)
                    base = _peak_at(by_key, fid, RECORDED, device, devices, at)
                    peak_at = mine
                    saving = None if mine is None or base is None or variant == RECORDED else base - mine
                rows.append({"function_id": fid, "function": names.get(fid, str(fid)), "variant": variant,
                             "device": device, **row, "at_batch": at, "peak_at_batch_bytes": peak_at,
                             "saving_at_batch_bytes": saving})
    out = pd.DataFrame(rows, columns=MODEL_COLUMNS)
    for c in ("largest_batch", "largest_batch_with_settings", "next_batch", "at_batch", "peak_at_batch_bytes",
              "saving_at_batch_bytes", "intercept_bytes", "max_residual_bytes", "batch_min", "batch_max", "points"):
        out[c] = out[c].astype("Int64")
    out["affine"] = out["affine"].astype("boolean")
    return out


def _refused(points: pd.DataFrame) -> dict:
    """(function_id, variant) -> the batches whose compile was refused as too large for the device
    (XLA:TPU's RESOURCE_EXHAUSTED: an answer, "it does not fit"; read on a backend without a pool, a TPU)."""
    if points.empty:
        return {}
    bad = points[points["error"].map(tpus.out_of_memory)]
    return {(int(f), str(v)): sorted({int(b) for b in g["batch"]})
            for (f, v), g in bad.groupby(["function_id", "variant"], sort=False)}


def _bound_by_refusals(row: dict, refused: list, c: Curve, fits) -> None:
    """A batch the chip's compiler refused does not fit: the largest batch is the largest compiled one that fits
    below the smallest refused, and the next batch the smallest compiled (not fitting) or refused above it."""
    if row.get("largest_batch") is None:
        return
    best = 0
    for x, y in zip(c.b, c.p):
        if x >= refused[0] or not fits(int(y)):
            break
        best = int(x)
    row["largest_batch"] = row["largest_batch_with_settings"] = best
    above = [b for b in refused if b > best]
    nxt = c.above(best, fits)
    row["next_batch"] = min(above + ([nxt] if nxt is not None else [])) if above or nxt is not None else None


def _peak_at(by_key, fid, variant, device, devices, batch) -> int | None:
    """The variant's peak compiled at ``batch`` (the busiest device, for the
    job); None where it was not compiled there."""
    if device == JOB:
        vals = [by_key[(fid, variant, d)].at(batch) for d in devices if (fid, variant, d) in by_key]
        return None if not vals or None in vals else max(vals)
    c = by_key.get((fid, variant, device))
    return None if c is None else c.at(batch)


def _curve_row(c: Curve, device_bytes: int | None, rule: Backend) -> dict:
    row = {"points": len(c.b), "batch_min": int(c.b[0]), "batch_max": int(c.b[-1]),
           "intercept_bytes": int(round(c.intercept)), "bytes_per_example": round(c.slope, 3),
           "affine": c.affine, "max_residual_bytes": int(round(c.max_residual)), "largest_batch": None,
           "largest_batch_with_settings": None, "next_batch": None}
    if device_bytes is not None:
        def fits(p):
            return rule.fits(p, device_bytes)

        row["largest_batch"] = largest = c.largest(fits)
        row["largest_batch_with_settings"] = c.largest(lambda p: rule.fits_at_all(p, device_bytes))
        row["next_batch"] = c.above(largest, fits)
    return row


def _job_row(parts: list, device_bytes: int | None, rule: Backend) -> dict:
    """All devices of the call together: each device's own answer, the smallest."""
    rows = [_curve_row(c, device_bytes, rule) for c in parts]
    out = {"points": min(r["points"] for r in rows), "batch_min": max(r["batch_min"] for r in rows),
           "batch_max": min(r["batch_max"] for r in rows), "intercept_bytes": None, "bytes_per_example": None,
           "affine": all(r["affine"] for r in rows), "max_residual_bytes": None, "largest_batch": None,
           "largest_batch_with_settings": None, "next_batch": None}
    if device_bytes is not None:
        for k in ("largest_batch", "largest_batch_with_settings"):
            known = [r[k] for r in rows if r[k] is not None]
            out[k] = min(known) if known else None
        nexts = [r["next_batch"] for r in rows if r["next_batch"] is not None and r["next_batch"] > out["largest_batch"]]
        out["next_batch"] = min(nexts) if nexts else None
    return out


def _planned(run, points: pd.DataFrame, names: dict, params: dict, findings) -> list:
    plans = run.jit.plans
    out = []
    for fid, g in plans.groupby("function_id", sort=False):
        fid = int(fid)
        first = _json(g["detail"].iloc[0], {})
        why = first.get("planned") if isinstance(first.get("planned"), dict) else {}
        donated_detail = next((d.get("donated") for d in (_json(x, {}) for x in g["detail"])
                               if isinstance(d.get("donated"), dict)), None)
        donated = []
        if donated_detail:
            p = params.get(fid, [])
            donated = [p[i] if isinstance(i, int) and i < len(p) else str(i) for i in donated_detail.get("argnums", [])]
            donated += [str(n) for n in donated_detail.get("argnames", [])]
        name = names.get(fid, str(fid))
        advice = next((f for f in findings if f.rule == "donate" and f.fact("function") == name), None)
        notes = []
        if any(f.rule == "remat" and f.fact("function") == name for f in findings):
            notes.append("remat (jax.checkpoint of the forward pass, which the report hints): not compiled; it "
                         "changes the step's own code, which the plan cannot do from outside")
        compiled = g[g["compile_s"] > 0]
        out.append(Planned(
            function_id=fid, function=name, signature=str(g["signature"].iloc[0]),
            recorded_batch=int(g["recorded_batch"].iloc[0]), axis=int(g["axis"].iloc[0]),
            batch_inputs=[str(x) for x in first.get("batch_inputs") or []],
            batch_flow=str(first.get("batch_flow") or ""), backend=str(g["backend"].iloc[0] or ""),
            compiles=int(len(compiled)), compile_s=float(compiled["compile_s"].sum()),
            failed=int(g["error"].map(lambda e: isinstance(e, str) and bool(e) and not tpus.out_of_memory(e)).sum()),
            refused_at=sorted({int(b) for b in g.loc[g["error"].map(tpus.out_of_memory), "batch"]}),
            call_peak_bytes=_int(why.get("call_peak_bytes")), rank=_int(why.get("rank")) or 1,
            not_planned=[x for x in why.get("not_planned") or [] if isinstance(x, list)],
            donated=donated, advised=None if advice is None else [str(a) for a in advice.fact("arguments", [])],
            notes=notes))
    return out


def function_names(run) -> dict:
    """function_id -> the jitted function's name (jit_functions)."""
    functions = run.jit.functions
    if functions.empty:
        return {}
    return {int(f): str(n) for f, n in zip(functions["function_id"], functions["name"])}


def build_plan(ar, findings=(), device_bytes: int | None = None) -> Plan | None:
    """The run's plan (None: recorded without --plan). ``findings``: the
    report's, to say whether the donated variant is what it advises and
    which hinted fixes cannot be compiled; ``device_bytes``: the device
    to find the largest batch for."""
    run = ar.run
    plans = run.jit.plans
    if plans.empty:
        return None
    functions = run.jit.functions
    names, params = function_names(run), {}
    if functions is not None and not functions.empty:
        params = {int(f): [str(x) for x in _json(p, [])] for f, p in zip(functions["function_id"], functions["params"])}
    points = _less_donated(ar, points_of(plans, names), plans, params)
    planned_for = ((run.manifest or {}).get("settings") or {}).get("plan") or {}
    searched = _int(planned_for.get("device_bytes")) if isinstance(planned_for, dict) else None
    m = run.manifest or {}
    rule = ar.backend
    device_from = "asked" if device_bytes is not None else ""
    if device_bytes is None and searched is not None:  # the device the run searched for, unless another is asked
        device_bytes, device_from = searched, "searched"
    if device_bytes is None and not rule.has_pool:  # a TPU: the chip it ran on, all of it
        device_bytes = recorded_limit(run)
        device_from = "bytes_limit" if device_bytes is not None else ""
    if device_bytes is not None:
        ok = points["peak_bytes"].notna()
        points.loc[ok, "fits"] = [rule.fits(int(p), device_bytes) for p in points.loc[ok, "peak_bytes"]]
        if not rule.has_pool:  # XLA:TPU's own "it does not fit", at compile
            points.loc[points["error"].map(tpus.out_of_memory), "fits"] = False
    ev = run.events
    said = [] if ev is None or ev.empty else [str(m) for m in ev.loc[ev["kind"] == "plan", "message"]]
    cut = str(getattr(run, "end_cut", "") or "")
    if cut:  # said first, where the plan is (JSON's events too)
        said = [plan_cut_words(cut)] + said
    return Plan(points=points, models=batch_models(points, device_bytes, rule),
                functions=_planned(run, points, names, params, list(findings)),
                device_bytes=device_bytes, events=said, fraction_variable=fraction_env_name(m.get("jaxlib_version")),
                searched_bytes=searched, cut=cut, backend=rule.name, device_from=device_from)


def _less_donated(ar, points: pd.DataFrame, plans: pd.DataFrame, params: dict) -> pd.DataFrame:
    """The donated rows' bytes outside the call less what the donation
    deletes beside the call's own arguments: the first call's donated
    arrays that the program holds by another name (``variables`` of a
    linen module, the ``params`` a TrainState was made of) and would keep
    through the run (donation._first_kept: deleted by that first call,
    donated). Nothing else is taken off."""
    from jaxmemprof.analysis.advice.donation import first_kept

    donated = points["variant"] == "donated"
    if not donated.any():
        return points
    points = points.copy()
    for fid in sorted(set(points.loc[donated, "function_id"])):
        rows = plans[(plans["function_id"] == fid) & (plans["variant"] == "donated")]
        detail = next((d.get("donated") for d in (_json(x, {}) for x in rows["detail"])
                       if isinstance(d.get("donated"), dict)), None) or {}
        names = [params.get(int(fid), [])[i] if isinstance(i, int) and i < len(params.get(int(fid), [])) else str(i)
                 for i in detail.get("argnums", [])] + [str(n) for n in detail.get("argnames", [])]
        off: dict = {}
        for _, until, per in first_kept(ar, int(fid), names) if names else ():
            if until == float("inf"):  # kept to the run's end: outside every later call of the step
                for d, b in per.items():
                    off[d] = off.get(d, 0) + int(b)
        mine = donated & (points["function_id"] == fid) & points["live_outside_bytes"].notna()
        for i in points.index[mine]:
            less = min(off.get(str(points.at[i, "device"]), 0), int(points.at[i, "live_outside_bytes"]))
            if less:
                points.at[i, "live_outside_bytes"] -= less
                if pd.notna(points.at[i, "peak_bytes"]):
                    points.at[i, "peak_bytes"] -= less
    return points


def recorded_limit(run) -> int | None:
    """The smallest ``bytes_limit`` the run's devices recorded (the chip's
    memory on a TPU); None where none did."""
    stats = getattr(run, "memory_stats", None)
    if stats is None or len(stats) == 0:
        return None
    limits = stats[stats["key"] == "bytes_limit"]
    if limits.empty:
        return None
    return int(limits.groupby("device")["value"].last().min())


def plan_cut_words(cut: str) -> str:
    """The plan's compiles cut short (``cut``: why, Run.end_cut), in words."""
    return (f"the run's end was cut short ({cut}): its compiles may not all have been made, and a largest batch "
            "is the largest compiled before that fits, not the answer of a search")


def fraction_for(peak: int, device_bytes: int) -> str:
    """The fraction setting a peak needs on that device (``.82``)."""
    return fraction_setting(percent_needed(needed_bytes(peak), device_bytes))

"""Whether the run fits a device: ``fit``, found here from
analysis/advice/capacity.py's ``Fit`` (run with ``--device-memory``), and the
report's other findings whose measured saving would make it fit."""

from __future__ import annotations

from collections.abc import Sequence

from jaxmemprof.facts import backends
from jaxmemprof.analysis.advice.allocator import DOCS_URL, UNDERUSED_SHARE
from jaxmemprof.facts.backends.gpu import DEFAULT_FRACTION, MAX_FRACTION_PERCENT, PREALLOCATE, fraction_setting
from jaxmemprof.analysis.advice.capacity import Fit
from jaxmemprof.analysis.findings import Finding
from jaxmemprof.analysis.rules.allocator import both_fractions_findings
from jaxmemprof.analysis.rules.base import LOWER_THE_PEAK, Context, Rule, Words, exact, fmt, peak_source


def detect(ctx: Context) -> list[Finding]:
    """Last: the fit names the findings made before it."""
    return [] if ctx.fit is None else fit_findings(ctx.fit, ctx.found)

CAPACITY_EXCLUDES = ("library workspaces (cuDNN, cuBLAS, NCCL), the CUDA context and allocator fragmentation "
                     "are not in this estimate")


TPU_DOCS = "docs/tpu.md"


def _fit_whole_device(f: Finding, x: dict) -> Words:
    """A backend with no pool (a TPU): the peak within the whole device, as XLA:TPU compiles it."""
    n = x.get("processes") or 1
    peak, device_bytes = x["peak_bytes"], x["device_bytes"]
    pct = 100 * peak / device_bytes if device_bytes else 0.0
    head = f"A peak of {fmt(peak)}" + (" per process" if n > 1 else "")
    device = f"a {fmt(device_bytes)} device"
    fits = f.case in ("fits", "shared-fits")
    says = (f"{head} fits {device} ({pct:.1f} % of it; no pool, no preallocation: the whole device is usable)"
            if fits else f"{head} needs {pct:.1f} % of {device}: it cannot fit (XLA:TPU refuses at compile a step "
                         "whose temporaries exceed the device)")
    if n > 1:
        says = f"{says}, {n} processes sharing it"
    bound = ""
    if x.get("peak_source") in ("device_live_bytes", "live_bytes"):
        bound = " The estimate is a lower bound: XLA's temporaries inside a computation are not in it."
    fixes = x.get("fixes_that_fit") or []
    if fits:
        fix = brief_fix = "Nothing to set."
    elif fixes:
        brief_fix = f"apply the {fixes[0]['rule']} finding at {fixes[0]['site']}: it then fits"
        fix = "Apply " + "; or ".join(f"the {c['rule']} finding at {c['site']} (saves {fmt(c['saving_bytes'])}: "
                                      f"{fmt(c['peak_after_bytes'])} then)" for c in fixes) + \
            ": it then fits, as measured by XLA's compile of the fixed step."
    else:
        fix, brief_fix = LOWER_THE_PEAK, "lower the peak, or use a larger device"
    evidence = (f"peak {exact(peak)}, from {peak_source(x)}; device {exact(device_bytes)} (its bytes_limit on a "
                f"TPU), all of it usable: no pool fraction, no headroom; backend {x.get('backend')}")
    return Words(brief=says + ".", brief_fix=brief_fix, message=says + "." + bound, fix=fix + f" See {TPU_DOCS}",
                 evidence=evidence)


def _fit(f: Finding, x: dict) -> Words:
    if not backends.get(x.get("backend")).has_pool:
        return _fit_whole_device(f, x)
    pct = round(x["fraction_needed"] * 100)
    n = x.get("processes") or 1
    peak, need, device_bytes = x["peak_bytes"], x["needed_bytes"], x["device_bytes"]
    head = (f"A peak of {fmt(peak)} ({fmt(need)} with the allocator's headroom, +5 % + 64 MiB)"
            + (" per process" if n > 1 else ""))
    device = f"a {fmt(device_bytes)} device"
    name, pool, most = x["fraction_variable"], x["default_pool_bytes"], fraction_setting(MAX_FRACTION_PERCENT)
    says = {
        "shared-fits": (f"{head} fits {n} processes on {device} ({pct / 100:.2f} of it each), but not under "
                        f"default preallocation ({DEFAULT_FRACTION:.2f} each): set {PREALLOCATE}=false, or "
                        f"{name}={fraction_setting(pct)} in each process."),
        "shared-cannot": (f"{head} needs {pct} % of {device}: {n} processes cannot share it (at most {most} of a "
                          "device should go to JAX's pools)."),
        "fits": f"{head} fits {device} under default preallocation (pool {fmt(pool)} = {DEFAULT_FRACTION:.2f} of it).",
        "fits-with": (f"{head} does not fit the default pool of {device} ({fmt(pool)} = {DEFAULT_FRACTION:.2f} of "
                      f"it); it fits with {name}={fraction_setting(pct)}."),
        "cannot": (f"{head} needs {pct} % of {device}: it cannot fit (at most {most} of a device should go to "
                   "JAX's pool)."),
    }[f.case]
    bound = f" The estimate is a lower bound: {CAPACITY_EXCLUDES}"
    if x.get("peak_source") in ("device_live_bytes", "live_bytes"):
        bound += ", nor are XLA's temporaries inside a computation"
    settings = x.get("settings") or {}
    fixes = x.get("fixes_that_fit") or []  # measured fixes of the report's that bring it into the default pool
    named = "; or ".join(f"the {c['rule']} finding at {c['site']} (saves {fmt(c['saving_bytes'])}: "
                         f"{fmt(c['peak_after_bytes'])} then)" for c in fixes)
    instead = (f"apply the {fixes[0]['rule']} finding at {fixes[0]['site']}: it then fits the default pool"
               if fixes else "")
    if settings:
        what = ", ".join(f"{k}={v}" for k, v in settings.items())
        trade = ("Memory is then allocated on demand: more prone to fragmentation, and freed memory stays with its "
                 "process." if PREALLOCATE in settings else
                 f"What the pool takes, other processes and the libraries outside it cannot have; above {most} they "
                 "may fail to allocate.")
        fix, brief_fix = f"Set {what}. {trade}", what + (f"; or {instead}" if instead else "")
    elif x.get("fits_by_default"):
        fix = brief_fix = "Nothing to set."
        if x.get("underused"):
            fix += (f" To leave the rest of the GPU to other processes: {PREALLOCATE}=false, or "
                    f"{name}={fraction_setting(pct)}.")
    elif fixes:
        fix, brief_fix = "", instead
    else:
        fix, brief_fix = LOWER_THE_PEAK, "lower the peak, or use a larger device"
    if fixes:
        fix += (" " if fix else "") + (f"Apply {named}: it then fits the default pool, as measured by XLA's compile "
                                       f"of the fixed step.")
    if x.get("fraction_policy_set"):
        fix += (" XLA_FLAGS sets --xla_gpu_memory_fraction_policy, which changes the default pool: check it against "
                "these figures.")
    evidence = (f"peak {exact(peak)}, from {peak_source(x)}; with headroom (+5 % + 64 MiB) {exact(need)}; "
                f"device {exact(device_bytes)}; default pool {x['default_fraction']:.2f} x device = {exact(pool)}; "
                f"fraction needed {x['fraction_needed']:.2f}" + (f" per process, {n} processes" if n > 1 else "")
                + f"; jaxlib {x.get('jaxlib_version') or '(unknown)'} reads {name}")
    return Words(brief=says.split(": set ")[0].rstrip(".") + ".", brief_fix=brief_fix, message=says + bound + ".",
                 fix=fix + f" See {DOCS_URL}", evidence=evidence)


FIT = Rule(
    "fit", made_by="analysis/rules/capacity.py",
    finds=("Whether the run fits a device of `--device-memory SIZE`; its case is the fit's "
             "(analysis/rules/capacity.py)."),
    facts={"": ("device_bytes", "peak_bytes", "peak_source", "peak_device", "needed_bytes", "default_fraction",
                "default_pool_bytes", "fits_by_default", "fraction_needed", "fits_at_all", "settings",
                "jaxlib_version", "fraction_variable", "processes", "backend", "fraction_policy_set", "underused",
                "fixes_that_fit")},
    meanings={"peak_bytes": "The peak checked, per device: the best of `peak_source`.",
              "processes": "Processes that will share the device.",
              "backend": "The backend the run was recorded on.",
              "fraction_policy_set": ("True when `XLA_FLAGS` sets `--xla_gpu_memory_fraction_policy` (which "
                                      "changes the default pool)."),
              "underused": "True when it fits by default with the peak under 25 % of the default pool.",
              "fixes_that_fit": ("Where it does not fit by default: the report's findings whose saving XLA's "
                                 "compile measured would each make it fit, largest first: objects of `rule`, "
                                 "`site`, `saving_bytes` (per device) and `peak_after_bytes`.")},
    words={"fits": _fit, "fits-with": _fit, "cannot": _fit, "shared-fits": _fit, "shared-cannot": _fit},
)


def _fixes_that_fit(fit: Fit, others: Sequence[Finding]) -> list[dict]:
    """The other findings whose measured saving (XLA's compile of the fixed
    step: ``verified``) brings the peak into the default pool, each alone."""
    out = []
    for f in others:
        if not f.facts.get("verified") or not f.saving_bytes:
            continue
        per_device = int(f.facts.get("saving_bytes_per_device", f.saving_bytes))
        after = max(fit.peak_bytes - per_device, 0)
        rule = backends.get(fit.backend)
        if fit.processes == 1 and rule.needed_bytes(after) <= fit.default_pool_bytes:
            out.append({"rule": f.rule, "site": f.site, "saving_bytes": per_device, "peak_after_bytes": after})
    return sorted(out, key=lambda x: -x["saving_bytes"])


def fit_findings(fit: Fit, others: Sequence[Finding] = ()) -> list[Finding]:
    """The fit as a finding (rule ``fit``, its case the fit's), and a warning
    when the run's own environment would stop a GPU run (both fraction
    variables set). Where it does not fit by default, the ``others`` (the
    report's findings) whose measured saving would make it fit are named."""
    severity = "medium" if fit.settings else "info" if fit.fits_by_default else "high"
    facts = {k: v for k, v in vars(fit).items() if k not in ("environment", "case")}
    facts["fraction_policy_set"] = "xla_gpu_memory_fraction_policy" in (fit.environment.get("XLA_FLAGS") or "")
    facts["underused"] = fit.fits_by_default and fit.peak_bytes < UNDERUSED_SHARE * fit.default_pool_bytes
    facts["fixes_that_fit"] = [] if fit.fits_by_default else _fixes_that_fit(fit, others)
    out = [Finding(rule="fit", case=fit.case, severity=severity, facts=facts)]
    out += both_fractions_findings(fit.environment, fit.jaxlib_version, str(fit.backend or "").lower())
    return out


RULES = (FIT,)

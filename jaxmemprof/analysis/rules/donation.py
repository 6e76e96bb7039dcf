"""Donation: ``donate``, ``donation-unusable`` and ``donated-then-used``,
found here from analysis/advice/donation.py's candidates (the rule of
donors.py on the sampled calls) and what XLA's compile of the donated step
measured (``verified_change``)."""

from __future__ import annotations

from jaxmemprof.analysis.advice.donation import (donate_option, donation_candidates, fix_change, functions_of,
                                                 unusable_donations, verified_change, where_of, wrapper_of)
from jaxmemprof.analysis.attributed import Attributed, Files
from jaxmemprof.analysis.cells import json_cell
from jaxmemprof.analysis.findings import Finding
from jaxmemprof.analysis.rules.base import Context, Rule, Words, fmt, listed

from jaxmemprof.facts.donors import describe, label
from jaxmemprof.facts.libraries import BY_NAME, phrases
from jaxmemprof.units import alike, counted, format_pair


def detect(ctx: Context) -> list[Finding]:
    return donation_findings(ctx.ar)

DONATION_DOCS = "https://docs.jax.dev/en/latest/faq.html#buffer-donation"


def _arguments(x: dict) -> str:
    return ", ".join(f"argument {a}" if positional else f"'{a}'"
                     for a, positional in zip(x["arguments"], x.get("by_position") or [False] * len(x["arguments"])))


def _donate_fix(f: Finding, x: dict) -> tuple[str, str]:
    """(the full fix, the short one)."""
    name, change, option = x["function"], x.get("change"), x.get("option", "")
    lib = BY_NAME.get(x.get("wrapper"))
    own = lib.fix_words(x, f.site, listed) if lib is not None else None
    if own is not None:  # a change of the library's own kind, in its words
        return own
    verb = lib.verb if lib is not None else "jit"
    if change == "through-wrapper":
        full = f"jit {name} with {option}, through {x.get('wrapper')} (at {f.site}) if it passes them to jax.jit"
    else:
        full = f"{verb} {name} with {option} (at {f.site})"
    edited = x.get("edited_line") or ""
    short = edited or f"{verb} {name} with {option}"
    if x.get("stops_donating"):  # donated already, and no output can take them (donation-unusable)
        stopped = listed(x["stops_donating"])
        several = len(x["stops_donating"]) > 1
        full = (f"{full}, no longer donating {stopped}: no output can take {'their' if several else 'its'} "
                f"buffers (donation-unusable)")
        short = f"{short}, no longer donating {stopped}"
    if edited:  # a statement of several lines goes under the sentence, as it is in the file
        full += f":\n{edited}" if "\n" in edited else f":  {edited}"
    if x.get("also_donates"):
        full += f" (that donates {listed(x['also_donates'])} too: the program drops them with each call)"
    if x.get("first_kept"):
        full += (f"; the first call's {listed(x['first_kept'])} stayed referenced after it (a variable set before "
                 f"the loop?): donating deletes it, so if the program uses it again, give the first call a copy "
                 f"(jax.tree.map(jnp.copy, ...))")
    return full, short


def _temporaries(x: dict) -> str:
    """What the donated compile did to XLA's temporaries (the largest signature's)."""
    before, after = x["temp_before_bytes"], x["temp_after_bytes"]
    if before == after:
        return f"XLA's temporaries stay {fmt(before)}"
    way = "rise" if after > before else "fall"
    return f"XLA's temporaries {way} {fmt(before)} -> {fmt(after)}{alike(before, after)}"


def _measured(x: dict, total: int) -> tuple[str, str]:
    """(what the compile with the arguments donated showed, the terminal's
    'saves' words) for a verified finding (``total``: its saving, the fall
    on all devices summed)."""
    devices = x.get("devices") or 1
    fall = x["saving_bytes_per_device"]
    elsewhere = fall <= 0 < total  # another device's peak falls (the run has several), not the busiest's
    on = " on the busiest device" if devices > 1 or elsewhere else ""
    before, after = x["true_peak_before_bytes"], x["true_peak_after_bytes"]
    peak = f"{fmt(before)} -> {fmt(after)}{alike(before, after)}{on}"
    missing = x["signatures"] - x["signatures_verified"]
    why = x.get("not_verified") or "the others over the budget"  # runs analysed before it said why
    sigs = ("" if missing <= 0 else
            f"; {x['signatures_verified']} of its {x['signatures']} signatures compiled, {why}")
    what = (f"XLA's compile of {x['function']} with them donated aliases {fmt(x['aliased_bytes'])} and "
            f"{_temporaries(x)}, so the run's true peak goes {peak}{sigs}")
    if fall > 0:
        least = "at least " if "lower bound" in (x.get("not_verified") or "") else ""
        return what, f"saves {least}{fmt(fall)}{' per device' if devices > 1 else ''} (compiled)"
    where = "rises" if fall < 0 else "does not fall"
    if elsewhere:  # the busiest device's peak is what must fit: no saving to lead with
        return (what + f": it {where} there; on all the run's devices summed it falls {fmt(total)}",
                f"saves {fmt(total)} on the devices summed, none on the busiest (compiled)")
    return what + f": it {where}", ""


def _donate(f: Finding, x: dict) -> Words:
    what = _arguments(x)
    devices = x.get("devices") or 1
    shown: dict = {}
    for argument, i, o in x.get("leaves") or []:
        shown.setdefault(argument, []).append(f"{i} -> {o}")
    matches = "; ".join(m for ms in shown.values() for m in ms[:6])
    each = "in each after the first" if x.get("first_kept") else "in each"
    evidence = (f"{counted(x['calls_sampled'], 'call')} sampled (the first ones, then one in 50; calls between them "
                f"are not seen); {each}, the program dropped {what} during the call or right after it, "
                f"before running anything else, and every leaf has an output of the same shape and dtype: "
                f"{matches}. See {DONATION_DOCS}")
    full, short = _donate_fix(f, x)
    donated = x.get("donated_bytes", f.saving_bytes)
    per_device = f" ({fmt(donated // devices)} on each of {devices} devices)" if devices > 1 else ""
    if x.get("verified"):
        measured, saves = _measured(x, f.saving_bytes)
        rise = x["temp_after_bytes"] - x["temp_before_bytes"]
        temps = "" if not rise else f", temporaries {'+' if rise > 0 else '-'}{fmt(abs(rise))}"
        peak = f"{format_pair(x['true_peak_before_bytes'], x['true_peak_after_bytes'])}{temps}"
        if x["saving_bytes_per_device"] > 0:
            brief = f"Donate {what} of {x['function']}: true peak {peak}."
        else:
            brief = f"Donating {what} of {x['function']} would not lower the run's true peak ({peak})."
        head = (f"Donate {what} of {x['function']} (defined at {x['defined_at']}): XLA can then write"
                if x["saving_bytes_per_device"] > 0 else
                f"Donating {what} of {x['function']} (defined at {x['defined_at']}) would let XLA write")
        message = (f"{head} the outputs into their {fmt(donated)} of buffers{per_device} instead of holding old and "
                   f"new values at once during each call. Measured: {measured}.")
        return Words(brief=brief, brief_fix=short, message=message, fix=full, evidence=evidence, saves=saves)
    return Words(
        brief=f"Donate {what} of {x['function']}: XLA can write the outputs into their buffers{per_device}.",
        brief_fix=short,
        message=(f"Donate {what} of {x['function']} (defined at {x['defined_at']}): XLA can then write the outputs "
                 f"into their {fmt(donated)} of buffers{per_device} instead of holding old and new values "
                 f"at once during each call: up to that much less at each call's peak ({x['not_verified']}; "
                 f"XLA's temporaries may change too)."),
        fix=full, evidence=evidence, saves=f"saves up to {fmt(f.saving_bytes)} (not verified)")


def _unusable(f: Finding, x: dict) -> Words:
    args = listed(x["arguments"])
    warned = " (JAX warned: 'Some donated buffers were not usable')" if x.get("jax_warned") else ""
    return Words(
        brief=f"{x['function']} donates {args}, but no output can take {'its' if len(x['arguments']) == 1 else 'their'}"
              f" buffers.",
        brief_fix=f"stop donating {args}, or return an output of the same shape and dtype",
        message=(f"{x['function']} donates {listed(x['lost_leaves'])}, but no output has that shape and dtype, so the "
                 f"buffer cannot be reused and stays alive{warned}."),
        fix=(f"stop donating {args} of {x['function']}, or return an output of the same shape and dtype so that "
             f"XLA can write into it"),
        evidence=f"outputs of the sampled call {x['call_index']}: {listed(x['outputs']) or 'none'}. See {DONATION_DOCS}")


def _donated_then_used(f: Finding, x: dict) -> Words:
    names = listed(x.get("donating") or []) or "a jitted function"
    return Words(
        brief=f"An array was used after it was donated: {x['error'][:120]}",
        brief_fix="use the output instead of the donated input (state = step(state)), or pass jnp.copy(x)",
        message=f"The program used an array after donating it: {x['error']}",
        fix=("keep using the function's output instead of the donated input (state = step(state)), or "
             "stop donating that argument, or pass a copy (jnp.copy(x)) where the original is still needed"),
        evidence=(f"functions that donate arguments in this run: {names}. A donated array is deleted "
                  f"when the call starts; see {DONATION_DOCS}"))


DONATE = Rule(
    "donate", made_by="analysis/rules/donation.py",
    about_a_call=True,
    finds=("Arguments of a jitted function to donate: every sampled call dropped them and each leaf has an "
             "output to take its buffer; what it saves is the fall of the run's true peak with the function "
             "compiled donated at the end of the run (analysis/rules/donation.py)."),
    facts={"": ("function", "wrapper", "defined_at", "arguments", "by_position", "leaves", "calls_sampled", "devices",
                "donated_bytes", "verified", "not_verified", "signatures_verified", "signatures",
                "true_peak_before_bytes", "true_peak_after_bytes", "saving_bytes_per_device", "aliased_bytes",
                "temp_before_bytes", "temp_after_bytes", "signatures_not_verified", "saving_bytes_all_devices",
                "first_kept", "also_donates", "change", "option", "argnums",
                "argnames", "stops_donating", "pass_first", "edited_line", "peak_elsewhere")},
    optional=("not_verified", "signatures_verified", "signatures", "signatures_not_verified", "true_peak_before_bytes",
              "true_peak_after_bytes", "aliased_bytes", "temp_before_bytes", "temp_after_bytes", "argnums", "argnames", "stops_donating",
              "pass_first", "peak_elsewhere"),
    meanings={"function": "The jitted function's name.",
              "arguments": "The arguments to donate: parameter names, or positions as strings (`'0'`).",
              "by_position": "Per argument, true when it is known only by its position.",
              "leaves": ("`[argument, input leaf, output leaf]` per leaf matched (`params[0][0] float32[512,1024]` "
                         "-> `output[0][0][0]`)."),
              "calls_sampled": "Calls the jit probe sampled (the first ones, then one in 50).",
              "devices": "Devices the arguments' leaves lie on (XLA's figures are per device).",
              "donated_bytes": "The bytes of the leaves to donate, per call, on all their devices.",
              "verified": ("True when the function was compiled at the end of the run with the arguments donated "
                           "(jit_whatif): the saving is then the fall of the run's true peak with XLA's figures "
                           "of that compile; false: the saving is `donated_bytes`, an upper bound."),
              "not_verified": "Why the donated compile is missing (over the compile budget, a wrapper that "
                              "donates inside its own call, ...).",
              "signatures_verified": "The function's signatures compiled donated.",
              "signatures": "The function's signatures compiled in the run.",
              "signatures_not_verified": ("Every signature of the function with no donated compile, its text in full "
                                          "(the words name two, each cut at 100 characters with '+N more')."),
              "true_peak_before_bytes": "The run's true peak on the busiest device, as recorded.",
              "true_peak_after_bytes": "The run's true peak on the busiest device with the donated compiles' figures.",
              "saving_bytes_per_device": ("The fall of the true peak on the busiest device (verified), else "
                                          "`donated_bytes / devices`."),
              "saving_bytes_all_devices": ("The fall of the true peak on all the devices summed (verified), else "
                                           "`donated_bytes`: the outputs' `saving_bytes` is the busiest device's "
                                           "(`saving_bytes_per_device`)."),
              "aliased_bytes": "What XLA's donated compile aliases beyond the recorded one (largest signature).",
              "temp_before_bytes": "XLA's temporaries of the largest signature as recorded.",
              "temp_after_bytes": "XLA's temporaries of the largest signature compiled donated.",
              "first_kept": "Arguments whose first call's value stayed referenced after it (donating deletes it).",
              "also_donates": ("What a wrapper's option that donates every array ("
                               + ", ".join(phrases("donate_every_array"))
                               + ") donates besides the arguments (dropped with each call too)."),
              "change": ("The kind of change: `jit` (add `option` to the wrapper), "
                         + "".join(f"{c}, " for c in phrases("donate_change"))
                         + "or `through-wrapper` (a library's own wrapper)."),
              "option": 'The option to add, as the wrapper takes it (`donate_argnums=(0, 1)`, `donate="all"`).',
              "argnums": "The positions to donate, with those already donated (`jit` and `through-wrapper` changes).",
              "argnames": "The names to donate, with those already donated (`jit` and `through-wrapper` changes).",
              "stops_donating": ("Arguments the function donates already that no output can take (as its "
                                 "`donation-unusable` finding says): left out of `option`, `argnums` and `argnames`."),
              "pass_first": ("Arguments to pass first, as one tuple, for a wrapper's option that donates all but the "
                             f"first argument ({', '.join(phrases('donate_all_but_first'))})."),
              "edited_line": ("The line that applies the wrapper, with the option added, where it can be read; "
                              "the lines, newline-separated, when the wrapper's call spans several; else empty.")},
    words={"": _donate},
)


DONATION_UNUSABLE = Rule(
    "donation-unusable", made_by="analysis/rules/donation.py",
    finds="A donated argument no output can take: its buffer stays alive (analysis/rules/donation.py).",
    facts={"": ("function", "arguments", "lost_leaves", "outputs", "call_index", "jax_warned")},
    meanings={"function": "The jitted function's name.",
              "arguments": "The donated arguments that lost a leaf.",
              "lost_leaves": "The donated leaves no output matches (`params[0] float32[1024]`).",
              "outputs": "The shapes and dtypes of the call's outputs.",
              "call_index": "The sampled call that shows it (1: the first call).",
              "jax_warned": "True when JAX warned 'Some donated buffers were not usable' for those leaves."},
    words={"": _unusable},
)


DONATED_THEN_USED = Rule(
    "donated-then-used", made_by="analysis/rules/donation.py",
    finds="The program used an array after donating it (analysis/rules/donation.py).",
    facts={"": ("error", "donating")},
    meanings={"error": "The first line of the exception (up to 300 characters).",
              "donating": "The functions that donate arguments in the run, `name (path:line)`."},
    words={"": _donated_then_used},
)


def donation_findings(ar: Attributed) -> list[Finding]:
    """The donation advice. A ``donate`` finding's saving is what XLA's
    compile of the function with the arguments donated does to the run's
    true peak (``verified_change``); where that compile is missing, the
    donated bytes, said as an upper bound that was not verified."""
    run, files = ar.run, ar.files
    findings: list[Finding] = []
    functions = functions_of(run)
    if functions.empty:
        return findings
    by_id = functions.set_index("function_id")
    unusable = unusable_donations(run)
    lost_by_function: dict = {}  # function id -> the labels of its donated arguments no output can take
    for fn, _, lost, _ in unusable:
        lost_by_function.setdefault(int(fn["function_id"]), set()).update(label(leaf) for leaf in lost)
    for c in donation_candidates(ar):
        fid = c.function_id
        fn = by_id.loc[fid].copy()
        fn["function_id"] = fid
        cands = c.donors
        donated, devices = c.donated_bytes, c.devices
        measured = verified_change(ar, fid, [d.argument for d in cands])
        if measured["verified"]:  # the fall on all devices summed is the finding's saving; on the busiest, a fact
            saving, per_device = measured.pop("saving_bytes"), measured["saving_bytes_per_device"]
        else:
            saving, per_device = donated, donated // devices
        severity = "high" if per_device >= 256 * 1024**2 else "medium" if per_device > 0 else "low"
        findings.append(Finding(
            rule="donate",
            severity=severity,
            site=where_of(fn["jit_file"], int(fn["jit_line"]), files),
            saving_bytes=int(max(saving, 0)),
            facts={
                "function": str(fn["name"]), "wrapper": wrapper_of(fn),
                "defined_at": where_of(fn["file"], int(fn["line"]), files),
                "arguments": [d.argument for d in cands],
                "by_position": [not d.keyword and d.argument.isdigit() for d in cands],
                "leaves": [[d.argument, i, o] for d in cands for i, o in d.matches],
                "calls_sampled": int(c.calls_sampled),
                "devices": int(devices), "donated_bytes": int(donated),
                **measured, "saving_bytes_per_device": int(per_device),
                "saving_bytes_all_devices": int(max(saving, 0)),
                **fix_change(run, fn, cands, lost_by_function.get(int(fid), ())),
            },
        ))
    for fn, call, lost, outputs in unusable:
        option = donate_option(fn)
        lib = BY_NAME.get(wrapper_of(fn))
        if option is not None and json_cell(fn.get("wrapper_options"), {}).get(option) in lib.donates_every_array:
            continue  # the wrapper donates every array by design, and silences JAX's warning about the unusable
        findings.append(Finding(
            rule="donation-unusable",
            severity="low",
            site=where_of(fn["jit_file"], int(fn["jit_line"]), files),
            facts={
                "function": str(fn["name"]),
                "arguments": sorted({label(leaf) for leaf in lost}),
                "lost_leaves": [f"{label(leaf)}{leaf['path']} {describe(leaf)}" for leaf in lost],
                "outputs": sorted({describe(o) for o in outputs}),
                "call_index": int(call["call_index"]),
                "jax_warned": _warned(run, lost),
            },
        ))
    findings += _used_after_donation(run, files)
    return findings


def _warned(run, lost: list[dict]) -> bool:
    ev = run.events
    if ev is None or ev.empty:
        return False
    msgs = ev.loc[ev["kind"] == "warning", "message"].astype(str)
    return any("donated buffers were not usable" in m and any(describe(leaf) in m for leaf in lost) for m in msgs)


def _used_after_donation(run, files: Files) -> list[Finding]:
    ev = run.events
    if ev is None or ev.empty:
        return []
    hits = ev[(ev["kind"] == "exception") & ev["message"].astype(str).str.contains("deleted", case=False)]
    functions = functions_of(run)
    donating = functions[functions.apply(
        lambda f: bool(json_cell(f["donate_argnums"], []) or json_cell(f["donate_argnames"], [])), axis=1)] \
        if not functions.empty else functions
    out = []
    for msg in hits["message"].astype(str).head(1):
        out.append(Finding(
            rule="donated-then-used",
            severity="high",
            facts={"error": msg.splitlines()[0][:300],
                   "donating": [f"{f['name']} ({where_of(f['jit_file'], int(f['jit_line']), files)})"
                                for _, f in donating.iterrows()]},
        ))
    return out


RULES = (DONATE, DONATION_UNUSABLE, DONATED_THEN_USED,)

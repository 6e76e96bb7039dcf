"""What a notebook shows of a run: its summary and findings (HTML, with the
same text as the plain-text fallback), the whole report, and the report's
self-contained HTML page inline.

Every sentence is render/'s (``render_closing``, the findings' words);
this module only lays them out for a notebook. The page is
``report --html``'s, put in an ``<iframe srcdoc>``: it fetches nothing (its
Content-Security-Policy says so), so it draws offline and in Colab, and the
iframe's sandbox lets its own script run without reaching the notebook.
"""

from __future__ import annotations

import html
import io
from pathlib import Path

# The summary names this many sites at the peak (as `run`'s does).
SUMMARY_SITES = 5
PAGE_HEIGHT_PX = 640

_SEVERITY_COLOURS = {"high": "#c62828", "medium": "#b26a00", "low": "#00838f", "info": "#616161"}
_STYLE = ("font-family: var(--jp-code-font-family, monospace); font-size: 13px; line-height: 1.45; "
          "white-space: normal")


class Shown:
    """One analysis of a run (read, attributed and reported once), and the
    displays made from it."""

    def __init__(self, run, *, top: int = 10):
        self.run = run
        self.top = top
        self.made_while_recording = run.recording
        self._made: tuple | None = None  # (run, attributed, report, overview)

    def stale(self, run) -> bool:
        return self.made_while_recording and not run.recording

    def _analysis(self):
        if self._made is None:
            from jaxmemprof.analysis.attributed import attribute
            from jaxmemprof.analysis.options import Options
            from jaxmemprof.analysis.report import build_report
            from jaxmemprof.analysis.runs import overview
            from jaxmemprof.store.reader import load_run

            run_ = load_run(self.run._where())
            ar = attribute(run_, Options(top_sites=self.top))
            rep = build_report(ar)
            self._made = (run_, ar, rep, overview(ar, top_sites=SUMMARY_SITES))
        return self._made

    def summary(self) -> RunDisplay:
        run = self.run
        if run.path is None:
            return RunDisplay("jaxmemprof: the run has not started", None)
        if run.recording or run.deferred:
            what = "recording into" if run.recording else "recorded by the run already recording:"
            text = f"jaxmemprof: {run.target}: {what} {run.path}"
            return RunDisplay(text, f"<div style=\"{_STYLE}\">{_e(text)}</div>")
        run_, ar, rep, ov = self._analysis()
        try:
            end_lines = _end_lines(run, run_, ar)
        except Exception as exc:  # the summary stands without them; the report has the plan's section
            end_lines = [f"jaxmemprof: warning: could not summarise --plan/--target: {type(exc).__name__}: {exc}"]
        return RunDisplay(_summary_text(run, run_, ov, rep, end_lines), _summary_html(run, run_, ov, rep, end_lines))

    def report(self, *, explain: bool = False) -> Text:
        from jaxmemprof.analysis.page import run_document
        from jaxmemprof.render.report import render_report

        _, ar, rep, _ = self._analysis()
        buf = io.StringIO()
        render_report(run_document(rep, ar, top=self.top, explain=explain, oom=False), _console(buf))
        return Text(buf.getvalue())

    def page(self) -> Page:
        from jaxmemprof.analysis.page import run_document
        from jaxmemprof.render.html import report_page

        _, ar, rep, _ = self._analysis()
        return Page(report_page(run_document(rep, ar, page=True, oom=False)), str(self.run.path))


# -- the summary ---------------------------------------------------------------------------


def _problems(run_) -> list[str]:
    ev = run_.events
    if ev is None or ev.empty:
        return []
    return ev.loc[ev["kind"].isin(["sampler-error", "probe-error"]), "message"].astype(str).tolist()


def _console(buf):
    """A console writing plain text into ``buf`` (rich would otherwise
    send its output to the notebook itself), never wrapped; its text
    escaped as the terminal's is (a notebook shows ANSI codes as colours)."""
    from jaxmemprof.render.text import EscapingConsole

    return EscapingConsole(file=buf, force_jupyter=False, force_terminal=False, highlight=False, width=100_000,
                   no_color=True, color_system=None)


def _head(run, ov) -> str:
    from jaxmemprof.units import counted

    took = f"{ov.duration_s:.1f} s" if ov.duration_s is not None else "?"
    ended = ""
    if ov.ended_by not in (None, "exit"):
        error = f" ({type(run.error).__name__})" if run.error is not None else ""
        ended = f", ended by {'running out of device memory' if ov.ended_by == 'oom' else 'an exception'}{error}"
    share = f" ({100 * ov.sampling_s / ov.duration_s:.1f}% CPU)" if ov.duration_s else ""
    return f"jaxmemprof: {run.target}: {took}{ended}; {counted(ov.snapshots, 'snapshot')}{share}; run {run.path}"


def _peak_line(ov) -> str:
    from jaxmemprof.units import format_bytes

    return (f"live peak {format_bytes(ov.peak_bytes)} at {ov.peak_t:.1f} s (snapshot {ov.peak_snapshot}), "
            "held by:")


def _answer_lines(rep) -> list[str]:
    """The true peak and what it is (render/answer.py), as ``run`` says them."""
    from jaxmemprof.render import answer

    a = rep.answer
    if a is None:
        return []
    return [line for line in (answer.true_peak_line(a), answer.composition_line(a, 100_000)) if line]


def _next(run) -> str:
    """What else there is to see of the run, and how."""
    tables = f"jaxmemprof.load_run({str(run.path)!r}): its tables"
    if getattr(run, "by_magic", False):
        return f"next: %jaxmemprof report: the whole report; {tables}"
    return f"next: .report(): the whole report; .html(): its page; {tables}"


def _end_lines(run, run_, ar) -> list[str]:
    """What ``run`` says of its --plan and --target compiles as it ends
    (render/'s closing lines), for a run a magic recorded with them."""
    settings = run_.manifest.get("settings") or {}
    plans = run_.jit.plans
    buf = io.StringIO()
    con = _console(buf)
    if plans is not None and not plans.empty or settings.get("plan"):
        from jaxmemprof.analysis.advice.plan import build_plan
        from jaxmemprof.render.report import render_plan_closing

        render_plan_closing(build_plan(ar), run_.events, con, str(run.path))
    if settings.get("targets"):
        from jaxmemprof.analysis.advice.targets import build_targets
        from jaxmemprof.render.targets import render_targets_closing

        render_targets_closing(build_targets(ar), con)
    return buf.getvalue().rstrip("\n").splitlines()


def _summary_text(run, run_, ov, rep, end_lines=()) -> str:
    """What ``jaxmemprof run`` says when its script ends, for a notebook's
    run: the run, the peak and the sites holding it, the findings."""
    from rich.text import Text as RichText

    from jaxmemprof.render.escape import safe
    from jaxmemprof.render.report import render_findings
    from jaxmemprof.render.text import render_oom
    from jaxmemprof.units import counted, format_bytes

    buf = io.StringIO()
    con = _console(buf)
    con.print(RichText(_head(run, ov)))
    for w in _problems(run_):
        con.print(RichText(f"jaxmemprof: warning: {safe(w)}"))
    if ov.oom_sites is not None:
        render_oom(ov.oom_sites, con)
    if ov.peak_snapshot is None:
        con.print("no snapshot: the code never put an array on a JAX device")
    else:
        for line in _answer_lines(rep):
            con.print(RichText(line))
        con.print(RichText(_peak_line(ov)))
        for _, row in ov.peak_sites.rows.iterrows():
            con.print(RichText(f"  {format_bytes(row['bytes']):>10}  {safe(row['site'])}"))
        if ov.peak_sites.omitted_rows:
            con.print(RichText(f"  {format_bytes(ov.peak_sites.omitted_bytes):>10}  "
                                f"{counted(ov.peak_sites.omitted_rows, 'more site', 'more sites')}"))
    if rep.findings:
        con.print(f"findings ({len(rep.findings)}):")
        render_findings(rep.findings, con)
    else:
        con.print("findings: nothing to fix found")
    for line in end_lines:
        con.print(RichText(line))
    con.print(RichText(_next(run)))
    return buf.getvalue().rstrip("\n")


def _summary_html(run, run_, ov, rep, end_lines=()) -> str:
    """The summary's text, laid out: the run, the peak and the sites
    holding it, then each finding (its severity, rule, site and saving; its
    sentence; its fix)."""
    from jaxmemprof.render.findings import saves, words
    from jaxmemprof.units import counted, format_bytes

    out = [f"<div class=\"jaxmemprof-summary\" style=\"{_STYLE}\">", f"<div>{_e(_head(run, ov))}</div>"]
    for w in _problems(run_):
        out.append(f"<div style=\"color:#b26a00\">jaxmemprof: warning: {_e(w)}</div>")
    if ov.peak_snapshot is None:
        out.append("<div>no snapshot: the code never put an array on a JAX device</div>")
    else:
        out += [f"<div>{_e(line)}</div>" for line in _answer_lines(rep)]
        out.append(f"<div>{_e(_peak_line(ov))}</div>")
        out.append("<table style=\"border-collapse:collapse;margin:2px 0 6px 1em\">")
        rows = [(format_bytes(r["bytes"]), f"<code>{_e(r['site'])}</code>") for _, r in ov.peak_sites.rows.iterrows()]
        if ov.peak_sites.omitted_rows:
            rows.append((format_bytes(ov.peak_sites.omitted_bytes),
                         counted(ov.peak_sites.omitted_rows, "more site", "more sites")))
        for b, site in rows:
            out.append(f"<tr><td style=\"text-align:right;padding:0 1em 0 0\">{b}</td><td>{site}</td></tr>")
        out.append("</table>")
    if rep.findings:
        out.append(f"<div>findings ({len(rep.findings)}):</div><ol style=\"margin:2px 0;padding-left:2em\">")
        for f in rep.findings:
            said = words(f)
            colour = _SEVERITY_COLOURS.get(f.severity, "inherit")
            head = f"<b style=\"color:{colour}\">{_e(f.severity)} {_e(f.rule)}</b>"
            if f.site:
                head += f" <code>{_e(f.site)}</code>"
            if f.saving_bytes:
                head += f" {_e(saves(f, said))}"
            item = [head, f"<div>{_e(said.brief)}</div>"]
            if said.brief_fix:
                item.append(f"<div>fix: <code style=\"white-space:pre-wrap\">{_e(said.brief_fix)}</code></div>")
            out.append("<li style=\"margin-bottom:4px\">" + "".join(item) + "</li>")
        out.append("</ol>")
    else:
        out.append("<div>findings: nothing to fix found</div>")
    out += [f"<div>{_e(line)}</div>" for line in end_lines]
    out.append(f"<div style=\"color:#616161\">{_e(_next(run))}</div></div>")
    return "".join(out)


def _e(text) -> str:
    from jaxmemprof.render.escape import safe

    return html.escape(safe(text), quote=True)


# -- what is displayed ----------------------------------------------------------------------


class RunDisplay:
    """A run's summary and findings: HTML in a notebook, the same as text
    elsewhere (``str()``)."""

    def __init__(self, text: str, html_text: str | None):
        self.text, self.html = text, html_text

    def __str__(self) -> str:
        return self.text

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = {"text/plain": self.text}
        if self.html is not None:
            bundle["text/html"] = self.html
        return bundle

    def _repr_pretty_(self, p, cycle):
        p.text(self.text)


class Text:
    """Text as the terminal has it (the report): preformatted in a notebook."""

    def __init__(self, text: str):
        self.text = text

    def __str__(self) -> str:
        return self.text

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": self.text, "text/html": f"<pre style=\"line-height:1.3\">{_e(self.text)}</pre>"}

    def _repr_pretty_(self, p, cycle):
        p.text(self.text)


class Page:
    """The report's self-contained HTML page (``report --html``'s): inline
    in a notebook, in a sandboxed ``<iframe srcdoc>``."""

    def __init__(self, page: str, run: str):
        self.page, self.run = page, run

    def __str__(self) -> str:
        return self.page

    def iframe(self, height: int = PAGE_HEIGHT_PX) -> str:
        return (f"<iframe title=\"jaxmemprof report of {_e(self.run)}\" sandbox=\"allow-scripts\" "
                f"style=\"width:100%;height:{int(height)}px;border:1px solid #ccc\" "
                f"srcdoc=\"{html.escape(self.page, quote=True)}\"></iframe>")

    def save(self, path, *, force: bool = False) -> Path:
        """Write the page to ``path`` (an existing file only with ``force``)."""
        from jaxmemprof.cli.outputs import write_output

        write_output(str(path), self.page.encode("utf-8"), force)
        return Path(path)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": self._plain(), "text/html": self.iframe()}

    def _repr_pretty_(self, p, cycle):
        p.text(self._plain())

    def _plain(self) -> str:
        return f"(the report's page, in the notebook's HTML; jaxmemprof report {self.run} --html FILE writes it)"


class Shows:
    """Several displays in one output (the summary, then the page)."""

    def __init__(self, *parts):
        self.parts = parts

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundles = [p._repr_mimebundle_() for p in self.parts]
        return {"text/plain": "\n".join(b["text/plain"] for b in bundles),
                "text/html": "".join(b.get("text/html", f"<pre>{_e(b['text/plain'])}</pre>") for b in bundles)}

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.parts)

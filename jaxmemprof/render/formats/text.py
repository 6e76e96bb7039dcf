"""The terminal's text: a run's report, a job's, and show's and diff's
tables (off a terminal, plain lines where the text allows)."""

from __future__ import annotations

from jaxmemprof.render.formats import Format


def run(doc, to) -> None:
    from jaxmemprof.render import text
    from jaxmemprof.render.report import render_report

    with to.stream() as out:
        render_report(doc, text.console(out))


def job(doc, to) -> None:
    from jaxmemprof.render import text
    from jaxmemprof.render.job import render_job_report

    with to.stream() as out:
        render_job_report(doc, text.console(out))


def profiles(doc, to) -> None:
    from jaxmemprof.render import plain

    show = doc.command == "show"
    with to.stream() as out:
        if plain.applies(out):  # off a terminal: rich's layout without rich, when the text allows
            make = plain.breakdown_lines if show else plain.diff_lines
            lines = make(doc.result, title=doc.title, value_type=doc.value_type)
            if lines is not None:
                from jaxmemprof.render.escape import terminal

                out.write(terminal("\n".join(lines) + "\n"))
                return
        from jaxmemprof.render import text

        render = text.render_breakdown if show else text.render_diff
        render(doc.result, text.console(out), title=doc.title, value_type=doc.value_type)


def runs(doc, to) -> None:
    from jaxmemprof.render.rundiff import rundiff_lines

    with to.stream() as out:
        out.write("\n".join(rundiff_lines(doc.result)) + "\n")


FORMAT = Format("text", run=run, job=job, profiles=profiles, runs=runs)

"""One self-contained HTML page (render/html.py): a run's report, a job's, a
profile's flame graph (show) or two profiles' differential one (diff)."""

from __future__ import annotations

from jaxmemprof.render.formats import Format


def _write(text: str, to) -> None:
    with to.stream() as out:
        out.write(text)


def run(doc, to) -> None:
    from jaxmemprof.render.html import report_page

    _write(report_page(doc), to)


def job(doc, to) -> None:
    from jaxmemprof.render.html import job_page

    _write(job_page(doc), to)


def profiles(doc, to) -> None:
    from jaxmemprof.render.html import diff_page, show_page

    _write((show_page if doc.command == "show" else diff_page)(doc), to)


FORMAT = Format("html", run=run, job=job, profiles=profiles, page=True)

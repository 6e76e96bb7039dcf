"""JSON on stdout: every section's rows of a run's report, a job's, or show's and diff's rows and totals."""

from __future__ import annotations

from jaxmemprof.render.formats import Format


def run(doc, to) -> None:
    from jaxmemprof.render.json import write_json
    from jaxmemprof.render.tables import report_document

    with to.stream() as out:
        write_json(report_document(doc.report), out)


def job(doc, to) -> None:
    from jaxmemprof.render.job import job_document
    from jaxmemprof.render.json import write_json

    with to.stream() as out:
        write_json(job_document(doc.report), out)


def profiles(doc, to) -> None:
    from jaxmemprof.render.json import write_json
    from jaxmemprof.render.results import document

    with to.stream() as out:
        write_json(document(doc.command, doc.names, doc.result, doc.value_type), out)


def runs(doc, to) -> None:
    from jaxmemprof.render.json import write_json
    from jaxmemprof.render.rundiff import rundiff_document

    with to.stream() as out:
        write_json(rundiff_document(doc.result), out)


FORMAT = Format("json", run=run, job=job, profiles=profiles, runs=runs)

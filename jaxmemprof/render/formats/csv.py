"""CSV: a run's tables as files of a directory (export --csv), a job's (each
process's, with a process column, and the job's own), or show's and diff's
rows as one table."""

from __future__ import annotations

from jaxmemprof.render.formats import Format


def _files(tables: dict, to) -> None:
    from jaxmemprof.render.csv import write_csv

    for name, rows in tables.items():
        with to.file(name) as f:
            write_csv(rows, f)


def run(doc, to) -> None:
    from jaxmemprof.render.job import with_process
    from jaxmemprof.render.tables import export_tables

    _files(with_process(export_tables(doc.report), doc.process), to)  # as a job's export has it


def job(doc, to) -> None:
    import pandas as pd

    from jaxmemprof.render.job import job_tables, with_process
    from jaxmemprof.render.tables import EXPORT_FILES, export_tables

    parts: dict[str, list] = {name: [] for name in EXPORT_FILES}
    for n, rep in doc.reports:
        for name, rows in with_process(export_tables(rep), n).items():
            parts[name].append(rows)
    # each table's processes one after the other (the rows as they are: stacked, not shaped)
    tables = {name: (pd.concat([r for r in rows if not r.empty] or rows[:1], ignore_index=True) if rows
                     else pd.DataFrame({"process": pd.Series(dtype="int64")}))
              for name, rows in parts.items()}
    tables.update(job_tables(doc.report))
    _files(tables, to)


def profiles(doc, to) -> None:
    from jaxmemprof.render.csv import write_csv
    from jaxmemprof.render.results import plain_table

    with to.stream() as out:
        write_csv(plain_table(doc.result), out)


def runs(doc, to) -> None:
    from jaxmemprof.render.csv import write_csv

    with to.stream() as out:
        write_csv(doc.result.rows, out)


def files(kind: str) -> tuple:
    """The files a run's or a job's tables are written to (the directory is checked for them first)."""
    from jaxmemprof.render.job import JOB_FILES
    from jaxmemprof.render.tables import EXPORT_FILES

    return tuple(EXPORT_FILES) + (JOB_FILES if kind == "job" else ())


FORMAT = Format("csv", run=run, job=job, profiles=profiles, runs=runs, files=files)

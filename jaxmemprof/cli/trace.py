"""``export --format perfetto``: a run as a trace (render/formats/perfetto.py),
merged with a JAX trace when there is one (``--with``, else the one that
``run --xprof`` recorded into the run)."""

from __future__ import annotations

from pathlib import Path

import click

from jaxmemprof.cli.base import isatty, open_run, say, stdout_stream, warn
from jaxmemprof.cli.formats import Output, emit
from jaxmemprof.cli.jobs import run_path, whole_job
from jaxmemprof.cli.progress import Phases
from jaxmemprof.errors import InputError

PHASES = ["reading the run", "attributing its arrays", "the analyses", "writing"]


def recorded_trace(run) -> Path | None:
    """The JAX trace that ``run --xprof`` recorded into the run (the session
    directory its manifest names under RUN/xprof/), if any."""
    xprof = run.manifest.get("xprof")
    if not isinstance(xprof, dict):
        return None
    session = xprof.get("session")
    if not isinstance(session, str) or not session or "/" in session or "\\" in session or session in (".", ".."):
        return None
    from jaxmemprof.store.jax_trace import LOG_DIR, PROFILE_SUBDIR

    path = Path(run.path, LOG_DIR, *PROFILE_SUBDIR, session)
    return path if path.is_dir() and not path.is_symlink() else None


def export_trace(spec: str, output: str, force: bool, with_trace: str | None, options) -> None:
    from jaxmemprof.analysis.attributed import attribute
    from jaxmemprof.analysis.page import run_document
    from jaxmemprof.analysis.report import build_report
    from jaxmemprof.analysis.trace import trace_model
    from jaxmemprof.cli.outputs import check_output
    from jaxmemprof.store.jax_trace import read_jax_trace

    if whole_job(spec):
        raise InputError(spec, "is a multi-process job: export one process's trace (--process N)")
    if output == "-":
        if isatty(stdout_stream()):
            raise click.UsageError("-o - would write the trace to the terminal; redirect it or name a file")
    else:
        check_output(output, force)  # refused before the work, not after
    with Phases("export", PHASES) as phase:
        run_ = open_run(run_path(spec))
        warn(run_)
        source = Path(with_trace) if with_trace is not None else recorded_trace(run_)
        jax = read_jax_trace(source) if source is not None else None
        phase.step()
        ar = attribute(run_, options)
        phase.step()
        rep = build_report(ar)
        model = trace_model(rep, ar, jax)
        if not model.jax_overlaps:
            say(f"jaxmemprof: warning: {jax.path}: its events and the run's share no moment: "  # type: ignore[union-attr]
                "a trace of another run? (merged on the wall clock all the same)")
        phase.step()
        doc = run_document(rep, ar, oom=False)
        import dataclasses

        emit("perfetto", dataclasses.replace(doc, trace=model), Output(output, force))
    if output != "-":
        merged = f", merged with {jax.path}" if jax is not None else ""
        say(f"jaxmemprof: wrote {output}{merged} (open it at ui.perfetto.dev: Open trace file; "
            f"docs/trace-export.md)")

"""The table of output formats: every command that writes a report, a job's
report, or one or two profiles (``report``, ``export``, ``show``, ``diff``)
writes it through here.

A format is one module of this package, named in ``MODULES``, holding a
``FORMAT``: what it writes for each kind of document
(analysis/documents.py: a run's ``RunDocument``, a job's ``JobDocument``,
``show``'s and ``diff``'s ``ProfilesDocument``, ``diff``'s of two runs, ``RunsDocument``), each a function
``(document, destination)`` that only prints what the document holds. The
command builds the document (analysis/page.py) and the ``Destination``
(cli/formats.py: stdout, a file written safely, a directory of files),
then calls :func:`write`. A new format is one module here and its name in
``MODULES``; the modules are imported when used (``show`` of a profile file
imports no pandas)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from importlib import import_module
from typing import Protocol, TextIO

MODULES = ("text", "json", "html", "csv", "pprof", "perfetto")


class Destination(Protocol):
    """Where a format writes (cli/formats.py makes one per output asked for)."""

    def stream(self) -> AbstractContextManager[TextIO]:
        """The one text stream: stdout, or the file named (written whole or not at all)."""

    def file(self, name: str) -> AbstractContextManager[TextIO]:
        """One file of the directory named (``export --csv``)."""

    def binary(self, data: bytes) -> None:
        """The whole of a binary output (pprof)."""


@dataclass(frozen=True)
class Format:
    """What one format writes for each kind of document (None: it does not write that kind)."""

    name: str
    run: Callable | None = None  # (RunDocument, Destination)
    job: Callable | None = None  # (JobDocument, Destination)
    profiles: Callable | None = None  # (ProfilesDocument, Destination)
    runs: Callable | None = None  # (RunsDocument, Destination): diff of two runs
    page: bool = False  # its documents carry what the HTML page draws (analysis/page.py page=True)
    files: Callable | None = None  # kind -> the names of the files it writes into a directory (refused early)

    def writer(self, kind: str) -> Callable | None:
        return {"run": self.run, "job": self.job, "profiles": self.profiles, "runs": self.runs}[kind]


def get(name: str) -> Format:
    """The format called ``name`` (one of ``MODULES``)."""
    if name not in MODULES:
        raise KeyError(f"no output format {name!r}: {', '.join(MODULES)}")
    return import_module(f"{__name__}.{name}").FORMAT


def kind_of(document) -> str:
    """run, job, profiles or runs: the document's kind (by its class's name, so
    that this module imports none of them)."""
    return {"RunDocument": "run", "JobDocument": "job", "ProfilesDocument": "profiles",
            "RunsDocument": "runs"}[type(document).__name__]


def write(name: str, document, to: Destination) -> None:
    """Write ``document`` in the format ``name`` to ``to``: the one way every command writes its output."""
    fmt = get(name)
    kind = kind_of(document)
    writer = fmt.writer(kind)
    if writer is None:
        raise ValueError(f"the {name} format does not write a {kind}'s document")
    writer(document, to)

"""Where the commands' outputs go: the ``Destination`` that a format of
render/formats/ writes to (stdout, a file written by outputs.py's rules, a
directory of files), and :func:`emit`, the one call by which ``report``,
``export``, ``show`` and ``diff`` write a document in a format."""

from __future__ import annotations

import os
from contextlib import contextmanager

from jaxmemprof.cli.base import output_to, stdout_stream
from jaxmemprof.render.formats import get, write


class Output:
    """stdout (``path`` None or '-'), the file ``path`` (replaced only with
    ``force``, written whole or not at all), or the files of ``directory``;
    ``written``: the names written into it."""

    def __init__(self, path: str | None = None, force: bool = False, *, directory: str | None = None):
        self.path, self.force, self.directory = path, force, directory
        self.written: list[str] = []

    @contextmanager
    def stream(self):
        if self.path is None:
            yield stdout_stream()
            return
        with output_to(self.path, self.force) as out:
            yield out

    @contextmanager
    def file(self, name: str):
        from jaxmemprof.cli.outputs import open_output

        assert self.directory is not None  # a format's files: written only into a directory (export --csv DIR)
        with open_output(os.path.join(self.directory, name), self.force, strict=True) as f:
            yield f
        self.written.append(name)

    def binary(self, data: bytes) -> None:
        if self.path in (None, "-"):
            out = stdout_stream()
            out.flush()
            out.buffer.write(data)
            out.buffer.flush()
            return
        from jaxmemprof.cli.outputs import write_output

        write_output(self.path, data, self.force)

    def prepare(self, fmt: str, kind: str) -> Output:
        """A directory checked (created, and refused where it holds files it
        would replace without ``force``) for the files format ``fmt`` writes
        for ``kind``, before the work."""
        from jaxmemprof.cli.outputs import prepare_directory

        files = get(fmt).files
        assert self.directory is not None and files is not None  # a format that writes files, into a directory
        prepare_directory(self.directory, files(kind), self.force)
        return self


def needs_page(formats) -> bool:
    """Whether any of the formats asked for draws the HTML page (its documents then carry the page's model)."""
    return any(get(name).page for name in formats)


def emit(fmt: str, document, to: Output | None = None) -> Output:
    """``document`` written in the format ``fmt`` to ``to`` (stdout by default)."""
    to = to if to is not None else Output()
    write(fmt, document, to)
    return to

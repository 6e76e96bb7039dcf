"""Names are data: escape them before they are shown.

One rule for every place a name from the user's program is shown (function,
file and argument names, dict keys, module attributes, labels, paths): the
terminal (render/text.py, plain.py, report.py), CSV (render/csv.py) and the
HTML page (render/html.py, which escapes the page's data before the script
reads it) all escape with :func:`safe`, so one name reads the same in each.
JSON carries names unchanged.

Kept apart from render/text.py (which needs rich and pandas) so that the
command line can escape its one-line errors and warnings at no import cost.
"""

from __future__ import annotations

import re

# C0 and C1 controls (newline, ESC, DEL included), the line and paragraph
# separators, the bidirectional marks, embeddings, overrides and isolates
# that can reorder what is shown (U+061C, U+200E/F, U+202A..E, U+2066..9),
# and lone surrogates: the bytes of a path that is not UTF-8 (Python decodes
# them as U+DC80..U+DCFF), which written back raw could be a C1 control (0x9b
# is CSI) or fail to encode.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")

# Texts of several lines of jaxmemprof's own (a fix's edited statement):
# escaped a line at a time, their line breaks kept.
LINE_FIELDS = frozenset({"fix", "brief_fix"})


def _escape(c: str) -> str:
    n = ord(c)
    if 0xDC80 <= n <= 0xDCFF:
        return f"\\x{n - 0xDC00:02x}"  # the original byte
    return c.encode("unicode_escape", "backslashreplace").decode("ascii")


def _sub(m: re.Match) -> str:
    return _escape(m.group())


def safe(text: object) -> str:
    """``text`` with control characters written as escapes (``\\x1b``,
    ``\\n``, ``\\u202e``): the same escapes as Python's ``repr``, so a dict
    key in an owner path (``params['w\\x1b']``, written by
    ``jax.tree_util.keystr``) reads as the same name elsewhere."""
    return _UNSAFE.sub(_sub, str(text))


def safe_lines(text: object) -> str:
    """``text`` escaped a line at a time, its ``\\n`` kept: for a text of
    several lines that jaxmemprof wrote (a fix), whose lines are shown as
    lines."""
    return "\n".join(safe(line) for line in str(text).split("\n"))


_UNSAFE_BUT_NEWLINE = re.compile(_UNSAFE.pattern.replace("\x00-\x1f", "\x00-\x09\x0b-\x1f"))


def terminal(text: str) -> str:
    """What jaxmemprof writes to a terminal (or a pipe, a log a CI job
    keeps), escaped as ``safe`` escapes a name, its line breaks alone kept:
    the last guard, at the few places text leaves for the terminal (rich's
    consoles, render/text.py; the plain lines of show, diff and check; the
    progress line), so that no program text (an exception's message, a
    function's name) that a call site did not escape can clear a screen,
    recolour it or reorder a line. Escaping is idempotent: text escaped
    before passes unchanged."""
    if text.isascii() and text.isprintable():
        return text
    return _UNSAFE_BUT_NEWLINE.sub(_sub, text)


def safe_field(name: str, text: object) -> str:
    """``text`` escaped as the field (column) ``name`` is: line by line for
    LINE_FIELDS, else whole."""
    return safe_lines(text) if name in LINE_FIELDS else safe(text)


def safe_column(name: str, values: list) -> list:
    """The strings of ``values`` (a column) escaped as ``safe_field`` does;
    anything else as it is. A column without anything to escape is returned
    as it is, after one search of all its text."""
    texts = [v for v in values if isinstance(v, str)]
    if not texts or not _UNSAFE.search("".join(texts)):
        return values
    esc = safe_lines if name in LINE_FIELDS else safe
    return [esc(v) if isinstance(v, str) else v for v in values]


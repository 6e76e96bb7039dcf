"""The text of the statement that jitted a function, as the program has it:
the line the call was made on and, when its brackets open there and close on
later lines, those lines too (``step = jax.jit(\\n    step,\\n    static_argnums=1,\\n)``).

A leaf (imports nothing of the package), so that the probe (which records
the text in the target process) and the donation advice (which reads it for
a run recorded before the probe kept it) take the same text the same way.
"""

from __future__ import annotations

import io
import linecache
import tokenize

# A longer statement is not one a fix could be written on (minified, generated).
MAX_STATEMENT = 1000
# Lines a statement may run on to: an open bracket further than that is not a call's.
MAX_LINES = 40


def statement_at(filename: str, lineno: int, module_globals=None) -> str:
    """The text from line ``lineno`` of ``filename`` through the line where
    the brackets opened on it close, lines joined by newlines, without the
    last one's; '' when the file cannot be read (a loader of the program's
    that fails included) or the text is longer than MAX_STATEMENT. When the
    brackets do not close within MAX_LINES lines (or the lines do not
    tokenize: the line starts inside a string), the line alone."""
    try:
        first = linecache.getline(filename, lineno, module_globals)
    except Exception:  # a loader of the program's that fails: no text, as for a file gone
        return ""
    lines = [first]
    depth = _open_brackets(lines)
    n = lineno
    while depth > 0 and len(lines) < MAX_LINES:
        n += 1
        try:
            line = linecache.getline(filename, n, module_globals)
        except Exception:
            break
        if not line:
            break
        lines.append(line)
        depth = _open_brackets(lines)
    if depth != 0:
        lines = [first]
    text = "".join(lines).rstrip("\n")
    return text if len(text) <= MAX_STATEMENT else ""


def _open_brackets(lines: list[str]) -> int:
    """Brackets opened in ``lines`` and not closed, strings and comments
    left out; -1 when the lines do not tokenize (a string that starts
    before them, a bracket closed that they never opened)."""
    depth = 0
    try:
        for _, char in _brackets("".join(lines)):
            depth += 1 if char in "([{" else -1
            if depth < 0:
                return -1
    except (tokenize.TokenError, SyntaxError):
        # The end of the text inside open brackets ("EOF in multi-line
        # statement"): the depth so far is the answer.
        return depth if depth > 0 else -1
    return depth


def closing_bracket(text: str, start: int) -> int | None:
    """The offset in ``text`` of the bracket that closes the one at
    ``start``, brackets in strings and comments left out; None when there is
    none or the text does not tokenize."""
    depth = 0
    try:
        for offset, char in _brackets(text):
            if offset < start:
                continue
            depth += 1 if char in "([{" else -1
            if depth == 0:
                return offset
    except (tokenize.TokenError, SyntaxError):
        pass
    return None


def _brackets(text: str):
    """(offset, bracket) of each bracket the tokenizer finds in ``text``."""
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.OP and tok.string in ("(", "[", "{", ")", "]", "}"):
            yield starts[tok.start[0] - 1] + tok.start[1], tok.string

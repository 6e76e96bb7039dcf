"""Names are data: escape them before they reach a terminal.

Kept apart from render/text.py (which needs rich and pandas) so that the
command line can escape its one-line errors and warnings at no import cost.
"""

from __future__ import annotations

import re

# C0 and C1 controls, the bidirectional marks and overrides that can reorder
# what a terminal shows, and lone surrogates: the bytes of a path that is not
# UTF-8 (Python decodes them as U+DC80..U+DCFF), which written back raw could
# be a C1 control (0x9b is CSI) or fail to encode.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(c: str) -> str:
    n = ord(c)
    if 0xDC80 <= n <= 0xDCFF:
        return f"\\x{n - 0xDC00:02x}"  # the original byte
    return c.encode("unicode_escape", "backslashreplace").decode("ascii")


def safe(text: object) -> str:
    """``text`` with control characters written as escapes (``\\x1b``)."""
    return _UNSAFE.sub(lambda m: _escape(m.group()), str(text))

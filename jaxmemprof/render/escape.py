"""Names are data: escape them before they reach a terminal.

Kept apart from render/text.py (which needs rich and pandas) so that the
command line can escape its one-line errors and warnings at no import cost.
"""

from __future__ import annotations

import re

# C0 and C1 controls, and the bidirectional marks and overrides that can
# reorder what a terminal shows.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def safe(text: object) -> str:
    """``text`` with control characters written as escapes (``\\x1b``)."""
    s = str(text)
    return _UNSAFE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), s)

"""XLA's out-of-memory messages read: what was needed, what was available,
and (where XLA lists them) the largest allocations with the user's line that
made each. Plain Python (no jax): the recorder reads the limit off a message
at the failure, the analyses read the rest from the run's events.

The forms read (each from a real message; tests/test_oom.py holds them with
their sources):

- XLA:TPU at compile: ``RESOURCE_EXHAUSTED: Ran out of memory on HBM, the
  total memory required for HLO temporaries (24.16G) exceeds available HBM
  (15.75G).`` (a chip's and a deviceless compile's alike);
- XLA:TPU at compile, the older form: ``Ran out of memory in memory space
  hbm. Used 41.74G of 16.00G hbm. Exceeded hbm capacity by 25.74G.`` with
  its ``Largest program allocations in hbm:`` listing (``1. Size: 1.00G``,
  ``Operator: op_name="..." source_file="..." source_line=711``, ``Shape:``,
  ``Allocation type:``);
- a GPU's allocator at run time: ``RESOURCE_EXHAUSTED: Out of memory while
  trying to allocate 6291456 bytes.`` with ``BufferAssignment stats:``
  (``total allocation:  12.00MiB``) and ``Peak buffers:`` (``Buffer 1:``,
  ``Size:``, ``Operator:``, ``Shape:``);
- XLA:CPU on the host: ``RESOURCE_EXHAUSTED: Out of memory allocating
  4294967296 bytes.``; Python's own ``MemoryError``.

XLA writes sizes with binary units (``15.75G`` is 15.75 GiB: a v5e's
``bytes_limit`` of 16,909,336,064 B is the ``available HBM (15.75G)`` its
compiles say), rounded to two decimals.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20, "MIB": 1 << 20,
          "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30, "T": 1 << 40, "TB": 1 << 40, "TIB": 1 << 40}
_SIZE = r"([0-9]+(?:\.[0-9]+)?)\s*([KMGT]i?B?|B)?"

_TEMPS = re.compile(r"Ran out of memory on (\w+), the total memory required for ([^()]+?) \(" + _SIZE +
                    r"\) exceeds available \w+ \(" + _SIZE + r"\)", re.I)
_SPACE = re.compile(r"Ran out of memory in memory space (\w+)\.(?:\s*Used " + _SIZE + r" of " + _SIZE + r")?", re.I)
_BFC = re.compile(r"Out of memory while trying to allocate ([0-9]+) bytes", re.I)
_HOST = re.compile(r"Out of memory allocating ([0-9]+) bytes", re.I)
_TOTAL = re.compile(r"total allocation:\s*" + _SIZE, re.I)
_ITEM = re.compile(r"^\s*(?:[0-9]+\.\s*Size|Buffer [0-9]+:\s*$|Size):?\s*(.*)$")
_OP = re.compile(r'op_name="([^"]*)"')
_FILE = re.compile(r'source_file="([^"]*)"')
_LINE = re.compile(r"source_line=([0-9]+)")


def size_bytes(number: str, unit: str | None) -> int:
    """XLA's ``24.16G``, ``384.0KiB``, ``0B`` as bytes (binary units)."""
    return int(round(float(number) * _UNITS.get((unit or "").upper(), 1)))


@dataclass
class Allocation:
    """One of the largest allocations XLA listed: its size, the op that made
    it and the user's line XLA names for it (where it does), its shape."""

    bytes: int
    op: str = ""
    file: str = ""
    line: int = 0
    shape: str = ""
    kind: str = ""  # XLA's "Allocation type" (HLO temp, ...), where it says


@dataclass
class OutOfMemory:
    """An out-of-memory message, read. ``when``: ``compile`` (XLA:TPU refused
    the program), ``run`` (an allocation failed on the device), ``host``
    (XLA:CPU's or Python's allocation on the host). ``needed_bytes``: what
    XLA said the program needs (``what``: XLA's words for it, e.g. "HLO
    temporaries"); ``available_bytes``: what it said it had; ``request_bytes``:
    the allocation that failed. None where the message does not say."""

    when: str
    space: str = ""
    what: str = ""
    needed_bytes: int | None = None
    available_bytes: int | None = None
    request_bytes: int | None = None
    allocations: list = field(default_factory=list)
    first_line: str = ""

    @property
    def reason(self) -> str:
        """XLA's own first line (the status code left out)."""
        return self.first_line

    def as_dict(self) -> dict:
        return {"when": self.when, "space": self.space, "what": self.what, "needed_bytes": self.needed_bytes,
                "available_bytes": self.available_bytes, "request_bytes": self.request_bytes,
                "reason": self.reason, "allocations": [a.__dict__ for a in self.allocations]}


def first_line(message: str) -> str:
    text = (message or "").strip().splitlines()[0].strip() if (message or "").strip() else ""
    return re.sub(r"^(?:[\w.]+Error:\s*)?(?:RESOURCE_EXHAUSTED:\s*|Resource exhausted:\s*)", "", text)


def read(message: str) -> OutOfMemory | None:
    """The message read; None where it is no out-of-memory XLA or Python gives."""
    text = message or ""
    m = _TEMPS.search(text)
    if m:
        return OutOfMemory("compile", m.group(1).lower(), m.group(2).strip(), size_bytes(m.group(3), m.group(4)),
                           size_bytes(m.group(5), m.group(6)), None, _allocations(text), first_line(text))
    m = _SPACE.search(text)
    if m:
        used = size_bytes(m.group(2), m.group(3)) if m.group(2) else None
        limit = size_bytes(m.group(4), m.group(5)) if m.group(4) else None
        return OutOfMemory("compile", m.group(1).lower(), "the program", used, limit, None, _allocations(text),
                           first_line(text))
    m = _BFC.search(text)
    if m:
        total = _TOTAL.search(text)
        return OutOfMemory("run", "device", "the program's buffers" if total else "",
                           size_bytes(total.group(1), total.group(2)) if total else None, None, int(m.group(1)),
                           _allocations(text), first_line(text))
    m = _HOST.search(text)
    if m:
        return OutOfMemory("host", "host", "", None, None, int(m.group(1)), [], first_line(text))
    if text.startswith("MemoryError"):
        return OutOfMemory("host", "host", "", None, None, None, [], first_line(text))
    if "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower():
        return OutOfMemory("run", "device", "", None, None, None, _allocations(text), first_line(text))
    return None


def _allocations(text: str) -> list:
    """The listing's allocations, in XLA's order: TPU's ``Largest program
    allocations`` (``1. Size: 1.00G``) and the BFC's ``Peak buffers``
    (``Buffer 1:`` then ``Size: 6.00MiB``)."""
    out: list = []
    cur = None
    for raw in text.splitlines():
        line = raw.strip()
        if re.match(r"^(?:[0-9]+\.\s*)?Size:\s*", line):
            m = re.search(r"Size:\s*" + _SIZE, line)
            if m:
                cur = Allocation(size_bytes(m.group(1), m.group(2)))
                out.append(cur)
            continue
        if cur is None:
            continue
        if line.startswith("Operator:"):
            op, f, n = _OP.search(line), _FILE.search(line), _LINE.search(line)
            cur.op = op.group(1) if op else line[len("Operator:"):].strip()
            cur.file = f.group(1) if f else ""
            cur.line = int(n.group(1)) if n else 0
        elif line.startswith("Shape:") or line.startswith("Entry Parameter Subshape:"):
            cur.shape = line.split(":", 1)[1].strip()
            if line.startswith("Entry"):
                cur.kind = cur.kind or "parameter"
        elif line.startswith("Allocation type:"):
            cur.kind = line.split(":", 1)[1].strip()
        elif line.startswith("XLA Label:") or line.startswith("XLA label:"):
            if not cur.op:
                cur.op = line.split(":", 1)[1].strip()[:200]
    return out

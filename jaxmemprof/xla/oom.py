"""XLA's out-of-memory messages read: what was needed, what was available,
and (where XLA lists them) the largest allocations with the user's line that
made each. Plain Python (no jax): the recorder reads the limit off a message
at the failure, the analyses read the rest from the run's events.

The forms read (each from a real message; tests/test_oom.py holds them with
their sources):

- XLA:TPU at compile: ``RESOURCE_EXHAUSTED: Ran out of memory on HBM, the
  total memory required for HLO temporaries (24.16G) exceeds available HBM
  (15.75G).`` (a chip's and a deviceless compile's alike), and its early
  form ``Aborting compilation early because it's unlikely to have enough
  memory. Requires 3.84T, has 90.96G available.``;
- XLA:TPU at compile, the older form: ``Ran out of memory in memory space
  hbm. Used 41.74G of 16.00G hbm. Exceeded hbm capacity by 25.74G.`` with
  its ``Largest program allocations in hbm:`` listing (``1. Size: 1.00G``,
  ``Operator: op_name="..." source_file="..." source_line=711``, ``Shape:``,
  ``Allocation type:``); a kernel's scoped VMEM: ``Allocation
  (size=134217728) would exceed memory (size=67108864)``;
- XLA:TPU's runtime (its error codes E0100 RuntimeBufferAllocationFailure,
  E0101 RuntimeProgramAllocationFailure; XLA writes ``EXXXX: Name:`` and the
  message on the next line, then ``See https://openxla.org/... for more
  details.``): ``Error allocating device buffer: Attempting to allocate
  256.00M. That was not possible. There are 252.58M free.; (0x0x0_HBM0)``,
  ``Error loading program 'jit_step': Attempting to reserve 29.49G at the
  bottom of memory. That was not possible. There are 147.64M free, 0B
  reserved, and 147.64M reservable.``, and the allocator's ``... The largest
  contiguous region of free memory is 1.00G due to fragmentation.``;
- a GPU's allocator at run time: ``RESOURCE_EXHAUSTED: Out of memory while
  trying to allocate 6291456 bytes.`` (``Out of host memory while ...`` for
  pinned host memory) with ``BufferAssignment stats:`` (``total allocation:
  12.00MiB``) and ``Peak buffers:`` (``Buffer 1:``, ``Size:``,
  ``Operator:``, ``Shape:``); the platform allocator's ``Failed to allocate
  request for 1.00GiB (1073741824B) on device ordinal 0``;
- XLA:CPU on the host: ``RESOURCE_EXHAUSTED: Out of memory allocating
  4294967296 bytes.``; Python's own ``MemoryError``.

XLA writes sizes with binary units (``15.75G`` is 15.75 GiB: a v5e's
``bytes_limit`` of 16,909,336,064 B is the ``available HBM (15.75G)`` its
compiles say), rounded to two decimals. The text is the program's run's,
and so untrusted: a figure past 2**53 bytes is no size any memory has, and
is read as damaged (``damaged`` names it), never as a number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20, "MIB": 1 << 20,
          "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30, "T": 1 << 40, "TB": 1 << 40, "TIB": 1 << 40}
_SIZE = r"([0-9]+(?:\.[0-9]+)?)\s*([KMGT]i?B?|B)?"
LIMIT = 2**53  # no memory has this many bytes: a figure at or past it is damage, not a size
_MAX_DIGITS = 24  # more digits than any size below LIMIT needs, whatever its unit

_TEMPS = re.compile(r"Ran out of memory on (\w+), the total memory required for ([^()]+?) \(" + _SIZE +
                    r"\) exceeds available \w+ \(" + _SIZE + r"\)", re.I)
_EARLY = re.compile(r"Aborting compilation early because it's unlikely to have enough memory\. Requires " + _SIZE +
                    r", has " + _SIZE + r" available", re.I)
_SPACE = re.compile(r"Ran out of memory in memory space (\w+)(?:\.\s*Used " + _SIZE + r" of " + _SIZE + r")?", re.I)
_VMEM = re.compile(r"Allocation \(size=([0-9]+)\) would exceed memory \(size=([0-9]+)\)", re.I)
_RUNTIME = re.compile(r"Attempting to (allocate|reserve) " + _SIZE + r"(?: at the bottom of memory)?\.\s+That was "
                      r"not possible\.\s+There are " + _SIZE + r" free", re.I)
_LARGEST_FREE = re.compile(r"largest contiguous region of free memory is\s+" + _SIZE, re.I)
_BFC = re.compile(r"Out of (host )?memory while trying to allocate ([0-9]+) bytes", re.I)
_PLATFORM = re.compile(r"Failed to allocate request for [^(]*\(([0-9]+)B\) on device ordinal", re.I)
_HOST = re.compile(r"Out of memory allocating ([0-9]+) bytes", re.I)
_TOTAL = re.compile(r"total allocation:\s*" + _SIZE, re.I)
_CODE = re.compile(r"\b(E[0-9]{4}): ([A-Za-z]+):")
_ITEM = re.compile(r"^\s*(?:[0-9]+\.\s*Size|Buffer [0-9]+:\s*$|Size):?\s*(.*)$")
_OP = re.compile(r'op_name="([^"]*)"')
_FILE = re.compile(r'source_file="([^"]*)"')
_LINE = re.compile(r"source_line=([0-9]+)")


def size_bytes(number: str, unit: str | None = None) -> int | None:
    """XLA's ``24.16G``, ``384.0KiB``, ``0B`` as bytes (binary units); None
    where it is no size (past 2**53 bytes: a number of 400 digits, say)."""
    if len(number) > _MAX_DIGITS:
        return None
    try:
        exact = Decimal(number) * _UNITS.get((unit or "").upper(), 1)
    except (InvalidOperation, ValueError):
        return None
    if not exact.is_finite() or not 0 <= exact < LIMIT:
        return None
    return int(exact.to_integral_value())


def shown(number: str, unit: str | None = None) -> str:
    """A figure that is no size, as a sentence may quote it: short."""
    return f"{number}{unit or ''}" if len(number) <= 20 else f"a number of {len(number)} digits"


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
    temporaries"); ``available_bytes``: what it said the device has;
    ``request_bytes``: the allocation that failed; ``free_bytes``: what the
    allocator said was free when it failed (``largest_free_bytes``: its
    largest contiguous region, where fragmentation is said). None where the
    message does not say, or says a figure that is no size: ``damaged``
    then names it (``the allocation (400 digits)``). ``code``: XLA's error
    code and name (``E0100 RuntimeBufferAllocationFailure``), where given."""

    when: str
    space: str = ""
    what: str = ""
    needed_bytes: int | None = None
    available_bytes: int | None = None
    request_bytes: int | None = None
    allocations: list = field(default_factory=list)
    first_line: str = ""
    free_bytes: int | None = None
    largest_free_bytes: int | None = None
    code: str = ""
    damaged: list = field(default_factory=list)

    @property
    def reason(self) -> str:
        """XLA's own words, on one line (300 characters at most): the status
        code, the error code's prefix and its documentation link left out."""
        return self.first_line if len(self.first_line) <= 300 else self.first_line[:297] + "..."

    def as_dict(self) -> dict:
        return {"when": self.when, "space": self.space, "what": self.what, "needed_bytes": self.needed_bytes,
                "available_bytes": self.available_bytes, "request_bytes": self.request_bytes,
                "free_bytes": self.free_bytes, "largest_free_bytes": self.largest_free_bytes, "code": self.code,
                "damaged": list(self.damaged), "reason": self.reason,
                "allocations": [a.__dict__ for a in self.allocations]}


_PREFIX = re.compile(r"^(?:[\w.]+Error:\s*)?(?:RESOURCE_EXHAUSTED:\s*|Resource exhausted:\s*)?(?:E[0-9]{4}: [A-Za-z]+:\s*)?")


def first_line(message: str) -> str:
    """The message's first line of XLA's own words: without the exception's
    class, the status code (``RESOURCE_EXHAUSTED:``) or XLA's error code
    (``E0100: RuntimeBufferAllocationFailure:``, after which XLA starts a
    new line), nor its ``See https://openxla.org/... for more details.``"""
    text = _PREFIX.sub("", (message or "").strip(), count=1)
    for line in text.splitlines():
        line = line.strip()
        if line and not (line.startswith("See https://") and line.endswith("for more details.")):
            return _LONG_NUMBER.sub(lambda m: f"<a number of {len(m.group())} digits>", line)
    return ""


_LONG_NUMBER = re.compile("[0-9]{" + str(_MAX_DIGITS + 1) + ",}")


class _Figures:
    """Sizes read off a message; those that are no size named as damaged."""

    def __init__(self) -> None:
        self.damaged: list = []

    def size(self, what: str, number: str | None, unit: str | None = None) -> int | None:
        if number is None:
            return None
        n = size_bytes(number, unit)
        if n is None:
            self.damaged.append(f"{what}: {shown(number, unit)}")
        return n


def read(message: str) -> OutOfMemory | None:
    """The message read; None where it is no out-of-memory XLA or Python gives."""
    text = message or ""
    fig = _Figures()
    code = _CODE.search(text)
    out = _read(text, fig)
    if out is not None:
        out.damaged = fig.damaged
        out.code = f"{code.group(1)} {code.group(2)}" if code else ""
    return out


def _read(text: str, fig: _Figures) -> OutOfMemory | None:
    line = first_line(text)
    m = _TEMPS.search(text)
    if m:
        return OutOfMemory("compile", m.group(1).lower(), m.group(2).strip(), fig.size("the need", *m.group(3, 4)),
                           fig.size("the device's memory", *m.group(5, 6)), None, _allocations(text, fig), line)
    m = _EARLY.search(text)
    if m:
        return OutOfMemory("compile", "hbm", "the program", fig.size("the need", *m.group(1, 2)),
                           fig.size("the device's memory", *m.group(3, 4)), None, [], line)
    m = _SPACE.search(text)
    if m:
        return OutOfMemory("compile", m.group(1).lower(), "the program", fig.size("the need", *m.group(2, 3)),
                           fig.size("the device's memory", *m.group(4, 5)), None, _allocations(text, fig), line)
    m = _VMEM.search(text)
    if m:
        return OutOfMemory("compile", "vmem", "a kernel's scoped memory", fig.size("the need", m.group(1)),
                           fig.size("the memory", m.group(2)), None, [], line)
    m = _RUNTIME.search(text)
    if m:
        program = m.group(1).lower() == "reserve" or "Error loading program" in text
        largest = _LARGEST_FREE.search(text)
        out = OutOfMemory("run", "hbm" if "HBM" in text else "device", "the program" if program else "",
                          None, None, fig.size("the allocation", *m.group(2, 3)), [], line)
        out.free_bytes = fig.size("the free memory", *m.group(4, 5))
        out.largest_free_bytes = fig.size("the largest free region", *largest.group(1, 2)) if largest else None
        return out
    m = _BFC.search(text)
    if m:
        total = _TOTAL.search(text)
        return OutOfMemory("host" if m.group(1) else "run", "host" if m.group(1) else "device",
                           "the program's buffers" if total else "",
                           fig.size("the program's buffers", *total.group(1, 2)) if total else None, None,
                           fig.size("the allocation", m.group(2)), _allocations(text, fig), line)
    m = _PLATFORM.search(text)
    if m:
        return OutOfMemory("run", "device", "", None, None, fig.size("the allocation", m.group(1)), [], line)
    m = _HOST.search(text)
    if m:
        return OutOfMemory("host", "host", "", None, None, fig.size("the allocation", m.group(1)), [], line)
    if text.startswith("MemoryError"):
        return OutOfMemory("host", "host", "", None, None, None, [], line)
    if "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower():
        return OutOfMemory("run", "device", "", None, None, None, _allocations(text, fig), line)
    return None


def _allocations(text: str, fig: _Figures) -> list:
    """The listing's allocations, in XLA's order: TPU's ``Largest program
    allocations`` (``1. Size: 1.00G``) and the BFC's ``Peak buffers``
    (``Buffer 1:`` then ``Size: 6.00MiB``)."""
    out: list = []
    cur = None
    for raw in text.splitlines():
        line = raw.strip()
        if re.match(r"^(?:[0-9]+\.\s*)?Size:\s*", line):
            m = re.search(r"Size:\s*" + _SIZE, line)
            n = fig.size("a listed allocation", m.group(1), m.group(2)) if m else None
            cur = Allocation(n) if n is not None else None
            if cur is not None:
                out.append(cur)
            continue
        if cur is None:
            continue
        if line.startswith("Operator:"):
            op, f, at = _OP.search(line), _FILE.search(line), _LINE.search(line)
            cur.op = op.group(1) if op else line[len("Operator:"):].strip()
            cur.file = f.group(1) if f else ""
            cur.line = int(at.group(1)) if at and len(at.group(1)) < 10 else 0
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

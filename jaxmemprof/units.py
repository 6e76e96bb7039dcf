"""Byte sizes (binary units for people, raw integers for programs) and counts in words."""

from __future__ import annotations

import math
import re
from decimal import ROUND_FLOOR, Decimal

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
_FACTORS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
    "t": 1000**4, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}
# ASCII digits only (Python's \d and float() also take '١٢'), a decimal point
# at most: the number read exactly (Decimal), never through a float.
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*", re.ASCII)
# A bare number below this on a device-memory size is a unit forgotten (16 for 16 GiB), not bytes.
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
BARE_MINIMUM = MiB
_MAX_DIGITS = 64  # more is no size (a float would be inf): OverflowError


def array_bytes(shape, dtype) -> int:
    """The bytes of an array of ``shape`` and ``dtype`` held whole (its elements, where the dtype has no itemsize)."""
    n = math.prod(int(d) for d in shape)
    itemsize = getattr(dtype, "itemsize", None)
    return n * int(itemsize) if itemsize else n


def counted(n: int, word: str, plural: str | None = None) -> str:
    """``1 site``, ``2 sites``, ``0 processes``: a count and its noun, agreeing."""
    if n == 1:
        return f"{n} {word}"
    return f"{n} {plural or (word + 'es' if word.endswith(('s', 'x', 'ch', 'sh')) else word + 's')}"


# A figure at or past this is no size any memory has: damage (a number read
# off a program's text, a journal's cell), said as such, never formatted.
NO_SIZE = 2**63
NOT_A_SIZE = "(not a size)"


def format_bytes(n: int | float, *, signed: bool = False) -> str:
    """``1536`` -> ``1.5 KiB``; with ``signed``, ``+1.5 KiB`` / ``-1.5 KiB``;
    a figure that is no size (not a finite number, or past 2**63 bytes
    either way) is ``(not a size)``, never an exception."""
    try:
        if not -NO_SIZE < n < NO_SIZE or n != n:
            return NOT_A_SIZE
    except TypeError:
        return NOT_A_SIZE
    sign = ""
    if n < 0:
        sign = "-"
    elif signed and n > 0:
        sign = "+"
    v = abs(float(n))
    i = 0
    while v >= 1024 and i < len(_UNITS) - 1:
        v /= 1024
        i += 1
    text = f"{int(v)} B" if i == 0 else f"{v:.2f} {_UNITS[i]}"
    return sign + text


def format_pair(a: int, b: int, *, exact: bool = True) -> str:
    """``38.62 -> 34.60 MiB`` (the unit once where both have it), else ``1.00 GiB -> 900.00 MiB``;
    with ``exact``, where the two read alike but differ, the difference in bytes: ``72.72 -> 72.72 MiB (+64 B)``."""
    left, right = format_bytes(a), format_bytes(b)
    unit = left.rpartition(" ")[2]
    text = f"{left.rpartition(' ')[0]} -> {right}" if right.endswith(" " + unit) else f"{left} -> {right}"
    return text + (alike(a, b) if exact else "")


def alike(a: int, b: int) -> str:
    """`` (+64 B)``: the difference in bytes of two sizes that read alike in
    units (``72.72 MiB`` both) but differ; else ''."""
    return f" ({format_bytes(b - a, signed=True)})" if a != b and format_bytes(a) == format_bytes(b) else ""


def parse_size(text: str, *, memory: bool = False) -> int:
    """``16GiB`` -> 17179869184, ``80GB`` -> 80000000000, ``1.5MiB`` ->
    1572864, ``4096`` -> 4096: exact, a fraction of a byte of a larger unit
    rounded down. ``memory``: a size of device memory, where a bare number
    below 1 MiB (``16``) is refused as a unit forgotten (``16B`` is bytes).

    Raises ValueError on anything else (a fraction of a byte included),
    OverflowError past 64 digits."""
    m = _SIZE.fullmatch(str(text))
    if not m or m.group(2).lower() not in _FACTORS:
        raise ValueError(f"not a size: {text!r} (examples: 4096, 512MiB, 16GiB, 80GB)")
    number, unit = m.group(1), m.group(2)
    if len(number) > _MAX_DIGITS:
        raise OverflowError(f"not a size: {text!r} (too large)")
    factor = _FACTORS[unit.lower()]
    exact = Decimal(number) * factor
    if factor == 1 and exact != exact.to_integral_value():
        raise ValueError(f"not a size: {text!r} is a fraction of a byte (give whole bytes, or a unit: 1.5MiB)")
    n = int(exact.to_integral_value(rounding=ROUND_FLOOR))
    if memory and not unit and n < BARE_MINIMUM:
        raise ValueError(f"{text.strip()!r} has no unit, so it would be {n} byte{'' if n == 1 else 's'}: write "
                         f"{number}B for bytes, or give its unit ({number}GiB, {number}MiB)")
    return n

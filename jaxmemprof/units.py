"""Byte sizes: binary units for people, raw integers for programs."""

from __future__ import annotations

import re

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
_FACTORS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
    "t": 1000**4, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*$")


def format_bytes(n: int | float, *, signed: bool = False) -> str:
    """``1536`` -> ``1.5 KiB``; with ``signed``, ``+1.5 KiB`` / ``-1.5 KiB``."""
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


def parse_size(text: str) -> int:
    """``16GiB`` -> 17179869184, ``80GB`` -> 80000000000, ``4096`` -> 4096.

    Raises ValueError on anything else."""
    m = _SIZE.match(str(text))
    if not m or m.group(2).lower() not in _FACTORS:
        raise ValueError(f"not a size: {text!r} (examples: 4096, 512MiB, 16GiB, 80GB)")
    return int(float(m.group(1)) * _FACTORS[m.group(2).lower()])

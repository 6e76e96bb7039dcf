"""Gzip bombs made cheaply: valid gzip files of a few MB that inflate to GiBs,
built without compressing (or holding) what they inflate to. Shared by
tests/test_bounded_input.py and benchmarks/bench_gzip_bomb.py."""

from __future__ import annotations

import struct
import zlib

MiB = 1024**2
M32 = 0xFFFFFFFF


def _apply(columns, v):
    out, i = 0, 0
    while v:
        if v & 1:
            out ^= columns[i]
        v >>= 1
        i += 1
    return out


def crc32_of_repeats(unit: bytes, times: int) -> int:
    """``zlib.crc32(unit * times)`` without making those bytes: appending
    ``unit`` maps the CRC register ``r`` to ``A r ^ c`` (linear over GF(2));
    A's columns and c are read off zlib, and the map is composed with
    itself by squaring."""
    c = ~zlib.crc32(unit, M32) & M32  # the register after unit, from 0
    cols = [(~zlib.crc32(unit, ~(1 << i) & M32) & M32) ^ c for i in range(32)]
    reg = M32  # the register before any byte
    while times:
        if times & 1:
            reg = _apply(cols, reg) ^ c
        # (A, c) composed with itself: A·A, A·c ^ c.
        cols, c = [_apply(cols, x) for x in cols], _apply(cols, c) ^ c
        times >>= 1
    return ~reg & M32


def gzip_bomb(size: int, unit: bytes = bytes(MiB)) -> tuple[bytes, int]:
    """A valid gzip file of about ``size`` bytes holding ``unit`` over and
    over (zeros: about 1,000 times its size): ``unit`` compressed once and
    made to stand alone (a full flush forgets the history), repeated.
    Returns the file and how many bytes it decompresses to."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = c.compress(unit) + c.flush(zlib.Z_FULL_FLUSH)
    n = max(size // len(block), 1)
    end = zlib.compressobj(9, zlib.DEFLATED, -15).flush(zlib.Z_FINISH)
    total = n * len(unit)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return header + block * n + end + struct.pack("<II", crc32_of_repeats(unit, n), total & M32), total

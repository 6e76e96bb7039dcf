"""A device's name as every output shows it: ``tpu:0``, ``gpu:0``, ``cpu:0``
(its platform and id), whatever the runtime's own ``str(device)`` is.

A run keeps each device's name as JAX gave it when it was recorded (runs
recorded before read as they did): on a TPU that is
``TPU_0(process=0,(0,0,0,0))`` (its id, process and chip coordinates and
core), on a GPU ``cuda:0`` or ``rocm:0``, on a CPU ``cpu:0`` (jax 0.10.2;
older jaxlibs: ``TFRT_CPU_0``), and the profiles of
``device_memory_profile()`` label each sample with the same. The outputs
(the terminal, CSV, JSON, the HTML page, pprof labels) show it through
``display`` alone, so the same device reads the same everywhere. A device's
id is unique across the processes of a job (JAX numbers a job's devices
globally), so ``tpu:3`` stays one device; ``display(..., process=True)``
adds the process a TPU name records (``tpu:3 (process 1)``) where that reads
better. Text that is no device's name (``job``, ``all``, a count) is left
as it is. Plain Python: no heavy import.
"""

from __future__ import annotations

import re

# Each form of a device's name the runtimes write, and its platform. The id is the first group;
# a TPU's name also records its process.
_REST = r"(?:, process_index=(\d+))?(?:, [a-z_]+=(?:\([0-9, ]*\)|[^,()]*))*\)"  # a repr's other fields
_FORMS = (
    (re.compile(r"TPU_(\d+)\(process=(\d+),\([0-9,]*\)\)"), "tpu"),
    (re.compile(r"TpuDevice\(id=(\d+)" + _REST), "tpu"),
    (re.compile(r"\b(?:cuda|rocm|gpu):(\d+)\b"), "gpu"),
    (re.compile(r"(?:Cuda|Rocm|Gpu)Device\(id=(\d+)" + _REST), "gpu"),
    (re.compile(r"TFRT_CPU_(\d+)\b"), "cpu"),
    (re.compile(r"CpuDevice\(id=(\d+)" + _REST), "cpu"),
)
_ANY = re.compile(r"TPU_|Device\(|cuda:|rocm:|gpu:|TFRT_CPU_")
# The columns of the tables that hold devices' names (``devices``: an array's, joined).
COLUMNS = ("device", "devices")


def display(name: object, *, process: bool = False) -> object:
    """``name`` (a device's name as recorded, or text holding several) with
    every device in it named ``platform:id``; with ``process``, a TPU's
    recorded process after it (``tpu:3 (process 1)``). Anything but a
    string is returned as it is."""
    if not isinstance(name, str) or not _ANY.search(name):
        return name
    for form, platform in _FORMS:
        def named(m: re.Match, platform=platform) -> str:
            proc = m.group(2) if process and m.re.groups > 1 else None
            return f"{platform}:{m.group(1)}" + (f" (process {proc})" if proc is not None else "")
        name = form.sub(named, name)
    return name


def display_all(values, *, process: bool = False) -> list:
    """``display`` of each of ``values`` (a column): a list, the same one
    where no name in it changes."""
    values = list(values)
    # each distinct name once (a table of a million arrays names a few devices)
    names = {v: display(v, process=process) for v in {v for v in values if type(v) is str} if _ANY.search(v)}
    if not names:
        return values
    return [names.get(v, v) if type(v) is str else display(v, process=process) for v in values]


def displayed(rows, *, process: bool = False):
    """A frame (or a plain Table of show's and diff's results) with its
    columns of devices' names (``COLUMNS``) shown by ``display``; the frame
    itself where there is nothing to rename (never changed in place)."""
    columns = [str(c) for c in getattr(rows, "columns", ())]
    targets = [c for c in COLUMNS if c in columns]
    if not targets:
        return rows
    if hasattr(rows, "assign"):  # a DataFrame
        changed = {}
        for c in targets:
            col = rows[c]
            if col.dtype != object and str(col.dtype) not in ("string", "str"):
                continue
            values = col.tolist()
            shown = display_all(values, process=process)
            if shown is not values:  # the same list where no name changes
                changed[c] = shown
        return rows.assign(**changed) if changed else rows
    if hasattr(rows, "rows"):  # a plain Table: header and rows of Python values
        at = [columns.index(c) for c in targets]
        new = [tuple(display(v, process=process) if i in at else v for i, v in enumerate(r)) for r in rows.rows]
        if new == [tuple(r) for r in rows.rows]:
            return rows
        return _with_rows(rows, new)
    return rows


def _with_rows(table, rows: list):
    """A copy of a plain Table with other rows."""
    import copy

    out = copy.copy(table)
    try:
        out.rows = rows
    except AttributeError:
        return table
    return out

"""``SEL``, the grammar of ``RUN@SEL``: which snapshot of a run a selector names.

SEL is a snapshot number as shown in the ``snapshot`` column (1, 2, ...;
negative counts from the end: -1 is the last), ``first``, ``last``, ``peak``
(most live bytes; the first such), ``final`` (the last snapshot taken
while the program ran: the last one before the exit snapshot, whose
arrays a script's ``main()`` has usually freed already), a label given to
``jaxmemprof.snapshot()``,
or a trigger (``oom``, ``exit``, ``exception``, ``signal``): the first
snapshot that has it. Resolving a whole ``RUN@SEL`` (a file, a run, a job)
is store/refs.py's.
"""

from __future__ import annotations

from jaxmemprof.errors import InputError


def select(run, sel: str) -> int:
    """The snapshot number ``sel`` names in ``run``."""
    snaps = run.snapshots
    where = str(run.path)
    if snaps.empty:
        raise InputError(where, "has no snapshots (did the program use JAX?)")
    numbers = snaps["snapshot"].tolist()
    s = sel.strip()
    if s == "first":
        return int(numbers[0])
    if s == "last":
        return int(numbers[-1])
    if s == "final":
        running = snaps[snaps["trigger"] != "exit"]
        return int((running if not running.empty else snaps)["snapshot"].iloc[-1])
    if s == "peak":
        return int(snaps.loc[snaps["live_bytes"].idxmax(), "snapshot"])
    if s.lstrip("-").isdigit():
        n = int(s)
        if n < 0 and -n <= len(numbers):
            return int(numbers[n])
        if n > 0 and n in numbers:
            return n
        raise InputError(where, f"has no snapshot {n} (it has {len(numbers)}: {numbers[0]}..{numbers[-1]})")
    for col in ("label", "trigger"):
        hit = snaps[snaps[col] == s]
        if not hit.empty:
            return int(hit["snapshot"].iloc[0])
    raise InputError(
        where, f"no snapshot matches {sel!r} (use a number, first, last, peak, a label or a trigger)"
    )

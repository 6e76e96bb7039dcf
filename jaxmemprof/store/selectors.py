"""``RUN@SEL``: pick one snapshot of a run wherever a profile is accepted.

SEL is a snapshot number as shown in the ``snapshot`` column (1, 2, ...;
negative counts from the end: -1 is the last), ``first``, ``last``, ``peak``
(most live bytes; the first such), ``final`` (the last snapshot taken
while the program ran: the last one before the exit snapshot, whose
arrays a script's ``main()`` has usually freed already), a label given to
``jaxmemprof.snapshot()``,
or a trigger (``oom``, ``exit``, ``exception``, ``signal``): the first
snapshot that has it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from jaxmemprof.errors import InputError, check_not_empty


@dataclass(frozen=True)
class ProfileRef:
    """A profile to read: a file, or one snapshot of a run."""

    name: str  # how to call it in output
    path: Path
    run: object = None  # the Run, when it came from one
    snapshot: int | None = None


def split_selector(spec: str) -> tuple[str, str | None]:
    """``RUN@SEL`` -> (RUN, SEL) when RUN is a directory; else (spec, None).
    Either may hold an ``@`` (``runs/a@b@peak``, a label ``step@10``): the
    last ``@`` whose left side is a directory splits them. A path that
    exists as it is (a file ``runs@1.prof`` beside a directory ``runs``)
    is that path."""
    if "@" not in spec or Path(spec).exists():
        return spec, None
    at = len(spec)
    while (at := spec.rfind("@", 0, at)) > 0:
        left = spec[:at]
        if Path(left).is_dir():
            return left, spec[at + 1:]
    return spec, None


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


def resolve(spec: str, default: str = "peak") -> ProfileRef:
    """A profile file, ``RUN@SEL``, or a bare run directory (``default``)."""
    from jaxmemprof.store.reader import load_run

    check_not_empty(spec)
    base, sel = split_selector(spec)
    path = Path(base)
    if sel is None and not path.is_dir():
        return ProfileRef(name=spec, path=path)
    run = load_run(path)
    n = select(run, sel if sel is not None else default)
    return ProfileRef(name=f"{base}@{n}", path=run.profile_path(n), run=run, snapshot=n)

"""``RUN@SEL``: pick one snapshot of a run wherever a profile is accepted.

SEL is a snapshot number as shown in the ``snapshot`` column (1, 2, ...;
negative counts from the end: -1 is the last), ``first``, ``last``, ``peak``
(most live bytes; the first such), ``final`` (the last snapshot taken
while the program ran: the last one before the exit snapshot, whose
arrays a script's ``main()`` has usually freed already), a label given to
``jaxmemprof.snapshot()``,
or a trigger (``oom``, ``exit``, ``exception``, ``signal``): the first
snapshot that has it.

On a multi-process job (a directory of ``process-N`` runs, store/job.py),
``RUN/process-3@SEL`` is one process's snapshot; ``RUN@SEL`` is the whole
job: ``peak`` the job's peak (the snapshot in effect in each process at the
moment the sum over processes was highest), any other SEL each process's
own, merged into one profile whose devices are ``process-N/DEVICE``. The
``process`` argument (``--process N``) picks one process instead.
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
    run: object = None  # the Run, when it came from one (a JobView for a whole job)
    snapshot: int | None = None
    merged: object = None  # for a whole job: (Job, {process: snapshot})

    def load(self, **kwargs):
        """The Profile (``kwargs``: load_profile's: sample_index, max_decompressed)."""
        if self.merged is not None:
            from jaxmemprof.store.job import merged_profile

            job, at = self.merged
            return merged_profile(job, at, name=self.name, warnings=self.run.warnings, **kwargs)
        from jaxmemprof.pprof.reader import load_profile

        return load_profile(self.path, name=self.name, **kwargs)


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


def resolve(spec: str, default: str = "peak", process: int | None = None) -> ProfileRef:
    """A profile file, ``RUN@SEL``, or a bare run directory (``default``);
    on a job, the whole job or (``process``) one of its processes."""
    check_not_empty(spec)
    base, sel = split_selector(spec)
    path = Path(base)
    if sel is None and not path.is_dir():
        if process is not None:
            raise InputError(spec, "is a profile file: --process picks a process of a multi-process job")
        return ProfileRef(name=spec, path=path)
    # Only a run needs these (and pandas): a profile file is read without them.
    from jaxmemprof.store import job as jobs
    from jaxmemprof.store.reader import load_run

    if jobs.is_job_directory(path):
        if process is not None:
            base, path = _process_of(path, process)
        else:
            job = jobs.load_job(path)
            chosen = sel if sel is not None else default
            at = jobs.snapshots_at(job, chosen)
            view = jobs.JobView(path=path, manifest=job.processes[0].manifest, warnings=list(job.warnings), job=job)
            return ProfileRef(name=f"{base}@{chosen}", path=path, run=view, merged=(job, at))
    elif process is not None:
        raise InputError(base, "is not a multi-process job (no process-N directories): "
                               "--process picks a process of one")
    run = load_run(path)
    n = select(run, sel if sel is not None else default)
    return ProfileRef(name=f"{base}@{n}", path=run.profile_path(n), run=run, snapshot=n)


def process_directory(path, process: int) -> Path:
    """``path/process-N`` of a job, or a one-line error naming what it has."""
    return _process_of(Path(path), process)[1]


def _process_of(path: Path, process: int) -> tuple[str, Path]:
    from jaxmemprof.store import job as jobs

    have = [n for n, _ in jobs.process_directories(path)]
    if process not in have:
        raise InputError(str(path), f"has no process {process} (it has {jobs.process_list_text(have) or 'none'})")
    p = path / f"{jobs.layout.PROCESS_DIR_PREFIX}{process}"
    return str(p), p

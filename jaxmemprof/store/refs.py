"""``RUN@SEL`` resolved: a profile file, one snapshot of a run, or one of a
whole job, wherever a profile is accepted (the grammar of SEL:
store/selectors.py).

An XProf profile (a ``.xplane.pb``, or a directory ``jax.profiler.trace``
wrote: store/xprof.py) is read into the run model too: ``PROFILE`` is its
live peak where it has a memory profile, else the largest program's buffers
at that program's peak (XLA's), each by the line that made it; ``--process
N`` picks its Nth host (in its files' name order).

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
from typing import TYPE_CHECKING, Any

from jaxmemprof.errors import InputError, check_not_empty
from jaxmemprof.store import layout
from jaxmemprof.store.selectors import select

# store.job (and pandas with it) is imported where a run is resolved: a
# profile file is read without them.
if TYPE_CHECKING:
    from collections.abc import Callable

    from jaxmemprof.store.job import Job
    from jaxmemprof.store.reader import Run


@dataclass(frozen=True)
class ProfileRef:
    """A profile to read: a file, or one snapshot of a run."""

    name: str  # how to call it in output
    path: Path
    run: Run | JobView | None = None  # the Run, when it came from one (a JobView for a whole job)
    snapshot: int | None = None
    merged: tuple[Job, dict[int, int]] | None = None  # for a whole job: (Job, {process: snapshot})
    made: Callable[[], Any] | None = None  # an XProf profile's Profile, made in memory

    def load(self, **kwargs):
        """The Profile (``kwargs``: load_profile's: sample_index, max_decompressed).
        A run's snapshot is its buffers, the bytes its live bytes count (the
        loaded executables' code is counted apart); a file is read whole."""
        if self.made is not None:
            return self.made()
        if self.merged is not None:
            job, at = self.merged
            assert self.run is not None  # a whole job's: its JobView (resolve)
            return merged_profile(job, at, name=self.name, warnings=self.run.warnings,
                                  **kwargs).without_kind("executable")
        from jaxmemprof.pprof.reader import load_profile

        profile = load_profile(self.path, name=self.name, **kwargs)
        return profile if self.run is None else profile.without_kind("executable")


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


def resolve(spec: str, default: str = "peak", process: int | None = None) -> ProfileRef:
    """A profile file, ``RUN@SEL``, or a bare run directory (``default``);
    on a job, the whole job or (``process``) one of its processes."""
    check_not_empty(spec)
    base, sel = split_selector(spec)
    path = Path(base)
    from jaxmemprof.store.xprof import is_profile

    if is_profile(path):
        return _profile_ref(spec, path, sel, process)
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
            at = snapshots_at(job, chosen)
            view = JobView(path=path, manifest=job.processes[0].manifest, warnings=list(job.warnings), job=job)
            return ProfileRef(name=f"{base}@{chosen}", path=path, run=view, merged=(job, at))
    elif process is not None:
        raise InputError(base, "is not a multi-process job (no process-N directories): "
                               "--process picks a process of one")
    run = load_run(path)
    n = select(run, sel if sel is not None else default)
    return ProfileRef(name=f"{base}@{n}", path=run.profile_path(n), run=run, snapshot=n)


def open_any(path, process: int | None = None):
    """The run at ``path``: an XProf profile (``process``: its Nth host),
    a run directory, or a directory of .prof files."""
    from jaxmemprof.store.xprof import is_profile, load_profile_run

    if is_profile(path):
        return load_profile_run(path, host=process)
    from jaxmemprof.store.reader import load_run

    return load_run(path)


def _profile_ref(spec: str, path: Path, sel: str | None, process: int | None) -> ProfileRef:
    """An XProf profile as one profile: the snapshot SEL of its memory
    profile (``peak`` by default), or where it has none, the largest
    program's buffers at its peak (SEL then names a program's module)."""
    from jaxmemprof.store.xprof import load_profile_run
    from jaxmemprof.store.xprof_tables import program_profile

    run = load_profile_run(path, host=process)
    if not run.snapshots.empty:
        n = select(run, sel if sel is not None else "peak")
        return ProfileRef(name=f"{path}@{n}", path=path, run=run, snapshot=n, made=run.profiles[n])
    module, made = program_profile(run, sel)
    return ProfileRef(name=f"{path}@{module}", path=path, run=run, made=made)


def process_directory(path, process: int) -> Path:
    """``path/process-N`` of a job, or a one-line error naming what it has."""
    return _process_of(Path(path), process)[1]


def _process_of(path: Path, process: int) -> tuple[str, Path]:
    from jaxmemprof.store import job as jobs

    have = [n for n, _ in jobs.process_directories(path)]
    if process not in have:
        raise InputError(str(path), f"has no process {process} (it has {jobs.process_list_text(have) or 'none'})")
    p = path / f"{layout.PROCESS_DIR_PREFIX}{process}"
    return str(p), p


@dataclass
class JobView:
    """What the commands that read one profile need of a job: its path,
    warnings and a manifest (process 0's, whose cwd names paths)."""

    path: Path
    manifest: dict
    warnings: list
    job: Job


def snapshots_at(job: Job, sel: str) -> dict[int, int]:
    """process -> snapshot for ``RUN@SEL`` on a whole job: ``peak`` is the
    job's peak (the snapshot in effect in each process at that moment);
    any other SEL is each process's own (``first``, ``final``, a number, a
    label, a trigger), processes without it left out."""
    from jaxmemprof.store.job import job_timeline

    if sel.strip() == "peak":
        at = job_timeline(job).at_peak
        if not at:
            raise InputError(str(job.path), "has no snapshots in any process (did the program use JAX?)")
        return at
    out, errors = {}, []
    for p in job.processes:
        if p.snapshots.empty:
            continue
        try:
            out[p.process] = select(p, sel)
        except InputError as exc:
            errors.append(exc)
    if not out:
        if errors:
            raise InputError(str(job.path), f"no process has a snapshot matching {sel!r} ({errors[0].problem})")
        raise InputError(str(job.path), "has no snapshots in any process (did the program use JAX?)")
    return out


def merged_profile(job: Job, at: dict[int, int], *, name: str, warnings: list, **load_kwargs):
    """One Profile holding the samples of each process's snapshot in ``at``;
    devices are named ``process-N/DEVICE``. A thinned or missing snapshot
    file leaves that process out, with a warning."""
    from jaxmemprof.pprof.merge import concat_profiles
    from jaxmemprof.pprof.reader import load_profile

    profiles = []
    for n, snap in sorted(at.items()):
        p = job.process(n)
        row = p.snapshots.loc[p.snapshots["snapshot"] == snap]
        if row.empty:
            continue
        if snap in p.thinned:
            warnings.append(f"process {n}: snapshot {snap} was thinned as the run went; left out")
            continue
        f = layout.snapshot_file(p.path, str(row["file"].iloc[0]))  # never through a link
        if f is None:
            warnings.append(f"process {n}: snapshot {snap}'s profile file is missing; left out")
            continue
        profiles.append((f"{layout.PROCESS_DIR_PREFIX}{n}/", load_profile(f, name=f"{p.path}@{snap}", **load_kwargs)))
    if not profiles:
        raise InputError(name, "no process has a readable profile there")
    return concat_profiles(profiles, name=name)

"""A capture session: the run directory, its writer and the sampler, shared by
``jaxmemprof run`` and ``with jaxmemprof.profile():``."""

from __future__ import annotations

import os
import platform
import shutil
import sys
import time
import warnings
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from jaxmemprof import __version__
from jaxmemprof.capture.jitprobe import JitProbe
from jaxmemprof.capture.sampler import Sampler, _jax_ready
from jaxmemprof.errors import InputError
from jaxmemprof.store import layout
from jaxmemprof.store.writer import RunWriter

DEFAULT_ROOT = "jaxmemprof-runs"

_active: "Session | None" = None


def active() -> "Session | None":
    return _active


def default_output(stem: str) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(DEFAULT_ROOT) / f"{stem}-{stamp}"


def prepare_directory(path: Path, force: bool) -> Path:
    """Make ``path`` ready for a new run: refuse a non-empty directory unless
    ``force``, in which case the previous run's files are removed."""
    if path.exists() and not path.is_dir():
        raise InputError(str(path), "exists and is not a directory")
    if path.is_dir() and any(path.iterdir()):
        if not force:
            raise InputError(str(path), "is not empty; choose another --output or pass --force")
        for name in (layout.MANIFEST, layout.JOURNAL, layout.JOURNAL + "-wal", layout.JOURNAL + "-shm"):
            (path / name).unlink(missing_ok=True)
        shutil.rmtree(path / layout.SNAPSHOT_DIR, ignore_errors=True)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(str(path), f"cannot create the run directory: {exc.strerror or exc}") from None
    return path


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def allocator_environment() -> dict:
    return {
        k: v for k, v in sorted(os.environ.items())
        if k.startswith(layout.ALLOCATOR_ENV_PREFIXES) or k in layout.ALLOCATOR_ENV_NAMES
    }


class Session:
    def __init__(self, directory: Path, *, target_argv: list[str], interval: float,
                 max_overhead: float, jit_probe: bool = True, addresses: str = "auto",
                 command: list[str] | None = None):
        self.directory = directory
        self.t_start = time.monotonic()
        manifest = {
            "jaxmemprof_version": __version__,
            "command": command if command is not None else list(sys.argv),
            "argv": target_argv,
            "cwd": os.getcwd(),
            "python": sys.version.split()[0],
            "jax_version": _version("jax"),
            "jaxlib_version": _version("jaxlib"),
            "platform": platform.platform(),
            "hostname": platform.node(),
            "pid": os.getpid(),
            "environment": allocator_environment(),
            "start_time": datetime.now(timezone.utc).isoformat(),
            "start_epoch": time.time(),
            "end_time": None,
            "exit_status": None,
            "settings": {"interval": interval, "max_overhead": max_overhead, "jit_probe": jit_probe,
                         "addresses": addresses},
        }
        self.writer = RunWriter(directory, manifest)
        self.sampler = Sampler(self.writer, interval=interval, max_overhead=max_overhead, addresses=addresses)
        self.probe = JitProbe(self.writer) if jit_probe else None
        if self.probe is not None:
            self.sampler.hooks.append(self.probe.on_snapshot)

    def start(self) -> "Session":
        global _active
        _active = self
        if self.probe is not None:
            self.probe.install()
        self._showwarning = warnings.showwarning
        warnings.showwarning = self._on_warning
        self.sampler.start()
        return self

    def _on_warning(self, message, category, filename, lineno, file=None, line=None):
        """Record each warning the program shows (JAX's 'Some donated buffers
        were not usable', say), then show it as before."""
        try:
            self.writer.add_event("warning", f"{category.__name__}: {message} ({filename}:{lineno})"[:4000])
        except Exception:
            pass
        self._showwarning(message, category, filename, lineno, file, line)

    def stop(self, exit_status, ended_by: str) -> None:
        """Stop sampling and record how the run ended (the last snapshot has
        been taken by the caller)."""
        global _active
        self.sampler.stop()
        if self.probe is not None:
            self.probe.uninstall()
        if warnings.showwarning == self._on_warning:
            warnings.showwarning = self._showwarning
        if _active is self:
            _active = None
        try:
            self._finish(exit_status, ended_by)
        except Exception as exc:  # a full disk: what was committed stays readable
            sys.stderr.write(f"jaxmemprof: warning: could not finalise {self.directory}: {exc}\n")

    def _finish(self, exit_status, ended_by: str) -> None:
        self.writer.finish(
            end_time=datetime.now(timezone.utc).isoformat(),
            duration_s=round(time.monotonic() - self.t_start, 6),
            exit_status=exit_status,
            ended_by=ended_by,
            **_backend_facts(),
        )


def _backend_facts() -> dict:
    """Devices and processes, read only if the target brought JAX up."""
    jax = _jax_ready()
    if jax is None:
        return {"backend": None, "devices": [], "process_index": 0, "process_count": 1}
    try:
        return {
            "backend": jax.default_backend(),
            "devices": [
                {"id": d.id, "name": str(d), "kind": getattr(d, "device_kind", ""),
                 "process_index": d.process_index,
                 "local_hardware_id": getattr(d, "local_hardware_id", None)}
                for d in jax.local_devices()
            ],
            "process_index": jax.process_index(),
            "process_count": jax.process_count(),
        }
    except Exception as exc:
        return {"backend": None, "devices": [], "backend_error": str(exc)}

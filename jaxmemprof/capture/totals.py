"""One test's totals, kept in memory, for the pytest plugin's --jaxmemprof on
a test without a limit: the sampler's snapshots of the totals (JAX's profile
and the bytes of the buffers in it, no array described) and the jit probe's
memory_analysis() of each compiled signature, written to a writer in memory
(no run directory, no journal), as analysis/check.py's measure_totals reads
them."""

from __future__ import annotations

import threading

from jaxmemprof.capture.jit import JitProbe
from jaxmemprof.capture.device_reads import profile_buffers
from jaxmemprof.capture.sampler import Sampler
from jaxmemprof.store.writer import SnapshotRecord


class _TotalsWriter:
    """Where a TotalsSession's sampler and jit probe write: what one test's
    peak needs, in memory (no run directory, no journal): each snapshot's
    number, time, trigger, label and live bytes; each compiled signature's
    memory_analysis() figures; each sampled call's signature, input leaves
    and live bytes before it."""

    thinned = 0

    def __init__(self):
        self._lock = threading.RLock()
        self.closed = False
        self.manifest: dict = {}
        self.rows: list[dict] = []  # the snapshots
        self.functions: dict = {}  # function_id -> name
        self.compiles: list[dict] = []
        self.calls: list[dict] = []
        self.events: list = []

    @property
    def snapshots(self) -> int:
        return len(self.rows)

    def add_snapshot(self, rec) -> int:
        with self._lock:
            self.rows.append({"snapshot": len(self.rows) + 1, "t_wall": rec.t_wall, "trigger": rec.trigger,
                              "label": rec.label, "live_bytes": rec.live_bytes})
            return len(self.rows)

    # The jit probe's rows, in the order of store/layout.py's jit tables.
    def add_jit_function(self, row: dict) -> None:
        self.functions[row["function_id"]] = row.get("name")

    def add_jit_compile(self, row: tuple) -> None:
        fid, _, t_wall, signature, argument, output, alias, temp, code = row[:9]
        self.compiles.append({"function_id": fid, "t_wall": t_wall, "signature": signature,
                              "argument_bytes": argument, "output_bytes": output, "alias_bytes": alias,
                              "temp_bytes": temp, "generated_code_bytes": code})

    def add_jit_call(self, row: tuple) -> None:
        self.calls.append({"function_id": row[1], "call_index": row[2], "t_wall": row[3], "inputs": row[8],
                           "outputs": row[9], "signature": row[10], "live_before": row[11]})

    def add_snapshot_calls(self, snapshot: int, function_ids: list) -> None:
        pass  # no calls in flight are asked for (only a run's session sets Sampler.in_flight)

    def flush_markers(self) -> None:
        pass  # no markers: a test's steps are not counted

    def add_event(self, kind: str, message: str, snapshot=None) -> None:
        self.events.append((kind, message))

    def add_jit_program(self, *args, **kwargs) -> None:
        pass  # XLA's buffers by line: not kept (the totals need memory_analysis() alone)

    def set_jit_compile_temp(self, function_id, signature: str, temp_bytes: int) -> None:
        for row in self.compiles:  # on a TPU, its dump's temporaries (capture/jit/programs.py)
            if row["function_id"] == function_id and row["signature"] == signature:
                row["temp_bytes"] = temp_bytes

    def set_jit_liveness(self, *args) -> None:
        pass

    def set_jit_counts(self, rows) -> None:
        pass

    def owned_by_this_thread(self) -> bool:
        return self._lock._is_owned()  # type: ignore[attr-defined]  # CPython's RLock has it, its stubs do not

    def detach(self) -> None:
        self.closed = True

    def finish(self, **fields) -> None:
        self.closed = True


class _TotalsSampler(Sampler):
    """Snapshots of the totals only: JAX's profile, and the bytes of the
    buffers in it (as a run's snapshots count them); no array described."""

    def _collect(self, jax, trigger, label, t_wall, t_mono, live, wait: bool) -> SnapshotRecord:
        profile = jax.profiler.device_memory_profile()
        live_bytes, buffers = profile_buffers(profile)
        return SnapshotRecord(t_wall=t_wall, t_mono=t_mono, trigger=trigger, label=label, profile=b"",
                              live_bytes=live_bytes, buffers=buffers, arrays=0)

    def _affordable_at(self):
        # No array is described: the next snapshot costs what the last one did.
        return self._t0 + (self._spent + self._cost) * self._wall_per_sampling_s, None


class _TotalsProbe(JitProbe):
    def _read_program(self, state, signature, compiled, ma) -> bool:
        return True  # memory_analysis() is all the totals need: the executable's program is not read


class TotalsSession:
    """One test's device memory, in memory, for a figure without its lines
    (``pytest --jaxmemprof`` on a test without a limit): snapshots of the
    totals (the caller's, and one every ``interval`` seconds within
    ``max_overhead``) and the jit probe's memory_analysis() of what the test
    compiles, in ``writer``. No run directory; not the active session."""

    def __init__(self, *, interval: float, max_overhead: float):
        self.writer = _TotalsWriter()
        self.sampler = _TotalsSampler(self.writer, interval=interval, max_overhead=max_overhead)
        self.probe: _TotalsProbe | None = _TotalsProbe(self.writer, dump_share=0.0, dump_min_s=0.0)
        self.sampler.hooks.append(self.probe.on_snapshot)
        self.probe.observer = self.sampler

    def start(self) -> TotalsSession:
        assert self.probe is not None  # started once, before stop_sampling lets the probe go
        self.probe.install()
        self.sampler.start()
        return self

    def stop_sampling(self) -> None:
        """The sampler's thread and the probe stop (snapshots on demand go on)."""
        self.sampler.stop()
        if self.probe is not None:
            probe, self.probe = self.probe, None
            probe.uninstall()
            # No cycle left between them: freed with the session, not by a
            # garbage collection of the old generation later.
            self.sampler.hooks.clear()
            probe.observer = None
        self.sampler._thread = None  # joined: the thread and the sampler no longer hold each other

"""Take device-memory snapshots inside the target process.

A snapshot is JAX's own ``device_memory_profile()`` plus one record per live
``jax.Array`` (shape, dtype, shards, devices, buffer addresses, creation
stack) and each device's allocator statistics. Arrays are tracked across
snapshots by weak references whose callbacks report each death before another
object can take the dead one's ``id()``: a snapshot finds the arrays it has
not seen by set differences of ids, describes only those (never touching
what makes JAX keep extra per-shard arrays, unless asked), and an identity
is never reused.

The sampler never imports jax and never initialises a JAX backend itself: it
waits until the target has done both, so the target's own configuration
(``jax.config.update``, environment variables read at import) still applies.

What is kept and read of each array is in arrays.py.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from typing import Protocol

from jaxmemprof.capture.arrays import (add_device_bytes, buffer_address, Entry, is_ready, json_list, Ref,
                                       Static, is_deleted)
# Imported here, not in the first snapshot, whose cost sets the sampling pace.
from jaxmemprof.capture.device_reads import LoadedExecutables, memory_stats_rows, profile_buffers
from jaxmemprof.capture.threads import OwnThread
from jaxmemprof.capture.steps import StepSnapshots, Steps
from jaxmemprof.store.writer import SnapshotRecord
from jaxmemprof.capture.tracebacks import described

ADDRESS_MODES = ("auto", "all", "none")
TRIGGERS = ("interval", "first", "step", "exit", "exception", "oom", "signal", "api")


# Signals a thread raises itself by a fault: never blocked (blocked, the kernel
# kills the process without the traceback faulthandler would print).
_SYNCHRONOUS = {"SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT", "SIGTRAP", "SIGSYS"}


def block_signals_in_this_thread() -> None:
    """For jaxmemprof's own threads: the kernel then delivers every signal
    meant for the program to the program's threads, as under python (a
    main thread that blocks SIGTERM and sigwait()s for it later gets it)."""
    try:
        signals = {s for s in signal.valid_signals() if getattr(s, "name", "") not in _SYNCHRONOUS}
        signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    except (AttributeError, OSError, ValueError):
        pass


def jax_ready():
    """The jax module once the target imported it and a backend is up, else None."""
    jax = sys.modules.get("jax")
    if jax is None or getattr(getattr(jax, "__spec__", None), "_initializing", False):
        return None
    xb = sys.modules.get("jax._src.xla_bridge")
    if xb is None:
        return None
    try:
        ready = xb.backends_are_initialized()
    except Exception:  # older JAX: fall back to its private registry
        ready = bool(getattr(xb, "_backends", None))
    return jax if ready else None


class SnapshotWriter(Protocol):
    """What a sampler writes to: a run's RunWriter, or a test's in memory (capture/totals.py)."""

    closed: bool

    @property
    def snapshots(self) -> int: ...
    def add_snapshot(self, rec: SnapshotRecord) -> int: ...
    def flush_markers(self) -> None: ...
    def add_snapshot_calls(self, snapshot: int, function_ids: list) -> None: ...
    def add_event(self, kind: str, message: str, snapshot: int | None = None) -> None: ...


class Sampler(StepSnapshots):
    """Snapshots on demand and, in a background thread, every ``interval``
    seconds, stretched so that sampling takes at most half of
    ``max_overhead`` of the wall time (measured on the real snapshot cost)."""

    def __init__(self, writer: SnapshotWriter, *, interval: float = 0.5, max_overhead: float = 0.02,
                 adaptive: bool = True, addresses: str = "auto"):
        self.writer = writer
        self.interval = interval
        self.max_overhead = max_overhead
        self.adaptive = adaptive
        # Reading a buffer's address makes JAX keep a per-shard view of
        # device_put and sharded arrays (listed by jax.live_arrays(), and
        # slowing its device_memory_profile()): "auto" reads only those that
        # make no new view, "all" every one, "none" none.
        if addresses not in ADDRESS_MODES:
            raise ValueError(f"addresses must be one of {ADDRESS_MODES}, not {addresses!r}")
        self.addresses = addresses
        self._view_sites: set = set()  # stack ids where reading an address made a view
        self._clean_sites: set = set()  # stack ids where it made none (one-device arrays)
        self._unread: dict = {}  # id(traceback) -> {id(array): entry} of tracked arrays whose addresses are not read
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: OwnThread | None = None
        self._tracked: dict[int, Entry] = {}  # id(array) -> what we know of it
        self._aliases: dict = {}  # id(view) -> _Ref: per-shard views, not counted
        self._pending: dict[int, Entry] = {}  # tracked arrays whose addresses are to be read
        self._dead: list[Ref] = []  # _Ref/_Entry of arrays that died (appended by their callbacks)
        self._owner: dict = {}  # (device, address) -> the tracked entry that holds it
        self._static: dict = {}  # (shape, dtype, sharding) -> what every such array shares
        self._stacks: dict = {}  # traceback -> stack_id
        self._executables = LoadedExecutables()
        self._next_array = 1
        self._next_stack = 1
        self._cost = 0.0  # smoothed cost of one snapshot, seconds
        self._spent = 0.0  # cost of all snapshots (and checks) so far, seconds
        self._checks = 0.0  # cost of the checks since the last snapshot, seconds
        self._check_cost = 0.0  # cost of the last check, seconds
        self._per_new = 10e-6  # cost of describing one new array, seconds (measured when many)
        self._t0 = time.monotonic()  # when sampling began
        self._last_mono = 0.0  # when the last snapshot was taken
        self.peak: tuple[int, int, float] | None = None  # (live_bytes, snapshot, t_mono)
        self.failed: str | None = None
        self.first_taken = False
        self.hooks: list = []  # called after each snapshot, in the sampling thread, holding its lock
        # called once, in the sampling thread, when it first sees JAX's backend up (arrays or not)
        self.backend_hooks: list = []
        # () -> function ids whose call is in progress, asked as a snapshot starts (the jit probe's
        # calls_in_flight); kept with the snapshot (snapshot_calls)
        self.in_flight = None
        # Searches for the Python references holding the arrays (capture/py_holders.py),
        # after a snapshot, outside its cost; None: none
        self.py_holders = None
        # (snapshot, trigger, live bytes, calls in flight) the next search is for
        self._pending_search: tuple | None = None
        self.steps = Steps()  # the program's markers: snapshots keyed to its steps (capture/steps.py)
        # The snapshots taken in the program's own thread (its steps', its own) and their cost there,
        # kept in the manifest as the run goes (written when it is finished).
        self.program_thread = {"snapshots": 0, "wall_s": 0.0, "cpu_s": 0.0}
        manifest = getattr(writer, "manifest", None)
        if type(manifest) is dict:
            manifest["program_thread"] = self.program_thread

    # -- the background thread -------------------------------------------------

    def start(self) -> None:
        self._thread = OwnThread(self._loop, "jaxmemprof-sampler")  # capture/threads.py: no hook of the program's
        self._thread.start()

    def stop(self) -> None:
        """No more snapshots of the thread's: it is waited for, for a second
        at most where this thread holds the lock that thread may be waiting
        for (a signal's end that came in the middle of a snapshot taken here,
        or an interrupt that came out of the jit probe's count between its
        take and its let-go): waiting for it there would be for ever, and the
        thread, once it has the lock, finds sampling stopped."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0 if self.owned_by_this_thread() else None)

    @property
    def _wall_per_sampling_s(self) -> float:
        """Wall time per second of sampling: sampling keeps to half of
        ``max_overhead`` (when it is above 0)."""
        return 2.0 / self.max_overhead

    @staticmethod
    def jax_up() -> bool:
        """Whether the program imported jax and a backend is up (``jax_ready``)."""
        return jax_ready() is not None

    def next_due(self) -> float:
        """When (monotonic) the next interval snapshot is due: ``interval``
        after the last one, stretched so that sampling takes at most half of
        ``max_overhead`` of the time (the other half is left to start-up,
        the jit probe and the end of the run), both since the last snapshot
        and since sampling began (counting the next snapshot, estimated at
        the recent cost): describing every array the first time it is seen
        costs more than a snapshot of arrays already known."""
        due = self._last_mono + self.interval
        if self.adaptive and self.max_overhead > 0:
            times = self._wall_per_sampling_s
            due = max(due, self._last_mono + self._cost * (times - 1.0),
                      self._t0 + (self._spent + self._cost) * times)
        return due

    def _loop(self) -> None:
        block_signals_in_this_thread()
        poll = min(self.interval, 0.05)
        while not self.failed:
            if not self.first_taken:
                # Until the backend has arrays, poll cheaply and often.
                if self._stop.wait(poll):
                    return
                if jax_ready() is None:
                    continue
                while self.backend_hooks:
                    self.backend_hooks.pop(0)()
                # Arrays, and still no step an interval later: a program
                # whose first step made them (and compiled it) takes its
                # first snapshot at that step, in every run.
                if self._has_arrays():
                    if self._stop.wait(self.interval):
                        return
                    if not self.steps.stepping(time.monotonic()) and time.monotonic() >= self.timed_due():
                        self.snapshot("first")  # (not inside a call of a jitted function: timed_due)
                continue
            # Counted from the last snapshot, whoever took it.
            if self._stop.wait(max(0.0, self.timed_due() - time.monotonic())):
                return
            try:
                self.writer.flush_markers()  # a fast loop's last markers (store/writer.py), once it pauses
            except Exception as exc:  # a full disk, a closed journal: as a snapshot's failure
                self.fail(exc)
                return
            if time.monotonic() < self.timed_due():
                continue
            # Many arrays made since the last snapshot (a model being built)
            # cost a description each: wait until the budget affords them,
            # so that a burst is described once, after it, not half-way.
            # The list of live arrays holds every array it lists alive: it
            # exists only while this thread holds the lock (see holding()).
            with self._lock:
                if self._stop.is_set():
                    return  # stopped while it waited for the lock
                if time.monotonic() < self.timed_due():
                    continue  # a step's snapshot meanwhile
                affordable, live = self._affordable_at()
                now = time.monotonic()
                if affordable <= now:
                    self.snapshot("interval", live=live, search=False)
                del live
                self.search_holders()
            if affordable > now:
                # Each check pushes the budget back by its own cost: check
                # again when it affords the snapshot (or in a second, in case
                # the new arrays are gone), but no sooner than ten times that
                # push, so that the checks take at most a tenth of the budget
                # and cannot chase it for ever.
                if self._stop.wait(max(min(affordable - now, 1.0), 10 * self._check_cost * self._wall_per_sampling_s)):
                    return

    def _affordable_at(self) -> tuple[float, list | None]:
        """When the since-start budget affords the next snapshot, counting
        a description for each array not seen yet; and the live arrays
        counted, for that snapshot. Listing them costs milliseconds when
        there are many, so the check counts in the budget too."""
        if not self.adaptive or self.max_overhead <= 0:
            return 0.0, None
        c0 = time.thread_time()
        try:
            live = jax_ready().live_arrays()
        except Exception:
            return 0.0, None
        unseen = len(live) - len(self._tracked) - len(self._aliases)
        cost = self._check_cost = time.thread_time() - c0
        self._spent += cost
        self._checks += cost  # journalled with the next snapshot's cost
        estimate = self._cost + max(0, unseen) * self._per_new
        return self._t0 + (self._spent + estimate) * self._wall_per_sampling_s, live

    def _has_arrays(self) -> bool:
        jax = jax_ready()
        with self._lock:
            try:
                return bool(jax.live_arrays())
            except Exception:
                return False

    def live_bytes_by_device(self) -> dict | None:
        """The bytes of the live arrays on each device (``str(device)``),
        counted now, without a snapshot (for the jit probe, before a sampled
        call); None before JAX is up. Its cost counts in the budget."""
        jax = jax_ready()
        if jax is None or self.failed:
            return None
        c0 = time.thread_time()
        out: dict = {}
        with self._lock:
            try:
                live = jax.live_arrays()
                aliases = self._aliases
                for a in live:
                    view = aliases.get(id(a))
                    if view is not None and view() is a:
                        continue  # a per-shard view our reading of an address made: its array's bytes, counted
                    add_device_bytes(a, out)
            except Exception:
                return None
            finally:
                live = a = None
        cost = time.thread_time() - c0
        self._spent += cost
        self._checks += cost
        return out

    def holding(self):
        """The lock under which the sampler holds the program's arrays (the
        list from ``jax.live_arrays()``): it holds none of them while another
        thread holds it. The jit probe takes it to tell whether the program
        still holds an array, and ``owned_by_this_thread()`` tells it that an
        array died when the sampler let go of it, not where the program did."""
        return self._lock

    # -- one snapshot ----------------------------------------------------------

    def owned_by_this_thread(self) -> bool:
        """Whether this thread is taking a snapshot (holds the lock)."""
        return self._lock._is_owned()  # type: ignore[attr-defined]  # CPython's RLock has it, its stubs do not

    def snapshot(self, trigger: str, label: str | None = None, live: list | None = None,
                 wait: bool | None = None, search: bool = True) -> int | None:
        """Take a snapshot now; None when JAX is not up yet or sampling has
        stopped after an error. ``live``: ``jax.live_arrays()`` if listed a
        moment ago. ``wait``: whether to wait for computations in flight to
        read their arrays' addresses (default: not for background snapshots;
        never for SIGTERM's, which must not outlast the process). ``search``:
        search for the arrays' Python holders now; False: the caller holds
        ``live`` and calls ``search_holders()`` once it has let go of it
        (the search must hold none of the program's arrays)."""
        jax = jax_ready()
        if jax is None or self.failed or self.writer.closed:
            return None
        with self._lock:
            if trigger == "first" and self.first_taken:
                return None  # someone else took a snapshot meanwhile
            if not self.first_taken:
                # protobuf's reader, imported at the first snapshot so that a
                # script without JAX never pays for it: a one-time start-up
                # cost, not the sampling that the overhead budget paces (in
                # the budget, it alone spaced the next snapshots by seconds).
                from jaxmemprof.pprof import profile_pb2  # noqa: F401  (imported for its cost, see above)
            # The cost that matters is the CPU time this thread takes (holding
            # the GIL, the target waits); its wall time also counts the waits
            # for the GIL while the target runs Python, which cost the target nothing.
            c0, w0 = time.thread_time(), time.perf_counter()
            t_wall, t_mono = time.time(), time.monotonic()
            if trigger == "first" and self.steps.stepping(t_mono):
                # A step's marker will take it. Checked after the snapshot's time is read: a marker counted
                # after this check is placed after that time, never before a timed snapshot of the loop.
                return None
            calls: list = self.in_flight() if self.in_flight is not None else []
            try:
                # Background snapshots never wait for a computation to finish;
                # one the program asked for (or its last) reads every address.
                if wait is None:
                    wait = trigger not in ("interval", "first", "step")
                rec = self._collect(jax, trigger, label, t_wall, t_mono, live, wait=wait)
                rec.cost_s = time.thread_time() - c0 + self._checks
                self._checks = 0.0
                rec.wall_s = time.perf_counter() - w0
                index = self.writer.add_snapshot(rec)
                if calls:
                    self.writer.add_snapshot_calls(index, calls)
            except Exception as exc:  # a full disk, a closed journal, a JAX error
                self.fail(exc)
                return None
            self.first_taken = True
            for hook in self.hooks:
                hook()
            self._last_mono = time.monotonic()
            cost = time.thread_time() - c0
            self._spent += cost
            self._cost = cost if self._cost == 0 else 0.7 * self._cost + 0.3 * cost
            if len(rec.new_arrays) >= 1000:  # mostly describing: its cost per new array
                self._per_new = cost / len(rec.new_arrays)
            if self.peak is None or rec.live_bytes > self.peak[0]:
                self.peak = (rec.live_bytes, index, t_mono)
            self._pending_search = (index, trigger, rec.live_bytes, calls)
            del live, rec
            if search:
                self.search_holders()
            return index

    def search_holders(self) -> None:
        """The holder search after the last snapshot, if it asked for one
        (capture/py_holders.py); under the lock, with no list of the
        program's arrays held."""
        pending, self._pending_search = self._pending_search, None
        if pending is None or self.failed:
            return
        jax = jax_ready()
        index, trigger, live_bytes, calls = pending
        with self._lock:
            if self.py_holders is not None:
                try:
                    self.py_holders.after(jax, self._tracked, index, trigger, live_bytes, calls, self._viewed)
                except Exception as exc:
                    self.py_holders = None
                    if _write_error(exc):  # the journal could not take its rows: as any snapshot's failed write
                        self.fail(exc)
                        return
                    try:
                        self.writer.add_event("warning", f"the search for Python holders stopped: {described(exc)}"[:2000],
                                              index)
                    except Exception as again:
                        self.fail(again)

    def fail(self, exc: BaseException) -> None:
        """Stop sampling after an error (a full disk, say), warning once; the
        target runs on."""
        if self.failed:
            return
        from jaxmemprof.store.writer import write_failure

        self.failed = write_failure(exc)
        sys.stderr.write(f"jaxmemprof: warning: sampling stopped: {self.failed}\n")
        try:
            self.writer.add_event("sampler-error", self.failed)
        except Exception:
            pass

    def _collect(self, jax, trigger, label, t_wall, t_mono, live, wait: bool) -> SnapshotRecord:
        profile = jax.profiler.device_memory_profile()
        if live is None:
            live = jax.live_arrays()  # holds every listed array alive until we are done
        previous = self.writer.snapshots
        tracked, aliases, owner = self._tracked, self._aliases, self._owner
        ended: list = []

        def end(entry, how):
            ended.append((entry.array_id, previous, how))
            self._pending.pop(entry.key, None)
            if entry.traceback_id is not None:
                self._forget_unread(entry)
            for k in entry.keys:
                if owner.get(k) is entry:
                    del owner[k]

        # Arrays (and views) that died since the last snapshot: their weak
        # references said so, before any other object could take their id.
        # They give up their addresses first: a new array may hold one
        # already (a donated input's buffer, reused).
        dead = self._dead
        while dead:
            ref = dead.pop()
            if tracked.get(ref.key) is ref:
                del tracked[ref.key]
                end(ref, "freed")
            elif aliases.get(ref.key) is ref:
                del aliases[ref.key]
        ids = set(map(id, live))
        if not ids.issuperset(tracked.keys()):
            # Alive but no longer listed: deleted (donated) arrays.
            for key in tracked.keys() - ids:
                entry = tracked.pop(key)
                obj = entry()
                end(entry, "deleted" if obj is not None and is_deleted(obj) else "freed")
        address_updates: list = []
        for key, entry in list(self._pending.items()):
            a = entry()
            if a is not None and (wait or is_ready(a)):
                del self._pending[key]
                self._read_late(a, entry, address_updates)
        unseen = ids - tracked.keys() - aliases.keys() if len(ids) > len(tracked) else ()
        fresh = [a for a in live if id(a) in unseen] if unseen else []
        new_stacks: list = []
        new_rows = self._add_new(fresh, new_stacks, address_updates, wait) if fresh else []
        del live, fresh
        # The totals are the profile's own (its buffers), not the array records':
        # the two are read a moment apart while the program runs on.
        live_bytes, buffers = profile_buffers(profile)
        return SnapshotRecord(
            t_wall=t_wall, t_mono=t_mono, trigger=trigger, label=label, profile=profile,
            live_bytes=live_bytes, buffers=buffers, arrays=len(tracked),
            new_stacks=new_stacks, new_arrays=new_rows, ended_arrays=ended,
            address_updates=address_updates, memory_stats=memory_stats_rows(jax),
            executables=self._executables.rows(jax, lambda tb: self._stack_id(tb, new_stacks)),
        )

    def _add_new(self, fresh: list, stacks: list, address_updates: list, wait: bool) -> list:
        """Track the arrays not seen before; their journal rows, per-shard
        views left out. (Written to allocate little: describing many new
        arrays at once otherwise sets off full garbage collections.)"""
        n = len(fresh)
        statics: list = [None] * n
        tbs: list = [None] * n
        sites: list = [None] * n
        cache, stack_id = self._static, self._stack_id
        for i, a in enumerate(fresh):
            try:
                sharding = a.sharding
                static = cache.get((a.shape, a.dtype, sharding))
                if static is None:
                    static = Static(a, sharding)
                    if len(cache) < 10_000:
                        cache[(a.shape, a.dtype, sharding)] = static
                tb = getattr(a, "traceback", None)
            except Exception:
                continue  # deleted while we looked, or not a concrete array
            statics[i], tbs[i], sites[i] = static, tb, stack_id(tb, stacks)
        # Views the program made of arrays whose addresses are not read (it
        # read a shard, or float() a replicated array) are recognised without
        # reading: same traceback object, on one of the array's devices, the
        # size of its shard there.
        views = self._views_of_unread(statics, tbs) if self.addresses != "all" else ()
        paired = self._one_device_pairs(statics, tbs) if self.addresses == "auto" else ()
        multi: list = []
        single: list = []
        for i, a in enumerate(fresh):
            static = statics[i]
            if static is None:
                continue
            if i in views:
                self._aliases[id(a)] = Ref(a, self._dead.append)
                continue
            tb, site = tbs[i], sites[i]
            pair = tb is not None and id(tb) in paired
            read = self._reads(len(static.devices), site, pair)
            try:
                # Reading a buffer's address waits for the computation that
                # fills it: an array still being computed gets them later.
                pending = read and not wait and not is_ready(a)
                keys = (self._read(a, static.devices, site, learn=not pair) if read and not pending
                        else static.unread_keys)
            except Exception:
                continue  # deleted while we looked
            entry = Entry(a, self._dead.append, keys, pending, site, static)
            if not read and tb is not None:
                entry.traceback_id = id(tb)
            (multi if len(keys) > 1 else single).append(entry)
        # JAX keeps per-shard views of an array as arrays of their own: they
        # hold no memory of their own. One array owns each (device, address):
        # arrays seen before, then new arrays with more shards first.
        owner, aliases, tracked = self._owner, self._aliases, self._tracked
        rows = []
        for entry in multi + single:
            a = entry()
            if a is None:
                continue
            key = entry.key
            known = [k for k in entry.keys if k[1] is not None]
            if known and all(k in owner for k in known):
                aliases[key] = entry
                continue
            entry.array_id = self._next_array
            self._next_array += 1
            s = entry.static
            rows.append((entry.array_id, key, s.shape, s.dtype, s.nbytes, s.sizes, s.devices_json,
                         json_list(address for _, address in entry.keys), s.sharding, s.memory_kind,
                         entry.site))
            self._own(entry)
            if entry.traceback_id is not None:
                self._unread.setdefault(entry.traceback_id, {})[key] = entry
            if entry.pending:
                self._pending[key] = entry
            tracked[key] = entry
        return rows

    def _reads(self, n_devices: int, site, paired: bool) -> bool:
        """Whether to read an array's buffer addresses. ``auto``: where it
        makes JAX keep no new per-shard view: one-device arrays except those
        made where such an array had to get one (device_put); and a
        one-device array paired with another (an array and its view, or two
        outputs of one call: either way reading is free and tells them
        apart)."""
        if self.addresses == "auto":
            return n_devices == 1 and (paired or site not in self._view_sites)
        return self.addresses == "all"

    def _read(self, a, devices: tuple, site, learn: bool = True) -> tuple:
        """(device, address) per shard, in the order of ``devices``. The
        per-shard views this makes JAX keep are known as views from now on;
        with ``learn``, where (``site``) one-device arrays get one, or none,
        is remembered (not from arrays whose views the program made: a view
        shares its array's site, and reading it makes none)."""
        if len(devices) == 1 and site in self._clean_sites:
            return ((devices[0], buffer_address(a)),)
        shards = a.addressable_shards
        if len(shards) == 1:
            address = {devices[0]: buffer_address(a)}
            views: tuple
            try:
                views = (shards[0].data,)
            except Exception:
                views = ()
        else:
            views = tuple(s.data for s in shards)
            address = {str(s.device): buffer_address(v) for s, v in zip(shards, views)}
        made = [v for v in views if v is not a]
        for v in made:
            self._aliases[id(v)] = Ref(v, self._dead.append)
        if made and learn:
            self._view_sites.add(site)
        elif len(devices) == 1 and learn:
            self._clean_sites.add(site)
        return tuple((d, address.get(d)) for d in devices)

    def _read_late(self, a, entry: Entry, updates: list) -> None:
        """Read the addresses of a tracked array computed by now and queue
        the journal update."""
        try:
            keys = self._read(a, entry.static.devices, entry.site)
        except Exception:
            entry.pending = False  # deleted meanwhile: it ends at the next snapshot
            return
        entry.keys, entry.pending = keys, False
        self._own(entry)
        updates.append((json_list(k[1] for k in keys), entry.array_id))

    def _views_of_unread(self, statics: list, tbs: list) -> set:
        """Indices of new one-device arrays that are views of an array whose
        addresses are not read (new in this snapshot and on several devices,
        or tracked): the same traceback object (shared by a view and its
        array, and otherwise only by the outputs of one call, which appear
        together and all lie on the call's devices), one of its devices, and
        the size of its shard there."""
        parents: dict[int, list] = {}
        for static, tb in zip(statics, tbs):
            if static is not None and tb is not None and len(static.devices) > 1:
                parents.setdefault(id(tb), []).append(static)
        out = set()
        for i, (static, tb) in enumerate(zip(statics, tbs)):
            if static is None or tb is None or len(static.devices) != 1:
                continue
            k = id(tb)
            candidates = list(parents.get(k, ()))
            for entry in self._unread.get(k, {}).values():
                obj = entry()
                if obj is not None and getattr(obj, "traceback", None) is tb:
                    candidates.append(entry.static)
            device = static.devices[0]
            if any(device in p.devices and p.shard_bytes[p.devices.index(device)] == static.nbytes
                   for p in candidates):
                out.add(i)
        return out

    @staticmethod
    def _one_device_pairs(statics: list, tbs: list) -> set:
        """id(traceback) of new one-device arrays that share the traceback
        object, device and size with another new one."""
        seen, pairs = set(), set()
        for static, tb in zip(statics, tbs):
            if static is None or tb is None or len(static.devices) != 1:
                continue
            k = (id(tb), static.devices[0], static.nbytes)
            if k in seen:
                pairs.add(id(tb))
            seen.add(k)
        return pairs

    def _viewed(self, key: int):
        """The tracked entry whose buffers the per-shard view ``id()`` ``key``
        shares (None when unknown)."""
        view = self._aliases.get(key)
        for k in getattr(view, "keys", ()):
            if k[1] is not None:
                entry = self._owner.get(k)
                if entry is not None:
                    return entry
        return None

    def _forget_unread(self, entry: Entry) -> None:
        group = self._unread.get(entry.traceback_id)
        if group is not None and group.get(entry.key) is entry:
            del group[entry.key]
            if not group:
                del self._unread[entry.traceback_id]

    def _own(self, entry: Entry) -> None:
        for k in entry.keys:
            if k[1] is not None:
                self._owner[k] = entry

    def _stack_id(self, tb, stacks: list):
        if tb is None:
            return None
        try:
            sid = self._stacks.get(tb)
        except TypeError:
            sid = None
        if sid is None:
            frames = [[f.file_name, int(f.line_num), f.function_name] for f in tb.frames]
            sid = self._next_stack
            self._next_stack += 1
            try:
                self._stacks[tb] = sid
            except TypeError:
                pass
            stacks.append((sid, json.dumps(frames, separators=(",", ":"))))
        return sid




def _write_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the run's storage failing (the disk full, a file
    past its size limit, SQLite unable to write), not the code that wrote."""
    return isinstance(exc, OSError) or type(exc).__module__ == "sqlite3"

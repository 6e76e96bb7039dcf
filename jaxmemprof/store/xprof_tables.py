"""A profile's hosts (jaxmemprof/xprof/) made into the run model's tables:
the manifest, the snapshots and memory_stats of the memory profile, and the
jit tables of its programs (store/xprof.py says what is read and what is not)."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from jaxmemprof.errors import InputError
from jaxmemprof.store.decode import typed
from jaxmemprof.store.jit_tables import JitTables
from jaxmemprof.store.reader import Run
from jaxmemprof.xprof import timeline as tl
from jaxmemprof.xprof.programs import ProgramFacts, read_program
from jaxmemprof.xprof.xplane import Host, read_host

NO_MEMORY_EVENTS = ("no memory events in this profile ({why}): the timeline, the live peak and what held it are not "
                    "in it; each program's own figures are read")
# Why, by the profile's backend: XProf records allocations only on a TPU or GPU, there with the host tracer on.
NO_MEMORY_EVENTS_WHY = {"cpu": "a CPU profile: XProf records allocations only on a TPU or GPU"}
NO_MEMORY_EVENTS_ELSE = ("recorded with the host tracer off: XProf records the runtime's allocations with "
                         "host_tracer_level 2, as by default")
NOT_IN_A_PROFILE = ("not in a profile: the Python that held arrays, when the caller let go of an argument (the donation "
                    "finding takes the usual state = step(state, batch)), a compile of a change (a saving is an "
                    "upper bound)")
_NO_OP = "dummy"  # the op a TPU runtime's allocation events name (JAX 0.10, v5e)
IMBALANCE_FROM = 0.05  # a chip this much above the median (of the median), and at least 1 MiB, is named
_MIB = 1024**2

_FUNCTION_COLUMNS = ["function_id", "name", "qualname", "file", "line", "jit_file", "jit_line", "jit_function",
                     "jit_source", "params", "donate_argnums", "donate_argnames", "static_argnums", "static_argnames",
                     "t_wall", "wrapper", "wrapper_options"]
_COMPILE_COLUMNS = ["function_id", "call_index", "t_wall", "signature", "argument_bytes", "output_bytes",
                    "alias_bytes", "temp_bytes", "generated_code_bytes", "host_argument_bytes", "host_output_bytes",
                    "host_alias_bytes", "host_temp_bytes", "host_generated_code_bytes", "peak_bytes"]
_CALL_COLUMNS = ["call_id", "function_id", "call_index", "t_wall", "t_mono", "caller_file", "caller_line",
                 "caller_function", "inputs", "outputs", "inputs_alive", "signature", "live_before"]
_COUNT_COLUMNS = ["function_id", "calls", "compiles", "calls_complete", "traced", "backend_compiles"]
_PROGRAM_COLUMNS = ["function_id", "signature", "module", "length", "peak_position", "peak_bytes", "argument_bytes",
                    "output_bytes", "alias_bytes", "temp_bytes", "dump_s"]
_BUFFER_COLUMNS = ["function_id", "name", "bytes", "shape", "kind", "op", "frames", "live_start", "live_end",
                   "at_peak", "signature"]
_CURVE_COLUMNS = ["function_id", "signature", "curve"]
_SNAPSHOT_COLUMNS = ["snapshot", "t", "t_wall", "t_mono", "live_bytes", "buffers", "arrays", "cost_s", "wall_s",
                     "trigger", "label", "file", "thinned", "process"]
_STAT_COLUMNS = ["snapshot", "device", "key", "value"]


@dataclass
class XprofRun(Run):
    """A profile's run: a Run whose snapshots' profiles are made from the
    memory events in memory (no file), with what the profile could not say."""

    notes: list = field(default_factory=list)  # what the profile does not hold, one line each
    chips: pd.DataFrame = field(default_factory=pd.DataFrame)  # host, device, peak_bytes, source
    imbalance: list = field(default_factory=list)  # one line per chip well above the median
    profiles: dict = field(default_factory=dict)  # snapshot -> a function making its Profile

    def profile_path(self, snapshot: int) -> Path:
        if snapshot not in self.profiles:
            raise InputError(str(self.path), f"has no snapshot {snapshot}")
        return self.path

    def profile(self, snapshot: int, **kwargs):
        if snapshot not in self.profiles:
            raise InputError(str(self.path), f"has no snapshot {snapshot}")
        return self.profiles[snapshot]()



def _empty(columns) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})


def frame_json(frames) -> str:
    return json.dumps([list(f) for f in frames])


def typed_table(rows: list, columns: list, table: str, warnings: list) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=columns) if rows else pd.DataFrame({c: pd.Series(dtype=object) for c in columns})
    return typed(df, table, warnings)


def build_run(path: Path, files: list, *, multi: bool, process: int | None) -> XprofRun:
    warnings: list = []
    hosts: list[Host] = []
    chips: list = []
    series: list = []  # (device name, Series, MemoryEvents)
    devices: list = []
    for n, f in enumerate(files):
        h = read_host(f)  # one host at a time: its planes are dropped once its figures are taken
        if h.errors:
            warnings.append(f"{h.path.name}: the profile says: {h.errors[0]}")
        prefix = f"{h.host}/" if multi else ""
        for memory, ev in sorted(h.memory.items()):
            name = prefix + _device(h, memory)
            s = tl.series(ev)
            series.append((name, s, ev))
            chips.append((h.host, name, s.peak[1], "memory profile"))
        for kind, ordinal in h.devices or [(h.backend, 0)]:
            devices.append({"id": ordinal, "kind": kind.lower(), "name": prefix + f"{kind.lower()}:{ordinal}",
                            "process_index": n if process is None else process, "host": h.host})
            if not h.memory:  # no memory profile: each chip's largest program stands for its peak
                chips.append((h.host, devices[-1]["name"], _program_peaks(h).get(ordinal, 0), "largest program"))
        hosts.append(_light(h) if n else h)
    first = hosts[0]
    facts = [(p, read_program(p.module, p.hlo_module, p.buffer_assignment)) for p in first.programs]
    unread = [f"{pf.module} ({pf.error})" for _, pf in facts if pf.memory is None]
    if unread:
        warnings.append(f"{len(unread)} program(s) without XLA's buffers: {', '.join(unread[:3])}")
    start_ns = min((h.start_ns for h in hosts if h.start_ns), default=0)
    stop_ns = max((h.stop_ns for h in hosts), default=0)
    start = start_ns / 1e9 if start_ns else Path(files[0]).stat().st_mtime
    jit = _jit_tables(facts, first, start, warnings)
    snapshots, stats, profiles = _snapshots(series, start, facts, warnings)
    manifest = {
        "backend": first.backend, "devices": devices, "process_index": 0 if process is None else process,
        "process_count": len(files) if process is None else max(process + 1, 1), "hostname": first.host,
        "hosts": [h.host for h in hosts], "start_epoch": start, "duration_s": max(stop_ns - start_ns, 0) / 1e9,
        "jax_version": first.versions.get("jax_version", ""), "jaxlib_version": first.versions.get("jaxlib_version", ""),
        "source": {"format": "xprof", "files": [str(f) for f in files]},
        "argv": [f"XProf profile of {', '.join(h.host for h in hosts[:4])}{' ...' if len(hosts) > 4 else ''}"],
    }
    notes = [] if series else [NO_MEMORY_EVENTS.format(
        why=NO_MEMORY_EVENTS_WHY.get(first.backend, NO_MEMORY_EVENTS_ELSE))]
    notes.append(NOT_IN_A_PROFILE)
    chip_table = pd.DataFrame(chips, columns=["host", "device", "peak_bytes", "source"])
    return XprofRun(path=Path(path), manifest=manifest, snapshots=snapshots, arrays=_empty(["array_id"]), stacks={},
                    memory_stats=stats, executables=_empty(["snapshot", "stack_id", "name", "count", "code_bytes"]),
                    jit=jit, markers=_empty(["marker", "t_wall", "t_mono", "label", "after_snapshot", "t"]),
                    events=_empty(["event", "t_wall", "kind", "message", "snapshot"]), has_arrays=False,
                    warnings=warnings, notes=notes, chips=chip_table, imbalance=imbalance(chip_table),
                    profiles=profiles)


def _program_peaks(h: Host) -> dict:
    """device ordinal -> the largest peak of a program that ran on it in the
    capture (XLA's buffers swept); of any program the profile holds where
    none ran. A host without device planes (a CPU) has one device, 0."""
    ran = [p for p in h.programs if p.program_id in h.runs] or h.programs
    out: dict = {}
    for p in ran:
        if not p.buffer_assignment:
            continue
        pf = read_program(p.module, p.hlo_module, p.buffer_assignment, largest=0)
        if pf.memory is None:
            continue
        on = h.runs.get(p.program_id, (0, set()))[1] if h.devices else set()
        for d in on or {0}:
            out[d] = max(out.get(d, 0), pf.memory.peak_bytes)
    return out


def _light(h: Host) -> Host:
    """A host past the first less its programs (only the first's are read)."""
    h.programs = []
    return h


def _device(h: Host, memory: str) -> str:
    return f"{h.backend}:{memory}" if memory.isdigit() else memory


def imbalance(chips: pd.DataFrame) -> list:
    """One line per chip whose peak is well above the median of the chips'
    (a job of several hosts): "chip tpu:3 of host h7 peaks 1.2 GiB above the
    median (...)"; [] for one host."""
    from jaxmemprof.units import format_bytes

    if chips.empty or chips["host"].nunique() < 2:
        return []
    median = statistics.median(int(b) for b in chips["peak_bytes"])
    out = []
    for row in chips.sort_values("peak_bytes", ascending=False).itertuples():
        above = int(row.peak_bytes) - median
        if above > max(IMBALANCE_FROM * median, _MIB):
            device = str(row.device).split("/", 1)[-1]
            out.append(f"chip {device} of host {row.host} peaks {format_bytes(above)} above the median "
                       f"({format_bytes(int(row.peak_bytes))} against {format_bytes(int(median))}, {row.source})")
    return out


def _function_of(pf: ProgramFacts) -> tuple[str, str, int, tuple]:
    """(name, file, line, caller frame) of the jitted function, from the
    stacks of its ops: the frame named as the module (jit_<name>)."""
    name = pf.module[4:] if pf.module.startswith("jit_") else pf.module
    best: tuple = ("", 0)
    caller: tuple = ("", 0, "")
    for b in (pf.memory.buffers if pf.memory else []):
        frames = list(b.frames)
        for i, (file, line, function) in enumerate(frames):
            if function == name:
                if not best[0] or line < best[1]:
                    best = (file, int(line))
                    if i + 1 < len(frames):
                        caller = tuple(frames[i + 1])
                break
    return name, best[0], best[1], caller


def _jit_tables(facts: list, host: Host, start: float, warnings: list) -> JitTables:
    ids: dict = {}
    rows: dict = {k: [] for k in ("functions", "compiles", "calls", "counts", "programs", "buffers", "curves")}
    seen: set = set()
    counts: dict = {}
    for program, pf in facts:
        if pf.memory is None:
            continue
        name, file, line, caller = _function_of(pf)
        key = (pf.module, pf.signature)
        if key in seen:
            continue
        seen.add(key)
        fid = ids.get(pf.module)
        runs, on = host.runs.get(program.program_id, (0, set()))
        device = min(on) if on else 0
        if fid is None:
            fid = ids[pf.module] = len(ids) + 1
            donated = sorted({a.position for a in pf.arguments if a.aliased})
            # where jax.jit was applied is not in a profile: the function's own first line stands for it
            rows["functions"].append((fid, name, name, file, line, file, line, name, "", json.dumps(pf.argument_names),
                                      json.dumps(donated), "[]", "[]", "[]", start, "jax.jit", "{}"))
        m = pf.memory
        c = counts.setdefault(fid, [0, 0])
        c[0] += runs
        c[1] += 1
        rows["compiles"].append((fid, c[1], start, pf.signature, m.argument_bytes, m.output_bytes, m.alias_bytes,
                                 m.temp_bytes, 0, 0, 0, 0, 0, 0, m.peak_bytes))
        rows["programs"].append((fid, pf.signature, pf.module, m.length, m.peak_position, m.peak_bytes,
                                 m.argument_bytes, m.output_bytes, m.alias_bytes, m.temp_bytes, 0.0))
        rows["buffers"].extend((fid, b.name, b.bytes, b.shape, b.kind, b.op, frame_json(b.frames), b.start, b.end,
                                int(b.at_peak), pf.signature) for b in m.buffers)
        if m.curve is not None:
            rows["curves"].append((fid, pf.signature, json.dumps(m.curve, separators=(",", ":"))))
        rows["calls"].append(_call(len(rows["calls"]) + 1, fid, c[1], start, caller, pf, device))
    rows["counts"] = [(fid, calls, compiles, 1, 0, compiles) for fid, (calls, compiles) in counts.items()]
    jit = JitTables(
        functions=typed_table(rows["functions"], _FUNCTION_COLUMNS, "jit_functions", warnings),
        compiles=typed_table(rows["compiles"], _COMPILE_COLUMNS, "jit_compiles", warnings),
        calls=typed_table(rows["calls"], _CALL_COLUMNS, "jit_calls", warnings),
        counts=typed_table(rows["counts"], _COUNT_COLUMNS, "jit_counts", warnings),
        programs=typed_table(rows["programs"], _PROGRAM_COLUMNS, "jit_programs", warnings),
        buffers=typed_table(rows["buffers"], _BUFFER_COLUMNS, "jit_buffers", warnings),
        curves=typed_table(rows["curves"], _CURVE_COLUMNS, "jit_curves", warnings))
    return jit


def _call(call_id: int, fid: int, index: int, start: float, caller: tuple, pf: ProgramFacts, device: int) -> tuple:
    """The program's one call as the jit probe records a sampled call: its
    leaves by the names JAX gave them; each argument taken as let go by the
    calling statement (a profile does not say: NOT_IN_A_PROFILE)."""
    names = pf.argument_names
    on = [f"device:{device}"]
    inputs = [{"path": a.path[len(a.argument):], "shape": list(a.shape), "dtype": a.dtype, "sharding": "",
               "memory_kind": "device", "devices": 1, "bytes": a.bytes, "arg": names.index(a.argument),
               "name": a.argument, "kw": False, "donated": a.aliased, "same_as": i, "owner": a.path, "on": on}
              for i, a in enumerate(pf.arguments)]
    outputs = [{"path": o.path, "shape": list(o.shape), "dtype": o.dtype, "memory_kind": "device", "devices": 1,
                "bytes": o.bytes, "on": on} for o in pf.outputs]
    fates = ["dropped"] * len(inputs)
    file, line, function = (caller + ("", 0, ""))[:3] if caller else ("", 0, "")
    return (call_id, fid, index, start, 0.0, file, int(line or 0), function, json.dumps(inputs), json.dumps(outputs),
            json.dumps(fates), pf.signature, None)


def _op_frames(facts: list) -> dict:
    """op name -> the frames of the buffers made by it, over the programs."""
    out: dict = {}
    for _, pf in facts:
        for b in (pf.memory.buffers if pf.memory else []):
            if b.op and b.frames and b.op not in out:
                out[b.op] = tuple((fn, file, line) for file, line, fn in b.frames)  # as pprof's writer takes them
    return out


def _snapshots(series: list, start: float, facts: list, warnings: list):
    """The memory profile's moments as snapshots, the allocator's figures
    as memory_stats, and each snapshot's Profile made on demand."""
    if not series:
        return (_snapshot_table([], warnings), typed_table([], _STAT_COLUMNS, "memory_stats", warnings), {})
    all_series = [s for _, s, _ in series]
    peak_t = tl.sum_peak(all_series)[0]
    moments = tl.moments(all_series, peak_t=peak_t)
    t0 = min(moments)
    snaps, stats, profiles = [], [], {}
    op_frames = _op_frames(facts)
    for n, t in enumerate(moments, start=1):
        live = [s.at(t) for s in all_series]
        t_s = (t - t0) / 1e12
        snaps.append((n, t_s, start + t_s, t_s, sum(live), 0, 0, 0.0, 0.0, "peak" if t == peak_t else "interval",
                      None, "", False, 0))
        for (name, s, _), b in zip(series, live):
            stats.append((n, name, "bytes_in_use", b))
            stats.append((n, name, "peak_bytes_in_use", max(s.peak[1], s.lifetime_peak)))
            if s.limit:
                stats.append((n, name, "bytes_limit", s.limit))
        profiles[n] = _profile_maker(series, t, op_frames, n)
    return (_snapshot_table(snaps, warnings), typed_table(stats, _STAT_COLUMNS, "memory_stats", warnings), profiles)


def _snapshot_table(rows: list, warnings: list) -> pd.DataFrame:
    """The snapshots as the run reader gives them: the journal's columns, ``t`` second."""
    snaps = typed_table(rows, _SNAPSHOT_COLUMNS, "snapshots", warnings)
    snaps.insert(1, "t", pd.Series([r[1] for r in rows], dtype=float))
    snaps["snapshot"] = snaps["snapshot"].astype("int64")
    snaps["thinned"] = False
    snaps["process"] = 0
    return snaps


def _profile_maker(series: list, t: int, op_frames: dict, n: int):
    def make():
        from jaxmemprof.pprof.reader import load_profile
        from jaxmemprof.pprof.writer import write_profile

        samples = []
        for name, _, ev in series:
            for size, op, region, _dtype, shape in tl.live_at(ev, t):
                # no user line for it: its op (or the name JAX gave an argument; a TPU's runtime names none:
                # "dummy", where its shape says more) in the place of a function
                label = op if op and op != _NO_OP else shape or op or "(no op named)"
                frames = op_frames.get(op) or ((label, f"<{region or 'allocation'}>", 0),)
                samples.append((frames, (1, size), {"kind": "buffer", "device": name}))
        if not samples:
            samples.append(((("(nothing live)", "", 0),), (0, 0), {"kind": "buffer"}))
        raw = write_profile([("allocations", "count"), ("space", "bytes")], samples, default_type="space")
        return load_profile(raw, name=f"snapshot {n}")
    return make


def program_profile(run: XprofRun, sel: str | None):
    """(module, a maker of the Profile of XLA's buffers at the peak of the
    program ``sel`` names (its module, jit_step, or its function, step), by
    default the largest): a profile without a memory profile, shown by line."""
    programs = run.jit.programs
    if programs.empty:
        raise InputError(str(run.path), "holds no program with XLA's buffers (and no memory events): nothing to show")
    names = run.jit.functions.set_index("function_id")["name"]
    if sel is None or sel.strip() == "peak":
        row = programs.loc[programs["peak_bytes"].astype("int64").idxmax()]
    else:
        s = sel.strip()
        hit = programs[(programs["module"] == s) | (programs["function_id"].map(names) == s)]
        if hit.empty:
            have = ", ".join(sorted(set(programs["module"]))[:8])
            raise InputError(str(run.path), f"has no memory events, and no program {s!r} (it has {have})")
        row = hit.loc[hit["peak_bytes"].astype("int64").idxmax()]
    fid, signature, module = int(row["function_id"]), row["signature"], str(row["module"])
    b = run.jit.buffers
    rows = b[(b["function_id"] == fid) & (b["signature"] == signature) & (b["at_peak"] == 1)]
    device = next((d["name"] for d in run.manifest.get("devices", [])), "")

    def make():
        from jaxmemprof.pprof.reader import load_profile
        from jaxmemprof.pprof.writer import write_profile

        samples = []
        for r in rows.itertuples():
            frames = [(fn, file, line) for file, line, fn in json.loads(r.frames)] if isinstance(r.frames, str) else []
            if not frames:
                frames = [(str(r.op or r.name), f"<{r.kind}>", 0)]
            samples.append((tuple(frames), (1, int(r.bytes)), {"kind": "buffer", "device": device}))
        raw = write_profile([("allocations", "count"), ("space", "bytes")], samples, default_type="space",
                            comments=[f"XLA's buffers at the peak of {module} ({signature})"])
        return load_profile(raw, name=f"{run.path}@{module}")
    return module, make

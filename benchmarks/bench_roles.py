"""What roles and owners cost: ``report``'s "What the memory is" and the
replicated finding on a recorded run, and the jit probe's owners per sampled
call, against the report and against plain python.

    python benchmarks/bench_roles.py [--repeat K] [--only report|probe|run] [--seconds S] [--out CSV]

report
    On bench_report.py's recorded run of 1,000 snapshots x 10,000 arrays
    (``benchmarks/workloads/report_churn.py``, cached in
    ``benchmarks/data/report_runs/``; recorded once by bench_report.py's own
    ``ensure_run`` when missing), in one fresh process: the run loaded once,
    then one untimed round and K timed rounds, alternating the order, of
    ``build_report(attribute(run))`` whole and of the part the roles add:
    ``roles(ar)`` and ``replication_findings(ar)`` on a fresh
    ``attribute(run)`` each time (``devices``: the timeline's, which the
    report makes anyway). A fresh ``Attributed`` makes the roles pay for the
    tables they share with the rest of the report (the attribution, XLA's
    buffers by line), so the same part is also timed on an ``Attributed``
    whose shared tables were made first (what the roles add to a report that
    makes them anyway), and ``Peaks.largest_sampled`` (the run's peaks) alone
    (``roles()`` calls it: the jit calls and compiles read again, after the
    report's own ``true_peak`` read them). Wall and CPU time
    (``time.process_time``), and the cores other processes kept busy
    meanwhile. Target: the part <= 5% of the whole (issue 25). Then, as whole
    processes (bench_report.py's launcher: wall, CPU, peak RSS), K runs each
    of ``jaxmemprof show RUN@peak --by owner`` against ``show RUN@peak`` (by
    site, the default), alternating after one untimed run of each; no target.

probe
    In a fresh process with a ``JitProbe`` installed (as bench_jit_probe.py's
    micro part does; sampling every call), on three realistic argument trees:
    ``adam`` (an optax adam state over an MLP of 50 layers, 100 parameter
    leaves: 303 input leaves, 302 output leaves), ``adam_mesh`` (the same
    replicated by a NamedSharding over a 4-device mesh, the batch sharded) and
    ``nnx`` (a flax.nnx model of 50 Linear layers and its nnx.Optimizer with
    adam, through ``nnx.jit``). Per sampled call: the time inside the owners'
    functions (capture/jit/owners.py: ``optax_tags``, ``mesh_facts``, the
    ``Previous`` of the call and its ``origin`` per leaf, ``nnx_owners``):
    recorders put in place of them in capture/jit/probe.py's namespace keep
    the arguments of each of their calls during one sampled call, and those
    calls are then made again, 20 times in a loop, timed as a whole (a clock
    read per call would cost more than ``mesh_facts`` itself), and checked to
    give the same results; median of 5 sampled calls. Then, in alternating
    blocks: the whole sampled call (and ``_describe_inputs`` and
    ``_record_call`` in it), the same with the owners' functions replaced by
    stubs that return nothing (the difference also counts the JSON the
    owners' facts add), and an unsampled call (the probe quiet, as it is
    once a function's samples are taken) for comparison. Times the most
    sampled calls a function gets in a run (the probe's ``max_samples``, plus
    one per further signature): the owners' cost per jitted function per run.

run
    ``python -c pass`` and ``python benchmarks/workloads/trivial.py`` (JAX's
    start-up), then the adam training loop above (this script,
    ``--train-child adam``, calibrated to ``--seconds``) plain against
    ``jaxmemprof run -q`` with default settings, K runs each alternating
    (bench_run_overhead.py's ``measure_pair``), after one untimed pair whose
    run directory says how many calls the probe sampled. The owners' cost per
    run (probe's figure x those samples) is set beside the difference and the
    spread of the plain runs: below the spread, it cannot be seen.

    The run directory of that untimed pair is also timed as the report part
    is (build_report against the roles' part): a run whose 20 sampled calls
    carry 605 leaves each, where the roles cost most in proportion.

Results: ``benchmarks/data/roles_results.csv`` (columns ``benchmark, case,
value, unit, reference, ratio, target, met``) and a summary on stdout. About
6 minutes on 2 busy cores with the run cached; recording it took 16 more
there (bench_report.py: about 4 on idle cores). Figures: docs/performance.md.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import Results, git_state

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATA = HERE / "data"
DEFAULT_OUT = DATA / "roles_results.csv"
TRIVIAL = HERE / "workloads" / "trivial.py"
COLUMNS = ("benchmark", "case", "value", "unit", "reference", "ratio", "target", "met")

REPORT_SIZE = (1_000, 10_000)
REPORT_TARGET = 0.05  # the roles' part of report (issue 25)
DEPTH, WIDTH, BATCH = 50, 32, 16  # 50 layers: 100 parameter leaves
MESH_DEVICES = 4


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def child_json(cmd: list[str], env: dict) -> dict:
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


class Meter:
    """Wall and CPU time of this process, and the cores the rest of the
    machine kept busy meanwhile (bench_report.busy_cpu_s)."""

    def __init__(self):
        from bench_report import busy_cpu_s

        self._busy = busy_cpu_s
        self.t0, self.c0, self.b0 = time.perf_counter(), time.process_time(), busy_cpu_s()

    def stop(self) -> dict:
        wall, cpu, b1 = time.perf_counter() - self.t0, time.process_time() - self.c0, self._busy()
        others = (max(0.0, (b1 - self.b0 - cpu) / wall) if self.b0 is not None and b1 is not None and wall > 0
                  else float("nan"))
        return {"wall": wall, "cpu": cpu, "others": others}


# -- report: in one process ------------------------------------------------------------


def report_child(run_path: str, repeat: int) -> dict:
    from jaxmemprof.analysis.rules.sharding import replication_findings
    from jaxmemprof.analysis.attributed import attribute
    from jaxmemprof.analysis.report import build_report
    from jaxmemprof.analysis.roles import roles
    from jaxmemprof.store.reader import load_run

    m = Meter()
    run = load_run(run_path)
    load = m.stop()
    seen: dict = {}

    def whole():
        rep = build_report(attribute(run))
        seen["report_roles_rows"] = 0 if rep.roles is None else len(rep.roles.by_role)
        seen["report_findings"] = len(rep.findings)

    def part():
        ar = attribute(run)
        what = roles(ar)
        found = replication_findings(ar)
        seen.update(role_rows=len(what.by_role), owner_rows=len(what.owners), where=what.where,
                    roles=list(what.by_role["role"].unique()), replicated_findings=len(found))

    shared = {}

    def part_marginal():
        ar = shared.pop("ar")
        roles(ar)
        replication_findings(ar)

    def prepare_marginal():
        ar = attribute(run)
        ar.attribution, ar.jit_buffers  # noqa: B018  (made by the rest of the report anyway)
        shared["ar"] = ar

    def call():
        attribute(run).peaks.largest_sampled  # noqa: B018 (the run's peaks, made once per attributed run)

    cases = {"build_report": whole, "roles_part": part, "roles_part_shared_tables": part_marginal,
             "largest_sampled_call": call}
    times = {k: [] for k in cases}
    for r in range(repeat + 1):  # round 0: untimed
        names = list(cases) if r % 2 == 0 else list(reversed(cases))
        for name in names:
            if name == "roles_part_shared_tables":
                prepare_marginal()
            m = Meter()
            cases[name]()
            t = m.stop()
            if r > 0:
                times[name].append(t)
    return {"load_run": load, "times": times, "seen": seen, "arrays": len(run.arrays),
            "snapshots": len(run.snapshots),
            "sampled_calls": len(run.jit.calls)}


def bench_report(res: Results, args, env: dict) -> None:
    from bench_report import Code, ensure_run, jaxmemprof_cmd, launch, run_dir

    s, n = REPORT_SIZE
    code = Code(None)
    if args.run is not None:  # a quick try on another run
        run = str(args.run.resolve())
        res.say(f"\n== report: {run} ==")
    else:
        res.say(f"\n== report: {s:,} snapshots x {n:,} arrays ==")
        meta = ensure_run(s, n, code, args.rerecord)
        run = str(run_dir(s, n) / "run")
        res.say(f"run {Path(run).relative_to(REPO)}: {meta['snapshots']} snapshots, {meta['array_rows']:,} array "
                "records" + (" (cached)" if meta.get("cached") else f" (recorded in {meta['record_wall_s']:.0f} s)"))
    log("  in-process: build_report against the roles' part ...")
    out = child_json([sys.executable, str(Path(__file__).resolve()), "--report-child", run,
                      "--repeat", str(args.repeat)], code.env)
    seen, t = out["seen"], out["times"]
    res.say(f"load_run (once) {out['load_run']['wall']:.2f} s wall, CPU {out['load_run']['cpu']:.2f} s; "
            f"{out['sampled_calls']} sampled jit calls in the run")
    res.say(f"roles at {seen.get('where')!r}: {seen.get('role_rows')} role rows "
            f"({', '.join(seen.get('roles') or [])}), {seen.get('owner_rows')} owner rows; "
            f"replicated findings: {seen.get('replicated_findings')}")
    res.say(f"{'in-process (median of ' + str(args.repeat) + ')':32} {'wall s':>8} {'CPU s':>8} {'min wall':>9} "
            f"{'of report: wall':>16} {'CPU':>7} {'others':>7}")
    whole_w = median([x["wall"] for x in t["build_report"]])
    whole_c = median([x["cpu"] for x in t["build_report"]])
    for name, rows in t.items():
        w, c = median([x["wall"] for x in rows]), median([x["cpu"] for x in rows])
        mn, others = min(x["wall"] for x in rows), max(x["others"] for x in rows)
        share = "" if name == "build_report" else f"{w / whole_w:16.2%} {c / whole_c:7.2%}"
        res.say(f"  {name:30} {w:8.3f} {c:8.3f} {mn:9.3f} {share:>24} {others:7.1f}")
        ref = (None, None) if name == "build_report" else (whole_w, w / whole_w)
        res.add("report", f"{name}_wall", w, "s", *ref)
        ref = (None, None) if name == "build_report" else (whole_c, c / whole_c)
        res.add("report", f"{name}_cpu", c, "s", *ref)
        res.add("report", f"{name}_other_load_max", others, "cores")
    # What the roles add: their part over the rest of the report (build_report makes them too).
    part_w = median([x["wall"] for x in t["roles_part"]])
    part_c = median([x["cpu"] for x in t["roles_part"]])
    added_w, added_c = part_w / (whole_w - part_w), part_c / (whole_c - part_c)
    res.say(f"  the roles add {added_w:.2%} (wall), {added_c:.2%} (CPU) to the rest of the report: target "
            f"<= {REPORT_TARGET:.0%}: {'met' if added_c <= REPORT_TARGET else 'MISSED'} (CPU), "
            f"{'met' if added_w <= REPORT_TARGET else 'MISSED'} (wall)")
    res.add("report", "roles_added_wall", part_w, "s", whole_w - part_w, added_w, f"<= {REPORT_TARGET:.0%}",
            added_w <= REPORT_TARGET)
    res.add("report", "roles_added_cpu", part_c, "s", whole_c - part_c, added_c, f"<= {REPORT_TARGET:.0%}",
            added_c <= REPORT_TARGET)
    call_w = median([x["wall"] for x in t["largest_sampled_call"]])
    call_c = median([x["cpu"] for x in t["largest_sampled_call"]])
    res.say(f"  largest_sampled_call (inside roles()) is {call_c / part_c:.0%} of the roles' part by CPU "
            f"({call_c * 1e3:.0f} of {part_c * 1e3:.0f} ms; wall {call_w * 1e3:.0f} of {part_w * 1e3:.0f} ms), "
            f"{call_c / whole_c:.2%} of the report")

    log("  whole processes: show RUN@peak --by owner against show RUN@peak ...")
    cmds = {"show_by_owner": jaxmemprof_cmd("show", f"{run}@peak", "--by", "owner"),
            "show_by_site": jaxmemprof_cmd("show", f"{run}@peak")}
    got = {k: [] for k in cmds}
    for r in range(args.repeat + 1):
        for name in (list(cmds) if r % 2 == 0 else list(reversed(cmds))):
            m = launch(cmds[name], code.env, code.cwd)
            if r > 0:
                got[name].append(m)
    res.say(f"{'whole process (median of ' + str(args.repeat) + ')':32} {'wall s':>8} {'CPU s':>8} {'min wall':>9} "
            f"{'peak RSS':>9} {'others':>7}")
    for name, rows in got.items():
        w, c = median([x["wall"] for x in rows]), median([x["cpu"] for x in rows])
        rss, others = max(x["rss"] for x in rows) / 1024, max(x["others"] for x in rows)
        res.say(f"  {name:30} {w:8.3f} {c:8.3f} {min(x['wall'] for x in rows):9.3f} {rss:6.0f} MiB {others:6.1f}")
        res.add("show", f"{name}_wall", w, "s")
        res.add("show", f"{name}_cpu", c, "s")
        res.add("show", f"{name}_max_rss", rss, "MiB")
        res.add("show", f"{name}_other_load_max", others, "cores")
    wo, ws = (median([x["wall"] for x in got[k]]) for k in ("show_by_owner", "show_by_site"))
    co, cs = (median([x["cpu"] for x in got[k]]) for k in ("show_by_owner", "show_by_site"))
    res.say(f"  show --by owner / show (by site): wall x{wo / ws:.2f}, CPU x{co / cs:.2f}")
    res.add("show", "by_owner_over_by_site_wall", wo, "s", ws, wo / ws)
    res.add("show", "by_owner_over_by_site_cpu", co, "s", cs, co / cs)


# -- probe: the owners per sampled call ---------------------------------------------------


def adam_setup(depth: int = DEPTH, width: int = WIDTH, batch: int = BATCH, mesh_devices: int = 0):
    """An MLP's parameters ({'layer_NN': {'w', 'b'}}), optax adam's state and a
    batch; ``step(params, opt_state, x, y) -> (params, opt_state, loss)``,
    jitted with both states donated. With ``mesh_devices``: every state
    array replicated by a NamedSharding over a 1-D mesh ``('data',)``, the
    batch sharded along it."""
    import functools

    import jax
    import jax.numpy as jnp
    import optax

    tx = optax.adam(1e-3)

    def loss_fn(params, x, y):
        h = x
        for k in sorted(params):
            h = jnp.tanh(h @ params[k]["w"] + params[k]["b"])
        return jnp.mean((h - y) ** 2)

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    key = jax.random.key(0)
    params = {f"layer_{i:02d}": {"w": jax.random.normal(jax.random.fold_in(key, i), (width, width)) * 0.1,
                                 "b": jnp.zeros((width,))} for i in range(depth)}
    x, y = jnp.ones((batch, width)), jnp.zeros((batch, width))
    if mesh_devices:
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

        mesh = Mesh(jax.devices()[:mesh_devices], ("data",))
        params = jax.device_put(params, NamedSharding(mesh, P()))
        x, y = (jax.device_put(a, NamedSharding(mesh, P("data"))) for a in (x, y))
    opt_state = tx.init(params)
    box = {"state": (params, opt_state)}

    def call(fn):
        params, opt_state = box.pop("state")
        params, opt_state, loss = fn(params, opt_state, x, y)
        box["state"] = (params, opt_state)
        return loss

    return step, call


def nnx_setup(depth: int = DEPTH, width: int = WIDTH, batch: int = BATCH):
    """A flax.nnx model of ``depth`` Linear layers and its nnx.Optimizer
    (optax adam), trained in place by an ``nnx.jit`` step."""
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx

    class Deep(nnx.Module):
        def __init__(self, rngs):
            for i in range(depth):
                setattr(self, f"l{i:02d}", nnx.Linear(width, width, rngs=rngs))

        def __call__(self, x):
            for i in range(depth):
                x = jnp.tanh(getattr(self, f"l{i:02d}")(x))
            return x

    def loss_fn(model, x, y):
        return jnp.mean((model(x) - y) ** 2)

    @nnx.jit
    def step(model, optimizer, x, y):
        loss, grads = nnx.value_and_grad(loss_fn)(model, x, y)
        optimizer.update(model, grads)
        return loss

    model = Deep(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    x, y = jnp.ones((batch, width)), jnp.zeros((batch, width))
    jax.block_until_ready(step(model, optimizer, x, y))
    return step, (lambda fn: fn(model, optimizer, x, y))


def probe_defaults() -> dict:
    """The jit probe's sampling settings, as jaxmemprof run uses them."""
    import inspect

    from jaxmemprof.capture.jit import JitProbe

    return {k: v.default for k, v in inspect.signature(JitProbe).parameters.items()
            if k in ("sample_first", "sample_every", "max_samples")}


OWNER_PARTS = ("optax_tags", "mesh_facts", "Previous", "Previous.origin", "nnx_owners")


def probe_child(cfg: dict) -> dict:
    """Runs in a fresh process: the owners' work per sampled call."""
    import gc

    from jaxmemprof.capture.jit import JitProbe
    from jaxmemprof.store.writer import RunWriter

    tmp = tempfile.mkdtemp(prefix="jaxmemprof-bench-roles-")
    writer = RunWriter(Path(tmp), {"benchmark": "bench_roles probe"})
    defaults = probe_defaults()
    # Every call sampled, so that each timed call is a sampled one.
    probe = JitProbe(writer, sample_first=10 ** 9, sample_every=1, max_samples=10 ** 9)
    probe.install()  # before jax is imported, as jaxmemprof run does

    import jax

    jax.config.update("jax_num_cpu_devices", MESH_DEVICES)
    import jaxmemprof.capture.jit.owners as owners
    import jaxmemprof.capture.jit.probe as probe_mod

    wall_ns, cpu_ns = time.perf_counter_ns, time.thread_time_ns
    real = {name: getattr(probe_mod, name) for name in ("optax_tags", "mesh_facts", "nnx_owners", "Previous")}
    stubs = {"optax_tags": lambda tu, value: {}, "mesh_facts": lambda a: {}, "nnx_owners": lambda frame: {},
             "Previous": lambda *a: None}

    # Recording: each owners' function's arguments and result during one sampled call, to replay.
    calls: dict = {k: [] for k in OWNER_PARTS}

    def recording(name):
        fn = real[name]

        def wrapper(*a):
            out = fn(*a)
            calls[name].append((a, out))
            return out
        return wrapper

    class RecordingPrevious(owners.Previous):
        __slots__ = ()

        def __init__(self, *a):
            super().__init__(*a)
            calls["Previous"].append((a, None))

        def origin(self, leaf):
            out = super().origin(leaf)
            calls["Previous.origin"].append(((self, leaf), out))
            return out

    recorders = {name: recording(name) for name in ("optax_tags", "mesh_facts", "nnx_owners")}
    recorders["Previous"] = RecordingPrevious

    def replay(repeat: int) -> dict:
        """Each recorded call made again, ``repeat`` times in a loop (the
        clock read once per loop): wall and CPU microseconds per sampled call;
        and whether every result came out the same."""
        fns = {"optax_tags": real["optax_tags"], "mesh_facts": real["mesh_facts"],
               "nnx_owners": real["nnx_owners"], "Previous": owners.Previous,
               "Previous.origin": lambda prev, leaf: owners.Previous.origin(prev, leaf)}
        out = {}
        for name, recorded in calls.items():
            fn = fns[name]
            # nnx_owners keys by id(): the model holds new arrays after the call, under the same paths
            key = (lambda d: sorted(d.values())) if name == "nnx_owners" else (lambda x: x)
            same = all(name == "Previous" or key(fn(*a)) == key(r) for a, r in recorded)
            c0, t0 = cpu_ns(), wall_ns()
            for _ in range(repeat):
                for a, _r in recorded:
                    fn(*a)
            t1, c1 = wall_ns(), cpu_ns()
            out[name] = {"us": (t1 - t0) / repeat / 1e3, "cpu_us": (c1 - c0) / repeat / 1e3,
                         "count": len(recorded), "same": same}
        return out

    def timed(name, fn):
        def wrapper(*a, **k):
            c0, t0 = cpu_ns(), wall_ns()
            try:
                return fn(*a, **k)
            finally:
                parts[name] = (wall_ns() - t0, cpu_ns() - c0)
        return wrapper

    parts: dict = {}
    for name in ("_describe_inputs", "_record_call"):  # one timer each per sampled call
        setattr(probe, name, timed(name, getattr(probe, name)))
    json_bytes, last_row = [], []
    add_jit_call = writer.add_jit_call

    def counting_add(row):
        json_bytes.append(len(row[8]) + len(row[9]))
        last_row[:] = [row]
        return add_jit_call(row)

    writer.add_jit_call = counting_add

    def use(names: dict):
        for name, fn in names.items():
            setattr(probe_mod, name, fn)

    out = {"defaults": defaults, "cases": {}}
    setups = {"adam": lambda: adam_setup(), "adam_mesh": lambda: adam_setup(mesh_devices=MESH_DEVICES),
              "nnx": nnx_setup}
    gc.disable()  # the collector's pauses land on one side or the other
    for case in cfg["cases"]:
        use(real)
        step, call = setups[case]()
        for _ in range(3):  # compile, and the first calls
            jax.block_until_ready(call(step))
        st = probe._states[-1]
        # The owners' functions alone: one sampled call recorded, its calls replayed.
        reps = []
        for _ in range(cfg["replays"]):
            use(recorders)
            jax.block_until_ready(call(step))  # its Previous, whose origin() the next call asks
            for v in calls.values():
                v.clear()
            jax.block_until_ready(call(step))
            use(real)
            reps.append(replay(cfg["repeat"]))
        leaves = leaves_of(last_row[0])
        # The whole sampled call with the owners' functions and with stubs, alternating blocks.
        # And unsampled: the call as the program makes it once the probe has its samples (quiet).
        rows = {"real": [], "stub": [], "unsampled": []}
        for b in range(cfg["blocks"]):
            for mode in (("real", "stub", "unsampled") if b % 2 == 0 else ("unsampled", "stub", "real")):
                use(real if mode != "stub" else stubs)
                probe.max_samples = 0 if mode == "unsampled" else 10 ** 9
                if mode != "unsampled":
                    probe._wake(st)
                # the first call of a block has no previous sampled call (and an unsampled one goes quiet)
                jax.block_until_ready(call(step))
                for _ in range(cfg["calls"]):
                    parts.clear()
                    recorded = len(json_bytes)
                    c0, t0 = cpu_ns(), wall_ns()
                    jax.block_until_ready(call(step))
                    t1, c1 = wall_ns(), cpu_ns()
                    if (len(json_bytes) > recorded) != (mode != "unsampled"):
                        raise RuntimeError(f"{case}: a {mode} call was {'not ' if mode != 'unsampled' else ''}sampled")
                    rows[mode].append({"call": (t1 - t0, c1 - c0), "parts": dict(parts), "json": json_bytes[-1]})
        use(real)
        probe.max_samples = 10 ** 9
        probe._wake(st)
        res = {"input_leaves": len(leaves["inputs"]), "output_leaves": len(leaves["outputs"]),
               "wrapper": st.row.get("wrapper"), "samples": st.samples, "calls": st.calls,
               "owner_example": leaves["example"], "owners": {}}
        for name in OWNER_PARTS:
            got = [r[name] for r in reps if name in r]
            if got and got[0]["count"]:
                res["owners"][name] = {"us": median([g["us"] for g in got]), "cpu_us": median([g["cpu_us"] for g in got]),
                                       "count": got[0]["count"], "same": all(g["same"] for g in got)}
        res["owners_us"] = median([sum(r[n]["us"] for n in r) for r in reps])
        res["owners_cpu_us"] = median([sum(r[n]["cpu_us"] for n in r) for r in reps])
        for mode, rs in rows.items():
            res[mode] = {"call_us": median([r["call"][0] for r in rs]) / 1e3,
                         "call_cpu_us": median([r["call"][1] for r in rs]) / 1e3,
                         "json_bytes": median([r["json"] for r in rs]),
                         "calls": len(rs)}
            if mode == "unsampled":
                continue
            for name in ("_describe_inputs", "_record_call"):
                res[mode][name + "_us"] = median([r["parts"][name][0] for r in rs]) / 1e3
                res[mode][name + "_cpu_us"] = median([r["parts"][name][1] for r in rs]) / 1e3
        out["cases"][case] = res
    gc.enable()
    probe.uninstall()
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def leaves_of(row: tuple) -> dict:
    """A jit_calls row's input and output leaves, and one input leaf as
    recorded (its owners' facts)."""
    ins, outs = json.loads(row[8]), json.loads(row[9])
    example = next((leaf for leaf in ins if leaf.get("tag") or leaf.get("mesh")), ins[0] if ins else {})
    keep = ("owner", "tag", "from", "on", "mesh", "replicated", "shape")
    return {"inputs": ins, "outputs": outs, "example": {k: example[k] for k in keep if k in example}}


def owners_per_call(case: dict) -> tuple[float, float]:
    """(wall, CPU) seconds the owners add to one sampled call: the larger of
    their functions alone and the stubbed difference of the whole call."""
    diff_w = case["real"]["call_us"] - case["stub"]["call_us"]
    diff_c = case["real"]["call_cpu_us"] - case["stub"]["call_cpu_us"]
    return max(case["owners_us"], diff_w) / 1e6, max(case["owners_cpu_us"], diff_c) / 1e6


def bench_probe(res: Results, args, env: dict) -> dict:
    res.say("\n== probe: the owners' work per sampled call ==")
    log("  probe child (compiles three steps) ...")
    cfg = {"cases": ["adam", "adam_mesh", "nnx"], "blocks": args.blocks, "calls": args.calls,
           "replays": 5, "repeat": 20}
    out = child_json([sys.executable, str(Path(__file__).resolve()), "--probe-child", json.dumps(cfg)], env)
    d = out["defaults"]
    most = d["max_samples"]
    res.say(f"probe defaults: sample_first {d['sample_first']}, sample_every {d['sample_every']}, max_samples "
            f"{d['max_samples']}: a function gets at most {most} sampled calls in a run, plus one per further "
            f"signature (and one more for each sample whose leaf the program dropped while the sampler held it)")
    res.say(f"the owners' functions: one sampled call's calls replayed {cfg['repeat']} times, median of "
            f"{cfg['replays']} calls; whole sampled calls: {args.blocks} blocks x {args.calls} calls per side, medians")
    for case, c in out["cases"].items():
        r, s = c["real"], c["stub"]
        res.say(f"{case} ({c['wrapper']}): {c['input_leaves']} input, {c['output_leaves']} output leaves; "
                f"e.g. {json.dumps(c['owner_example'])}")
        for name, p in c["owners"].items():
            res.say(f"    {name:18} {p['us']:8.1f} us  CPU {p['cpu_us']:8.1f} us  ({p['count']} calls"
                    f"{'' if p['same'] else '; replay differed!'})")
            res.add(f"probe_{case}", f"{name}_cpu_us", p["cpu_us"], "us per sampled call")
        res.say(f"  the owners' functions: {c['owners_us']:8.1f} us, CPU {c['owners_cpu_us']:8.1f} us per sampled call")
        dw, dc = r["call_us"] - s["call_us"], r["call_cpu_us"] - s["call_cpu_us"]
        res.say(f"  sampled call (CPU):  {r['call_cpu_us']:8.0f} us with owners, {s['call_cpu_us']:8.0f} us stubbed, "
                f"difference {dc:+.0f} us ({dc / r['call_cpu_us']:+.1%}); _describe_inputs "
                f"{r['_describe_inputs_cpu_us']:.0f} / {s['_describe_inputs_cpu_us']:.0f}, _record_call "
                f"{r['_record_call_cpu_us']:.0f} / {s['_record_call_cpu_us']:.0f}")
        res.say(f"  sampled call (wall): {r['call_us']:8.0f} us with owners, {s['call_us']:8.0f} us stubbed, "
                f"difference {dw:+.0f} us; JSON {r['json_bytes']:.0f} against {s['json_bytes']:.0f} bytes per call")
        u = c["unsampled"]
        res.say(f"  an unsampled call (the probe quiet, as after its samples): {u['call_us']:.0f} us, "
                f"CPU {u['call_cpu_us']:.0f} us; the owners' functions are {c['owners_cpu_us'] / u['call_cpu_us']:.1f} "
                "such calls (CPU)")
        res.add(f"probe_{case}", "unsampled_call_cpu_us", u["call_cpu_us"], "us")
        res.add(f"probe_{case}", "unsampled_call_us", u["call_us"], "us")
        pw, pc = owners_per_call(c)
        res.say(f"  per jitted function per run ({most} sampled calls): {pw * most * 1e3:.1f} ms wall, "
                f"{pc * most * 1e3:.1f} ms CPU (the larger of the functions alone and the stubbed difference)")
        res.add(f"probe_{case}", "owners_us", c["owners_us"], "us per sampled call")
        res.add(f"probe_{case}", "owners_cpu_us", c["owners_cpu_us"], "us per sampled call")
        res.add(f"probe_{case}", "sampled_call_cpu_us", r["call_cpu_us"], "us")
        res.add(f"probe_{case}", "sampled_call_owners_stubbed_cpu_us", s["call_cpu_us"], "us", r["call_cpu_us"],
                s["call_cpu_us"] / r["call_cpu_us"])
        res.add(f"probe_{case}", "stubbed_difference_cpu_us", dc, "us per sampled call")
        res.add(f"probe_{case}", "stubbed_difference_us", dw, "us per sampled call")
        res.add(f"probe_{case}", "json_bytes", r["json_bytes"], "bytes per sampled call", s["json_bytes"],
                r["json_bytes"] / s["json_bytes"] if s["json_bytes"] else None)
        res.add(f"probe_{case}", "per_function_per_run_cpu_ms", pc * most * 1e3, f"ms ({most} sampled calls)")
        res.add(f"probe_{case}", "per_function_per_run_ms", pw * most * 1e3, f"ms ({most} sampled calls)")
    return out


# -- run: against python ------------------------------------------------------------------


def train_child(argv: list[str]) -> None:
    """``--train-child adam [--steps N | --calibrate S]``: the adam loop of
    ``adam_setup`` as a workload (benchmarks/workloads/_common.py's options)."""
    spec = importlib.util.spec_from_file_location("workloads_common", HERE / "workloads" / "_common.py")
    wc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wc)
    sys.argv = [sys.argv[0], *argv[2:]]  # after --train-child CASE
    args = wc.parse_args("the adam loop of bench_roles.py", 2000)
    step, call = adam_setup()

    def run_steps(n):
        loss = None
        for _ in range(n):
            loss = call(step)
        float(loss)

    wc.run(run_steps, args)


def bench_run(res: Results, args, env: dict, probe: dict | None) -> None:
    import jaxmemprof
    from bench_run_overhead import calibrate, measure_pair, timed_run

    res.say("\n== run: jaxmemprof run against python ==")
    me = Path(__file__).resolve()
    start = {"python -c pass": [sys.executable, "-c", "pass"],
             "python workloads/trivial.py": [sys.executable, str(TRIVIAL)]}
    for name, cmd in start.items():
        timed_run(cmd, env)
        ws = [timed_run(cmd, env) for _ in range(args.repeat)]
        w, c = median([x[0] for x in ws]), median([x[1] for x in ws])
        res.say(f"  {name:30} {w:6.3f} s wall, CPU {c:.3f} s (median of {args.repeat})")
        res.add("startup", name, w, "s")
        res.add("startup", name + " cpu", c, "s")
    log("  calibrating the adam loop ...")
    steps = calibrate(me, args.seconds, ["--train-child", "adam"], env)
    # At least enough steps for the step to get all its samples (calls 1 to sample_first + 1, then
    # every sample_every-th up to max_samples).
    d = probe_defaults()
    steps = max(steps, d["sample_every"] * (d["max_samples"] - d["sample_first"] - 1))
    script_args = ["--train-child", "adam", "--steps", str(steps)]
    # One untimed pair; the run directory says what the probe sampled, and its report is timed
    # as the report part's is: a run whose sampled calls carry 605 leaves each.
    timed_run([sys.executable, str(me), *script_args], env)
    tmp = tempfile.mkdtemp(prefix="jmp-bench-roles-")
    try:
        timed_run([sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", tmp, str(me), *script_args], env)
        jit = jaxmemprof.load_run(tmp).jit
        calls, funcs = jit.calls, jit.functions
        names = dict(zip(funcs["function_id"], funcs["name"])) if not funcs.empty else {}
        sampled = calls.groupby("function_id").size().to_dict() if not calls.empty else {}
        step_samples = max((n for f, n in sampled.items() if names.get(f) == "step"), default=0)
        res.say(f"  adam loop: {steps} steps; sampled calls per function in the run: "
                + ", ".join(f"{names.get(f, f)} {n}" for f, n in sampled.items()))
        rep = child_json([sys.executable, str(me), "--report-child", tmp, "--repeat", str(args.repeat)], env)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    t = rep["times"]
    whole_c, part_c = (median([x["cpu"] for x in t[k]]) for k in ("build_report", "roles_part"))
    call_c = median([x["cpu"] for x in t["largest_sampled_call"]])
    res.say(f"  its report ({rep['snapshots']} snapshots, {rep['sampled_calls']} sampled calls of "
            f"{probe_leaf_count(probe)} leaves): build_report {whole_c:.3f} s CPU, the roles' part {part_c:.3f} s "
            f"({part_c / (whole_c - part_c):.1%} added; largest_sampled_call {call_c * 1e3:.0f} ms), "
            f"roles {rep['seen'].get('role_rows')} rows, {rep['seen'].get('owner_rows')} owners")
    res.add("report_adam_loop", "build_report_cpu", whole_c, "s")
    res.add("report_adam_loop", "roles_part_cpu", part_c, "s", whole_c - part_c, part_c / (whole_c - part_c))
    res.add("report_adam_loop", "largest_sampled_call_cpu", call_c, "s", part_c, call_c / part_c)
    plain, ours = measure_pair(me, script_args, args.repeat, env, [])
    pw, rw = median(plain.wall), median(ours.wall)
    pc, rc = median(plain.cpu), median(ours.cpu)
    spread, cspread = max(plain.wall) / min(plain.wall) - 1, max(plain.cpu) / min(plain.cpu) - 1
    res.say(f"  plain  {pw:6.2f} s wall (runs {', '.join(f'{x:.2f}' for x in plain.wall)}), CPU {pc:.2f} s "
            f"(runs {', '.join(f'{x:.2f}' for x in plain.cpu)})")
    res.say(f"  run    {rw:6.2f} s wall (runs {', '.join(f'{x:.2f}' for x in ours.wall)}), CPU {rc:.2f} s "
            f"(runs {', '.join(f'{x:.2f}' for x in ours.cpu)})")
    res.say(f"  run / plain: wall x{rw / pw:.3f}, CPU x{rc / pc:.3f}; difference {rw - pw:+.2f} s wall, "
            f"{rc - pc:+.2f} s CPU; the plain runs' spread {spread:.1%} wall ({max(plain.wall) - min(plain.wall):.2f} s), "
            f"{cspread:.1%} CPU ({max(plain.cpu) - min(plain.cpu):.2f} s)")
    res.add("run", "plain_wall", pw, "s")
    res.add("run", "run_wall", rw, "s", pw, rw / pw)
    res.add("run", "plain_cpu", pc, "s")
    res.add("run", "run_cpu", rc, "s", pc, rc / pc)
    res.add("run", "plain_spread_wall", spread, "max/min - 1")
    res.add("run", "plain_spread_cpu", cspread, "max/min - 1")
    if probe is not None:
        per_w, per_c = owners_per_call(probe["cases"]["adam"])
        own_w, own_c = per_w * step_samples, per_c * step_samples
        dw, dc = max(plain.wall) - min(plain.wall), max(plain.cpu) - min(plain.cpu)
        seen = own_w < dw and own_c < dc
        res.say(f"  the owners' part of this run: {step_samples} sampled calls x {per_w * 1e3:.1f} ms wall "
                f"({per_c * 1e3:.1f} ms CPU) = {own_w * 1e3:.0f} ms wall, {own_c * 1e3:.0f} ms CPU: {own_w / pw:.2%} "
                f"of the plain run's wall, {own_c / pc:.2%} of its CPU; the plain runs differ by {dw:.2f} s wall, "
                f"{dc:.2f} s CPU: {'below' if seen else 'NOT below'} what this measurement can see")
        res.add("run", "owners_part_wall", own_w, "s", pw, own_w / pw, "< plain runs' spread", own_w < dw)
        res.add("run", "owners_part_cpu", own_c, "s", pc, own_c / pc, "< plain runs' spread", own_c < dc)


def probe_leaf_count(probe: dict | None) -> str:
    c = (probe or {}).get("cases", {}).get("adam")
    return f"{c['input_leaves']} + {c['output_leaves']}" if c else "303 + 302"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, metavar="K",
                    help="timed rounds of each report case and runs of each command (default 3)")
    ap.add_argument("--only", choices=("report", "probe", "run"), default=None, help="run one part only")
    ap.add_argument("--rerecord", action="store_true", help="record the 1,000 x 10,000 run again")
    ap.add_argument("--run", type=Path, default=None,
                    help="time the report part on this recorded run instead (a quick try; the target needs 1,000 x 10,000)")
    ap.add_argument("--seconds", type=float, default=3.0, help="length of the plain training run (default 3)")
    ap.add_argument("--blocks", type=int, default=4, help="blocks of sampled calls per side (default 4)")
    ap.add_argument("--calls", type=int, default=8, help="sampled calls per block (default 8)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT,
                    help=f"CSV file (default {DEFAULT_OUT.relative_to(REPO)})")
    ap.add_argument("--report-child", metavar="RUN", help=argparse.SUPPRESS)
    ap.add_argument("--probe-child", metavar="JSON", help=argparse.SUPPRESS)
    ap.add_argument("--train-child", metavar="CASE", help=argparse.SUPPRESS)
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--train-child":
        train_child(sys.argv[1:])  # its own options (workloads/_common.py)
        return 0
    args = ap.parse_args(argv)
    if args.report_child:
        print(json.dumps(report_child(args.report_child, args.repeat)))
        return 0
    if args.probe_child:
        print(json.dumps(probe_child(json.loads(args.probe_child))))
        return 0
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")

    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"
    env.pop("NO_COLOR", None)
    res = Results()
    t0 = time.perf_counter()
    from importlib.metadata import version

    res.say(f"date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    res.say(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}")
    res.say(f"python {sys.version.split()[0]}, jax {version('jax')}, optax {version('optax')}, "
            f"flax {version('flax')}; jaxmemprof {git_state()}")
    res.say(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    probe = None
    if args.only in (None, "report"):
        bench_report(res, args, env)
    if args.only in (None, "probe", "run"):
        probe = bench_probe(res, args, env)
    if args.only in (None, "run"):
        bench_run(res, args, env, probe)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(res.rows)
    res.say(f"\nload average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    res.say(f"wrote {args.out} ({time.perf_counter() - t0:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

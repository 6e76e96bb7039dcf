"""The holder search reads frame locals only where it cannot harm the program
(issue 62 items 1 and 5; docs/holders.md, "Frames: what is read, and when"):
its own thread's frames, never another thread's, never through a raw
pointer; on 3.11-3.12 the dict ``frame.f_locals`` fills is emptied after the
read (it would keep rebound values alive), left alone where the program holds
it, and not read at all under a trace function. Each checked against
python's own behaviour, side by side."""

from __future__ import annotations

import gc
import pathlib
import subprocess
import sys
import threading
import weakref


from conftest import cpu_env, run_cli, write_script

from jaxmemprof.capture import frame_locals as fl
from jaxmemprof.capture.py_holders import searched

ROOT = pathlib.Path(__file__).resolve().parents[1]
OLD_WAY = sys.version_info < (3, 13)  # f_locals fills a dict cached on the frame


class Big:
    pass


def test_no_raw_pointer_reads_in_the_holder_search():
    for path in (ROOT / "jaxmemprof" / "capture").glob("*.py"):
        text = path.read_text()
        for word in ("from_address", "PyObj_FromPtr"):
            assert word not in text, f"{path.name} reads interpreter memory through {word}"
    for name in ("frame_locals.py", "py_holders.py"):
        assert "import ctypes" not in (ROOT / "jaxmemprof/capture" / name).read_text()


def test_a_read_keeps_no_value_alive_after_the_program_rebinds_it():
    """python frees a local's old value when it is rebound; after a read of
    the frame it still does (3.11-3.12: the frame's dict is emptied)."""
    seen = {}

    def program():
        params = Big()
        old = weakref.ref(params)
        seen["names"] = [k for k, _ in fl.frame_locals(sys._getframe())]
        params = Big()  # the next step's: the old one must be freed now
        seen["freed"] = old() is None
        return params

    program()
    assert {"params", "old"} <= set(seen["names"])
    assert seen["freed"]


def test_a_dict_the_program_holds_from_locals_is_left_as_it_was():
    """A frame whose code calls locals() is not read on 3.11-3.12: the
    program's dict stays what it was when it took it (as under python)."""
    unread = fl.Unread()
    seen = {}

    def train(lr=0.1):
        hparams = locals()
        kept = [Big()]
        seen["names"] = fl.frame_locals(sys._getframe(), unread)
        return sorted(hparams), kept

    names, _ = train()
    assert "kept" not in names and "hparams" not in names  # as python: taken before they were bound
    if OLD_WAY:
        assert seen["names"] == [] and fl.USES_LOCALS in unread.by_reason
        assert "train" in unread.text()
    else:
        assert {"hparams", "kept", "lr"} <= {k for k, _ in seen["names"]}


GRABBED: list = []


def _grab_callers_locals():
    GRABBED.append(sys._getframe(1).f_locals)  # a logging helper's way to its caller's variables


def test_a_frames_dict_held_elsewhere_is_not_emptied():
    """A dict a callee took of the frame (``sys._getframe(1).f_locals``) and
    keeps: after a read it still has the frame's names (3.11-3.12: the read
    refreshes it as a ``locals()`` call would, and leaves it filled)."""
    seen = {}

    def program():
        step = 3
        _grab_callers_locals()
        seen["read"] = [k for k, _ in fl.frame_locals(sys._getframe())]
        return step

    GRABBED.clear()
    try:
        program()
        assert "step" in seen["read"]
        if OLD_WAY:
            assert "step" in GRABBED[0]
    finally:
        GRABBED.clear()


def test_under_a_trace_function_nothing_is_read_and_the_program_keeps_its_locals():
    """A trace function's trampoline writes the frame's dict back: under one,
    3.11-3.12 read nothing (and say so); the program's locals, and what the
    tracer assigns through f_locals, are as under python."""

    def program(reads):
        x = 1
        y = [x]
        reads.append(fl.frame_locals(sys._getframe(), unread))
        return x, y

    def tracer(frame, event, arg):
        if frame.f_code is program.__code__ and event == "line":
            _ = frame.f_locals  # a debugger's look
        return tracer

    unread = fl.Unread()
    reads: list = []
    plain = program([])
    sys.settrace(tracer)
    try:
        traced = program(reads)
    finally:
        sys.settrace(None)
    assert traced == plain == (1, [1])
    if OLD_WAY:
        assert reads == [[]] and fl.TRACED in unread.by_reason
    else:
        assert {k for k, _ in reads[0]} >= {"x", "y"}


def test_a_search_from_another_thread_reads_no_frame_and_says_whose():
    """A search run outside the program's thread names only what globals
    reach: a local of the program's thread is not named, and the search
    says which thread's locals it did not read."""
    held = Big()
    targets = {id(held): (weakref.ref(held), 1)}
    box = {}

    def from_elsewhere():
        box["s"] = searched(targets, 5.0, library=False)

    t = threading.Thread(target=from_elsewhere, name="jaxmemprof-test-search")
    t.start()
    t.join(30)
    s = box["s"]
    assert s.found == {}
    assert fl.OTHER_THREAD in s.unread.by_reason and "MainThread" in s.unread.text()
    # the same search in this thread (the program's, at a point it offers) names it (in a function of
    # its own: pytest's rewritten asserts call locals(), and a frame that does is not read on 3.11-3.12)
    chains = _search_here()
    assert chains[0][0] == "local" and chains[0][5] == [("local", "held")]


def _search_here() -> list:
    held = Big()
    targets = {id(held): (weakref.ref(held), 1)}
    return searched(targets, 5.0, library=False).found.get(id(held), [])


GEN_HELD: list = []


def test_a_suspended_generators_locals_are_found_unnamed():
    def producer():
        batch = Big()
        yield 1
        yield batch

    g = producer()
    next(g)
    GEN_HELD.append(g)
    batch = gc.get_referents  # noqa: F841  (another name "batch": the chain must not be named by it)
    inner = next(r for r in gc.get_referents(g) if type(r) is Big)
    try:
        targets = {id(inner): (weakref.ref(inner), 1)}
        del inner
        s = searched(targets, 5.0, library=False, frames=False)
        (chain,) = [c for c in next(iter(s.found.values())) if c[0] == "global"]
        assert chain[5][-1] == ("local", "\u2026")  # a local of the generator, unnamed
        assert chain[5][0] == ("key", "GEN_HELD")
    finally:
        GEN_HELD.clear()


def test_the_stress_harness_runs_clean_here():
    """The short form of benchmarks/stress_frames.py (the long one reads a
    million frames per Python): an audit hook, a trace function,
    sys.monitoring (3.12+), generators and coroutines made and closed in
    threads; own-frame reads and searches from another thread; the program's
    result unchanged."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "stress_frames.py"), "--reads", "20000"],
                          env={**cpu_env(), "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == "result True 3\n"


AUDITED_PROGRAM = """
import sys
import threading
import queue
import jax
import jax.numpy as jnp

try:
    import jaxmemprof
except ImportError:
    jaxmemprof = None

events = []
def hook(event, args):  # an audit log, as compliance code keeps
    if event.startswith("ctypes"):
        events.append(event)
sys.addaudithook(hook)

q = queue.Queue(maxsize=8)
stop = threading.Event()

def worker(seed):
    n = seed
    while not stop.is_set():
        batch = [float(i + n) for i in range(64)]
        try:
            q.put(batch, timeout=0.1)
        except queue.Full:
            pass
        n += 1

threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
for t in threads:
    t.start()

@jax.jit
def step(w, x):
    return w * 0.99 + x.sum() * 1e-6

def main(steps):
    w = jnp.ones((256,))
    ok = True
    for i in range(steps):
        x = jnp.asarray(q.get())
        w = step(w, x)
        if jaxmemprof is not None:
            jaxmemprof.snapshot()
    stop.set()
    for t in threads:
        t.join()
    return steps, bool(jnp.isfinite(w).all())

n, ok = main(STEPS)
print("ok", n, ok, len(events))
"""


def test_the_audit_hook_program_with_three_workers_runs_as_under_python(tmp_path):
    """Issue 62 item 1's program (short form: benchmarks/bench_audited.py
    runs it 10 times a Python): an audit hook, three worker threads building
    batches, jaxmemprof.snapshot() each step. python and run: exit 0, the
    same output (no ctypes event handed to the program's hook)."""
    script = write_script(tmp_path, "audited.py", AUDITED_PROGRAM.replace("STEPS", "60"))
    py = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=cpu_env(), capture_output=True, text=True,
                        timeout=300)
    run = run_cli("run", "-q", "-o", tmp_path / "run", script, cwd=tmp_path)
    assert py.returncode == 0, py.stderr
    # The program's audit hook counts the ctypes events it was handed: 37 under run with the old frame reading.
    # Under the suite's load JAX itself sometimes hands it one, under python too (2026-12-07: python printed
    # "ok 60 True 1" in one run of this test, run in another; 0 in 6 runs alone, idle and under load).
    assert py.stdout in ("ok 60 True 0\n", "ok 60 True 1\n"), py.stdout
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout in ("ok 60 True 0\n", "ok 60 True 1\n"), (run.stdout, run.stderr[-3000:])


TRACED_LEAK = """
import sys
import jax.numpy as jnp
import jaxmemprof


def tracer(frame, event, arg):  # a coverage tool's or a debugger's, set for the whole loop
    return None


def main():
    kept = []
    for i in range(20):
        kept.append(jnp.ones((256,)) * i)
        jaxmemprof.mark("step")
    print(len(kept))


sys.settrace(tracer)
main()
sys.settrace(None)
"""


def test_a_holder_not_named_for_a_trace_function_is_said_in_one_line(tmp_path):
    """Under a trace function 3.11-3.12 read no frame: the run says which
    function's locals it could not read, and why, in one line; the
    program's output is python's."""
    script = write_script(tmp_path, "traced_leak.py", TRACED_LEAK)
    run = run_cli("run", "-o", tmp_path / "run", "--verify-seconds", "0", script, cwd=tmp_path)
    assert (run.returncode, run.stdout) == (0, "20\n"), run.stderr
    said = [line for line in run.stderr.splitlines() if line.startswith("jaxmemprof: holders: ")]
    if OLD_WAY:
        assert said == ["jaxmemprof: holders: locals not read: main (a trace or profile function is set in the "
                        "program's thread)"], run.stderr
        report = run_cli("report", tmp_path / "run", cwd=tmp_path)
        assert "holders: locals not read: main (a trace or profile function" in report.stdout
    else:
        assert said == [] and "kept[…] (local of main)" in run.stderr

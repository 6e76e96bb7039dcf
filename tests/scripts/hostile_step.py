"""A training step whose Python, traced again after the program's end, meets
what the end phase must survive (tests/test_rerun.py). argv[1] names it:

- lock-with: a daemon thread keeps a registry, holding a lock (``with``)
  while it writes, sleeping meanwhile; the step appends its shapes to the
  registry under the same lock whenever it is traced.
- lock-held: the same, the lock taken by ``acquire()`` and held for a
  second at a time (parking cannot see it).
- loop: once the program is over, a trace of the step never returns (a
  loop with no call in it).
- thread: once the program is over, a trace of the step starts a thread
  that prints a line every 0.1 s for 3 s.
- fdwrite: each trace of the step writes a line to a log descriptor the
  program opened (argv[2]); once the program is over, so does a trace.
- settrace: the program sets threading.settrace and threading.setprofile
  with functions that read ``__file__`` (gone once the script is over) and
  runs a worker thread; the step is plain.
- settrace-all (3.12 and later): the same through
  threading.settrace_all_threads and setprofile_all_threads (every thread
  running then, the main one and jaxmemprof's sampler included).
- monitoring (3.12 and later): the program registers a sys.monitoring tool
  that records the names of the threads it sees functions start in, and
  prints them at exit.
"""

import os
import sys
import threading
import time

import jax
import jax.numpy as jnp

MODE = sys.argv[1]
LOG = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_APPEND) if MODE == "fdwrite" else None
OVER = False  # the program's end: set last
LOCK = threading.Lock()
REGISTRY: list = []


def keeper():
    while True:
        if MODE == "lock-with":
            with LOCK:
                REGISTRY.append(("keeper", len(REGISTRY)))
                time.sleep(0.05)
            time.sleep(0.01)
        else:
            LOCK.acquire()
            REGISTRY.append(("keeper", len(REGISTRY)))
            time.sleep(1.0)
            LOCK.release()
            time.sleep(0.001)


def chatter():
    for i in range(30):
        print(f"chatter {i} from a thread the re-trace started", flush=True)
        time.sleep(0.1)


def step(params, x):
    if MODE.startswith("lock"):
        with LOCK:
            REGISTRY.append(("step", x.shape))
    if MODE == "fdwrite":
        os.write(LOG, f"traced at {x.shape}\n".encode())
    if OVER and MODE == "loop":
        n = 0
        while n >= 0:
            n += 1
    if OVER and MODE == "thread":
        threading.Thread(target=chatter, daemon=True).start()

    def loss(w):
        return (jnp.tanh(x @ w) ** 2).mean()

    value, grads = jax.value_and_grad(loss)(params)
    return params - 0.01 * grads, value


def tracer(frame, event, arg):
    __file__  # noqa: B018  (a NameError once the script is over: its __main__ has no __file__ then)
    return None


SEEN: set = set()


def main():
    global OVER
    if MODE.startswith("lock"):
        threading.Thread(target=keeper, daemon=True).start()
    if MODE == "settrace":
        threading.settrace(tracer)
        threading.setprofile(lambda frame, event, arg: __file__)
    if MODE == "settrace-all":
        threading.settrace_all_threads(tracer)
        threading.setprofile_all_threads(lambda frame, event, arg: __file__)
    if MODE.startswith("settrace"):
        worker = threading.Thread(target=lambda: sum(range(1000)))
        worker.start()
        worker.join()
    if MODE == "monitoring":
        mon = sys.monitoring
        mon.use_tool_id(3, "hostile-step")
        mon.register_callback(3, mon.events.PY_START, lambda code, offset: SEEN.add(threading.current_thread().name))
        mon.set_events(3, mon.events.PY_START)
    f = jax.jit(step)
    params = jnp.ones((64, 256)) * 0.01
    x = jnp.ones((32, 64))
    for _ in range(4):
        params, value = f(params, x)
    time.sleep(0.3)
    print(f"loss {float(value):.6f}", flush=True)
    if MODE == "monitoring":
        sys.monitoring.set_events(3, 0)
        print("threads seen:", ", ".join(sorted(SEEN)))
    OVER = True


main()
print("done", flush=True)

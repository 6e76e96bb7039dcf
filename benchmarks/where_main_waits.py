"""Where the program's own thread spends its time under ``jaxmemprof run``:
a wall-clock sampler of the main thread's stack (every 2 ms), run in the same
process as ``run`` and its script, printing the innermost jaxmemprof function
of each sample (and where the sample had none: the script's own time).

    python benchmarks/where_main_waits.py OUT.txt -- run -q -o RUNDIR script.py ARGS...

Used on the TPU lane (benchmarks/tpu/lane.sh: gpt8-where) to see what of
jaxmemprof's runs in the program's thread between its steps' dispatches.
"""

from __future__ import annotations

import atexit
import collections
import sys
import threading
import time

PERIOD_S = 0.002


# jaxmemprof's frames that run the program (its code then is the program's own).
RUNS_THE_PROGRAM = ("capture/target.py:", "capture/hooks.py:", "capture/runner.py:", "cli/")


def _where(names: list) -> str:
    """One sample's account: jaxmemprof's work on top of the stack (the
    innermost run of its frames: where it was entered > where it is), or
    someone else's code (the program, JAX, python) under jaxmemprof's
    nearest frame that is not the one running the program."""
    if names and names[0] is not None:
        block = []
        for name in names:
            if name is None:
                break
            block.append(name)
        return f"jaxmemprof: {block[-1]} > {block[0]}" if len(block) > 1 else f"jaxmemprof: {block[0]}"
    under = next((n for n in names if n is not None and not n.startswith(RUNS_THE_PROGRAM)), None)
    return f"other code, under {under}" if under else "other code (the program's own)"


def main() -> None:
    out, sep, *args = sys.argv[1:]
    assert sep == "--", __doc__
    main_ident = threading.main_thread().ident
    counts: collections.Counter = collections.Counter()
    started = time.perf_counter()
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(PERIOD_S):
            frame = sys._current_frames().get(main_ident)
            names = []  # innermost first: jaxmemprof's module:function, or None for anyone else's code
            top = True
            while frame is not None:
                code = frame.f_code
                ours = "/jaxmemprof/" in code.co_filename and "/benchmarks/" not in code.co_filename
                # The top frame's line too: a C function it calls (a jitted function's C++ call) has no frame.
                line = f":{frame.f_lineno}" if top else ""
                names.append(f"{code.co_filename.rsplit('/jaxmemprof/', 1)[1]}:{code.co_name}{line}" if ours else None)
                frame, top = frame.f_back, False
            counts[_where(names)] += 1

    def dump() -> None:
        stop.set()
        total = sum(counts.values()) or 1
        with open(out, "w") as f:
            f.write(f"{total} samples of the main thread every {PERIOD_S * 1e3:.0f} ms over "
                    f"{time.perf_counter() - started:.1f} s\n")
            for where, n in counts.most_common(40):
                f.write(f"{n * PERIOD_S:8.2f} s  {100 * n / total:5.1f} %  {where}\n")

    # A jaxmemprof- thread: the run's parking of the program's threads leaves it running.
    threading.Thread(target=sample, name="jaxmemprof-where", daemon=True).start()
    atexit.register(dump)
    from jaxmemprof.cli import main as cli

    try:
        cli(args, prog_name="jaxmemprof")
    finally:
        dump()


if __name__ == "__main__":
    main()

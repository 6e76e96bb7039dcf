"""A reading command's long work said as it goes (issue 54, item 4): past
``AFTER_S`` seconds, on a terminal, one line on stderr, redrawn once a
second and cleared at the end: the command, its phase (n of N), the
seconds so far; off a terminal, one closing line where the command took
over ``AFTER_S`` seconds of CPU (CPU, not wall: a loaded machine does not
make a quick command say it), with each phase's seconds. Never on stdout.
$JAXMEMPROF_PROGRESS_AFTER sets another threshold (seconds; the tests' 0).
"""

from __future__ import annotations

import os
import threading
import time

AFTER_S = 2.0


def _after() -> float:
    try:
        return max(0.0, float(os.environ.get("JAXMEMPROF_PROGRESS_AFTER", AFTER_S)))
    except ValueError:
        return AFTER_S


class Phases:
    """``with Phases("report", ["reading the run", ...]) as p: p.step(); ...``
    (``step()`` moves on to the next phase)."""

    def __init__(self, command: str, phases: list):
        from jaxmemprof.cli.base import isatty, stderr_stream

        self.command, self.phases = command, list(phases)
        self.index = 0
        self.t0, self.cpu0 = time.monotonic(), time.process_time()
        self.marks = [self.t0]
        stream = stderr_stream()
        self.fd: int | None = None  # stderr's, where it is a terminal: the phases are drawn there
        try:
            if stream is not None and isatty(stream):
                self.fd = stream.fileno()
        except (AttributeError, OSError, ValueError):
            self.fd = None
        self.shown = False
        self.after = _after()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def __enter__(self):
        if self.fd is not None:
            self._thread = threading.Thread(target=self._tick, name="jaxmemprof-progress", daemon=True)
            self._thread.start()
        return self

    def step(self) -> None:
        with self._lock:
            self.index = min(self.index + 1, len(self.phases) - 1)
            self.marks.append(time.monotonic())
            if self.shown:
                self._draw()

    def _tick(self) -> None:
        if self._stop.wait(self.after):
            return
        while True:
            with self._lock:
                self._draw()
            if self._stop.wait(1.0):
                return

    def _draw(self) -> None:
        text = (f"\r\x1b[Kjaxmemprof {self.command}: {self.phases[self.index]} ({self.index + 1} of "
                f"{len(self.phases)}; {time.monotonic() - self.t0:.0f} s)...")
        self._write(text)
        self.shown = True

    def _write(self, text: str) -> None:
        assert self.fd is not None  # drawn only by the thread __enter__ starts where there is one
        try:
            os.write(self.fd, text.encode("utf-8", "replace"))
        except OSError:
            pass

    def __exit__(self, kind, exc, tb):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        with self._lock:
            if self.shown:
                self._write("\r\x1b[K")
                self.shown = False
        if kind is None and self.fd is None and time.process_time() - self.cpu0 >= self.after:
            from jaxmemprof.cli.base import say

            now = time.monotonic()
            marks = self.marks + [now]
            parts = ", ".join(f"{name} {b - a:.1f} s" for name, a, b in zip(self.phases, marks, marks[1:]))
            say(f"jaxmemprof {self.command}: {now - self.t0:.1f} s ({parts})")
        return False

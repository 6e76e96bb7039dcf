"""Operations run outside jit, as JAX compiles them (docs/advice.md, "What
the true peak does not count").

An operation outside any jitted function (``jnp.dot(x, w)`` on arrays,
``predict`` called unjitted) runs as a small jitted function of JAX's own,
through its C++ dispatch, which no Python hook sees call by call. What such
operations hold beside their inputs, between two snapshots, is seen only
where a snapshot falls: a program whose peak is one (an accuracy pass over
the whole data set, unjitted) has it found or not as sampling falls. What
the probe does see is JAX's compile of each such operation (a
``/jax/core/compile/backend_compile_duration`` event outside a call of a
function it probes, in the program's thread): kept here with the user's
line that ran it, so that the report can say which operations ran outside
jit and where, and that what they held is not counted."""

from __future__ import annotations

import json
import sys
import time

from jaxmemprof.capture.jit.frames import user_frame
from jaxmemprof.capture.threads import is_ours

EVENT = "outside-jit"  # the journal's events row (its message: JSON, ``OutsideJit.flush``)
_KEPT = 64  # compiles kept with their line; the rest counted


class OutsideJit:
    """JAX's compiles of operations run outside jit (``compiled``), written
    at the end as one event (``flush``)."""

    def __init__(self):
        self.count = 0
        self.kept: list = []

    def compiled(self, fun_name: str, probed: set, calls: int) -> None:
        """A compile outside a probed call: ``fun_name`` as JAX says it
        (``jit(dot)``); not one of ``probed`` (the names of the functions the
        probe sees, whose compile came outside a call it followed), nor in a
        thread of jaxmemprof's own; ``calls``: the user's jitted calls seen
        before it."""
        name = fun_name[4:-1] if fun_name.startswith("jit(") and fun_name.endswith(")") else fun_name
        if name in probed or is_ours():
            return
        self.count += 1
        if len(self.kept) >= _KEPT:
            return
        f = user_frame(sys._getframe(1))
        self.kept.append({"t": time.time(), "op": name.lstrip("_"), "calls_before": calls,
                          "file": f.f_code.co_filename if f is not None else None,
                          "line": f.f_lineno if f is not None else None,
                          "function": f.f_code.co_name if f is not None else None})

    def flush(self, writer, calls: int) -> None:
        """One event: the compiles counted and kept, and the user's jitted calls seen in all (``calls``)."""
        if self.count:
            writer.add_event(EVENT, json.dumps({"count": self.count, "calls": calls, "compiles": self.kept}))

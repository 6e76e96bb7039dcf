"""``run --target v5e:2x2``: the program's step compiled for a TPU slice that
is not there, at the end of the run, from its recorded arguments' shapes
(plan.Abstract: no array is allocated), with libtpu's deviceless topology
(``jax.experimental.topologies.get_topology_desc``), and XLA's TPU figures
written to ``jit_targets`` beside the run's own (plan.Planner._plan_one
does the compiling, the same way for the run's backend and for a target).

The arguments keep their shardings, moved onto the target's devices: an
array on one device goes to the slice's first device (a single-device
program runs on one chip); one sharded by ``NamedSharding`` over a mesh of
N devices goes to a mesh of the same shape and axis names made of the
slice's devices, which must number N (else the target is not compiled,
and the slices that would fit the mesh are named). Other shardings (a
``jax.pmap`` step's, ``PositionalSharding``) are not mapped.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from dataclasses import dataclass

from jaxmemprof.capture.threads import OwnThread
from jaxmemprof.facts.tpus import slices_of, topology, usable_bytes


@dataclass
class Slice:
    """One slice to compile for: its name, its devices (libtpu's), and the
    largest per-device peak that fits one of them."""

    name: str
    devices: list
    fit_peak_bytes: int

    def moved(self, jax, ab):
        """The flat arguments of ``ab`` (plan.Abstract) with every array's
        sharding moved onto this slice's devices, and the devices the call
        then runs on (their names); or why it cannot be (a string)."""
        import numpy as np
        from jax.sharding import Mesh, NamedSharding, SingleDeviceSharding

        meshes: dict = {}
        flat, used = [], set()
        for x in ab.flat:
            s = getattr(x, "sharding", None) if isinstance(x, jax.ShapeDtypeStruct) else None
            if s is None:
                flat.append(x)
                continue
            if isinstance(s, SingleDeviceSharding) or len(s.device_set) == 1 and not isinstance(s, NamedSharding):
                moved = SingleDeviceSharding(self.devices[0])
            elif isinstance(s, NamedSharding):
                size = int(s.mesh.devices.size)
                if size == 1:
                    moved = SingleDeviceSharding(self.devices[0])
                elif size != len(self.devices):
                    fit = slices_of(size)
                    return (f"the program's mesh has {size} devices and {self.name} has {len(self.devices)}: "
                            + (f"name a slice of {size} devices ({', '.join(fit)})" if fit else
                               f"no slice this knows has {size} devices (the slices rented have 1, 4, 8, 16, ... "
                               f"chips; a v4 chip is 2 devices): record the program on a mesh of 4 or more"))
                else:
                    key = (tuple(s.mesh.devices.shape), tuple(s.mesh.axis_names))
                    mesh = meshes.get(key)
                    if mesh is None:
                        mesh = meshes[key] = Mesh(np.array(self.devices).reshape(key[0]), key[1])
                    moved = NamedSharding(mesh, s.spec)
            else:
                return f"an input sharded by {type(s).__name__} is not moved onto a target (NamedSharding is)"
            used.update(moved.device_set)
            flat.append(jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=moved,
                                             weak_type=bool(getattr(x, "weak_type", False))))
        # The slice's devices the call runs on (the live bytes outside the call stay the run's devices':
        # the analysis adds its busiest device's to each of these).
        return flat, [str(d) for d in self.devices if d in used] or [str(self.devices[0])]


class _Log:
    text = ""


# libtpu's own lines on file descriptor 2 as it starts (its C++ logging, and
# jax's warnings that no TPU host is named); every other line is the program's.
# A line of the program's written in two parts (a print's text, then its
# newline) can have one of libtpu's in between: what comes before the marker
# is the program's.
_LIBTPU_LINE = re.compile(rb"[EWIF]\d{4} \d\d:\d\d:[\d.]+ +\d+ [\w.]+:\d+\]|WARNING: Logging before InitGoogle|"
                          rb"=== Source Location Trace|learning/[0-9a-f]+/|Failed to find host bounds for accelerator|"
                          rb"WARNING: could not determine TPU")


@contextlib.contextmanager
def libtpu_log():
    """libtpu's own lines while it runs, kept in ``.text`` for the journal
    instead of the program's stderr: file descriptor 2 goes through a pipe
    whose reader keeps libtpu's lines and writes every other line (a thread
    of the program still running) on to the real stderr as it comes."""
    log = _Log()
    sys.stderr.flush()
    try:
        saved = os.dup(2)
        read_end, write_end = os.pipe()
    except OSError:  # no descriptor 2, or none left: nothing to keep apart
        yield log
        return
    kept: list = []

    def pump():
        with os.fdopen(read_end, "rb") as lines:
            for line in lines:
                m = _LIBTPU_LINE.search(line)
                theirs = line[m.start():] if m else b""
                ours = line[:m.start()] if m else line
                if theirs:
                    kept.append(theirs)
                if ours:
                    try:
                        os.write(saved, ours)
                    except OSError:
                        pass

    os.dup2(write_end, 2)
    os.close(write_end)
    reader = OwnThread(pump, "jaxmemprof-libtpu-log")
    reader.start()
    try:
        yield log
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # the pipe's last writer gone: the reader sees its end
        reader.join(timeout=5)
        if not reader.is_alive():
            os.close(saved)
        log.text = b"".join(kept).decode("utf-8", "replace").strip()


def targets(names: list) -> tuple[list, list]:
    """The slices ``names`` as Targets, and (name, why) of those libtpu
    refuses (a shape it cannot lay out)."""
    # A deviceless compile opens no TPU, so libtpu's lock on one (/tmp/libtpu_lockfile: one process
    # at a time) guards nothing here; without this, two runs with --target at once (a test suite's
    # workers, two jobs of a CI) would refuse each other's slices. Set after the program has ended.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

    out, refused = [], []
    for name in names:
        try:
            topo = topology(name)  # libtpu loaded with no log file of its own (tpus.py)
        except Exception as exc:
            refused.append((name, f"{type(exc).__name__}: {exc}".splitlines()[0][:500]))
            continue
        out.append(Slice(name, list(topo.devices), usable_bytes(name)))
    return out, refused

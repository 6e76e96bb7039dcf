"""TPU slices a run can compile its step for without the hardware (``run
--target v5e:2x2``): the names accepted, and each chip's memory.

A name is ``GENERATION:SHAPE``, the shape in chips along each axis of the
slice (``v5e:2x2``, ``v4:2x2x1``), as ``jax.experimental.topologies.
get_topology_desc(topology_name=..., platform="tpu")`` takes it. libtpu
lays a slice out on hosts of 2x2x1 chips unless told otherwise, and refuses
a shape that is not a whole number of them ("Topology layout "v5e:1x1" is
not divisible by the given (or default) chips_per_host_bounds "2x2x1""):
yet a single v5e or v6e chip is the commonest rental, and a v5e-8 or v6e-8
is one host of 2x4 chips. ``topology`` therefore names the host's chips
(``chips_per_host_bounds``, a sequence of three ints: libtpu refuses a
string) for a slice that is one host: a v5e or v6e slice of at most 8 chips
(Google Cloud's ct5lp-hightpu-1t/4t/8t and ct6e-standard-1t/4t/8t machines:
1x1, 2x2, 2x4), a v4 or v5p slice of at most 4; a larger slice keeps libtpu's
hosts of 2x2x1 (a v5e-16 is four hosts of 2x2). The per-chip figures do not
depend on the layout (libtpu 0.0.42.1, a small step: v5e:1x1's
``memory_analysis()`` is v5e:2x2's, v5e:2x4's and v5e:4x4's, byte for byte;
v6e:1x1's is v6e:2x2's). A shape libtpu still refuses is said when the step
is compiled.

Each chip's HBM is Google Cloud's published figure (cloud.google.com/tpu/docs:
v4 32 GiB, v5e 16, v5p 95, v6e 32). What XLA may use of one device is XLA:TPU's
own figure, as its out-of-memory message prints it for a deviceless compile
too large for the device ("exceeds available HBM (15.75G)"; libtpu 0.0.42.1,
measured here: docs/targets.md): a v5e's 15.75 GiB, a v6e's 31.25 (exactly
33,550,237,696 B, its ``memory_stats()['bytes_limit']`` on a real v6e:
vllm-project/vllm #16211), a v5p's 95.74, a v4 device's 15.25 (a v4 chip is
two devices here). The message rounds to 0.01 GiB: each figure is good to
5 MiB.

libtpu writes log files as it starts (``/tmp/tpu_logs/tpu_driver.*``: an INFO
and a WARNING file a process, named by its pid) unless told otherwise, and a
``--target`` run is often the first to load it in the process (a program
run with ``JAX_PLATFORMS=cpu`` never does): ``topology`` loads it with
``TPU_MIN_LOG_LEVEL=3`` (only a fatal error logged), which writes no file
and leaves its lines on stderr as they were. Measured with libtpu 0.0.42.1:
``TPU_LOG_DIR`` only moves the files (to ``$TMPDIR`` where the directory
cannot be used; ``disabled`` is no value it knows), ``--logtostderr`` in
``LIBTPU_INIT_ARGS`` also writes none but is the program's own variable. A
program that loaded libtpu itself (a TPU backend tried under plain python)
wrote its files then, as under python; libtpu reads these variables once,
as it starts.
"""

from __future__ import annotations

import importlib.util
import os
import re

from jaxmemprof.units import GiB

# generation -> (device_kind JAX names, HBM per chip in bytes, devices JAX makes of one chip,
#                what XLA:TPU may use of one device, in bytes)
CHIPS = {
    "v4": ("TPU v4", 32 * GiB, 2, int(15.25 * GiB)),
    "v5e": ("TPU v5 lite", 16 * GiB, 1, int(15.75 * GiB)),
    "v5p": ("TPU v5", 96 * GiB, 1, int(95.74 * GiB)),  # published as 95 (GB); XLA:TPU has 95.74 GiB of it
    "v6e": ("TPU v6 lite", 32 * GiB, 1, 33_550_237_696),
}
# What XLA:TPU says when a step's temporaries alone exceed a device: it does not fit.
OUT_OF_MEMORY = "RESOURCE_EXHAUSTED"
_NAME = re.compile(r"^(v[0-9a-z]+):([1-9][0-9]*)x([1-9][0-9]*)(?:x([1-9][0-9]*))?$")
EXAMPLES = ("v5e:1x1", "v5e:2x2", "v5e:2x4", "v5e:4x4", "v6e:1x1", "v6e:2x2", "v5p:2x2x1", "v4:2x2x1")
# The most chips one host of each generation holds (a slice of no more is laid out as one host).
HOST_CHIPS = {"v4": 4, "v5e": 8, "v5p": 4, "v6e": 8}
INSTALL = "pip install 'jaxmemprof[tpu]' (libtpu of the installed jaxlib's release)"


def problem(name: str) -> str | None:
    """Why ``name`` is not a TPU slice this can compile for (one line, for
    ``--target NAME: ...``), or None."""
    m = _NAME.match(name or "")
    lower = (name or "").lower()
    if m is None and lower != name and (low := _NAME.match(lower)) is not None and low.group(1) in CHIPS:
        return f"names are lower case: --target {lower}"
    if m is None and re.match(r"^v[0-9a-z]+:[0-9x]+$", name or "") and re.search(r"(^|[:x])0", name.split(":", 1)[1]):
        return "each dimension of a slice is a number of chips, 1 or more, without a leading 0 (e.g. v5e:2x2)"
    if m is None or m.group(1) not in CHIPS:
        return ("not a TPU slice this knows; names it accepts: "
                f"{', '.join(f'{g}:AxB' if g in ('v5e', 'v6e') else f'{g}:AxBxC' for g in CHIPS)} "
                f"(e.g. {', '.join(EXAMPLES)})")
    dims = [g for g in m.groups()[1:] if g]
    if m.group(1) in ("v4", "v5p") and len(dims) != 3:
        return f"a {m.group(1)} slice has three dimensions (e.g. {m.group(1)}:2x2x1)"
    if m.group(1) in ("v5e", "v6e") and len(dims) != 2:
        return f"a {m.group(1)} slice has two dimensions (e.g. {m.group(1)}:2x2)"
    return None


# libtpu's settings while jaxmemprof loads it: no log file (see above), and no query of Google
# Cloud's metadata server, which a deviceless topology does not need: libtpu 0.0.15 (jax 0.6.1, the
# oldest supported) retried it for good off Google Cloud, and `run --target` never ended.
LIBTPU_QUIET = {"TPU_MIN_LOG_LEVEL": "3", "TPU_SKIP_MDS_QUERY": "1"}


def host_bounds(name: str) -> tuple | None:
    """The chips of one host of the slice ``name`` (libtpu's
    ``chips_per_host_bounds``, x, y, z) where the slice is one host, or None
    for libtpu's default hosts of 2x2x1."""
    m = _NAME.match(name or "")
    if m is None or m.group(1) not in CHIPS:
        return None
    dims = [int(g) for g in m.groups()[1:] if g] + [1]
    if dims[0] * dims[1] * dims[2] > HOST_CHIPS[m.group(1)]:
        return None
    return tuple(dims[:3])


def topology(name: str):
    """libtpu's deviceless topology of the slice ``name``
    (``jax.experimental.topologies.get_topology_desc``; a slice of one host
    laid out as one: ``host_bounds``), libtpu loaded, if
    this is what loads it, with no log file written (``LIBTPU_QUIET``); the
    process's environment as it was afterwards."""
    from jax.experimental import topologies

    saved = {key: os.environ.get(key) for key in LIBTPU_QUIET}
    os.environ.update(LIBTPU_QUIET)
    try:
        bounds = host_bounds(name)
        extra = {} if bounds is None else {"chips_per_host_bounds": list(bounds)}
        return topologies.get_topology_desc(topology_name=name, platform="tpu", **extra)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def libtpu_missing() -> bool:
    """Whether libtpu, which compiles for a TPU, is not installed."""
    try:
        return importlib.util.find_spec("libtpu") is None
    except (ImportError, ValueError):
        return True


def chip(name: str) -> tuple:
    """(generation, device_kind, HBM bytes per chip, usable bytes per device, chips, devices) of a valid name."""
    m = _NAME.match(name)
    if m is None:
        raise ValueError(f"not a TPU slice: {name!r}")
    gen = m.group(1)
    kind, hbm, per_chip, usable = CHIPS[gen]
    chips = 1
    for g in m.groups()[1:]:
        if g:
            chips *= int(g)
    return gen, kind, hbm, usable, chips, chips * per_chip


def usable_bytes(name: str) -> int:
    """What XLA:TPU may use of one device of the slice ``name``."""
    return chip(name)[3]


def out_of_memory(error) -> bool:
    """Whether a compile's error is XLA:TPU's own "does not fit" (its temporaries exceed the device)."""
    return isinstance(error, str) and OUT_OF_MEMORY in error


def slices_of(devices: int) -> list:
    """The example slices with ``devices`` devices (for a mesh of that size)."""
    return [n for n in EXAMPLES if chip(n)[5] == devices]

"""The loaded executables a snapshot counts (capture/device_reads.py), read
once each: the same rows as reading every executable afresh, as functions
are compiled and freed, with each executable's name and code size read only
when it first appears (on a TPU ``hlo_modules()`` of a large step costs
0.2-0.3 s, and a step's snapshot runs in the program's thread)."""

import gc

import jax
import jax.numpy as jnp

from jaxmemprof.capture.device_reads import LoadedExecutables


def _fresh(jax):
    """Every executable read afresh: what the rows must equal."""
    return sorted(LoadedExecutables().rows(jax, lambda tb: None))


def test_executables_are_read_once_and_counted_as_a_fresh_reading_counts():
    reader = LoadedExecutables()
    rows = lambda: sorted(reader.rows(jax, lambda tb: None))  # noqa: E731

    def fns(k):
        return [jax.jit(lambda x, i=i: x * (i + 2.0) + k) for i in range(3)]

    first = fns(1.0)
    for f in first:
        f(jnp.ones((4,)))
    assert rows() == _fresh(jax)
    names = {name for _, name, _, _ in rows()}
    assert "jit__lambda" in names
    known = dict(reader._known)
    assert len(known) >= 3
    # Read again: the same executables, their readings kept (the very objects: nothing read again).
    assert rows() == _fresh(jax)
    assert all(reader._known[k] is v for k, v in known.items())

    # New executables come in, read once; the counts follow them.
    second = fns(2.0)
    for f in second:
        f(jnp.ones((8,)))
    before = sum(c for _, name, c, _ in rows() if name == "jit__lambda")
    assert rows() == _fresh(jax)
    assert len(reader._known) >= len(known) + 3

    # Executables freed: forgotten, and no longer counted.
    del first, second, f
    jax.clear_caches()
    gc.collect()
    after = rows()
    assert after == _fresh(jax)
    assert sum(c for _, name, c, _ in after if name == "jit__lambda") < before
    listed = {int(e.unsafe_executable_pointer) for d in jax.local_devices()
              for e in d.client.live_executables()}
    assert {pointer for pointer, _ in reader._known} <= listed  # what was freed is forgotten

"""What the sampler keeps of each ``jax.Array`` and reads of one: a weak
reference that knows the array's ``id()`` (``_Ref``) and a tracked array
(``Entry``), what every array of one shape, dtype and sharding shares
(``_Static``: read from the sharding alone), its bytes on each device (from
its sharding: no per-shard view made), a buffer's address, whether it is
ready or deleted, and its sharding as journal text.
"""

from __future__ import annotations

import json
import math
import weakref


class Ref(weakref.ref):
    """A weak reference to an array that knows the array's ``id()``: the
    callback hears of its death before another object can take the id."""

    __slots__ = ("key",)

    def __new__(cls, obj, callback, *args):
        return super().__new__(cls, obj, callback)

    def __init__(self, obj, callback, *args):  # weakref.ref's own __init__ only checks its arguments
        self.key = id(obj)


class Entry(Ref):
    """A tracked array (a weak reference to it): identity, (device, address)
    per shard, its stack id, whether its addresses are still to be read
    (``pending``: once computed), and what it shares with its kind."""

    __slots__ = ("array_id", "keys", "pending", "site", "static", "traceback_id")

    def __init__(self, obj, callback, keys, pending, site, static):
        super().__init__(obj, callback)
        self.array_id, self.keys, self.pending = 0, keys, pending
        self.site, self.static = site, static
        self.traceback_id = None  # id() of its traceback when its addresses are not read


class Static:
    """What every array of one shape, dtype and sharding shares, as journal
    text. The devices and shard sizes come from the sharding alone: even
    listing the shards makes JAX keep per-shard views of device_put and
    sharded arrays."""

    __slots__ = ("shape", "dtype", "nbytes", "sizes", "devices", "shard_bytes", "devices_json", "sharding",
                 "memory_kind", "unread_keys")

    def __init__(self, a, sharding):
        shape = a.shape
        try:
            index = sharding.addressable_devices_indices_map(shape)
            devices = sorted(index, key=lambda d: d.id)
            itemsize = a.dtype.itemsize
            sizes = [itemsize * math.prod(len(range(n)[s]) if isinstance(s, slice) else 1
                                          for s, n in zip(index[d], shape)) for d in devices]
        except Exception:
            devices = sorted(sharding.addressable_devices, key=lambda d: d.id)
            sizes = [int(a.nbytes) // max(len(devices), 1)] * len(devices)
        self.devices = tuple(str(d) for d in devices)
        self.shard_bytes = tuple(int(x) for x in sizes)
        self.unread_keys = tuple((d, None) for d in self.devices)  # (device, address) before reading
        self.shape = json_list(shape)
        self.dtype = str(a.dtype)
        self.nbytes = int(a.nbytes)
        self.sizes = json_list(self.shard_bytes)
        self.devices_json = json.dumps(list(self.devices))
        self.sharding = _sharding_text(sharding)
        self.memory_kind = getattr(sharding, "memory_kind", None)


def add_device_bytes(a, out: dict) -> None:
    """Add an array's bytes on each of its devices to ``out``, from its
    sharding (no per-shard views made): a shard's bytes on each device
    that holds one, replicas included."""
    sharding = a.sharding
    try:
        per_shard = math.prod(sharding.shard_shape(a.shape)) * a.dtype.itemsize
        devices = sharding.addressable_devices
    except Exception:
        devices = getattr(sharding, "addressable_devices", None) or ()
        per_shard = int(a.nbytes) // max(len(devices), 1)
    for d in devices:
        key = str(d)
        out[key] = out.get(key, 0) + int(per_shard)



def json_list(values) -> str:
    """JSON for a list of ints or None (faster than json.dumps for these)."""
    return "[" + ",".join("null" if v is None else str(int(v)) for v in values) + "]"


def is_ready(a) -> bool:
    try:
        return bool(a.is_ready())
    except Exception:
        return True


def buffer_address(a):
    try:
        return int(a.unsafe_buffer_pointer())
    except Exception:
        return None


def is_deleted(a) -> bool:
    """``a.is_deleted()``, False when it cannot be asked."""
    try:
        return bool(a.is_deleted())
    except Exception:
        return False


def _sharding_text(sharding) -> str:
    name = type(sharding).__name__
    spec = getattr(sharding, "spec", None)
    if spec is not None:
        return f"{name}({spec})"
    return name

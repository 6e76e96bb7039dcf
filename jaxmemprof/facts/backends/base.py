"""The protocol every backend module implements (backends/__init__.py says
what each part means). Defaults are a device with no pool and no counters
beyond ``bytes_in_use`` and ``peak_bytes_in_use``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChipPeak:
    """The device's own peak, read off its counters (``memory_stats()``)."""

    bytes: int  # the peak the counters say (in use + reserved on a TPU)
    in_use_bytes: int  # peak_bytes_in_use: arrays
    reserved_bytes: int | None  # peak_bytes_reserved: the running program's reservation (TPU); None elsewhere
    limit_bytes: int | None  # bytes_limit
    upper_bound: bool  # a sum of two high-water marks that need not have coincided

    @property
    def share_of_limit(self) -> float | None:
        return self.bytes / self.limit_bytes if self.limit_bytes else None


class Backend:
    """One backend's rules. Subclasses set the class attributes and override
    what differs."""

    name = "cpu"
    platforms: tuple = ("cpu",)
    keys: dict = {"in_use": "bytes_in_use", "peak_in_use": "peak_bytes_in_use", "limit": "bytes_limit"}
    has_pool = False  # memory comes from a pool that is a fraction of the device
    allocator_advice = False  # the GPU allocator's variables apply
    queue_advice = False  # async dispatch's queued outputs show in the counters, and the advice on them applies
    fit_words = "the whole device"  # how the fit rule is said, in a line

    def usable_bytes(self, device_bytes: int) -> int:
        """What a program may use of a device of ``device_bytes``, no setting changed."""
        return int(device_bytes)

    def needed_bytes(self, peak_bytes: int) -> int:
        """What a peak needs of ``usable_bytes``."""
        return max(int(peak_bytes), 0)

    def fits(self, peak_bytes: int, device_bytes: int) -> bool:
        """The fit rule: the peak fits a device of that size, no setting changed."""
        return self.needed_bytes(peak_bytes) <= self.usable_bytes(device_bytes)

    def fits_at_all(self, peak_bytes: int, device_bytes: int) -> bool:
        """The peak fits with whatever setting the backend has."""
        return self.fits(peak_bytes, device_bytes)

    def largest_fitting_peak(self, device_bytes: int) -> int:
        """The largest peak that ``fits`` a device of that size."""
        lo, hi = 0, int(device_bytes) + 1
        if not self.fits(0, device_bytes):
            return 0
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.fits(mid, device_bytes):
                lo = mid
            else:
                hi = mid
        return lo

    def chip_peak(self, stats: dict) -> ChipPeak | None:
        """The device's own peak from its counters (``stats``: key -> its
        largest recorded value, for one device); None without them."""
        peak = stats.get(self.keys["peak_in_use"])
        if peak is None:
            return None
        limit = stats.get(self.keys["limit"])
        return ChipPeak(int(peak), int(peak), None, None if limit is None else int(limit), False)

    def __repr__(self) -> str:
        return f"<backend {self.name}>"

"""Profiles as pprof files whose stacks are the user's own frames, so that
`go tool pprof` (-top, -http) shows user code instead of JAX internals."""

from __future__ import annotations

from jaxmemprof.facts.devices import display
from jaxmemprof.pprof.reader import Profile
from jaxmemprof.pprof.writer import BASE_LABEL, write_profile


def _samples(profile: Profile, stacks: list[tuple], *, base: bool):
    s = profile.samples
    sign = -1 if base else 1
    for stack_id, count, nbytes, kind, device in zip(
        s["stack_id"].tolist(), s["count"].tolist(), s["bytes"].tolist(), s["kind"], s["device"]
    ):
        labels = {"kind": kind, "device": display(device)}
        if base:
            labels[BASE_LABEL[0]] = BASE_LABEL[1]
        yield stacks[stack_id], (sign * count, sign * nbytes), labels


def _types(profile: Profile) -> list[tuple[str, str]]:
    vtype, vunit = profile.sample_types.iloc[profile.value_index][["type", "unit"]]
    if profile.count_index is None:
        ctype, cunit = "samples", "count"
    else:
        ctype, cunit = profile.sample_types.iloc[profile.count_index][["type", "unit"]]
    return [(ctype, cunit), (vtype, vunit)]


def snapshot_pprof(profile: Profile, stacks: list[tuple], comment: str) -> bytes:
    types = _types(profile)
    return write_profile(types, _samples(profile, stacks, base=False), default_type=types[1][0],
                         comments=[comment])


def diff_pprof(base: Profile, base_stacks: list[tuple], new: Profile, new_stacks: list[tuple],
               comment: str) -> bytes:
    """NEW merged with BASE negated and labelled pprof::base=true: what
    `go tool pprof -diff_base` builds, so the file reopens as a diff."""
    types = _types(new)

    def merged():
        yield from _samples(new, new_stacks, base=False)
        yield from _samples(base, base_stacks, base=True)

    return write_profile(types, merged(), default_type=types[1][0], comments=[comment])

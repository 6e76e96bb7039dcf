"""pprof (gzipped protobuf) of one snapshot, or of the change between two,
with the user's stacks (render/pprof.py): ``export --format pprof``."""

from __future__ import annotations

from jaxmemprof.render.formats import Format


def profiles(doc, to) -> None:
    from jaxmemprof.render.pprof import diff_pprof, snapshot_pprof

    if len(doc.profiles) == 1:
        data = snapshot_pprof(doc.profiles[0], doc.stacks[0], f"jaxmemprof: {doc.names[0]}, user stacks")
    else:
        (base, new), (base_stacks, new_stacks), (bname, nname) = doc.profiles, doc.stacks, doc.names
        data = diff_pprof(base, base_stacks, new, new_stacks, f"jaxmemprof: {nname} - {bname}, user stacks")
    to.binary(data)


FORMAT = Format("pprof", profiles=profiles)

"""How to read the report's figures: the methods and caveats behind each
section, said in full by ``report --explain`` and in JSON; the terminal
report keeps to one line where a caveat changes how a number reads."""

from __future__ import annotations

REUSE = (
    "Reuse is observed at snapshot resolution. A snapshot sees only the buffers alive at that "
    "instant: a buffer made and freed between two snapshots is never seen, so reuses of its "
    "address, and by it, are invisible; when an address changed hands several times between two "
    "snapshots, only its last holder is seen. A buffer counts as reusing an address when it is "
    "first seen, on the same device, at an address whose earlier holders had all gone by then; "
    "when, and through how many hands, it passed in between is not known. 'deleted' means donated "
    "or .delete()d; a donated input whose last reference is dropped at once (state = step(state)) "
    "is seen as freed, so that donation counts as an immediate same-size reuse, not as "
    "donated_in_place. Two arrays holding one address at the same time are one buffer seen "
    "twice (shared), not a reuse."
)

JIT = ("call peak = arguments + outputs - aliased (donation that took effect) + temporaries + code; "
       "snapshots, taken between calls, never see it. ≥N calls: the probe stops counting a "
       "function's calls once its samples are taken, so that it costs nothing per call.")

TRUE_PEAK = ("estimated true peak: for the jitted call that holds the most, the bytes live just before it "
             "(counted then, per device) plus what XLA's memory analysis of the signature it ran says the "
             "call holds beyond its arguments (outputs not aliased to inputs, temporaries, code): snapshots, "
             "taken between calls, never see it. Per device, as XLA's figures are; on several devices, "
             "also summed over them.")

ROLES = ("What the memory is: at the sampled jitted call that holds the most on a device, its inputs "
         "leaf by leaf, by how each flows from call to call (carried from the previous call's outputs: "
         "parameters, optimizer state or other state, as the library's types or the argument's name say; "
         "new at every call: the batch; the same array every call: held), then XLA's figures for the "
         "outputs it writes (new state: those the next call takes; results: the rest), its temporaries and "
         "code, and the arrays live before it that are not its inputs (other arrays); they add up to the "
         "call's peak. Owners are the arrays' paths in your own trees (docs/roles.md).")

LIFETIMES = ("Lifetimes are measured between snapshots: an array is seen from the first snapshot it is "
             "alive in to the first it is gone from; arrays living between two snapshots are not seen.")


def unknown_addresses(manifest: dict) -> str:
    """Why buffers of a run may lack an address, from how it was recorded."""
    settings = (manifest or {}).get("settings")
    mode = settings.get("addresses") if isinstance(settings, dict) else None
    if mode in (False, "none"):
        return "this run read no buffer address (`jaxmemprof run --addresses none`)."
    why = ("an array still being computed when a background snapshot saw it gets its address at a later "
           "snapshot, if it lives that long")
    if mode == "auto":
        why += ("; and `--addresses auto` (the default) leaves sharded and device_put arrays unread, since "
                "reading one makes JAX keep a per-shard view of the array (`--addresses all` reads them)")
    return why + "."


def reuse_note(rep) -> str:
    """The reuse section's caveats in full, for a Report."""
    if rep.reuse_unknown_addresses:
        return (f"{rep.reuse_unknown_addresses} of {rep.reuse_buffers} buffers have no recorded address and are "
                f"not matched: {unknown_addresses(rep.manifest)} {REUSE}")
    return REUSE

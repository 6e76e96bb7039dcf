"""The order of the end's verifying compiles (whatif.py): what each could
take off the run's true peak, largest first, so that the compile budget
(``run --verify-seconds``) goes to the compiles that matter and a change
that could save little waits for those that could save more.

- **What a change could save** (bytes per device, an upper bound, before
  any compile): a donation at most the bytes of the donated arguments
  (donors.py), and only where its function's calls hold the run's true
  peak: a donation changes its function's calls alone (the arguments it
  frees were dropped after the call anyway), so the true peak falls at most
  to the largest moment of the other functions' calls (``room``); a
  donation whose function's calls are not at the top could save nothing of
  it (the report's advice then says so: ``info``). A sharding at most the
  bytes sharding takes off each device (replicas.py ``saving``), not
  capped so: the arrays it shards are held across the other calls too.
- **The moments** are those the report reads (truepeak.moments: the bytes
  live before each sampled call, less its arguments, plus XLA's call peak
  for its signature), from the journal as it stands at the end; a function
  with a sampled call whose bytes before it were not counted (past
  probe.LIVE_BEFORE_CALLS) is not capped, nor is one whose moments are
  unknown. The snapshots are not read: where the run's peak is between
  calls, a donation's own bound stands in.
- **In order.** Jobs (a function's donation, all its kept signatures then
  those no sampled call ran; a function's sharding, then the functions that
  made its inputs) run largest bound first; a tie keeps the function with
  the larger call peak first, its donation before its sharding. Each job
  checks the deadline before each compile, as before: a job past it writes
  its rows with ``OVER_BUDGET``. A compile made beside the program
  (early.py) costs nothing here wherever its job falls.

Plain Python over the journal's rows: no JAX."""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable

from jaxmemprof.facts.truepeak import FIGURES, moments

DONATE, SHARD = 0, 1  # a tie: the donation's compile first


@dataclass(frozen=True)
class Job:
    """Some verifying compiles of one function: ``run()`` makes them and
    returns their jit_whatif rows; ``bound`` is what the change could take
    off the run's true peak (bytes per device, at most)."""

    bound: int
    kind: int  # DONATE or SHARD
    place: int  # the function's place among the largest call peaks (whatif._largest_states)
    run: Callable[[], list]


def in_order(jobs: list[Job]) -> list:
    """The jobs' rows, each job run in turn, largest bound first."""
    rows: list = []
    for job in sorted(jobs, key=lambda j: (-j.bound, j.place, j.kind)):
        rows += job.run()
    return rows


def donation_bound(found, room: int | None) -> int:
    """What donating the donors ``found`` (donors.Donor) could take off
    the run's true peak, per device: their bytes, at most ``room`` (None:
    not capped)."""
    donated = sum(int(d.donated_bytes) // max(int(d.devices or 1), 1) for d in found)
    return donated if room is None else min(donated, room)


def rooms(writer, function_ids: list) -> dict:
    """function_id -> how far a change to that function's calls alone could
    lower the run's true peak (bytes on the busiest device): its largest
    moment less the largest moment of the others (0 where another's is as
    large), or None where not known (a call whose bytes before it were not
    counted, no moment at all)."""
    compiles, calls, uncounted = [], [], set()
    for fid in function_ids:
        for sig, *figures in writer.jit_compiled_signatures(fid):
            compiles.append({"function_id": fid, "signature": sig, "call_index": None, "t_wall": 0.0,
                             **dict(zip(FIGURES, figures))})
        for index, inputs, outputs, sig, live_before in writer.jit_sampled_calls(fid):
            if live_before is None:
                uncounted.add(fid)
            calls.append({"function_id": fid, "call_index": index, "t_wall": 0.0, "signature": sig,
                          "inputs": inputs, "outputs": outputs, "live_before": live_before})
    top: dict = {}
    for m in moments(compiles, calls, []):
        fid = compiles[m.compile]["function_id"]
        top[fid] = max(top.get(fid, 0), int(m.device_bytes))
    out: dict = {}
    for fid in function_ids:
        if fid in uncounted or fid not in top:
            out[fid] = None
            continue
        others = max((b for g, b in top.items() if g != fid), default=0)
        out[fid] = max(top[fid] - others, 0)
    return out

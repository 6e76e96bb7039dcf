"""The words the reports and the docs use, one name per idea (docs/glossary.md)."""

from __future__ import annotations

TERMS: dict[str, str] = {
    "array": "A `jax.Array`: one or more buffers (its shards) on devices; its bytes are its shards' bytes.",
    "buffer": "One shard of an array on one device: the unit the device's allocator holds.",
    "site": "Where an allocation was made: the innermost frame of its stack that is user code, written "
            "`path:line (function)`.",
    "user code": "Every file that is not library code (or that `--user PATTERN` names); `--all-frames` makes every "
                 "frame user code.",
    "library code": "JAX, jaxlib, jaxmemprof itself, the Python standard library and installed packages "
                    "(`site-packages`, `dist-packages`; and, as the run recorded them, directories on its sys.path "
                    "outside the program's tree and distributions installed anywhere: `pip install --target` "
                    "on PYTHONPATH, vendored trees, zips), and what `--lib PATTERN` adds.",
    "user stack": "An allocation's stack with library frames removed, innermost first.",
    "snapshot": "What a run records at one instant: the device memory profile, one record per live array, the "
                "allocator statistics, the time, trigger and label; numbered 1, 2, ... in the order taken.",
    "trigger": "Why a snapshot was taken: `first`, `interval`, `exit`, `exception`, `oom`, `signal`, `api`.",
    "thinned": "A long run keeps its last 10 minutes whole and thins older interval snapshots to one per time bucket "
               "that doubles with age; a thinned snapshot keeps its row and array records but loses its profile "
               "file.",
    "marker": "A point on the run's timeline placed by `jaxmemprof.mark(label)`, numbered 1, 2, ... in order.",
    "step": "The interval between two markers, when the script marks each training step; rates per step count "
            "markers.",
    "setup": "The run before its first marker (without markers: before the busiest jitted function's first "
             "compile; without the jit probe: the first tenth of the run).",
    "live bytes": "Bytes of the live arrays' addressable shards at a snapshot (a replicated array counts once per "
                  "device).",
    "live peak": "The first snapshot with the most live bytes, and those bytes (the report's \"peak\" in its "
                 "JSON: `peak_bytes`); XLA's temporaries inside jitted calls are never in it.",
    "call peak": "What one call of a jitted function holds at its peak, from XLA's `memory_analysis()`: arguments + "
                 "outputs - aliased + temporaries + code.",
    "true peak": "The live peak with what snapshots cannot see inside jitted calls, estimated (its JSON name is "
                 "`true_peak_bytes`, on the busiest device; `true_peak_total_bytes` on all devices summed): the "
                 "most, over compiles and sampled calls, of the live bytes before the call minus its arguments "
                 "plus its call peak, per device. An "
                 "argument on fewer devices than the call (an array on one device passed to pmap) is copied onto "
                 "them and stays alive beside its copies: it is not taken off.",
    "role": "What an array is for at the true peak's call: parameters, optimizer state, batch, new state, inside "
            "the call (XLA's temporaries) and the others of roles.csv (docs/roles.md).",
    "top fix": "The finding whose fix lowers the true peak most: of those XLA's compile of the fixed step "
               "measured, the largest saving; else the first that saves anything.",
    "temporaries": "Buffers XLA allocates inside a jitted call and frees before it returns; snapshots never see them.",
    "unattributed bytes": "The allocator's bytes in use minus the live array bytes: temporaries, allocator slack, "
                          "library workspaces (GPU, TPU).",
    "jit probe": "The proxy around `jax.jit` and `jax.pmap` that records each jitted function, its compiles and "
                 "sampled calls during `run` (off with `--no-jit-probe`).",
    "donation": "Passing an argument to a jitted function with `donate_argnums`/`donate_argnames` (or the wrapper's "
                "equivalent), so XLA may write an output into its buffer; the donated array is deleted.",
    "aliased": "XLA's input/output aliasing only: an output written into an argument's buffer (donation that took "
               "effect; `alias_bytes`, kind `aliased`).",
    "shared": "An array over a buffer another array already holds (JAX's per-shard views): its bytes count once, "
              "under the array seen first.",
    "reuse": "A new buffer taking a device address that an earlier, ended buffer held, seen at snapshot resolution.",
    "lifetime": "From the first snapshot that saw an array to the first that no longer did; censored at the run's "
                "start and end.",
    "byte-seconds": "Bytes x seconds held: what holding memory cost over time.",
    "leak": "A site whose live bytes rise steadily over the run (a trend test, not last > first).",
    "recompile": "A function compiled again and again during the run, after the setup.",
    "pool": "The memory the BFC allocator reserves from a GPU: 0.75 of it by default, preallocated at the first "
            "operation.",
    "headroom": "What a pool needs beyond the peak: 5 % plus 64 MiB.",
    "process": "One Python process of a job, `process-N/` in its directory; a single run is process 0.",
    "job": "The processes of one multi-process program, recorded side by side, with their clocks aligned.",
    "finding": "What the analyses conclude, as data: a rule, a severity, a site, a saving and facts; its rule "
               "(jaxmemprof/analysis/rules/) says it in words.",
    "rule": "The kind of finding (`leak`, `donate`, ...); `check --fail-on` takes rule names.",
    "case": "Which variant of a rule a finding is (`allocator-fraction` `raise` or `cannot`).",
    "severity": "`high`, `medium`, `low` or `info`, by the rule; a saving under 1 % of the run's peak (the estimated "
                "true peak where known) makes it `info` (recompiles excepted).",
    "saving": "What acting on a finding saves, in bytes (`saving_bytes`), where known.",
    "facts": "The figures and names behind a finding, under the names the columns use.",
}

"""``IN_TABLE``: where a column or key name says something narrower, or
other, in one table than its one sentence in ``columns.GLOSSARY``."""

from __future__ import annotations

# Where a name says something narrower, or other, in one table.
_SHOW = {
    "site": "The site: `path:line (function)` of the innermost frame of user code.",
    "function": "The function (of the site's frame, or the group with `--by function`).",
    "file": "The file (of the site, or the group with `--by file`).",
    "device": "The device of the allocation (empty for executables).",
    "kind": "`buffer` (a live array's shard) or `executable` (a loaded program).",
    "owner": "With `--by owner` (show RUN@SEL): the array's path in your tree (`params['w1']`) as a sampled jitted "
             "call named it, or the line that made the bytes no call names.",
    "role": "With `--by owner`: the owner's role (`parameters`, `optimizer state`, `batch`, ...: docs/roles.md), "
            "or `by line`.",
    "bytes": "The sum of the sample's bytes value over the group.",
}
IN_TABLE: dict[str, dict[str, str]] = {
    "timeline.csv": {},
    "devices.csv": {
        "live_bytes": "Bytes of the live array shards on this device at the snapshot.",
        "buffers": "Live buffers (array shards) on this device at the snapshot.",
        "bytes_in_use": "This device's allocator bytes in use (`memory_stats()`); empty on CPU.",
        "peak_bytes_in_use": "This device's allocator high-water mark (`memory_stats()`); empty on CPU.",
        "bytes_limit": "This device's allocator limit (`memory_stats()`); empty on CPU.",
        "pool_bytes": "Bytes this device's BFC allocator has reserved (`memory_stats()`); empty on CPU.",
        "largest_free_block_bytes": "The largest free block of this device's pool (`memory_stats()`); empty on CPU.",
        "fragmentation": "This device's `(pool_bytes - bytes_in_use - largest_free_block_bytes) / (pool_bytes - "
                         "bytes_in_use)`, 0 to 1.",
        "unattributed_bytes": "This device's `bytes_in_use - live_bytes`: XLA temporaries, slack, workspaces.",
    },
    "sites.csv": {
        "site": "One of the top sites by peak live bytes (`export --top`), or `other` for all the rest.",
        "live_bytes": "The site's live bytes at the snapshot.",
        "arrays": "The site's live arrays at the snapshot (buffers, for a directory of profiles).",
    },
    "lifetimes.csv": {
        "alive_at_end": "Of its arrays, how many were still alive at the run's last snapshot.",
        "bytes_born": "Device bytes of the arrays born there.",
    },
    "lifetimes.csv (estimated)": {
        "bytes_born": "Bytes of the estimated `births` (count x buffer size).",
        "peak_bytes": "The most bytes the site held in one snapshot.",
        "snapshots": "How many snapshots the site held any buffer in.",
    },
    "reuse.csv": {
        "site": "The site of the new buffer.",
        "bytes_born": "Bytes of `buffers_born`.",
        "shared": "Array shards first seen at an address another live array held on the same device: one buffer "
                  "seen through a second `jax.Array` (counted in none of the other columns).",
    },
    "reuse_devices.csv": {
        "bytes_born": "Bytes of `buffers_born`.",
        "shared": "Array shards first seen at an address another live array held on the same device: one buffer "
                  "seen through a second `jax.Array` (counted in none of the other columns).",
    },
    "reuse events": {
        "site": "The site of the new buffer.",
        "first_snapshot": "The snapshot the new buffer was first seen in.",
        "bytes": "The new buffer's bytes.",
        "array_id": "The new buffer's array.",
        "donated_in_place": "True for an immediate reuse whose earlier holder ended `deleted`.",
        "device": "The device of the address.",
    },
    "recompiles.csv": {
        "site": "Where the executables were compiled (the call that compiled them).",
        "first_snapshot": "The first snapshot its executables were loaded in.",
    },
    "rejits": {
        "site": "The line that jitted the functions.",
        "name": "The jitted functions' name.",
        "suspect": "True from 5 functions, 2 or more after the setup, and (where the run counted them) as many XLA "
                   "compiles (a `recompile` finding, case `rejit`).",
    },
    "jit.csv": {
        "function": "The jitted function's name.",
    },
    "jit_peak.csv": {
        "function": "The jitted function's name.",
        "signature": "The compiled signature these buffers are of (every signature the run analysed is here, "
                     "each once).",
        "site": "The user line that made the buffers (`path:line (function)`), or `argument NAME` for an argument's "
                "buffer.",
        "file": "The site's path (empty for an argument).",
        "line": "The site's line (0 for an argument).",
        "kind": "The buffers' kind: `argument`, `output`, `aliased` (an argument XLA writes an output into: "
                "donation), `temporary` or `constant`.",
        "bytes": "Bytes of those buffers live at the function's own peak.",
        "buffers": "How many of XLA's buffers they are.",
    },
    "jit_buffers.csv": {
        "function": "The jitted function's name.",
        "signature": "The compiled signature these buffers are of (every signature the run analysed is here, "
                     "each once).",
        "name": "The HLO value, as XLA's live ranges name it (`sort.0{}`).",
        "site": "The user line that made it, or `argument NAME` for an argument's buffer.",
        "kind": "`argument`, `output`, `aliased` (an argument XLA writes an output into: donation), `temporary` or "
                "`constant`.",
        "shape": "XLA's shape, e.g. `f32[1024,1024]`.",
        "bytes": "The buffer's size in bytes.",
    },
    "jit_curve.csv": {
        "function": "The jitted function's name.",
        "signature": "The compiled signature these buffers are of (every signature the run analysed is here, "
                     "each once).",
        "site": "The user line whose buffers these are, `argument NAME` for an argument's, or `other lines` for the "
                "lines past the 8 that hold most at any position.",
        "bytes": "Bytes of that line's buffers live at the position.",
    },
    "holders.csv": {
        "at": "Which search: `peak` (the one at the largest live bytes before the end) or `end` (the run's last "
              "snapshot).",
        "snapshot": "The snapshot the search followed.",
        "site": "Where the held arrays were made, as in arrays.csv.",
        "holder": "The chain of references that holds them, root first, as the program would write it "
                  "(`trainer.history['loss'][…]`; `…` stands for any of a list's items or a dict's numbered keys).",
        "kind": "What kind of reference: `global`, `local` (a live frame's), `attribute`, `closure`, `generator` "
                "(a suspended generator's local), `lru_cache`, `output-history` (IPython's `Out`, `_N`), "
                "`jax-internal` or `library` (a library's own global or frame).",
        "container": "The type of the object that refers to the arrays themselves (`list`, `dict`, `deque`).",
        "created": "`file:line` of the assignment that made the container (`losses = []`), where the source shows "
                   "it; empty where it does not.",
        "arrays": "Arrays of the site the chain holds at that search.",
        "bytes": "Their bytes on their devices.",
        "generations": "How many different snapshots first saw these arrays: 1 for state a step replaces, "
                       "many for arrays kept step after step.",
        "shapes": "Their shapes, the three most common first.",
        "chain_id": "The chain's number in the run's journal (py_chains).",
        "complete": "False where the search stopped at its budget before every root was walked "
                    "(py_holder_searches.complete 0): the chain holds these arrays, but others may too, and arrays "
                    "it did not reach are not named; the report says `search cut short at its budget` beside it.",
        "site_arrays": "The site's arrays alive at that search's snapshot: what `arrays` is out of, at the same "
                       "moment (a peak whose own snapshot had no search shows the holders of the search before it, "
                       "said beside the table: `holders as searched at snapshot N`, with this count).",
    },
    "plan.csv": {
        "function": "The planned jitted function's name.",
        "device": "A device the call runs on.",
        "peak_bytes": "The device's peak during a call at this batch: `live_outside_bytes + call_peak_bytes`.",
        "call_peak_bytes": "XLA's call peak for this compile: `argument_bytes + output_bytes - alias_bytes + "
                           "temp_bytes + generated_code_bytes` (per device).",
        "argument_bytes": "XLA's `memory_analysis()` of this compile: bytes of the arguments (per device).",
        "backend": "The platform whose XLA compiled it (`cpu`, `gpu`, `tpu`).",
        "error": "Why it could not be compiled; empty when it was.",
    },
    "targets.csv": {
        "function": "The jitted function compiled for the slice.",
        "devices": "The slice's devices the call runs on (1: a single-device program, on the first chip).",
        "batch": "The batch the run used, where it was told (empty: not told; without --plan it need not be).",
        "peak_bytes": "XLA:TPU's call peak on the call's busiest device plus the run's live bytes outside the "
                      "call (its busiest device's).",
        "call_peak_bytes": "XLA:TPU's call peak for this compile, per device.",
        "argument_bytes": "XLA:TPU's `memory_analysis()` of the step at the recorded batch: arguments, per device.",
        "fits": "Whether `peak_bytes` is within `usable_bytes`.",
        "largest_batch": "With `run --plan --target`: the largest batch compiled for the slice whose peak fits, on "
                         "every device of the call (0: not even the smallest compiled); empty without --plan.",
        "compiles": "Compiles for this slice and function.",
        "compile_s": "Seconds they took.",
        "error": "Why the recorded batch could not be compiled for the slice; empty when it was.",
    },
    "target_points.csv": {
        "function": "The function compiled for the slice.",
        "device": "A device of the slice the call runs on.",
        "peak_bytes": "The device's peak during a call at this batch: XLA:TPU's call peak plus the run's live bytes "
                      "outside the call on its busiest device.",
        "backend": "`tpu`.",
        "fits": "Whether the peak is within what XLA may use of one device of the slice (`usable_bytes`).",
    },
    "target_lines.csv": {
        "function": "The function compiled for the slice.",
        "bytes": "XLA:TPU's buffers made at this line, of this kind, in device memory and live at the program's "
                 "peak (per device).",
        "buffers": "How many.",
        "program_peak_bytes": "The peak of XLA:TPU's buffer assignment for the program in device memory (per "
                              "device): what the lines add up to; XLA:TPU's call peak less its generated code.",
    },
    "targets": {
        "lines": "The rows of target_lines.csv.",
        "compiles": "The compiles for every slice.",
        "events": "What could not be compiled, and why, one line each.",
        "points": "The rows of target_points.csv.",
    },
    "plan_models.csv": {
        "function": "The planned jitted function's name.",
        "device": "A device of the call, or `job`: every device of the call together (the smallest answer).",
    },
    "plan": {
        "device_bytes": "The device's memory, in bytes (`report --device-memory`, else `run "
                        "--plan-device-memory`); null without either.",
        "compiles": "The plan's compiles, over the functions planned.",
        "functions": "One object per planned function (the plan's functions below).",
        "points": "The rows of plan.csv.",
    },
    "plan functions": {
        "function": "The planned jitted function's name.",
        "compiles": "The plan's compiles of it.",
        "compile_s": "Seconds they took.",
        "call_peak_bytes": "Its largest XLA call peak in the run, which chose it.",
        "donated": "The arguments the `donated` variant donated (names, else positions).",
        "backend": "The platform whose XLA compiled the plan.",
    },
    "roles.csv": {
        "device": "The device (`all`: a run recorded before calls counted the bytes live before them per device).",
        "role": "What the bytes are: `parameters`, `optimizer state`, `other state` (inputs carried from the "
                "previous call's outputs), `batch` (new at every call), `held inputs` (the same array every call), "
                "`other inputs`, `new state` (outputs the next call takes), `results` (the other outputs), "
                "`inside the call` (XLA's temporaries), `executable code`, `other arrays` (live before the call, "
                "not its inputs). See docs/roles.md.",
        "bytes": "The role's bytes on the device during the call; a device's roles add up to the call's peak there.",
        "share": "`bytes` over the call's peak on the device, 0 to 1.",
        "arrays": "Arrays of that role (for `inside the call`: the user lines of XLA's temporaries at its peak).",
        "largest_owner": "The largest of them: its path in your tree (`opt_state[0].mu['w1']`), or a user line.",
        "largest_owner_bytes": "Its bytes on the device.",
    },
    "owners.csv": {
        "device": "The device (`all`: a run recorded before calls counted the bytes live before them per device).",
        "role": "The array's role (roles.csv).",
        "owner": "Its path in your own tree, in your library's terms (`params['w1']`, `model.l1.kernel`, "
                 "`opt_state[0].mu['w1']`); an output that the next call takes is named by the input it becomes; "
                 "another output by `out` and its path; XLA's temporaries by the user line that made them.",
        "bytes": "Its bytes on the device.",
        "shape": "Its shape, `[256,512]` (XLA's, `f32[256,512]`, for a temporary).",
        "function": "The jitted function whose call it is.",
        "sharding": "Its sharding, as JAX names it (`NamedSharding(PartitionSpec('data',))`).",
    },
    "findings.csv": {
        "site": "The user line the finding is about (`path:line (function)` or `path:line`); empty when it is about "
                "the whole run.",
    },
    "job_findings.csv": {
        "site": "The user line the finding is about; empty when it is about the whole job or run.",
        "saving_bytes": "What acting on it saves in the process where it saves most, where known.",
        "facts": "The facts of the process where it is most severe and saves most (a JSON cell).",
    },
    "processes.csv": {
        "process": "The process index (the `process-N` directory's N).",
        "devices": "The process's local devices, as its manifest names them, joined by `, `.",
        "snapshots": "How many snapshots the process took.",
        "peak_bytes": "The process's own peak: its most live bytes in a snapshot.",
        "peak_t": "When its peak was, in seconds on the job's aligned clock.",
        "peak_snapshot": "The process's first snapshot with its most live bytes.",
    },
    "job_timeline.csv": {
        "t": "Seconds since the job began, on the job's aligned clock: a moment some process took a snapshot.",
        "live_bytes": "The job's live bytes then: the sum over processes of each one's last snapshot (0 before a "
                      "process's first snapshot or after its last).",
    },
    "job_peak_sites.csv": {
        "site": "A site holding bytes at the process's own peak (its top 50, or `--top` if more).",
        "bytes": "Its bytes at that peak.",
        "count": "Its allocations at that peak.",
    },
    "job": {
        "processes": "How many processes the job has.",
        "peak_bytes": "The job's peak: the most, over time, of the sum of the processes' live bytes at aligned "
                      "times.",
        "peak_t": "When the job's peak was, in seconds on the job's aligned clock.",
    },
    "report --json": {
        "command": "`report`.",
        "devices": "The rows of devices.csv.",
        "executables": "Loaded executables per snapshot (the executables section below).",
        "markers": "The markers (the markers section below).",
        "arrays": "The rows of arrays.csv.",
    },
    "job report --json": {
        "command": "`report`.",
        "processes": "The rows of processes.csv.",
        "peak_sites": "The rows of job_peak_sites.csv.",
        "timeline": "The rows of job_timeline.csv.",
        "roles": "Each process's roles at its largest sampled jitted call: objects of `process, device, role, "
                 "bytes, largest_owner` (roles.csv's columns; docs/roles.md).",
        "plan": "With run --plan and --device-memory: for each planned function and variant, the largest batch "
                "that fits every process (`largest_batch`, `largest_batch_with_settings`: the smallest process's "
                "answer) and the `process` that limits it (docs/plan.md).",
        "findings": "The merged findings: the columns of job_findings.csv and `process_list`, `facts` as an object.",
    },
    "reuse": {
        "buffers": "Buffers (array shards) the reuse analysis matched by address.",
    },
    "summary": {
        "chip": ("The chip's own counters beside the true peak (analysis/counters.py; null where the backend reports "
                 "none, a CPU): an object of `backend`; `device` (the device whose counters peaked highest); "
                 "`chip_peak_bytes` (what its counters reached: on a TPU `peak_bytes_in_use + peak_bytes_reserved`, "
                 "an upper bound, `upper_bound` true, where the two high-water marks need not coincide; on a GPU the "
                 "BFC's `peak_bytes_in_use`); `peak_in_use_bytes`, `peak_reserved_bytes` (null off a TPU), "
                 "`bytes_limit`, `share_of_limit`; `needed_bytes` (the true peak on the busiest device), "
                 "`over_needed_bytes` (`chip_peak_bytes - needed_bytes`), `over_needed_share` (of `needed_bytes`); "
                 "`arrays_needed_bytes` and `temporaries_bytes` (the true peak's arrays, and XLA's temporaries and "
                 "code); on a TPU, `queued_generations` (whole generations of `queued_function`'s new outputs, "
                 "`outputs_per_call_bytes` each: its outputs less what it aliases, 0 when donated, in use beyond the "
                 "step's arrays: outputs of steps queued by async dispatch), `queued_bytes` and `other_bytes` (the "
                 "rest beyond the step's arrays: padding and small buffers)."),
        "devices": "How many devices the run used.",
        "finished": "True when the run ended and its manifest was completed (false: killed, or still running).",
    },
    "peak_sites": {
        "bytes": "The site's bytes at the peak snapshot.",
        "count": "Its allocations then: live array shards (and executables).",
    },
    "fit": {
        "peak_bytes": "The peak checked, per device: the best of `peak_source`.",
        "processes": "Processes that will share the device (1 from `report`; `will_it_fit(..., processes=N)`).",
        "case": "`fits` (by default), `fits-with` (settings), `cannot`; `shared-fits`, `shared-cannot` for several "
                "processes.",
        "backend": "The backend the run was recorded on.",
    },
    "show": _SHOW,
    "diff": {**_SHOW, "bytes": "The sum of the sample's bytes value over the group (in `totals`)."},
    "show and diff --json": {
        "command": "`show` or `diff`.",
        "devices": "Per device: bytes and count (for diff: the diff columns).",
    },
    "check --json": {
        "command": "`check`.",
        "run": "The run checked.",
    },
    "check": {
        "process": "The process of a multi-process job the check is about (checked one by one); null for one run.",
        "site": "The site most to blame, where there is one (`target-fits`: the function).",
        "bytes": "The run's figure (`max-increase`).",
        "error": "`target-fits`, when XLA:TPU refused the step as too large for the device: its message (`value` "
                 "is then null).",
    },
}

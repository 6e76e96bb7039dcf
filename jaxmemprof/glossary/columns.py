"""What every column and key name means: ``GLOSSARY``, one sentence each
(``in_table.IN_TABLE``: where a name says something narrower in one table)."""

from __future__ import annotations

from jaxmemprof.facts.libraries import WRAPPERS, phrases

# -- the meaning of every name -------------------------------------------------------

GLOSSARY: dict[str, str] = {
    # snapshots and time
    "snapshot": "The snapshot's number in the run: 1, 2, ... in the order taken (a thinned one keeps its number).",
    "t": "Seconds since the run began (wall clock), at the snapshot or event of the row.",
    "trigger": "Why the snapshot was taken: `first`, `interval`, `step` (at a `jaxmemprof.mark()` on the step "
               "grid: docs/recording.md), `exit`, `exception`, `oom`, `signal` or `api` (`jaxmemprof.snapshot()`).",
    "label": "The label given to `jaxmemprof.snapshot(label)` (or `mark(label)` for a marker); empty when none.",
    "live_bytes": "Bytes of the live arrays' addressable shards at the snapshot (a replicated array counts once per "
                  "device), over all devices.",
    "buffers": "Live device buffers at the snapshot: one per addressable shard of each live array.",
    "arrays": "Live `jax.Array` objects at the snapshot (for a directory of `.prof` files: live buffers).",
    "markers_seen": "Markers (`jaxmemprof.mark()`) recorded before this snapshot: the step count when the script "
                    "marks each step.",
    # allocator statistics
    "bytes_in_use": "The allocator's bytes in use (`memory_stats()`), summed over devices; empty where the backend "
                    "has no statistics (CPU).",
    "peak_bytes_in_use": "The allocator's high-water mark of bytes in use (`memory_stats()`), summed over devices; "
                         "empty on CPU.",
    "bytes_limit": "The most the allocator may hold (`memory_stats()`: device memory x the pool fraction), summed "
                   "over devices; empty on CPU.",
    "pool_bytes": "Bytes the BFC allocator has reserved from the device (`memory_stats()`), summed over devices; "
                  "empty on CPU or without a BFC pool.",
    "largest_free_block_bytes": "The largest free block of the allocator's pool (`memory_stats()`); over devices "
                                "the smallest; empty on CPU.",
    "fragmentation": "`(pool_bytes - bytes_in_use - largest_free_block_bytes) / (pool_bytes - bytes_in_use)`, 0 to "
                     "1 (over devices the worst); empty without allocator statistics.",
    "unattributed_bytes": "`bytes_in_use` minus `live_bytes` on the devices that report it: XLA temporaries, "
                          "allocator slack, library workspaces; empty on CPU.",
    "device": "The device, by platform and id (`cpu:0`, `gpu:0`, `tpu:0`); the run keeps the name JAX gave it "
              "(a TPU's `TPU_0(process=0,(0,0,0,0))`).",
    # executables and markers
    "executables": "Loaded executables at the snapshot (compiled XLA programs); empty when the run recorded none.",
    "code_bytes": "Generated code bytes of the executables loaded at the snapshot (0 on CPU); empty when the run "
                  "recorded none.",
    "marker": "The marker's number, 1, 2, ... in the order `jaxmemprof.mark()` was called.",
    "after_snapshot": "The last snapshot taken before the marker; empty when none was.",
    # sites
    "site": "Where the bytes were allocated: the innermost frame of the user's own code, `path:line (function)` "
            "(`<no stack>` when the allocation has no stack).",
    "file": "The site's path: relative to the current directory when inside it; an installed file from its package "
            "down.",
    "line": "The site's line number (0 when unknown).",
    "function": "The function of the site's frame.",
    "stack": "The user stack: the allocation's frames of user code, innermost first, joined by ` <- `.",
    "kind": "What a profile sample is: `buffer` (a live array's shard) or `executable` (a loaded program).",
    # arrays
    "array_id": "The array's identity in the run (never reused, unlike Python's `id()`).",
    "stack_id": "Its creation stack in the run's stacks table; empty when unknown.",
    "shape": "Its dimensions joined by `x` (`256x1024`); `()` for a scalar.",
    "dtype": "Its element type, e.g. `float32`.",
    "bytes": "Device bytes: the sum of its addressable shards' bytes (a replicated array counts once per device).",
    "nbytes": "The logical size of the whole array (`jax.Array.nbytes`), in bytes.",
    "shards": "Its addressable shards (device buffers), one per device it lies on.",
    "devices": "The devices of its shards, joined by `;`.",
    "first_snapshot": "The first snapshot it was seen alive in.",
    "last_snapshot": "The last snapshot it was seen alive in.",
    "first_t": "`t` of `first_snapshot`: seconds since the run began.",
    "last_t": "`t` of `last_snapshot`: seconds since the run began.",
    "end_snapshot": "The first snapshot it was gone from; empty while alive at the end.",
    "ended_t": "`t` of `end_snapshot`; empty while alive at the end.",
    "lifetime_s": "Seconds from `first_t` to `ended_t` (to the run's last snapshot while still alive): measured "
                  "between snapshots.",
    "lifetime_snapshots": "How many of the run's snapshots saw it alive.",
    "lifetime_steps": "Markers placed between `first_snapshot` and `end_snapshot` (to the end while alive): the "
                      "interval of `lifetime_s` in steps; empty when the run has no markers.",
    "how": "How it ended: `freed` (its last reference went), `deleted` (donated, or `.delete()`d) or `alive` (still "
           "alive at the run's last snapshot).",
    "alive_at_start": "True when the run's first snapshot saw it (its birth is censored: it may be older).",
    "alive_at_end": "True when it was alive at the run's last snapshot (its end is censored).",
    "shared": "True when each of its buffers was, at its first snapshot, held by another live array seen before it "
              "(a second `jax.Array` over the same device memory); its bytes count once, under the other array.",
    "process": "The process index in a multi-process job (0 for a single process).",
    # lifetimes per site
    "arrays_born": "Arrays made at the site (those alive in the first snapshot included, `shared` ones left out).",
    "bytes_born": "Device bytes of the arrays (or buffers) born there, each counted once.",
    "live_bytes_at_peak": "The site's bytes alive at the run's peak snapshot; over all sites they add up to the "
                          "peak's `live_bytes` (less shared arrays').",
    "median_lifetime_s": "The median `lifetime_s` of its arrays, censored ones included (measured to the run's end).",
    "p90_lifetime_s": "The 90th percentile of its arrays' `lifetime_s`, censored ones included.",
    "max_lifetime_s": "The longest `lifetime_s` of its arrays.",
    "byte_seconds": "The sum of `bytes x lifetime_s` over its arrays: the memory-time the site held, in byte-seconds.",
    "alive_at_end_bytes": "Device bytes of its arrays still alive at the run's last snapshot.",
    # estimated births and deaths (a directory of .prof files)
    "births": "Estimated buffers born: rises in the site's count of buffers of one size on one device between "
              "consecutive snapshots, summed (a lower bound).",
    "deaths": "Estimated buffers freed: falls in those counts between consecutive snapshots, summed (a lower bound).",
    "bytes_freed": "Bytes of the estimated `deaths` (count x buffer size).",
    "count_first": "Buffers the site held in the first snapshot (`count_first + births - deaths = count_last`).",
    "count_last": "Buffers the site held in the last snapshot.",
    "bytes_first": "Bytes the site held in the first snapshot.",
    "bytes_last": "Bytes the site held in the last snapshot.",
    "peak_count": "The most buffers the site held in one snapshot.",
    "peak_bytes": "The most live bytes of any snapshot of the run: the (snapshot) peak, XLA's temporaries not "
                  "included.",
    "snapshots": "How many snapshots the run has.",
    "estimated": "Always true: births and deaths estimated from counts between snapshots, not observed.",
    # buffer reuse
    "buffers_born": "Buffers (array shards) first seen in the run; one buffer seen through two arrays at once counts "
                    "once.",
    "reused_address": "Of those, buffers that took a device address an earlier, ended buffer held on the same device.",
    "reused_address_bytes": "Bytes of the `reused_address` buffers.",
    "reused_same_size": "Address reuses whose buffer has the same bytes as the earlier holder's.",
    "reused_same_size_bytes": "Bytes of the `reused_same_size` buffers.",
    "reused_immediately": "Same-size reuses first seen in the very snapshot where the earlier holder was first gone "
                          "(what donation looks like from outside).",
    "reused_immediately_bytes": "Bytes of the `reused_immediately` buffers.",
    "donated_in_place": "Immediate reuses whose earlier holder ended `deleted`: an output that took a donated "
                        "input's buffer (or one made right after `.delete()`).",
    "donated_in_place_bytes": "Bytes of the `donated_in_place` buffers.",
    "shared_bytes": "Bytes of the `shared` buffers (counted in none of the other columns).",
    "address": "The buffer's device address (an unsigned integer).",
    "previous_array_id": "The `array_id` of the earlier holder of the address.",
    "previous_site": "The earlier holder's site.",
    "previous_last_snapshot": "The last snapshot the earlier holder was seen alive in.",
    "previous_end_snapshot": "The first snapshot the earlier holder was gone from.",
    "previous_bytes": "The earlier holder's bytes.",
    "previous_how": "How the earlier holder ended (`freed` or `deleted`).",
    "gap_snapshots": "`first_snapshot - previous_end_snapshot`: 0 is an immediate reuse.",
    "same_size": "True when the new buffer has the earlier holder's bytes.",
    "immediately": "True for a same-size reuse first seen where the earlier holder was first gone.",
    # leaks
    "growth_bytes_per_s": "Theil-Sen slope of the site's live bytes against time, in bytes per second.",
    "growth_bytes_per_step": "Theil-Sen slope of the site's live bytes against `markers_seen`, from the first "
                             "marker on, in bytes per step; empty without markers.",
    "live_bytes_first": "The site's live bytes at the first snapshot used (the `exit` snapshot is left out).",
    "live_bytes_last": "The site's live bytes at the last snapshot used.",
    "arrays_first": "The site's live arrays at the first snapshot used (buffers, for a directory of profiles).",
    "arrays_last": "The site's live arrays at the last snapshot used (buffers, for a directory of profiles).",
    "p_value": "One-sided Mann-Kendall p-value of an increasing trend (a site is reported below 0.01).",
    "tau": "Kendall's tau-b of the site's live bytes against time, -1 to 1 (1: every later snapshot holds more; "
           "reported from 0.5).",
    "projected_bytes_after": "The site's live bytes projected after `projected_steps` more steps (else after "
                             "`projected_seconds` more), `live_bytes_last` plus the growth.",
    "projected_growth_bytes": "`projected_bytes_after - live_bytes_last`: what the leak adds over the projection.",
    "projected_steps": "Steps projected ahead (`report --steps`, default 1000); empty when the run has no markers.",
    "projected_seconds": "Seconds projected ahead when the run has no markers (as long again as the snapshots used "
                         "span); empty otherwise.",
    "projected_share_of_peak": "`projected_growth_bytes` as a fraction of the run's peak live bytes.",
    "device_limit_bytes": "The run's devices' bytes together (`report --device-memory` for each, else each device's "
                          "`bytes_limit` from its counters); empty where unknown. No projection goes past it.",
    "steps_to_limit": "Steps until the devices are full at the site's rate (0: the run ran out of memory); empty "
                      "where the device's size or the steps are unknown.",
    "snapshots_used": "Snapshots in the site's series for the trend test (the `exit` snapshot left out).",
    # recompiles
    "name": "The HLO module name of the executables (`jit_train_step`); empty for a directory of profiles.",
    "first_count": "Executables loaded at `first_snapshot`.",
    "last_count": "Executables loaded at the last snapshot before `exit` (0 when none is loaded then).",
    "max_count": "The most executables loaded at any snapshot.",
    "growth": "`last_count - first_count`.",
    "first_code_bytes": "Generated code bytes of the executables at `first_snapshot` (0 on CPU).",
    "last_code_bytes": "Generated code bytes of the executables at the last snapshot before `exit` (0 on CPU).",
    "new_after_setup": "Executables that appeared after the setup (the first marker; else the busiest jitted "
                       "function's first compile; else the first tenth of the run).",
    "suspect": "True for a recompilation: 5 or more executables, new ones in two or more snapshots after the setup, "
               "spread over a quarter of the time after it (a `recompile` finding).",
    "functions": "Jitted functions made at that line with that name (`jax.jit(f)` inside a loop makes a new one "
                 "each time).",
    "after_setup": "Of those, how many were made after the setup.",
    # memory inside jit
    "function_id": "The jitted function's identity in the run (the jit probe's).",
    "wrapper": ("How the user jitted it: " + "".join(f"`{w}`, " for w in WRAPPERS)
                + "or `package:function` for another library's wrapper."),
    "defined_at": "`path:line` where the jitted function is defined.",
    "jitted_at": "`path:line` where it was jitted: the innermost frame of user code that applied the wrapper.",
    "calls": "Calls the jit probe counted (a lower bound when `calls_complete` is false).",
    "calls_complete": "False when the probe stopped counting calls once its samples were taken (`calls` is then "
                      "shown as `>=N`).",
    "traced": "Calls made while another transformation traced (`grad`, `vmap`, `scan`, an outer `jit`): no device "
              "call, nothing read.",
    "compiles": ("Times the function was compiled during the run, as its compile cache grew: more than `signatures` "
                 "where JAX compiled one signature again, for what a signature does not tell apart (an argument "
                 "committed to a device in some calls and not in others, a weak type)."),
    "signatures": ("The function's signatures the jit probe recorded (its arguments' shapes and dtypes, static "
                   "values): XLA's figures are read once for each."),
    "donated": ("What it donates, as its wrapper takes it: argument numbers and names (`0, 1`)"
                + "".join(f", or {p}" for p in phrases("donate_option")) + "; empty when nothing."),
    "argument_bytes": "XLA's `memory_analysis()` of its largest signature: bytes of the arguments (per device).",
    "output_bytes": "`memory_analysis()`: bytes of the outputs (per device).",
    "alias_bytes": "`memory_analysis()`: bytes of outputs XLA writes into argument buffers (donation that took "
                   "effect, per device).",
    "temp_bytes": "`memory_analysis()`: bytes of XLA's temporaries inside the call (per device).",
    "generated_code_bytes": "`memory_analysis()`: bytes of the generated code (per device).",
    "call_peak_bytes": "`argument_bytes + output_bytes - alias_bytes + temp_bytes + generated_code_bytes`: what one "
                       "call holds at its peak (per device).",
    "share_of_peak": "`bytes / program_peak_bytes`: the row's share of the function's own peak.",
    "program_peak_bytes": "The most bytes the function's largest signature holds at any position of its sequence, "
                          "each slice of XLA's allocations once (the top of its curve).",
    "op": "The HLO op that made the buffer, e.g. `jit(step)/dot_general`.",
    "live_start": "Where the buffer's live range starts in the program's instruction sequence.",
    "live_end": "Where the buffer's live range ends in the instruction sequence.",
    "program_length": "Instructions in the program's sequence (the scale of `live_start` and `live_end`).",
    "at_peak": "True when the buffer is live at the program's own peak.",
    "position": "A position in the program's instruction sequence (a long sequence keeps 256: the position of most "
                "bytes in each of 256 equal stretches, so the program's peak is always one).",
    "position_bytes": "Bytes of the program's buffers live at that position, each buffer once (the sum of the "
                      "position's rows).",
    "program_peak_position": "The first position of the function's largest signature where it holds "
                             "`program_peak_bytes` (its `position_bytes` there).",
    # findings
    "rule": "The finding's rule (`leak`, `donate`, `allocator-fraction`, ...; see the facts below).",
    "case": "Which of the rule's cases (the words differ); empty when the rule has one.",
    "severity": "`high`, `medium`, `low` or `info`; a saving under 1 % of the run's peak makes it `info`.",
    "saving_bytes": ("What acting on the finding saves, in bytes, where known (empty otherwise), on one device: the "
                     "busiest, whose true peak the report leads with and as the report says it (`saves X per "
                     "device`); a donation on several devices falls there by its fact `saving_bytes_per_device` "
                     "(never below 0), not by its fall on all of them summed. A leak's is its site's projected "
                     "growth."),
    "message": "The finding in one full sentence, with its figures.",
    "fix": "What to change, in full, with the trade-offs.",
    "evidence": "Every figure behind the finding, in words.",
    "brief": "One short sentence for the terminal (`report`, `run`'s summary).",
    "brief_fix": "The change to make, short, for the terminal.",
    "saves": ("What acting on it saves, in words: `saves 4.02 MiB (compiled)` (XLA's compile of the fix), "
              "`saves up to 12.09 MiB (not verified)` (an upper bound), else the bytes; empty when nothing is."),
    "facts": "The figures and names behind the finding, as data (a JSON object; in CSV one JSON cell); see the facts "
             "of each rule below.",
    "saving_bytes_total": "What acting on it saves over all the processes it applies to, where known.",
    "processes": "The processes a job finding applies to, as text: runs of three or more as ranges (`0–3, 5, 7, 8`).",
    "process_count": "How many processes it applies to.",
    "process_list": "Those processes as a JSON list of numbers.",
    # the job's processes
    "host": "The host the process ran on (its manifest's `hostname`).",
    "finished": "True when the run ended and its manifest was completed (false: killed, or still running).",
    "running": "True while the run is still being recorded (its process holds the run's lock); false when it "
               "finished or was killed.",
    "exit_status": "The script's exit status; empty when the run did not finish.",
    "ended_by": "How the run ended: `exit`, `exception`, `oom`, `SIGINT` or `SIGTERM`; empty when it did not finish.",
    "peak_t": "`t` of the peak snapshot.",
    "peak_snapshot": "The first snapshot with the most live bytes.",
    "at_job_peak_bytes": "The process's live bytes at the job's peak (the snapshot in effect then; 0 when it was "
                         "not running).",
    "at_job_peak_snapshot": "The process's snapshot in effect at the job's peak; empty when it was not running.",
    "clock_offset_s": "This host's clock minus the job's reference clock, in seconds (see the job's `alignment`).",
    "error": "Why the process's data could not be read; empty when it could.",
    # show and diff
    "count": "Allocations: live array shards (one per device) and loaded executables, as the profile counts them.",
    "share": "`bytes / total bytes` of the profile, 0 to 1.",
    "cum_share": "`share` summed down the rows so far.",
    "base_bytes": "Bytes in the base profile.",
    "new_bytes": "Bytes in the new profile.",
    "delta_bytes": "`new_bytes - base_bytes`; over all rows they add up to the totals' difference.",
    "base_count": "Allocations in the base profile.",
    "new_count": "Allocations in the new profile.",
    "delta_count": "`new_count - base_count`.",
    # the report's summary
    "run": "The run directory, as given.",
    "command": "The command line the run recorded (`script.py ARGS`).",
    "duration_s": "Seconds from the start of the run to its end (wall clock).",
    "backend": "The JAX backend the run used (`cpu`, `gpu`, `tpu`).",
    "markers": "Markers (`jaxmemprof.mark()`) the run recorded.",
    "sampling_cpu_s": "CPU seconds the sampler spent taking the snapshots (thread time, summed).",
    "step_snapshots_share": "The wall time of the snapshots taken in the program's thread at its steps (trigger `step`), "
                            "over the time from its first marker to its last; the report says so from 0.10 on: a fast "
                            "loop ran that much slower, and fewer of its steps queued ahead of an accelerator (docs/tpu.md).",
    "peak_unattributed_bytes": "`unattributed_bytes` at the peak snapshot; empty on CPU.",
    "peak_unattributed_what": "What `peak_unattributed_bytes` are: `queued` (the peak snapshot had a jitted call in "
                              "flight and the chip's counters saw queued generations of its outputs: steps queued "
                              "ahead of the chip), `runtime` (what the allocator holds beyond live arrays: the "
                              "runtime's own, compiled programs and constants), `profile` (an XProf profile's memory "
                              "events: the allocator's bytes, the profile names no arrays); empty where there are none.",
    "step_snapshots_gap_s": "How much longer the median marked step with a snapshot at it took than the median step "
                            "without (seconds, from the markers' gaps); empty under 2 steps of either kind.",
    "step_snapshots_host_bound": "Whether `step_snapshots_gap_s` is the snapshots' own wall time (at least half their "
                                 "median): the loop was host-bound and the snapshots slowed it; false: a device-bound "
                                 "loop absorbed them (async dispatch); the report speaks of `step_snapshots_share` "
                                 "only where true.",
    "no_snapshot_why": "Why the run has no snapshot: `running`, `killed`, `no-memory-events` (an XProf profile "
                       "without them), `no-arrays` (the program never put an array on a JAX device); empty where it "
                       "has one.",
    "true_peak_total_bytes": "The estimated true peak on all devices summed: the larger of the live peak and the "
                             "call that holds `true_peak_bytes` on all its devices (the live bytes before it minus its "
                             "arguments already on its devices plus the call peak of the signature it ran, on each "
                             "device it ran on); the same moment as `true_peak_bytes` on one device, and the answer "
                             "says when each is where they differ on several; empty without jit probe data.",
    "peak_elsewhere": "Where the run's (true) peak is when it is not during a call of the finding's function "
                      "(`during a call of eval_step`): acting on it does not lower the peak, so its severity is "
                      "`info`; its saving is still its own.",
    "true_peak_bytes": "The estimated true peak on the busiest device (what a device must hold: what `fit` and "
                       "`check --max-true-peak` take, and what every output leads with): the larger of the busiest "
                       "device's live peak and the largest call's peak there (live bytes before the call minus its "
                       "arguments plus XLA's call peak, per device); `true_peak_total_bytes` is the same on all "
                       "devices summed; empty without jit probe data.",
    "true_peak_where": "When the estimated true peak on the busiest device happens (`during a call of train_step`; "
                       "`at the live peak`: the snapshots' peak; on several devices, `at snapshot 3 on cpu:0`: the "
                       "busiest device's own peak of the snapshots, where it is not at the live peak).",
    "arrays_seen": "Arrays the run recorded (rows of arrays.csv).",
    "per_array_data": "True for a run directory; false for a directory of `.prof` files (no per-array records: "
                      "lifetimes are estimated, no reuse).",
    "holders": "The Python references found holding the run's arrays: the rows of holders.csv.",
    "outside_jit": "Operations the program ran outside jit between its jitted calls, as JAX compiled them, by the "
                   "user's line that ran them (`dot, add at mnist.py:20 (accuracy)`; '' where none): what they "
                   "hold is seen only where a snapshot fell, not counted in the true peak (docs/advice.md).",
    "holder_searches": "Searches the run made for the Python references holding its arrays (docs/holders.md).",
    "holder_search_cpu_s": "CPU seconds those searches took, in the searching thread.",
    "program_thread_wall_s": "Wall seconds the snapshots taken in the program's own thread (at its marked steps, "
                             "and its own `jaxmemprof.snapshot()`), their holder searches included, took from it "
                             "(waits for the GIL included); empty without any.",
    "program_thread_cpu_s": "CPU seconds of the same snapshots and searches, in the program's thread.",
    # will it fit (report --device-memory)
    "device_bytes": "The device's memory, in bytes (`--device-memory`).",
    "peak_source": "Which figure the peak is: `true_peak_bytes` (the true peak on the busiest device), "
                   "`peak_bytes_in_use`, `device_live_bytes` (the most live bytes on one device) or `live_bytes`.",
    "peak_device": "The device the peak was measured on, where known.",
    "needed_bytes": "The pool the peak needs: the peak + 5 % + 64 MiB (allocator rounding and slack, XLA's small "
                    "buffers); on a TPU, which has no pool, the peak itself.",
    "default_fraction": "XLA's default pool fraction, 0.75 of the device; 1 on a TPU (no pool: the whole device).",
    "default_pool_bytes": "`default_fraction x device_bytes`.",
    "fits_by_default": "True when one process's `needed_bytes` fits the default pool.",
    "fraction_needed": "The smallest whole percent of the device that holds `needed_bytes`, as a fraction (may "
                       "exceed 1); on a TPU, `needed_bytes / device_bytes`.",
    "fits_at_all": "True when `fraction_needed x processes` is at most 0.95 (on a TPU: at most 1).",
    "settings": "Environment variable -> value to set for it to fit (`{}` when nothing is needed).",
    "jaxlib_version": "The jaxlib version that names the fraction variable (the run's, unless given).",
    "fraction_variable": "The fraction variable that jaxlib reads: `XLA_CLIENT_MEM_FRACTION` (jaxlib 0.4.32 on) or "
                         "`XLA_PYTHON_CLIENT_MEM_FRACTION`.",
    "environment": "The run's allocation environment (`XLA_PYTHON_CLIENT_*`, `XLA_CLIENT_MEM_FRACTION`, "
                   "`TF_GPU_ALLOCATOR`, `XLA_FLAGS`) as recorded.",
    # report --json's other sections
    "schema_version": "The JSON document's schema version (2; 1 before the summary's true peaks were named "
                      "`true_peak_bytes`, `true_peak_total_bytes` and `true_peak_where`).",
    "inputs": "The inputs as given on the command line (a `RUN@SEL` selector resolved to `RUN@N`).",
    "warnings": "Warnings about the input (damage, what the jit probe could not read), one string each.",
    "summary": "The run's headline figures (the summary section below).",
    "manifest": "The run's `manifest.json` as recorded (docs/recording.md, the run directory).",
    "peak_sites": "What held the peak snapshot, by site (rows of `show RUN@peak`).",
    "timeline": "The rows of timeline.csv.",
    "sites": "The rows of sites.csv.",
    "lifetimes": "The rows of lifetimes.csv (estimated ones when `lifetimes_estimated`).",
    "lifetimes_estimated": "True when `lifetimes` holds estimated births and deaths (a directory of `.prof` files).",
    "reuse": "Buffer reuse: `by_device` (reuse_devices.csv), `by_site` (reuse.csv), `buffers`, `unknown_addresses`, "
             "`note`.",
    "by_device": "The rows of reuse_devices.csv.",
    "by_site": "The rows of reuse.csv.",
    "unknown_addresses": "Of `buffers`, those with no recorded address: not matched.",
    "note": "What snapshots can and cannot see of reuse, in words.",
    "leaks": "The rows of leaks.csv.",
    "recompiles": "The rows of recompiles.csv.",
    "jit_memory": "The rows of jit.csv.",
    "jit_peak": "The rows of jit_peak.csv.",
    "jit_buffers": "The rows of jit_buffers.csv.",
    "jit_curve": "The rows of jit_curve.csv.",
    "roles": "What the memory is: `where` (the call), `function`, `peak_bytes` (its peak on the busiest device), "
             "`by_role` (roles.csv's rows), `owners` (owners.csv's rows).",
    "by_role": "The rows of roles.csv.",
    "owners": "The rows of owners.csv.",
    "fit": "`report --device-memory SIZE`'s figures (the fit section below); null without it.",
    # run --target (docs/targets.md)
    "target": "The TPU slice compiled for, as `run --target` named it (`v5e:2x2`).",
    "chip": "The slice's chip, as JAX names its device kind (`TPU v5 lite`).",
    "hbm_bytes": "One chip's HBM, as Google Cloud publishes it for the generation (docs/targets.md).",
    "usable_bytes": "What XLA:TPU may use of one device of the slice, its own figure (its out-of-memory message's "
                    "\"available HBM\": docs/targets.md).",
    "run_backend": "The platform the run itself ran on (`cpu`, `gpu`).",
    "run_peak_bytes": "The run's own backend's peak, counted as `peak_bytes` is: its call peak plus the live bytes "
                      "outside the call.",
    "run_call_peak_bytes": "The run's own backend's XLA call peak for the same signature.",
    "run_argument_bytes": "The run's own backend's `memory_analysis()` of the same signature: arguments.",
    "run_output_bytes": "The same: outputs.",
    "run_alias_bytes": "The same: outputs aliased to arguments.",
    "run_temp_bytes": "The same: temporaries.",
    "run_generated_code_bytes": "The same: generated code.",
    "donated_peak_bytes": "The peak with the step's carried state donated, compiled for the slice at the same batch.",
    "bfloat16_peak_bytes": "The peak with every float32 argument as bfloat16, compiled for the slice at the same batch.",
    "asked": "The slices `run --target` named, in its order.",
    "targets": "A run recorded with `run --target`: the step compiled for each TPU slice (the targets section "
               "below); null for a run recorded without it.",
    # run --plan (docs/plan.md)
    "plan": "A run recorded with `run --plan`: the planned steps' peak against the batch (the plan section below); "
            "null for a run recorded without it.",
    "variant": "What was compiled: `recorded` (the step as the run jitted it), `donated` (its carried state "
               "donated), `bfloat16` (every float32 argument as bfloat16).",
    "batch": "The batch the step was compiled for: the size of the batch inputs' dimension `--plan-axis`.",
    "scale": "`batch` over the recorded batch.",
    "live_outside_bytes": "Bytes live on the device outside the call: live just before the recorded call, less "
                          "its arguments there, those already on the call's devices (an array copied onto them "
                          "stays alive beside its copies; empty where they were not counted).",
    "source": "`run` (the run's own compile of the recorded batch), `compiled` (compiled by the plan at the end "
              "of the run, from the arguments' shapes) or `search` (compiled in the search for the largest batch "
              "that fits, `--plan-device-memory`).",
    "compile_s": "Seconds the plan's lower and compile took (0 for the run's own figures).",
    "fits": "With `--device-memory`: whether the peak fits XLA's default pool by the fit rule (the peak plus 5 % and "
            "64 MiB within 0.75 of the device).",
    "points": "Compiled batches the line is fitted through.",
    "batch_min": "The smallest compiled batch.",
    "batch_max": "The largest compiled batch.",
    "intercept_bytes": "The line's peak at batch 0: `peak = intercept_bytes + bytes_per_example x batch` "
                       "(least squares through the points).",
    "bytes_per_example": "The line's slope: bytes more per example of the batch.",
    "affine": "Whether every point lies within 1 % of its own peak from the line (with 2 points, always).",
    "max_residual_bytes": "The largest distance of a point from the line, in bytes.",
    "largest_batch": "With `--device-memory`: the largest compiled batch whose peak fits XLA's default pool by "
                     "the fit rule, below the smallest compiled one that does not; 0 when even the smallest does "
                     "not fit.",
    "largest_batch_with_settings": "The same within 0.95 of the device (the fraction variable set to .95).",
    "next_batch": "The smallest compiled batch above `largest_batch`, which does not fit (empty: every compiled batch fits).",
    "at_batch": "The recorded variant's `largest_batch` on the same device: where each fix is compared.",
    "peak_at_batch_bytes": "The variant's peak compiled at `at_batch` (empty: not compiled there).",
    "saving_at_batch_bytes": "The recorded variant's peak at `at_batch` less this variant's: what the fix saves "
                             "there (negative: it needs more).",
    "backends": "The platforms whose XLA compiled the plan (`cpu`, `gpu`, `tpu`).",
    "searched_bytes": "The device `run --plan-device-memory` searched the largest batch for by compiles (null: "
                      "none); the plan's `device_bytes` unless `report --device-memory` asks for another.",
    "events": "What the recorder could not plan, one sentence each.",
    "models": "The rows of plan_models.csv.",
    "signature": "The recorded signature the plan was made from (jit_compiles' signature).",
    "cells": "The notebook cells a `%%jaxmemprof` magic recorded (`In [5]`, `In [7] to In [9]`); null for a script.",
    "raised": "What the recorded notebook cell raised (`ValueError: bad value`); null when nothing did.",
    "largest_signature": "Whether the signature is its function's largest (by its program's peak): the one the "
                         "report and the page show.",
    "recorded_batch": "The batch the run used.",
    "axis": "The batch's dimension in the inputs scaled (`--plan-axis`).",
    "batch_inputs": "The inputs scaled, by their path in your tree (`x`, `batch['image']`).",
    "batch_flow": "How those inputs flow from call to call: `per-step` (new at every call) or `held` (the same "
                  "arrays at every call).",
    "failed": "Compiles that failed (plan.csv's `error` says why), other than those refused as too large.",
    "refused_at": "Batches whose compile XLA refused as too large for the device (XLA:TPU's RESOURCE_EXHAUSTED at "
                  "compile): an answer, they do not fit.",
    "rank": "Its place among the run's jitted functions by XLA's call peak: 1 for the largest.",
    "not_planned": "The run's other jitted functions with XLA's figures, not planned: `[function, call peak]`.",
    "advised": "The arguments the report's donation finding donates (null: no such finding).",
    "notes": "Fixes the report hints that the plan cannot compile from outside the step, and why.",
    "findings": "The findings, ranked: the columns of findings.csv, with `facts` as an object.",
    # a job's JSON
    "job": "The job's own figures: `path, processes, alignment, peak_bytes, peak_t, unfinished`.",
    "path": "The job directory.",
    "alignment": "How the processes' clocks were aligned: `jax.distributed.initialize`, `wall clocks`, or `mixed: "
                 "...`.",
    "unfinished": "The processes that did not finish.",
    # show and diff JSON
    "by": "What the rows are grouped by: `site`, `function`, `file`, `stack`, `device`, `kind` or (show "
          "RUN@SEL) `owner`.",
    "value_type": "The profile's sample value reported, `type/unit` (`space/bytes`).",
    "totals": "Totals over every group (not only the rows shown): `bytes, count`; for diff the six diff columns.",
    "kinds": "Per kind (`buffer`, `executable`): bytes and count (for diff: the diff columns).",
    "omitted": "What `--top` left out: `rows`, and their `bytes` and `count` (for diff `delta_bytes`, "
               "`delta_count`).",
    "unchanged_rows": "Groups equal on both sides, left out of `rows` (diff).",
    "rows": "The rows, with exactly the CSV columns.",
    # check --json
    "baseline": "The `--baseline` run; null without one.",
    "ok": "True when every check held (exit status 0).",
    "checks": "One object per check asked for.",
    "check": "Which limit: `max-peak`, `max-true-peak`, `max-growth`, `fail-on`, `max-increase` or `target-fits`.",
    "limit": "The limit given (bytes, bytes per step or second, or a percentage); null for `fail-on`.",
    "value": "What was measured, in `unit`.",
    "unit": "`bytes`, `bytes/step`, `bytes/s`, `findings` or `percent`.",
    "held": "True when the value is within the limit.",
    "details": "The rows behind it: `[site, bytes]` pairs (the peak's top sites, or the growing sites' growth), or "
               "the findings' `[rule, severity, site]`.",
    "where": "When the estimated true peak happens (`max-true-peak`).",
    "rules": "The rules `--fail-on` names.",
    "what": "`peak` or `true peak` (`max-increase`).",
    "baseline_bytes": "The baseline's figure (`max-increase`).",
}

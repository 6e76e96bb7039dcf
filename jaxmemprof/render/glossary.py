"""One name per idea: what every CSV and JSON column means, and the two docs
made from it.

- ``GLOSSARY``: every column or key name that jaxmemprof writes to CSV or
  JSON -> one sentence (units, and how it is computed, in a few words).
- ``IN_TABLE``: table -> {name: sentence}, where a name says something
  narrower (or other) in that one table than ``GLOSSARY`` says.
- ``FACTS``: (rule, case) -> the names of a finding's ``facts``, in the order
  the rule writes them; ``FACT_MEANINGS``: rule -> {fact: sentence} where a
  fact is not what ``GLOSSARY`` says.
- ``TERMS``: the words the docs use (site, snapshot, peak, donation, ...).

The column lists come from the analyses' own constants (imported here, never
retyped); where a table has none (the job's processes.csv, job_peak_sites.csv
and job_timeline.csv, and a finding's facts) the list is kept here and
tests/test_columns_doc.py checks it against real output.

``python -m jaxmemprof.render.glossary`` writes docs/columns.md (every output
file and JSON section, its rows, its columns in order with their meaning, and
the facts of each finding rule) and docs/glossary.md (the terms);
``--check`` exits 1 when the committed files differ; ``--print`` writes
columns.md to stdout (``--print --glossary``: glossary.md).
"""

from __future__ import annotations

import ast
import inspect
import sys
from dataclasses import dataclass, fields
from pathlib import Path

REGENERATE = "python -m jaxmemprof.render.glossary"

# -- the meaning of every name -------------------------------------------------------

GLOSSARY: dict[str, str] = {
    # snapshots and time
    "snapshot": "The snapshot's number in the run: 1, 2, ... in the order taken (a thinned one keeps its number).",
    "t": "Seconds since the run began (wall clock), at the snapshot or event of the row.",
    "trigger": "Why the snapshot was taken: `first`, `interval`, `exit`, `exception`, `oom`, `signal` or `api` "
               "(`jaxmemprof.snapshot()`).",
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
    "device": "The device as JAX names it (`cpu:0`, `cuda:0`, `TPU_0`).",
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
    "wrapper": "How the user jitted it: `jax.jit`, `jax.pmap`, `flax.nnx.jit`, `equinox.filter_jit`, or "
               "`package:function` for another library's wrapper.",
    "defined_at": "`path:line` where the jitted function is defined.",
    "jitted_at": "`path:line` where it was jitted: the innermost frame of user code that applied the wrapper.",
    "calls": "Calls the jit probe counted (a lower bound when `calls_complete` is false).",
    "calls_complete": "False when the probe stopped counting calls once its samples were taken (`calls` is then "
                      "shown as `>=N`).",
    "traced": "Calls made while another transformation traced (`grad`, `vmap`, `scan`, an outer `jit`): no device "
              "call, nothing read.",
    "compiles": "Signatures the function was compiled for, as its compile cache grew during the run.",
    "donated": "What it donates, as its wrapper takes it: argument numbers and names (`0, 1`), or equinox's "
               "`donate=...`; empty when nothing.",
    "argument_bytes": "XLA's `memory_analysis()` of its largest signature: bytes of the arguments (per device).",
    "output_bytes": "`memory_analysis()`: bytes of the outputs (per device).",
    "alias_bytes": "`memory_analysis()`: bytes of outputs XLA writes into argument buffers (donation that took "
                   "effect, per device).",
    "temp_bytes": "`memory_analysis()`: bytes of XLA's temporaries inside the call (per device).",
    "generated_code_bytes": "`memory_analysis()`: bytes of the generated code (per device).",
    "call_peak_bytes": "`argument_bytes + output_bytes - alias_bytes + temp_bytes + generated_code_bytes`: what one "
                       "call holds at its peak (per device).",
    "share_of_peak": "`bytes / program_peak_bytes`: the row's share of the function's own peak.",
    "program_peak_bytes": "XLA's live-range peak of the function's largest signature: the bytes of its buffers live "
                          "at that point (each once).",
    "op": "The HLO op that made the buffer, e.g. `jit(step)/dot_general`.",
    "live_start": "Where the buffer's live range starts in the program's instruction sequence.",
    "live_end": "Where the buffer's live range ends in the instruction sequence.",
    "program_length": "Instructions in the program's sequence (the scale of `live_start` and `live_end`).",
    "at_peak": "True when the buffer is live at the program's own peak.",
    "position": "A position in the program's instruction sequence (a long sequence keeps 256: the position of most "
                "bytes in each of 256 equal stretches, so XLA's peak is always one).",
    "position_bytes": "Bytes of the program's buffers live at that position, each buffer once (the sum of the "
                      "position's rows).",
    "program_peak_position": "Where XLA's live-range peak of the function's largest signature is in its sequence "
                             "(its `position_bytes` there are `program_peak_bytes`).",
    # findings
    "rule": "The finding's rule (`leak`, `donate`, `allocator-fraction`, ...; see the facts below).",
    "case": "Which of the rule's cases (the words differ); empty when the rule has one.",
    "severity": "`high`, `medium`, `low` or `info`; a saving under 1 % of the run's peak makes it `info`.",
    "saving_bytes": "What acting on the finding saves, in bytes, where known (empty otherwise).",
    "message": "The finding in one full sentence, with its figures.",
    "fix": "What to change, in full, with the trade-offs.",
    "evidence": "Every figure behind the finding, in words.",
    "brief": "One short sentence for the terminal (`report`, `run`'s summary).",
    "brief_fix": "The change to make, short, for the terminal.",
    "facts": "The figures and names behind the finding, as data (a JSON object; in CSV one JSON cell); see the facts "
             "of each rule below.",
    "saving_bytes_total": "What acting on it saves over all the processes it applies to, where known.",
    "processes": "The processes a job finding applies to, as text: runs of three or more as ranges (`0–3, 5, 7, 8`).",
    "process_count": "How many processes it applies to.",
    "process_list": "Those processes as a JSON list of numbers.",
    # the job's processes
    "host": "The host the process ran on (its manifest's `hostname`).",
    "finished": "True when the run ended and its manifest was completed (false: killed, or still running).",
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
    "peak_unattributed_bytes": "`unattributed_bytes` at the peak snapshot; empty on CPU.",
    "estimated_true_peak_bytes": "The estimated true peak on all devices summed: the most, over sampled calls (and "
                                 "compiled signatures no sampled call ran), of the live bytes at the snapshot before "
                                 "the call minus its arguments plus the call peak of the signature it ran, on each "
                                 "device it ran on; at least the snapshot peak; empty without jit probe data.",
    "peak_elsewhere": "Where the run's (true) peak is when it is not during a call of the finding's function "
                      "(`during a call of eval_step`): acting on it does not lower the peak, so its severity is "
                      "`info`; its saving is still its own.",
    "estimated_true_peak_device_bytes": "The estimated true peak on the busiest device (what `fit` and `check "
                                        "--max-true-peak` take): as `estimated_true_peak_bytes`, on one device, "
                                        "XLA's figures being per device; at least the busiest device's snapshot "
                                        "peak.",
    "estimated_true_peak_where": "When the estimated true peak happens (`during a call of train_step`, or `at the "
                                 "snapshot peak`).",
    "arrays_seen": "Arrays the run recorded (rows of arrays.csv).",
    "per_array_data": "True for a run directory; false for a directory of `.prof` files (no per-array records: "
                      "lifetimes are estimated, no reuse).",
    # will it fit (report --device-memory)
    "device_bytes": "The device's memory, in bytes (`--device-memory`).",
    "peak_source": "Which figure the peak is: `estimated_true_peak_bytes`, `peak_bytes_in_use`, `device_live_bytes` "
                   "(the most live bytes on one device) or `live_bytes`.",
    "peak_device": "The device the peak was measured on, where known.",
    "needed_bytes": "The pool the peak needs: the peak + 5 % + 64 MiB (allocator rounding and slack, XLA's small "
                    "buffers).",
    "default_fraction": "XLA's default pool fraction, 0.75 of the device.",
    "default_pool_bytes": "`default_fraction x device_bytes`.",
    "fits_by_default": "True when one process's `needed_bytes` fits the default pool.",
    "fraction_needed": "The smallest whole percent of the device that holds `needed_bytes`, as a fraction (may "
                       "exceed 1).",
    "fits_at_all": "True when `fraction_needed x processes` is at most 0.95.",
    "settings": "Environment variable -> value to set for it to fit (`{}` when nothing is needed).",
    "jaxlib_version": "The jaxlib version that names the fraction variable (the run's, unless given).",
    "fraction_variable": "The fraction variable that jaxlib reads: `XLA_CLIENT_MEM_FRACTION` (jaxlib 0.4.32 on) or "
                         "`XLA_PYTHON_CLIENT_MEM_FRACTION`.",
    "environment": "The run's allocation environment (`XLA_PYTHON_CLIENT_*`, `XLA_CLIENT_MEM_FRACTION`, "
                   "`TF_GPU_ALLOCATOR`, `XLA_FLAGS`) as recorded.",
    # report --json's other sections
    "schema_version": "The JSON document's schema version (1).",
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
    # run --plan (docs/plan.md)
    "plan": "A run recorded with `run --plan`: the planned steps' peak against the batch (the plan section below); "
            "null for a run recorded without it.",
    "variant": "What was compiled: `recorded` (the step as the run jitted it), `donated` (its carried state "
               "donated), `bfloat16` (every float32 argument as bfloat16).",
    "batch": "The batch the step was compiled for: the size of the batch inputs' dimension `--plan-axis`.",
    "scale": "`batch` over the recorded batch.",
    "live_outside_bytes": "Bytes live on the device outside the call: live just before the recorded call, less "
                          "its arguments there (empty where they were not counted).",
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
    "largest_batch": "With `--device-memory`: the largest batch whose peak fits XLA's default pool by the fit "
                     "rule; 0 when none does; empty when the peak does not grow with the batch. Where the points do "
                     "not fit a line, the largest compiled batch that fits.",
    "largest_batch_with_settings": "The same within 0.95 of the device (the fraction variable set to .95).",
    "extrapolated": "Whether `largest_batch` lies beyond the compiled batches (read off the line, not compiled).",
    "at_batch": "The recorded variant's `largest_batch` on the same device: where each fix is compared.",
    "peak_at_batch_bytes": "The variant's peak at `at_batch`.",
    "saving_at_batch_bytes": "The recorded variant's peak at `at_batch` less this variant's: what the fix saves "
                             "there (negative: it needs more).",
    "backends": "The platforms whose XLA compiled the plan (`cpu`, `gpu`, `tpu`).",
    "searched_bytes": "The device `run --plan-device-memory` searched the largest batch for by compiles (null: "
                      "none); the plan's `device_bytes` unless `report --device-memory` asks for another.",
    "events": "What the recorder could not plan, one sentence each.",
    "models": "The rows of plan_models.csv.",
    "signature": "The recorded signature the plan was made from (jit_compiles' signature).",
    "recorded_batch": "The batch the run used.",
    "axis": "The batch's dimension in the inputs scaled (`--plan-axis`).",
    "batch_inputs": "The inputs scaled, by their path in your tree (`x`, `batch['image']`).",
    "batch_flow": "How those inputs flow from call to call: `per-step` (new at every call) or `held` (the same "
                  "arrays at every call).",
    "failed": "Compiles that failed (plan.csv's `error` says why).",
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
    "check": "Which limit: `max-peak`, `max-true-peak`, `max-growth`, `fail-on` or `max-increase`.",
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
        "name": "The HLO value, as XLA's live ranges name it (`sort.0{}`).",
        "site": "The user line that made it, or `argument NAME` for an argument's buffer.",
        "kind": "`argument`, `output`, `aliased` (an argument XLA writes an output into: donation), `temporary` or "
                "`constant`.",
        "shape": "XLA's shape, e.g. `f32[1024,1024]`.",
        "bytes": "The buffer's size in bytes.",
    },
    "jit_curve.csv": {
        "function": "The jitted function's name.",
        "site": "The user line whose buffers these are, `argument NAME` for an argument's, or `other lines` for the "
                "lines past the 8 that hold most at any position.",
        "bytes": "Bytes of that line's buffers live at the position.",
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
        "site": "The site most to blame, where there is one.",
        "bytes": "The run's figure (`max-increase`).",
    },
}

# -- what each finding rule says, as data ------------------------------------------------

# Where the allocator rules read their peak (allocator.Peak.facts()).
_PEAK = ("peak_bytes", "peak_source", "peak_device")
_FRACTION_FIX = ("set", "unset", "jaxlib_version")  # allocator.fraction_fix()
_FRACTION_BASE = _PEAK + ("needed_bytes", "device", "bytes_limit", "fraction", "fraction_variable", "fraction_value",
                          "device_bytes", "fraction_needed")

FACTS: dict[tuple[str, str], tuple[str, ...]] = {
    ("leak", ""): ("growth_bytes_per_step", "growth_bytes_per_s", "live_bytes_first", "live_bytes_last",
                   "snapshots_used", "arrays_last", "tau", "p_value", "projected_bytes_after",
                   "projected_growth_bytes", "projected_steps", "projected_seconds", "projected_share_of_peak"),
    ("recompile", "executables"): ("name", "executables", "first_count", "first_snapshot", "last_count",
                                   "generated_code_bytes"),
    ("recompile", "rejit"): ("function", "functions", "after_setup"),
    ("donate", ""): ("function", "wrapper", "defined_at", "arguments", "by_position", "leaves", "calls_sampled",
                     "devices", "saving_bytes_per_device", "first_kept", "also_donates", "change", "option",
                     "argnums", "argnames", "pass_first", "edited_line", "peak_elsewhere"),
    ("donation-unusable", ""): ("function", "arguments", "lost_leaves", "outputs", "call_index", "jax_warned"),
    ("donated-then-used", ""): ("error", "donating"),
    ("allocator-platform", ""): ("because",) + _PEAK,
    ("allocator-fraction", "raise"): _FRACTION_BASE + ("setting",) + _FRACTION_FIX,
    ("allocator-fraction", "cannot"): _FRACTION_BASE + ("fraction_env_name",),
    ("allocator-preallocate", "shared"): _PEAK + ("processes", "fraction", "fraction_variable", "preallocate",
                                                  "needed_bytes", "share", "share_percent", "device_bytes",
                                                  "bytes_each") + _FRACTION_FIX,
    ("allocator-preallocate", "underused"): _PEAK + ("device", "pool_bytes", "fraction", "needed_bytes",
                                                     "fraction_needed") + _FRACTION_FIX,
    ("allocator-fragmentation", ""): ("device", "snapshot", "fragmentation", "pool_bytes", "bytes_in_use",
                                      "largest_free_block_bytes", "free_bytes", "preallocate", "preallocates"),
    ("allocator-env", "both-refused"): ("fraction_value", "old_fraction_value", "jaxlib_version", "backend", "backend_seen",
                                        "jax_platforms"),
    ("allocator-env", "both-old-jaxlib"): ("fraction_value", "old_fraction_value", "jaxlib_version"),
    ("allocator-env", "new-name-ignored"): ("fraction_value", "old_fraction_value", "jaxlib_version"),
    ("allocator-env", "preallocate-spelling"): ("preallocate",),
    ("fit", ""): ("device_bytes", "peak_bytes", "peak_source", "peak_device", "needed_bytes", "default_fraction",
                  "default_pool_bytes", "fits_by_default", "fraction_needed", "fits_at_all", "settings",
                  "jaxlib_version", "fraction_variable", "processes", "backend", "fraction_policy_set", "underused"),
    ("remat", ""): ("function", "program_peak_bytes", "kept_bytes", "buffers", "by_line", "peak_elsewhere"),
    ("narrow-dtype", ""): ("function", "program_peak_bytes", "float32_bytes", "by_line", "peak_elsewhere"),
    ("imbalance", ""): ("process", "peak_bytes", "median_bytes", "min_bytes", "median_process",
                        "median_process_bytes", "excess_bytes", "sites", "processes", "process_count"),
    ("unfinished", ""): ("processes",),
    ("replicated", ""): ("function", "arrays", "array_count", "replicated_bytes", "meshes"),
    ("output-history", ""): ("snapshot", "entries", "entries_holding", "held_bytes", "freed_bytes", "arrays",
                             "ipython_version", "reset_frees"),
}
# Facts that only some findings of a rule carry (the others leave them out).
OPTIONAL_FACTS = {("donate", ""): ("argnums", "argnames", "pass_first", "peak_elsewhere"),
                  ("remat", ""): ("peak_elsewhere",), ("narrow-dtype", ""): ("peak_elsewhere",)}

# What each rule finds, and where (the module that makes it).
RULE_SUMMARY: dict[str, str] = {
    "leak": "A site whose live bytes grow steadily over the run (Mann-Kendall, Theil-Sen; analysis/leaks.py).",
    "recompile": "A function compiled again and again: executables that keep coming (case `executables`), or a "
                 "function jitted anew at one line (case `rejit`) (analysis/leaks.py).",
    "donate": "Arguments of a jitted function to donate: every sampled call dropped them and each leaf has an "
              "output to take its buffer (analysis/advice/donation.py).",
    "donation-unusable": "A donated argument no output can take: its buffer stays alive "
                         "(analysis/advice/donation.py).",
    "donated-then-used": "The program used an array after donating it (analysis/advice/donation.py).",
    "allocator-platform": "Measure exact use once with `XLA_PYTHON_CLIENT_ALLOCATOR=platform`, after another "
                          "allocator finding or an OOM (analysis/advice/allocator.py).",
    "allocator-fraction": "The peak needs more than the allocator's limit: raise the fraction (case `raise`), or no "
                          "fraction holds it (case `cannot`) (analysis/advice/allocator.py).",
    "allocator-preallocate": "Preallocate less: processes sharing a GPU (case `shared`), or a peak far below the "
                             "pool (case `underused`) (analysis/advice/allocator.py).",
    "allocator-fragmentation": "A pool of 1 GiB or more at least 30 % fragmented (analysis/advice/allocator.py).",
    "allocator-env": "The allocation environment is wrong for the jaxlib that ran (cases `both-refused`, "
                     "`both-old-jaxlib`, `new-name-ignored`, `preallocate-spelling`) (analysis/advice/allocator.py).",
    "fit": "Whether the run fits a device of `--device-memory SIZE`; its case is the fit's "
           "(analysis/advice/capacity.py).",
    "remat": "Activations kept for the backward pass hold a quarter or more of a function's own peak "
             "(analysis/inside_jit.py).",
    "narrow-dtype": "float32 temporaries hold half or more of a function's own peak (analysis/inside_jit.py).",
    "imbalance": "A job's process holds much more than the median process at its peak (job only; "
                 "analysis/job.py).",
    "unfinished": "Processes of a job that did not finish (job only; analysis/job.py).",
    "replicated": "Inputs of a jitted function, 1 MiB or more a device, held whole on each of several devices "
                  "while a mesh axis of the program's divides one of their dimensions (analysis/advice/sharding.py).",
    "output-history": "Live arrays that only IPython's output history (`Out[N]`, `_N`, `_`) keeps, at a notebook "
                      "run's end (analysis/history.py; docs/notebooks.md).",
}

# What a fact means where GLOSSARY does not say it (or says another table's meaning).
_FN = "The jitted function's name."
FACT_MEANINGS: dict[str, dict[str, str]] = {
    "leak": {},
    "recompile": {
        "name": "Case `executables`: the HLO module name (`jit_train_step`, empty for a directory of profiles), as "
                "in recompiles.csv.",
        "function": "Case `rejit`: the jitted functions' name.",
        "executables": "The most executables loaded at any snapshot (`max_count`).",
        "first_snapshot": "The first snapshot its executables were loaded in.",
        "generated_code_bytes": "Generated code bytes of its executables at the last snapshot (else the first); 0 on "
                                "CPU.",
    },
    "donate": {
        "function": _FN,
        "arguments": "The arguments to donate: parameter names, or positions as strings (`'0'`).",
        "by_position": "Per argument, true when it is known only by its position.",
        "leaves": "`[argument, input leaf, output leaf]` per leaf matched (`params[0][0] float32[512,1024]` -> "
                  "`output[0][0][0]`).",
        "calls_sampled": "Calls the jit probe sampled (the first ones, then one in 50).",
        "devices": "Devices the arguments' leaves lie on (XLA's figures are per device).",
        "saving_bytes_per_device": "`saving_bytes / devices`.",
        "first_kept": "Arguments whose first call's value stayed referenced after it (donating deletes it).",
        "also_donates": "What equinox's `donate=\"all\"` donates besides the arguments (dropped with each call too).",
        "change": "The kind of change: `jit` (add `option` to the wrapper), `equinox`, `equinox-restructure` (pass "
                  "`pass_first` first and donate all but it) or `through-wrapper` (a library's own wrapper).",
        "option": "The option to add, as the wrapper takes it (`donate_argnums=(0, 1)`, `donate=\"all\"`).",
        "argnums": "The positions to donate, with those already donated (`jit` and `through-wrapper` changes).",
        "argnames": "The names to donate, with those already donated (`jit` and `through-wrapper` changes).",
        "pass_first": "Arguments to pass first, as one tuple, for equinox's `donate=\"all-except-first\"` "
                      "(`equinox-restructure` only).",
        "edited_line": "The line that applies the wrapper, with the option added, where it can be read; else empty.",
    },
    "donation-unusable": {
        "function": _FN,
        "arguments": "The donated arguments that lost a leaf.",
        "lost_leaves": "The donated leaves no output matches (`params[0] float32[1024]`).",
        "outputs": "The shapes and dtypes of the call's outputs.",
        "call_index": "The sampled call that shows it (1: the first call).",
        "jax_warned": "True when JAX warned 'Some donated buffers were not usable' for those leaves.",
    },
    "donated-then-used": {
        "error": "The first line of the exception (up to 300 characters).",
        "donating": "The functions that donate arguments in the run, `name (path:line)`.",
    },
    "allocator-platform": {
        "peak_bytes": "The peak used: the best of `peak_source`, on the busiest device.",
        "because": "Why: `oom` (the run ran out of memory) and the rules that fired (`allocator-fraction`, "
                   "`allocator-fragmentation`).",
    },
    "allocator-fraction": {
        "peak_bytes": "The peak used: the best of `peak_source`, on the busiest device.",
        "device": "The device whose limit is checked.",
        "bytes_limit": "That device's allocator limit (the last recorded).",
        "fraction": "The pool fraction in effect (0.75 when no variable sets it).",
        "fraction_variable": "The variable the fraction came from; null for XLA's default.",
        "fraction_value": "That variable's value as set; null when none is.",
        "device_bytes": "The device's memory, estimated as `bytes_limit / fraction`.",
        "setting": "The fraction to set (`.82`).",
        "set": "The assignment to make, naming the variable that jaxlib reads (`XLA_CLIENT_MEM_FRACTION=.82`).",
        "unset": "The other fraction variable, to unset, when the environment has it; else empty.",
        "jaxlib_version": "The jaxlib version the run recorded.",
        "fraction_env_name": "The fraction variable that jaxlib reads.",
    },
    "allocator-preallocate": {
        "peak_bytes": "The peak used: the best of `peak_source`, on the busiest device.",
        "processes": "Processes that share one GPU.",
        "fraction": "The pool fraction in effect (0.75 when no variable sets it).",
        "fraction_variable": "The variable the fraction came from; null for XLA's default.",
        "preallocate": "`XLA_PYTHON_CLIENT_PREALLOCATE` as set (empty: unset, which preallocates).",
        "share": "The fraction to give each process, as set (`.47`: 95 % over the processes).",
        "share_percent": "That share in percent.",
        "device_bytes": "The device's memory, estimated as `bytes_limit / fraction`; null when unknown.",
        "bytes_each": "Bytes of the device each process gets at `share`; null when unknown.",
        "device": "The device whose pool is checked.",
        "pool_bytes": "Its pool (or its limit, without pool statistics).",
        "set": "The fraction assignment to make, naming the variable that jaxlib reads.",
        "unset": "The other fraction variable, to unset, when the environment has it; else empty.",
        "jaxlib_version": "The jaxlib version the run recorded.",
    },
    "allocator-fragmentation": {
        "device": "The device at its worst fragmentation.",
        "snapshot": "The snapshot of that worst fragmentation.",
        "fragmentation": "Its `fragmentation` then, 0 to 1 (reported from 0.30).",
        "pool_bytes": "Its `pool_bytes` then.",
        "bytes_in_use": "Its `bytes_in_use` then.",
        "largest_free_block_bytes": "Its `largest_free_block_bytes` then.",
        "free_bytes": "`pool_bytes - bytes_in_use`.",
        "preallocate": "`XLA_PYTHON_CLIENT_PREALLOCATE` as set (empty: unset).",
        "preallocates": "True when the allocator preallocates its pool (BFC, preallocation not turned off).",
    },
    "allocator-env": {
        "fraction_value": "`XLA_CLIENT_MEM_FRACTION` as set (a string; empty when unset).",
        "old_fraction_value": "`XLA_PYTHON_CLIENT_MEM_FRACTION` as set (a string; empty when unset).",
        "jaxlib_version": "The jaxlib version the run recorded.",
        "backend": "The backend the run used.",
        "backend_seen": "`gpu` (a GPU backend ran nonetheless), `other-platforms` (`JAX_PLATFORMS` asked for none) "
                        "or `other`.",
        "jax_platforms": "`JAX_PLATFORMS` as set (empty when unset).",
        "preallocate": "`XLA_PYTHON_CLIENT_PREALLOCATE` as set: a value jaxlib reads as true (`no`, `off`, ...).",
    },
    "fit": {
        "peak_bytes": "The peak checked, per device: the best of `peak_source`.",
        "processes": "Processes that will share the device.",
        "backend": "The backend the run was recorded on.",
        "fraction_policy_set": "True when `XLA_FLAGS` sets `--xla_gpu_memory_fraction_policy` (which changes the "
                               "default pool).",
        "underused": "True when it fits by default with the peak under 25 % of the default pool.",
    },
    "remat": {
        "function": _FN,
        "kept_bytes": "Bytes of the forward-pass (`jvp`) temporaries still live at the function's peak: activations "
                      "kept for the backward pass.",
        "buffers": "How many buffers those are.",
        "by_line": "`[site, bytes]` of the (up to 3) lines that hold most of them.",
    },
    "narrow-dtype": {
        "function": _FN,
        "float32_bytes": "Bytes of the float32 temporaries live at the function's peak.",
        "by_line": "`[site, bytes]` of the (up to 3) lines that hold most of them.",
    },
    "imbalance": {
        "process": "The process with the highest peak.",
        "peak_bytes": "Its peak.",
        "median_bytes": "The median process's peak (the lower median: a peak some process has).",
        "min_bytes": "The lowest peak of any process.",
        "median_process": "The process whose peak is nearest the median.",
        "median_process_bytes": "Its peak.",
        "excess_bytes": "`peak_bytes - median_bytes`.",
        "sites": "The (up to 3) sites whose bytes at the two peaks differ most: objects of `site, bytes, "
                 "median_process_bytes, delta_bytes`.",
        "processes": "Every process whose peak exceeds the median by the threshold (the finding applies to them all).",
        "process_count": "The processes of the job with snapshots.",
    },
    "unfinished": {
        "processes": "One object per process that did not finish: `process, snapshots, last_t` (its last snapshot, "
                     "on the job's clock) and `error` (why nothing could be read, if so).",
    },
    "replicated": {
        "function": _FN,
        "arrays": "The (up to 3) arrays that save most: objects of `owner` (its path in your tree), `shape`, "
                  "`dtype`, `bytes` (on each device), `devices`, `axis` and `axis_size` (the mesh axis to shard "
                  "over), `dim` (the dimension it divides), `spec` (the PartitionSpec to use) and `saving_bytes` "
                  "(per device).",
        "array_count": "How many such arrays the call had.",
        "replicated_bytes": "Their bytes on each device.",
        "meshes": "The meshes the program's arrays were sharded on: `{axis: size}` each.",
    },
    "output-history": {
        "snapshot": "The snapshot at which the history was looked at (the run's last).",
        "entries": "The (up to 5) entries holding live arrays, those that free most first: objects of `holder` "
                   "(`Out[12]`), `names` (every name IPython binds to its value: `Out[12]`, `_12`, `_`), `arrays`, "
                   "`bytes`, `freed_bytes` and `freed_arrays` (what letting it go frees) and `made_at` (the site "
                   "that made most of its bytes).",
        "entries_holding": "The entries of `Out` that hold live arrays.",
        "held_bytes": "Bytes of the live arrays the entries hold.",
        "freed_bytes": "Bytes of those that nothing else refers to: what letting the entries go frees (the "
                       "finding's saving).",
        "arrays": "Live arrays the entries hold.",
        "ipython_version": "The IPython that ran (empty where the run does not say).",
        "reset_frees": "True when that IPython's `%reset -f out` frees them (8.15 and later; before, it keeps the "
                       "hidden copy of `_N`); null when not known.",
    },
}

# -- the words the docs use ----------------------------------------------------------------

TERMS: dict[str, str] = {
    "array": "A `jax.Array`: one or more buffers (its shards) on devices; its bytes are its shards' bytes.",
    "buffer": "One shard of an array on one device: the unit the device's allocator holds.",
    "site": "Where an allocation was made: the innermost frame of its stack that is user code, written "
            "`path:line (function)`.",
    "user code": "Every file that is not library code (or that `--user PATTERN` names); `--all-frames` makes every "
                 "frame user code.",
    "library code": "JAX, jaxlib, jaxmemprof itself, the Python standard library and installed packages "
                    "(`site-packages`, `dist-packages`), and what `--lib PATTERN` adds.",
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
    "peak": "The first snapshot with the most live bytes, and those bytes; XLA's temporaries inside jitted calls "
            "are never in it.",
    "call peak": "What one call of a jitted function holds at its peak, from XLA's `memory_analysis()`: arguments + "
                 "outputs - aliased + temporaries + code.",
    "estimated true peak": "The peak with what snapshots cannot see inside jitted calls: the most, over compiles "
                           "and sampled calls, of the live bytes before the call minus its arguments plus its call "
                           "peak.",
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
    "finding": "What the analyses conclude, as data: a rule, a severity, a site, a saving and facts; rendered into "
               "words by render/findings.py.",
    "rule": "The kind of finding (`leak`, `donate`, ...); `check --fail-on` takes rule names.",
    "case": "Which variant of a rule a finding is (`allocator-fraction` `raise` or `cannot`).",
    "severity": "`high`, `medium`, `low` or `info`, by the rule; a saving under 1 % of the run's peak (the estimated "
                "true peak where known) makes it `info` (recompiles excepted).",
    "saving": "What acting on a finding saves, in bytes (`saving_bytes`), where known.",
    "facts": "The figures and names behind a finding, under the names the columns use.",
}

# -- the tables, and where each is written --------------------------------------------------


@dataclass(frozen=True)
class Table:
    name: str  # the key of IN_TABLE
    title: str
    where: str  # which command writes it, and under which file or JSON key
    rows: str  # what one row is
    columns: tuple


def _csv(columns) -> tuple:
    """An exported CSV's columns: `process` first, unless the table has its own
    (render/job.py with_process)."""
    return tuple(columns) if "process" in columns else ("process",) + tuple(columns)


def _summary_keys() -> tuple:
    """The keys of build_report's summary dict, read from its source."""
    from jaxmemprof.analysis import report

    tree = ast.parse(inspect.getsource(report))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                and any(isinstance(t, ast.Name) and t.id == "summary" for t in node.targets)):
            return tuple(k.value for k in node.value.keys)
    raise RuntimeError("analysis/report.py has no `summary = {...}`: update render/glossary.py")


# The job's tables have no column constants: tests/test_columns_doc.py checks these against a real job's export.
PROCESSES_COLUMNS = ("process", "host", "devices", "finished", "exit_status", "ended_by", "snapshots", "peak_bytes",
                     "peak_t", "peak_snapshot", "at_job_peak_bytes", "at_job_peak_snapshot", "clock_offset_s", "error")
JOB_PEAK_SITES_COLUMNS = ("process", "site", "bytes", "count")
JOB_TIMELINE_COLUMNS = ("t", "live_bytes")
JOB_KEYS = ("path", "processes", "alignment", "peak_bytes", "peak_t", "unfinished")
# check --json: the document, and the facts some checks add to an Outcome's fields.
CHECK_KEYS = ("command", "run", "baseline", "ok", "checks")
CHECK_FACTS = ("where", "devices", "rules", "what", "bytes", "baseline_bytes")


def tables() -> list[tuple[str, list[Table]]]:
    """Every output, in sections: (heading, tables)."""
    from jaxmemprof.analysis import inside_jit, leaks, lifetimes, reuse, roles, timeline
    from jaxmemprof.analysis.advice import plan
    from jaxmemprof.analysis.advice.capacity import Fit
    from jaxmemprof.analysis.advice.donation import JIT_MEMORY_COLUMNS
    from jaxmemprof.analysis.check import Outcome
    from jaxmemprof.analysis.groups import KEY_COLUMNS
    from jaxmemprof.render import findings, tables as export
    from jaxmemprof.render.job import JOB_FILES, findings_table
    from jaxmemprof.render.results import DIFF_VALUES, SHOW_VALUES

    both = "`export --csv DIR`: {f}; `report --json`: `{j}`"
    per_run = [
        Table("timeline.csv", "timeline.csv", both.format(f="timeline.csv", j="timeline"), "One per snapshot.",
              _csv(timeline.TOTALS_COLUMNS)),
        Table("devices.csv", "devices.csv", both.format(f="devices.csv", j="devices"),
              "One per snapshot x device.", _csv(timeline.DEVICES_COLUMNS)),
        Table("sites.csv", "sites.csv", both.format(f="sites.csv", j="sites"),
              "One per snapshot x top site (`--top`, the rest as `other`).", _csv(timeline.SITES_COLUMNS)),
        Table("arrays.csv", "arrays.csv", both.format(f="arrays.csv", j="arrays"),
              "One per array the run saw (none for a directory of `.prof` files).", _csv(lifetimes.ARRAY_COLUMNS)),
        Table("lifetimes.csv", "lifetimes.csv", both.format(f="lifetimes.csv", j="lifetimes"),
              "One per site, largest `byte_seconds` first.", _csv(lifetimes.SITE_LIFETIME_COLUMNS)),
        Table("lifetimes.csv (estimated)", "lifetimes.csv, for a directory of `.prof` files",
              both.format(f="lifetimes.csv", j="lifetimes") + " with `lifetimes_estimated` true",
              "One per site: births and deaths estimated from count changes between snapshots (lower bounds).",
              _csv(lifetimes.CHURN_COLUMNS)),
        Table("reuse.csv", "reuse.csv", both.format(f="reuse.csv", j="reuse.by_site"),
              "One per site of the new buffers.", _csv(list(reuse.SITE_COLUMNS) + list(reuse.COUNT_COLUMNS))),
        Table("reuse_devices.csv", "reuse_devices.csv", both.format(f="reuse_devices.csv", j="reuse.by_device"),
              "One per device.", _csv(["device"] + list(reuse.COUNT_COLUMNS))),
        Table("leaks.csv", "leaks.csv", both.format(f="leaks.csv", j="leaks"),
              "One per growing site, largest projected growth first.", _csv(leaks.LEAK_COLUMNS)),
        Table("recompiles.csv", "recompiles.csv", both.format(f="recompiles.csv", j="recompiles"),
              "One per site x HLO module whose executables grew in number or code size; suspects first.",
              _csv(leaks.RECOMPILE_COLUMNS)),
        Table("jit.csv", "jit.csv", both.format(f="jit.csv", j="jit_memory"),
              "One per jitted function (the jit probe): its largest compiled signature, largest call peak first.",
              _csv(JIT_MEMORY_COLUMNS)),
        Table("jit_peak.csv", "jit_peak.csv", both.format(f="jit_peak.csv", j="jit_peak"),
              "One per jitted function x user line x kind: XLA's buffers live at the function's own peak.",
              _csv(inside_jit.PEAK_COLUMNS)),
        Table("jit_buffers.csv", "jit_buffers.csv", both.format(f="jit_buffers.csv", j="jit_buffers"),
              "One per buffer of a dumped program: those live at its peak and its largest others.",
              _csv(inside_jit.BUFFER_COLUMNS)),
        Table("jit_curve.csv", "jit_curve.csv", both.format(f="jit_curve.csv", j="jit_curve"),
              "One per jitted function x position x user line: XLA's buffers live at each position of the "
              "function's largest signature, in program order (XProf's memory viewer, in your lines).",
              _csv(inside_jit.CURVE_COLUMNS)),
        Table("roles.csv", "roles.csv", both.format(f="roles.csv", j="roles.by_role"),
              "One per device x role at the sampled jitted call that holds the most: what the memory is "
              "(docs/roles.md).", _csv(roles.ROLE_COLUMNS)),
        Table("owners.csv", "owners.csv", both.format(f="owners.csv", j="roles.owners"),
              "One per device x array of that call, largest first: its role and its path in your tree.",
              _csv(roles.OWNER_COLUMNS)),
        Table("plan.csv", "plan.csv", both.format(f="plan.csv", j="plan.points"),
              "One per planned function x variant x batch x device of the call (`run --plan`; no rows without it): "
              "XLA's figures for the step compiled at that batch, and the device's peak (docs/plan.md).",
              _csv(plan.PLAN_COLUMNS)),
        Table("plan_models.csv", "plan_models.csv", both.format(f="plan_models.csv", j="plan.models"),
              "One per planned function x variant x device (and `job`): the line through its points and, with "
              "`--device-memory`, the largest batch that fits and what each fix saves there.",
              _csv(plan.MODEL_COLUMNS)),
        Table("findings.csv", "findings.csv", both.format(f="findings.csv", j="findings"),
              "One per finding, ranked by severity then saving (in JSON `facts` is an object).",
              _csv(findings.COLUMNS)),
    ]
    files = {t.title for t in per_run}
    missing = [f for f in export.EXPORT_FILES if f not in files]
    if missing:
        raise RuntimeError(f"render/tables.py exports {missing}, which render/glossary.py does not describe")

    report_only = [
        Table("report --json", "The document", "`report --json`", "One JSON object with these keys.",
              ("schema_version",) + tuple(_report_document_keys())),
        Table("summary", "summary", "`report --json`: `summary`", "The run's headline figures, one object.",
              _summary_keys()),
        Table("peak_sites", "peak_sites", "`report --json`: `peak_sites`",
              "One per site holding bytes at the peak snapshot, largest first.",
              tuple(KEY_COLUMNS["site"]) + tuple(SHOW_VALUES) + ("cum_share",)),
        Table("executables", "executables", "`report --json`: `executables`", "One per snapshot.",
              tuple(timeline.EXECUTABLES_COLUMNS)),
        Table("markers", "markers", "`report --json`: `markers`", "One per marker, in the order recorded.",
              tuple(timeline.MARKERS_COLUMNS)),
        Table("reuse", "reuse", "`report --json`: `reuse`", "One object.",
              ("by_device", "by_site", "buffers", "unknown_addresses", "note")),
        Table("plan", "plan", "`report --json`: `plan`", "One object (null for a run recorded without "
              "`--plan`).", ("device_bytes", "backends", "compiles", "compile_s", "fraction_variable",
                            "searched_bytes", "events", "functions", "points", "models")),
        Table("plan functions", "plan.functions", "`report --json`: `plan.functions`", "One per planned function.",
              tuple(f.name for f in fields(plan.Planned))),
        Table("fit", "fit", "`report --json --device-memory SIZE`: `fit`", "One object (null without "
              "`--device-memory`).", tuple(f.name for f in fields(Fit))),
    ]
    job_findings = tuple(c for c in findings_table([]).columns if c != "process_list")
    job_cols = {"processes.csv": PROCESSES_COLUMNS, "job_timeline.csv": JOB_TIMELINE_COLUMNS,
                "job_peak_sites.csv": JOB_PEAK_SITES_COLUMNS, "job_findings.csv": job_findings}
    if set(job_cols) != set(JOB_FILES):
        raise RuntimeError(f"render/job.py writes {JOB_FILES}; render/glossary.py describes {tuple(job_cols)}")
    job_json = "`export --csv DIR` of a job: {f}; `report --json`: `{j}`"
    job = [
        Table("processes.csv", "processes.csv", job_json.format(f="processes.csv", j="processes"),
              "One per process of the job.", PROCESSES_COLUMNS),
        Table("job_timeline.csv", "job_timeline.csv", job_json.format(f="job_timeline.csv", j="timeline"),
              "One per moment a process took a snapshot.", JOB_TIMELINE_COLUMNS),
        Table("job_peak_sites.csv", "job_peak_sites.csv", job_json.format(f="job_peak_sites.csv", j="peak_sites"),
              "One per process x site at that process's own peak.", JOB_PEAK_SITES_COLUMNS),
        Table("job_findings.csv", "job_findings.csv", job_json.format(f="job_findings.csv", j="findings"),
              "One per finding merged over the processes (by rule and site), plus the job's own; in JSON also "
              "`process_list`, and `facts` as an object.", job_findings),
        Table("job report --json", "The job's document", "`report --json` on a job", "One JSON object.",
              ("schema_version", "command", "inputs", "job", "warnings", "processes", "peak_sites", "timeline",
               "roles", "plan", "findings")),
        Table("job", "job", "`report --json` on a job: `job`", "One object.", JOB_KEYS),
    ]
    show = [
        Table("show", "show --by site", "`show --csv` and `show --json` (`rows`)", "One per site, largest first.",
              tuple(KEY_COLUMNS["site"]) + tuple(SHOW_VALUES)),
        Table("diff", "diff --by site", "`diff --csv` and `diff --json` (`rows`)",
              "One per site that changed, largest change first.", tuple(KEY_COLUMNS["site"]) + tuple(DIFF_VALUES)),
        Table("show", "other --by", "`show`/`diff --by function|file|stack|device|kind`",
              "The key columns above are replaced by one.",
              tuple(k for by, keys in KEY_COLUMNS.items() if by != "site" for k in keys)),
        Table("show and diff --json", "The document", "`show --json`, `diff --json`", "One JSON object.",
              ("schema_version", "command", "inputs", "by", "value_type", "totals", "unchanged_rows", "devices",
               "kinds", "omitted", "rows")),
    ]
    check = [
        Table("check --json", "The document", "`check --json`", "One JSON object.", ("schema_version",) + CHECK_KEYS),
        Table("check", "checks", "`check --json`: `checks`",
              "One per check; `where`, `rules`, `what`, `bytes`, `baseline_bytes` only where the check has them.",
              ("process",) + tuple(f.name for f in fields(Outcome) if f.name != "facts") + CHECK_FACTS),
    ]
    python_only = [
        Table("reuse events", "Reuse.events", "`jaxmemprof.analysis.reuse.reuse(attribute(run)).events` (Python only)",
              "One per address reuse.", tuple(reuse.EVENT_COLUMNS)),
        Table("rejits", "rejits", "`jaxmemprof.analysis.leaks.rejits(attribute(run))` (Python only; `recompile` findings "
              "of case `rejit`)", "One per line x function name jitted more than once.", tuple(leaks.REJIT_COLUMNS)),
    ]
    return [("Tables of a run: `export --csv` and `report --json`", per_run),
            ("Only in `report --json`", report_only),
            ("A multi-process job: `export --csv` and `report --json`", job),
            ("`show` and `diff`", show),
            ("`check --json`", check),
            ("Tables in Python only", python_only)]


def _report_document_keys() -> tuple:
    """The keys of render/tables.py report_document's dict, read from its source."""
    from jaxmemprof.render import tables as export

    tree = ast.parse(inspect.getsource(export.report_document))
    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Dict):
            return tuple(k.value for k in node.value.keys)
    raise RuntimeError("render/tables.py report_document returns no dict literal: update render/glossary.py")


def meaning(name: str, table: str | None = None) -> str:
    """What ``name`` means in ``table`` (IN_TABLE, else GLOSSARY)."""
    if table is not None and name in IN_TABLE.get(table, {}):
        return IN_TABLE[table][name]
    try:
        return GLOSSARY[name]
    except KeyError:
        raise KeyError(f"{name!r} has no entry in GLOSSARY (jaxmemprof/render/glossary.py): add one, then run "
                       f"{REGENERATE}") from None


def fact_meaning(rule: str, name: str) -> str:
    m = FACT_MEANINGS.get(rule, {})
    if name in m:
        return m[name]
    try:
        return GLOSSARY[name]
    except KeyError:
        raise KeyError(f"fact {name!r} of rule {rule!r} has no entry in FACT_MEANINGS or GLOSSARY "
                       f"(jaxmemprof/render/glossary.py)") from None


def documented_facts(rule: str) -> set:
    """Every fact name a finding of ``rule`` (any case) may carry."""
    return {n for (r, _), names in FACTS.items() if r == rule for n in names}


# -- the documents -----------------------------------------------------------------------------

_HEAD = ("<!-- Generated by `{cmd}` from jaxmemprof/render/glossary.py and the column constants; do not edit: "
         "tests/test_columns_doc.py fails when it differs. -->\n")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def columns_md() -> str:
    out = [_HEAD.format(cmd=REGENERATE), "# Columns of every CSV and JSON output", ""]
    out += [
        "Conventions, everywhere: bytes are raw integers; times are seconds (`t`: since the run began); "
        "snapshots are numbered 1, 2, ... in the order taken; shares and fractions are 0 to 1; a missing value is "
        "an empty CSV cell and `null` in JSON. CSV is UTF-8 with one header row; a text cell that begins with "
        "`=`, `+`, `-`, `@`, a tab or a carriage return gets a leading `'`. Every CSV that `export` writes for "
        "a run has a `process` column, the process index (0 for a single process), as a job's export has it: "
        "first, unless the table has its own (arrays.csv); `report --json` carries the same rows without the "
        "added column. The words are defined in [glossary.md](glossary.md).",
        "",
    ]
    for heading, group in tables():
        out += [f"## {heading}", ""]
        for t in group:
            rows = t.rows[0].lower() + t.rows[1:]
            out += [f"### {t.title}", "", f"Written by {t.where}. Rows: {rows}", "",
                    "| column | meaning |", "|---|---|"]
            out += [f"| `{c}` | {_cell(meaning(c, t.name))} |" for c in t.columns]
            out.append("")
    out += ["## Facts of each finding rule", "",
            "A finding's `facts` (a JSON object: in findings.csv one JSON cell) hold the figures and names behind "
            "it, under these names, in this order (a CSV cell sorts them by name); `render/findings.py` words them. "
            "A job's findings carry the facts of the process where the finding is most severe.", ""]
    rules = list(dict.fromkeys(r for r, _ in FACTS))
    for rule in rules:
        cases = [c for r, c in FACTS if r == rule]
        out += [f"### `{rule}`", "", RULE_SUMMARY[rule], ""]
        names = list(dict.fromkeys(n for c in cases for n in FACTS[(rule, c)]))
        if len(cases) > 1:
            out += ["| fact | meaning | cases |", "|---|---|---|"]
            for n in names:
                has = [c for c in cases if n in FACTS[(rule, c)]]
                which = "all" if len(has) == len(cases) else ", ".join(f"`{c}`" for c in has)
                out.append(f"| `{n}` | {_cell(fact_meaning(rule, n))} | {which} |")
        else:
            optional = OPTIONAL_FACTS.get((rule, cases[0]), ())
            out += ["| fact | meaning |", "|---|---|"]
            out += [f"| `{n}` | {_cell(fact_meaning(rule, n))}{' (not always present)' if n in optional else ''} |"
                    for n in names]
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def glossary_md() -> str:
    out = [_HEAD.format(cmd=REGENERATE), "# Glossary", "",
           "The words the reports and the docs use, one name per idea; every CSV and JSON column is in "
           "[columns.md](columns.md).", ""]
    out += [f"- **{term}**: {_cell(text)}" for term, text in TERMS.items()]
    return "\n".join(out) + "\n"


def documents(root: Path) -> dict[Path, str]:
    return {root / "docs" / "columns.md": columns_md(), root / "docs" / "glossary.md": glossary_md()}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    root = Path(__file__).resolve().parents[2]
    if "--print" in argv:
        sys.stdout.write(glossary_md() if "--glossary" in argv else columns_md())
        return 0
    docs = documents(root)
    if "--check" in argv:
        stale = [str(p.relative_to(root)) for p, text in docs.items()
                 if not p.exists() or p.read_text(encoding="utf-8") != text]
        if stale:
            print(f"{', '.join(stale)} differ from the generator: run {REGENERATE}", file=sys.stderr)
            return 1
        return 0
    for path, text in docs.items():
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Profiles merged into one: each one's samples, frames, stacks and label
sets kept, their ids shifted past the ones before, and each sample's device
named under its profile's prefix (``process-3/TFRT_CPU_0``)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from jaxmemprof.errors import InputError
from jaxmemprof.pprof.model import Profile


def concat_profiles(profiles: list[tuple[str, Profile]], *, name: str) -> Profile:
    """One Profile from ``[(device prefix, profile), ...]`` (at least one),
    all measuring the same value type."""
    first = profiles[0][1]
    samples, frames, label_ids = [], [], []
    stacks: list[tuple] = []
    label_sets: list[tuple] = []
    n_frames = n_stacks = n_labels = n_samples = 0
    for prefix, prof in profiles:
        if prof.value_type != first.value_type:
            raise InputError(prof.source, f"measures {prof.value_type}, but {first.source} measures {first.value_type}")
        s = prof.samples.copy()
        s["sample_id"] = s["sample_id"] + n_samples
        s["stack_id"] = s["stack_id"] + n_stacks
        s["device"] = [f"{prefix}{d}" if d else d for d in s["device"]]
        samples.append(s)
        fr = prof.frames.copy()
        fr.index = fr.index + n_frames
        frames.append(fr)
        stacks.extend(tuple(f + n_frames for f in st) for st in prof.stacks)
        label_sets.extend(prof.label_sets)
        label_ids.append(np.asarray(prof.label_ids, dtype=np.int64) + n_labels)
        n_frames += len(prof.frames)
        n_stacks += len(prof.stacks)
        n_labels += len(prof.label_sets)
        n_samples += len(prof.samples)
    frames_df = pd.concat(frames)
    frames_df.index.name = "frame_id"
    return Profile(
        source=name, samples=pd.concat(samples, ignore_index=True), frames=frames_df, stacks=tuple(stacks),
        label_sets=tuple(label_sets), label_ids=np.concatenate(label_ids), sample_types=first.sample_types,
        value_index=first.value_index, count_index=first.count_index, time_nanos=first.time_nanos,
        duration_nanos=0, comments=(),
    )

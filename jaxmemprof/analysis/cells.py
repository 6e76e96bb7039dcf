"""The journal's JSON cells, read as untrusted input: a damaged cell is its
default, never an error."""

from __future__ import annotations

import json


def json_cell(text, default):
    """Parsed JSON of the type of ``default``, else ``default``."""
    if not isinstance(text, str):
        return default
    try:
        v = json.loads(text)
    except ValueError:
        return default
    return v if isinstance(v, type(default)) else default


def leaves(text) -> list[dict]:
    """A sampled call's leaf list (jit_calls.inputs or .outputs): its dicts."""
    return [d for d in json_cell(text, []) if isinstance(d, dict)]

"""The Pythons and JAX releases jaxmemprof supports, and the one line `run`
says before the script starts where the running ones are outside them.

The range is measured, not hoped for (docs/development.md, "Supported
versions"): the README's example and the libraries' programs give the same
findings on each end of it, and CI runs a compatibility subset on the oldest
JAX and the newest Python declared (`.ci/run`). pyproject.toml's
``requires-python`` and ``jax>=`` say the same (tests/test_versions.py).

Outside the range a run goes on, and says in one line what is not supported
and what will be missing. Below Python's oldest, pip does not install
jaxmemprof at all (``requires-python``), and a checkout refuses in one line
(``too_old``, from the package's ``__init__``): 3.10 reached its end of life
in October 2026 and JAX left it at 0.6.2.

Plain Python: reads the installed JAX's version from its distribution's
metadata, without importing JAX (the program imports it, as it would under
python).
"""

from __future__ import annotations

import re
import sys

PYTHON_OLDEST = (3, 11)
PYTHON_NEWEST = (3, 13)
# jax 0.6.0's executables carry no buffer assignment, and XLA's dump of them
# reads as none either: memory inside a jitted call is not attributed to lines
# (measured: 0.4.30, 0.4.38, 0.5.3, 0.6.0; 0.6.1, 0.6.2, 0.8.3, 0.10.2 and
# 0.12.0.1 give the README example's findings and lines).
JAX_OLDEST = (0, 6, 1)
# jax.ShapeDtypeStruct takes weak_type from 0.4.33 on: before it, every
# compile of a what-if (donation, sharding, --plan, --target) fails.
_JAX_WEAK_TYPE = (0, 4, 33)

LOST_BELOW_JAX = "memory inside jitted calls will not be attributed to lines (its executables carry no buffer assignment)"
LOST_BELOW_WEAK_TYPE = "no fix will be verified by compiling (its jax.ShapeDtypeStruct takes no weak_type)"
LOST_ABOVE_PYTHON = ("untested there: the donation advice reads its bytecode and the holder search its frames, "
                     "either may find less")


def _text(version: tuple) -> str:
    return ".".join(str(p) for p in version)


def release(text: str | None) -> tuple | None:
    """A version's release numbers (``0.6.1`` of ``0.6.1.dev20250101``, of
    ``0.12.0.1``), or None when it has none."""
    if not text:
        return None
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)", text)
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def installed_jax() -> str | None:
    """The installed jaxlib's version (the compiler the figures come from),
    else jax's; None when neither is installed. Not imported."""
    from importlib import metadata

    versions = []
    for name in ("jax", "jaxlib"):
        try:
            versions.append(metadata.version(name))
        except metadata.PackageNotFoundError:
            continue
        except Exception:  # a damaged distribution's metadata: nothing known of it
            continue
    if not versions:
        return None
    return min(versions, key=lambda v: release(v) or ())


def outside(python: tuple | None = None, jax: str | None = None) -> str | None:
    """The one line `run` says where ``python`` (major, minor) or ``jax``
    (a version's text; None: not installed, said elsewhere) is outside the
    supported range, or loses something in it: what is not supported and
    what will be missing. None where everything is supported. (Holders
    among a running function's locals are read on every supported Python,
    in the program's own thread; where a run could not read them it says
    so itself: capture/frame_locals.py.)"""
    python = tuple(python or sys.version_info[:2])
    said = []
    if python > PYTHON_NEWEST:
        said.append(f"Python {_text(python)} is newer than the newest supported ({_text(PYTHON_NEWEST)}): "
                    f"{LOST_ABOVE_PYTHON}")
    got = release(jax)
    if got is not None and got < JAX_OLDEST:
        lost = [LOST_BELOW_JAX] + ([LOST_BELOW_WEAK_TYPE] if got < _JAX_WEAK_TYPE else [])
        said.append(f"JAX {jax} is older than the oldest supported ({_text(JAX_OLDEST)}): {'; '.join(lost)}")
    if not said:
        return None
    return "jaxmemprof: warning: " + "; ".join(said) + "; the run goes on"


def too_old(python: tuple | None = None) -> str | None:
    """The one line that refuses a Python older than the oldest supported
    (``python``: (major, minor); the running one by default), or None."""
    python = tuple(python or sys.version_info[:2])
    if python >= PYTHON_OLDEST:
        return None
    return (f"jaxmemprof: Python {_text(python)} is older than the oldest supported ({_text(PYTHON_OLDEST)}): "
            f"run jaxmemprof under Python {_text(PYTHON_OLDEST)}-{_text(PYTHON_NEWEST)}")


def supported_range() -> str:
    """The range in words, as the README and `--help` say it."""
    return f"Python {_text(PYTHON_OLDEST)}-{_text(PYTHON_NEWEST)}, jax and jaxlib >= {_text(JAX_OLDEST)}"


def run_line() -> str | None:
    """``outside`` for the running Python and the installed JAX: the line
    `run` says before the script starts, or None."""
    return outside(sys.version_info[:2], installed_jax())

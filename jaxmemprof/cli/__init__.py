"""The command line: parse options, call analysis, hand the result to a renderer.

``base`` holds the group, the shared options and the error handling; each
other module registers its commands on the group when imported here.
"""

from jaxmemprof.cli.base import cli, main
# Imported for what importing does: each registers its commands on the group (hence noqa F401).
from jaxmemprof.cli import profiles, record, runs  # noqa: F401  (report, show, diff, export, run, ...)
from jaxmemprof.cli import check  # noqa: F401  (registers jaxmemprof check)
from jaxmemprof.cli import merge  # noqa: F401  (registers jaxmemprof merge: a job's per-host copies)
from jaxmemprof.cli import top  # noqa: F401  (registers jaxmemprof top)

__all__ = ["cli", "main"]

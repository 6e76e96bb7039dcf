"""The command line: parse options, call analysis, hand the result to a renderer.

``base`` holds the group, the shared options and the error handling; each
other module registers its commands on the group when imported here.
"""

from jaxmemprof.cli.base import cli, main  # noqa: F401
from jaxmemprof.cli import profiles, record, runs  # noqa: F401,E402  (registers the commands)
from jaxmemprof.cli import check  # noqa: F401,E402  (jaxmemprof check)
from jaxmemprof.cli import merge  # noqa: F401,E402  (jaxmemprof merge: a job's per-host copies)
from jaxmemprof.cli import top  # noqa: F401,E402  (jaxmemprof top)

"""`merge`: one job directory from the per-host copies of a multi-process job."""

from __future__ import annotations

import click

from jaxmemprof.cli.base import cli, say


@cli.command()
@click.argument("output", metavar="OUT")
@click.argument("inputs", nargs=-1, required=True, metavar="DIR...")
def merge(output, inputs):
    """Merge the processes of one multi-process job into OUT/process-N.

    Each DIR is a job directory (holding process-N/ directories, as each
    host wrote them to its local disk and you copied them here), one
    process's directory (process-N), or a single run whose manifest names
    its process index (a process run with its own -o). OUT must be new or
    empty; the inputs are copied, never moved or changed. Two inputs that
    hold the same process are refused before anything is copied.

    \b
    Examples:
      jaxmemprof merge job host-a/run host-b/run host-c/run
      jaxmemprof merge job runs/rank0 runs/rank1
      jaxmemprof report job
    """
    from jaxmemprof.store.job import merge_job, process_list_text

    done = merge_job(output, inputs)
    say(f"jaxmemprof: merged {len(done)} process{'es' if len(done) != 1 else ''} "
        f"({process_list_text([n for n, _ in done])}) into {output}")
    say(f"next: jaxmemprof report {output}")

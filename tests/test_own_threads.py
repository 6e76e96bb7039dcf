"""jaxmemprof's own threads (capture/threads.py) are joined however often a
join is interrupted: a SIGINT's KeyboardInterrupt can come out of a join
just after its wait ended, and the next join (the end phase stops the
sampler again as it finalises the run) must still return. CI once hung
here: a kernel interrupt in a ``%%jaxmemprof`` cell's end left the cell
waiting for ever (tests/test_notebook_end.py)."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from jaxmemprof.capture.threads import start_thread


def _interrupt_after_the_wait(frame, event, arg):
    """A profile function that raises KeyboardInterrupt as the first lock
    acquire in this thread returns: where Python runs a signal's handler
    once a blocking C call is back (the handler's exception comes out there)."""
    if event == "c_return" and getattr(arg, "__name__", "") == "acquire":
        sys.setprofile(None)
        raise KeyboardInterrupt


def test_a_join_interrupted_once_its_wait_ended_leaves_the_thread_joinable():
    t = start_thread(time.sleep, "jaxmemprof-test", (0.3,))
    assert t.is_alive()
    sys.setprofile(_interrupt_after_the_wait)
    try:
        with pytest.raises(KeyboardInterrupt):
            t.join()
    finally:
        sys.setprofile(None)
    assert not t.is_alive()
    # Joined again (as Sampler.stop does in the end phase), from another thread so that a join that waits
    # for ever fails this test instead of holding it.
    again = threading.Thread(target=t.join, daemon=True)
    again.start()
    again.join(5)
    assert not again.is_alive(), "the second join waits for a lock the interrupted join kept"
    t.join(timeout=0)  # and with a timeout, at once


def test_a_join_waits_for_the_threads_end_and_a_timeout_bounds_it():
    release = threading.Event()
    t = start_thread(release.wait, "jaxmemprof-test")
    t0 = time.monotonic()
    t.join(timeout=0.2)
    assert t.is_alive() and time.monotonic() - t0 >= 0.2
    release.set()
    t.join()
    assert not t.is_alive()

"""jaxmemprof's own threads (capture/threads.py) are joined however often a
join is interrupted: a SIGINT's KeyboardInterrupt can come out of a join
just after its wait ended, and the next join (the end phase stops the
sampler again as it finalises the run) must still return. CI once hung
here: a kernel interrupt in a ``%%jaxmemprof`` cell's end left the cell
waiting for ever (tests/test_notebook_end.py). And the sampler is stopped
from the thread that holds its lock (a signal's end in the middle of a
snapshot of that thread's) without waiting for ever on itself."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from conftest import interrupted_as_a_lock_is_taken

from jaxmemprof.capture.threads import start_thread


def test_a_join_interrupted_once_its_wait_ended_leaves_the_thread_joinable():
    t = start_thread(time.sleep, "jaxmemprof-test", (0.3,))
    assert t.is_alive()
    sys.setprofile(interrupted_as_a_lock_is_taken)
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


def test_the_sampler_stopped_by_the_thread_that_holds_its_lock_is_not_waited_for_ever(tmp_path):
    import jax.numpy as jnp

    from jaxmemprof.capture.sampler import Sampler
    from jaxmemprof.store.writer import RunWriter

    kept = jnp.ones(8)  # arrays: the sampler's next look at them takes its lock
    s = Sampler(RunWriter(tmp_path / "run", {"argv": []}), interval=0.01, max_overhead=1.0)
    lock = s.holding()
    with lock:  # held here, as by a snapshot of this thread's that a signal's end came into
        s.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until the sampler waits for the lock (its look at the arrays)
            frame = sys._current_frames().get(s._thread.ident)
            if frame is not None and frame.f_code.co_name == "_has_arrays":
                break
            time.sleep(0.01)
        assert frame is not None and frame.f_code.co_name == "_has_arrays"
        del frame
        t0 = time.monotonic()
        s.stop()
        waited = time.monotonic() - t0
    assert 0.9 <= waited < 5, waited
    s._thread.join(5)  # once it has the lock, it finds sampling stopped and ends
    assert not s._thread.is_alive() and not s.first_taken  # no snapshot taken after the stop
    del kept


def test_a_finished_thread_whose_ident_the_joiner_now_has_is_joined():
    # A thread's ident is the OS's, reused once it ends: the thread that joins it later may have it (seen in
    # the full suite, where the join above from a new thread raised "cannot join current thread").
    import _thread

    t = start_thread(time.sleep, "jaxmemprof-test", (0.0,))
    t.join()
    t.ident = _thread.get_ident()
    t.join()  # at once, no error
    assert not t.is_alive()

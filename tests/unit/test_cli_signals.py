"""How a follower (`turnledger projections run --follow`) takes SIGTERM and Ctrl-C (E7).

Both set its stop event instead of raising wherever the process happens to be: a
`KeyboardInterrupt` raised between a lock's acquire and release left a follower unable to close
its store (once in CI, no exit 30 s after SIGINT). A second Ctrl-C still interrupts at once."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from turnledger import cli


def test_e7_follower_ctrl_c_and_sigterm_set_stop_and_a_second_ctrl_c_interrupts() -> None:
    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    stop = threading.Event()
    restore = cli._stop_on_signals(stop)  # noqa: SLF001 - the follower's signal handling
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(5.0)  # SIGTERM: stop, no exception
        stop.clear()
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.wait(5.0)  # the first Ctrl-C: stop, no KeyboardInterrupt
        with pytest.raises(KeyboardInterrupt):  # the second: now
            os.kill(os.getpid(), signal.SIGINT)
    finally:
        restore()
    assert before == (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))

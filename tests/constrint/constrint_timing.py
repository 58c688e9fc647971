"""A guard that turns a hang into a test failure (SIGALRM, so only in the main thread, as pytest runs tests)."""
from __future__ import annotations

import contextlib
import signal
from typing import Iterator


@contextlib.contextmanager
def finishes_within(seconds: float) -> Iterator[None]:
    """Fail with AssertionError when the block still runs after `seconds`."""
    def stop(signum, frame):
        raise AssertionError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)

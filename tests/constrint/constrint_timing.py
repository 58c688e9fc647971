"""A guard that turns a hang into a test failure (SIGALRM, so only in the main thread, as pytest runs tests)."""
from __future__ import annotations

import contextlib
import signal
from typing import Iterator


class _Overrun(Exception):
    """The alarm of `finishes_within`."""


@contextlib.contextmanager
def finishes_within(seconds: float) -> Iterator[None]:
    """Fail with AssertionError when the block still runs after `seconds`. The error is raised again here, without
    the frames the signal interrupted: one of those may have no line number, which pytest cannot report."""
    def stop(signum, frame):
        raise _Overrun(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _Overrun as exc:
        raise AssertionError(str(exc)) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)

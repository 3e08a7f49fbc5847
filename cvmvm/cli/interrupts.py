"""Ctrl-C and SIGTERM: one line on stderr and exit 130 or 143, through the same unwinding.

The standard library only: cvmvm.cli.launch uses it before anything else loads.
"""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager
from typing import Any, Iterator

EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as shells report it
EXIT_TERMINATED = 143  # SIGTERM (kill, timeout, systemd, docker stop): 128 + SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Python next runs, like Ctrl-C: whatever cleans up after Ctrl-C
    (temporary files, worker pools, a Ray started for a replay) cleans up after it too."""


def terminate(signum: int, frame: Any) -> None:
    raise Terminated


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """SIGTERM raises ``Terminated`` while the context lasts, then is the default again.  Left
    alone where a host program set its own handler (or an enclosing context did), and from a
    thread (only the main one may set it)."""
    mine = signal.getsignal(signal.SIGTERM) == signal.SIG_DFL and threading.current_thread() is threading.main_thread()
    if mine:
        signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        if mine:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _raised(signum: int) -> type[KeyboardInterrupt]:
    return Terminated if signum == signal.SIGTERM else KeyboardInterrupt


@contextmanager
def held() -> Iterator[list[int]]:
    """The first Ctrl-C or SIGTERM (while ``terminate`` is its handler) is held while the context
    lasts and raised when it ends, as a blocked signal is delivered when unblocked; a second one
    raises at once, for a load that never ends.  Loading modules needs it: an exception raised
    inside an import can come out as another, and numpy turns an interrupt during its C
    extension's load into an ImportError with a page of advice on broken installs.  A signal
    ignored or handled by someone else is left so.  Gives the signals held so far."""
    came: list[int] = []

    def record(signum: int, frame: Any) -> None:
        if came:
            raise _raised(signum)
        came.append(signum)
    previous = {}
    for signum, ours in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, terminate)):
        if signal.getsignal(signum) is ours:
            previous[signum] = signal.signal(signum, record)
    try:
        yield came
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if came:
        raise _raised(came[0])


def stopped(e: KeyboardInterrupt) -> int:
    """One line on stderr for Ctrl-C or SIGTERM, and the exit code."""
    if isinstance(e, Terminated):
        print("cvmvm: terminated", file=sys.stderr)
        return EXIT_TERMINATED
    print("cvmvm: interrupted", file=sys.stderr)
    return EXIT_INTERRUPTED

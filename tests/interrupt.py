"""Children a test interrupts with Ctrl-C (SIGINT)."""

from __future__ import annotations

import signal


def foreground() -> None:
    """``preexec_fn`` of such a child: SIGINT's disposition as a shell gives a foreground command.
    A test run started in the background by a script (``&``, nohup) ignores SIGINT, and a child
    inherits that: it would never see the signal, and Python would not even install its handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)

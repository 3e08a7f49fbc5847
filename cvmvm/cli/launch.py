"""The ``cvmvm`` console script and ``python -m cvmvm``: Ctrl-C and SIGTERM from the first moment.

The command's modules (numpy, the ISA, every command) take about half a second
to load.  Ctrl-C or SIGTERM meanwhile is held until they have loaded (an
interrupt inside an import may come out as another error: interrupts.held),
then ends the command as at any later moment: one line, exit 130 or 143, no
traceback; nothing has been written yet, so nothing is left behind.  So this
module and cvmvm.cli.interrupts import only the standard library (the ``cvmvm``
package loads its API on first use), and main.py's ``main`` reports interrupts
through the same ``stopped``.
"""

from __future__ import annotations

import signal

from cvmvm.cli.interrupts import held, sigterm_raises, stopped


def main() -> int:
    with sigterm_raises():
        try:
            with held():
                from cvmvm.cli import main as command
            code = command.main()
        except KeyboardInterrupt as e:   # held while loading, or in an instant main's own handling does not cover
            code = stopped(e)
    # The command is over and its code says how.  Python's shutdown that follows (tens of ms) puts
    # SIGINT back to its default, as leaving sigterm_raises did SIGTERM: a signal then would end the
    # process by the signal, with no line and the command's code lost.  Ignored dispositions last to
    # the end.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    return code

"""The ``cvmvm`` command line.

launch.py (the ``cvmvm`` entry point) and interrupts.py (Ctrl-C and SIGTERM:
one line, exit 130 or 143), handled before anything loads, so the standard
library only; main.py (the parser, dispatch, exit codes),
common.py (exit codes, the Reply type, the MODEL/--input arguments and their
loaders), one module per command group: model.py (verify, run, convert, hash,
disasm, ops, demo), tx.py (check-receipt, store, replay, diff, prove-step,
check-step), show.py (show), importer.py (import-onnx); demo.py and demo/ (the
bundled digits demo and its data).

May import everything below it (isa, serializer, cvmvm.files, cvmvm.vm,
cvmvm.tx); nothing imports it but ``cvmvm.__main__``.  Command modules import
common, never each other; main imports the command modules, and launch
imports main when it runs.
"""

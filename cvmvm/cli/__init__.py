"""The ``cvmvm`` command line.

main.py (the parser, dispatch, exit codes; the ``cvmvm`` entry point),
common.py (exit codes, the Reply type, the MODEL/--input arguments and their
loaders), one module per command group: model.py (verify, run, convert, hash,
disasm, ops, demo), tx.py (check-receipt, store, replay, diff, prove-step,
check-step), show.py (show), importer.py (import-onnx); demo.py and demo/ (the
bundled digits demo and its data).

May import everything below it (isa, serializer, cvmvm.files, cvmvm.vm,
cvmvm.tx); nothing imports it but ``cvmvm.__main__``.  Command modules import
common, never each other; main imports the command modules.
"""

"""The virtual machine: verification, execution, traces, batched runs, the Python API.

verify.py (Model IR -> checked Program), execute.py (runs a Program),
trace.py (the Merkle-committed trace of a run), batching.py (which programs
may run many inputs stacked along axis 0, and that batched traced run),
api.py (Model, Result, load, load_cortex, run_op), disasm.py (listings).

May import isa, serializer, cvmvm.files, numpy; never cvmvm.tx or cvmvm.cli.
"""

"""The transaction layer: receipts, the model store, replay, step proofs, trace diffs.

receipt.py (make a receipt from a run, sign it, check a claim against a
re-execution), store.py (content-addressed model directory), replay.py
(schedule and report the replay of a transaction file), stepproof.py (prove
and check one instruction, or one element of it, against a trace root and a
program root), element.py (what one output element reads and is, for the ops
the contract covers), contract.py with solidity/ (the on-chain verifier as
package data), tracediff.py (the first instruction at which two traces
disagree).  Their byte formats live in serializer.records.

May import isa, serializer, cvmvm.files, cvmvm.vm, numpy, cryptography (and
ray, an optional extra, inside the function that needs it); never cvmvm.cli.
"""

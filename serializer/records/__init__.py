"""The byte formats of the transaction layer, each a record with its codec (docs/FORMAT.md).

receipt.py (section 7: Receipt, Signer, encode/decode), transactions.py
(section 8: Transaction, encode_txs/decode_txs), trace.py (section 6: the
trace file, write and load_trace), stepproof.py (sections 9 and 10.2:
StepProof, encode/decode, the contract's calldata form), program.py (section
3: the program records a program root is made of).  Strict and canonical like the model codec: anything but the
canonical encoding of a well-formed record is refused.  What needs a model or
an execution (making, signing, checking) is cvmvm.tx.

May import isa, serializer, numpy, msgpack; never cvmvm.
"""

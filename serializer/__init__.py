"""Bytes <-> records, strict and canonical, and the hashes that commit to them (docs/FORMAT.md).

strict.py (canonical msgpack reading), limits.py (byte budgets), model.py (the
decoded-model IR), native.py (the native model codec), hashing.py (tensor,
model, trace and Merkle hashes), kinds.py (a file's kind from its content,
every format's version), cortex/ (the Cortex graph JSON + params format),
records/ (receipt, transaction file, trace file, step proof codecs).

May import isa, numpy, msgpack; never cvmvm.
"""

"""The cvmvm instruction set: pure op semantics.

types.py (TensorType, precisions, limits, div_trunc), errors.py (the one
CvmError hierarchy and its codes), attrs.py (attribute records and their
domains), spec.py (the OpDef record), table.py (the one op table and the ISA
version), ops/ (one block per op: rules, plan, fast kernel), reference/ (the
normative loop kernels written from the formalization).

Imports numpy only; nothing here knows about bytes, files or execution order.
"""

"""Reference kernels: each op's meaning, as loops written straight from the formalization.

One module per op family (elemwise, broadcast, reduce, nn, pool, transform,
vision), one function per op named after it (``abs_``, ``sum_``, ``max_``
where the name is a Python builtin), called like the fast kernels:
``reference(attrs_record, *arrays) -> tuple of arrays``.  Outputs have the
verified shapes; int32 outputs come back as exact int64 values, which the
executor checks against the inferred precision and narrows, exactly as it does
for a fast kernel's int64 output.  Slow on purpose and normative: every OpDef
names its reference (isa/ops/<family>.py), and the fast kernels are tested
against them under hypothesis (tests/test_ops_<family>.py).

May import numpy and the standard library only: nothing from isa/ops, so a
mistake in a fast kernel cannot be repeated here.
"""

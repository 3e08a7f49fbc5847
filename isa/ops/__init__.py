"""One module per op family, one block per op: attribute record, shape, precision and cost
rules, plan, fast kernel, and the OpDef that names them and the op's reference kernel
(isa/reference/).  isa/table.py lists every OpDef.

May import numpy, isa (types, errors, attrs, spec) and isa.reference.
"""

"""The cvmvm instruction set: pure op semantics (attributes, shape, precision, cost, kernel).

Imports numpy only; nothing here knows about bytes, files or execution order.
"""

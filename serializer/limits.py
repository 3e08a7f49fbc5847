"""Byte budgets of the Cortex reader, checked before anything is read or allocated."""

from __future__ import annotations

# A graph JSON holds structure only; the largest real Cortex models need well
# under 1 MiB, so 64 MiB leaves room without letting a file exhaust memory.
MAX_GRAPH_JSON_BYTES = 1 << 26

# One int32 tensor of the maximum size (2^30 elements) is 4 GiB.
MAX_PARAMS_BYTES = 1 << 32

"""The on-chain verifier, as package data (docs/FORMAT.md section 10).

``cvmvm/tx/solidity/`` holds the Solidity source of CvmStep and CvmChallenge
and ``artifact.json``, their ABI and bytecode as the pinned compiler builds
them (``node scripts/compile_contract.js cvmvm/tx/solidity``; a test
recompiles the source and compares the bytes).  ``deployment_files`` is what
``cvmvm contract DIR`` writes for users to deploy with their own tools.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

SOURCES = ("CvmStep.sol", "CvmChallenge.sol")
CONTRACTS = ("CvmStep", "CvmChallenge")


def _data(name: str) -> bytes:
    return resources.files("cvmvm.tx").joinpath("solidity", name).read_bytes()


def artifact() -> dict[str, Any]:
    """The compiler's output: its version, settings, and per contract abi, bytecode, deployedBytecode."""
    return json.loads(_data("artifact.json"))


def deployment_files() -> dict[str, bytes]:
    """File name -> bytes: each source, and per contract its ABI (JSON) and creation bytecode (hex)."""
    files = {name: _data(name) for name in SOURCES}
    compiled = artifact()
    for name in CONTRACTS:
        c = compiled["contracts"][name]
        files[f"{name}.abi.json"] = (json.dumps(c["abi"], indent=1, sort_keys=True) + "\n").encode()
        files[f"{name}.bin"] = (c["bytecode"] + "\n").encode()
    files["compiler.json"] = (json.dumps({"compiler": compiled["compiler"], "settings": compiled["settings"]},
                                         indent=1, sort_keys=True) + "\n").encode()
    return files

"""A content-addressed model store: a directory of native models named by model hash.

``<hex model hash>.cvm`` holds the model's canonical bytes.  Writes are atomic
(a reader never sees half a file), and every read re-hashes the file: a file
whose hash is not its name is refused (``malformed.store_hash``), so a store
can be copied around or shared without trusting the copy.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from isa.errors import InputError, MalformedError
from cvmvm import files
from cvmvm.vm.api import Model, load
from cvmvm.vm.verify import Limits

SUFFIX = ".cvm"
_NAME = re.compile(r"[0-9a-f]{64}\.cvm")


@dataclass(frozen=True)
class Entry:
    model_hash: str  # hex, the file's name
    size: int
    intact: bool     # the file's bytes hash to its name


class Store:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def path(self, model_hash: bytes) -> Path:
        return self.root / (model_hash.hex() + SUFFIX)

    def add(self, model: Model) -> bytes:
        """Store a model (once: an intact copy is kept as it is); return its hash."""
        digest = model.model_hash
        self.root.mkdir(parents=True, exist_ok=True)
        target = self.path(digest)
        if not (target.is_file() and hashlib.sha256(target.read_bytes()).digest() == digest):
            files.write_atomic(target, model.canonical_bytes)
        return digest

    def read(self, model_hash: bytes) -> bytes:
        """The canonical bytes of a stored model, checked against its name."""
        target = self.path(model_hash)
        if not target.is_file():
            raise InputError("unknown_model", f"model {model_hash.hex()} is not in the store {self.root}")
        data = files.read_bytes(target, "stored model")
        got = hashlib.sha256(data).digest()
        if got != model_hash:
            raise MalformedError("store_hash", f"{target}: the file hashes to {got.hex()}, not its name")
        return data

    def get(self, model_hash: bytes, limits: Limits = Limits()) -> Model:
        """Load and verify a stored model under ``limits``."""
        return load(self.read(model_hash), ops_limit=limits.ops, memory_limit=limits.memory, work_limit=limits.work)

    def list(self) -> list[Entry]:
        """Every model file, by name, each re-hashed."""
        if not self.root.is_dir():
            raise InputError("file", f"store {self.root} is not a directory")
        entries = []
        for path in sorted(p for p in self.root.iterdir() if _NAME.fullmatch(p.name)):
            data = files.read_bytes(path, "stored model")
            name = path.name[: -len(SUFFIX)]
            entries.append(Entry(name, len(data), hashlib.sha256(data).hexdigest() == name))
        return entries

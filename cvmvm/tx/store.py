"""A content-addressed model store: a directory of native models named by model hash.

``<hex model hash>.cvm`` holds the model's canonical bytes.  Writes are atomic
(a reader never sees half a file; cvmvm.files), and every read re-checks the
file: a file whose model hash (FORMAT.md section 1.3: the program root and the
bytes) is not its name is refused (``malformed.store_hash``), so a store can be
copied around or shared without trusting the copy.

The directory is not trusted either: only regular files are read, never
through a symbolic link (a link, fifo, device or subdirectory under a model's
name is ``io.not_regular``, found from ``lstat`` without opening it), and a
file's size is checked against the model limit before it is read.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from isa.errors import CvmError, InputError, IOFailure, LimitError, MalformedError
from serializer.native import MAX_MODEL_BYTES
from cvmvm import files
from cvmvm.vm.api import Model, load
from cvmvm.vm.verify import NOT_RUN, Limits

SUFFIX = ".cvm"
_NAME = re.compile(r"[0-9a-f]{64}\.cvm")


@dataclass(frozen=True)
class Entry:
    model_hash: str        # hex, the file's name
    size: int
    intact: bool           # a regular file holding the model its name is the hash of
    problem: str | None = None   # why it is not intact: "hash", or what the name holds instead of a model file


def checked_model(data: bytes, model_hash: bytes, where: str, limits: Limits = NOT_RUN) -> Model:
    """The model these bytes hold, verified under ``limits``, which must have this model hash.
    Its hash commits to its program root, so it is verified first; a model over the limits
    is refused as such (``limit.*``), anything else that does not verify is not that model."""
    try:
        model = load(data, ops_limit=limits.ops, memory_limit=limits.memory, work_limit=limits.work)
    except LimitError:
        raise
    except CvmError as e:
        raise MalformedError("store_hash", f"{where}: not a model that verifies ({e.code}: {e.message})") from None
    if model.model_hash != model_hash:
        raise MalformedError("store_hash", f"{where}: the model hashes to {model.model_hash.hex()}, not {model_hash.hex()}")
    if model.canonical_bytes != data:
        raise MalformedError("store_hash", f"{where}: not the canonical native bytes of model {model_hash.hex()}")
    return model


class Store:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def path(self, model_hash: bytes) -> Path:
        return self.root / (model_hash.hex() + SUFFIX)

    def add(self, model: Model) -> bytes:
        """Store a model (once: an intact copy is kept as it is); return its hash."""
        digest = model.model_hash
        files.make_directory(self.root, "store")
        target = self.path(digest)
        if self._check(target.name)[1] is not None:
            files.write_file(target, model.canonical_bytes, "stored model")
        return digest

    def read(self, model_hash: bytes) -> bytes:
        """The canonical bytes of a stored model, checked against its name (to the ISA's rules only:
        the reader that runs it loads it under its limits)."""
        return self.get(model_hash, NOT_RUN).canonical_bytes

    def read_file(self, model_hash: bytes) -> bytes:
        """A stored model file's bytes: a regular file, not a link, within the model limit."""
        target = self.path(model_hash)
        try:
            st = os.lstat(target)
        except FileNotFoundError:
            raise InputError("unknown_model", f"model {model_hash.hex()} is not in the store {self.root}") from None
        except OSError as e:
            raise files.read_failure(e, "stored model", target) from None
        if not stat.S_ISREG(st.st_mode):
            raise IOFailure("not_regular", f"stored model {target}: a {files.file_kind(st.st_mode)}, not a regular file")
        return files.read_bytes(target, "stored model", MAX_MODEL_BYTES, follow=False)

    def get(self, model_hash: bytes, limits: Limits = Limits()) -> Model:
        """Load and verify a stored model under ``limits``, checked against its name."""
        return checked_model(self.read_file(model_hash), model_hash, str(self.path(model_hash)), limits)

    def _check(self, name: str) -> tuple[int, str | None]:
        """(size, problem) of the file ``name``: problem None when it is an intact model file
        (read within the model limit, verified and hashed: the model hash commits to its program)."""
        path = self.root / name
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return 0, "missing"
        except OSError as e:
            raise files.read_failure(e, "stored model", path) from None
        if not stat.S_ISREG(st.st_mode):
            return 0, files.file_kind(st.st_mode)
        if st.st_size > MAX_MODEL_BYTES:
            return st.st_size, "too large"
        try:
            f, size = files.open_regular(path, "stored model", follow=False)
        except IOFailure as e:
            if e.reason == "not_found":
                return 0, "missing"
            raise
        try:
            with f:
                data = files.read_bounded(f, size, MAX_MODEL_BYTES, "stored model", path)
        except LimitError:   # grew while it was read
            return MAX_MODEL_BYTES + 1, "too large"
        try:
            checked_model(data, bytes.fromhex(name[: -len(SUFFIX)]), str(path))
        except (MalformedError, LimitError):
            return len(data), "hash"
        return len(data), None

    def list(self) -> list[Entry]:
        """Every name of a model file, each checked and re-hashed."""
        try:
            names = sorted(n for n in os.listdir(self.root) if _NAME.fullmatch(n))
        except NotADirectoryError:
            raise IOFailure("not_regular", f"store {self.root} is not a directory") from None
        except OSError as e:
            raise files.read_failure(e, "store", self.root) from None
        entries = []
        for name in names:
            size, problem = self._check(name)
            if problem != "missing":   # removed while listing
                entries.append(Entry(name[: -len(SUFFIX)], size, problem is None, problem))
        return entries


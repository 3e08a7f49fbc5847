"""Reading and writing the files the CLI and the store handle, bounded and atomic."""

from __future__ import annotations

import io
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator

import numpy as np

from isa.errors import InputError, LimitError, MalformedError

MAX_FILE_BYTES = 1 << 32  # nothing cvmvm reads may exceed 4 GiB


def read_bytes(path: str | os.PathLike[str], what: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """The whole file, after checking its size against the limit."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > limit:
                raise LimitError("bytes", f"{what} {path}: {size} bytes exceed the limit of {limit}")
            return f.read(limit + 1)
    except OSError as e:
        raise InputError("file", f"{what} {path}: {e.strerror or e}") from None


def read_npy(path: str | os.PathLike[str], limit: int = MAX_FILE_BYTES) -> np.ndarray:
    """A .npy array, never unpickling, its header checked before the data is read."""
    try:
        with open(path, "rb") as f:
            try:
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
                elif version in ((2, 0), (3, 0)):
                    shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
                else:
                    raise ValueError(f"unsupported .npy version {version}")
            except ValueError as e:
                raise MalformedError("npy", f"{path}: not a valid .npy file ({e})") from None
            if dtype.hasobject:
                raise MalformedError("npy", f"{path}: object arrays are not accepted")
            count = 1
            for d in shape:
                count *= d
            if count * dtype.itemsize > limit:
                raise LimitError("bytes", f"{path}: array of {count} x {dtype.itemsize} bytes exceeds the limit")
            f.seek(0)
            data = f.read(limit + 1024)
    except OSError as e:
        raise InputError("file", f"{path}: {e.strerror or e}") from None
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except ValueError as e:
        raise MalformedError("npy", f"{path}: {e}") from None


def write_atomic(path: str | os.PathLike[str], data: bytes, mode: int | None = None) -> None:
    """Write via a temporary file in the same directory and rename: never half a file."""
    with atomic_output(path, mode) as f:
        f.write(data)


@contextmanager
def atomic_output(path: str | os.PathLike[str], mode: int | None = None) -> Iterator[BinaryIO]:
    """A file to stream into, renamed to ``path`` only once the block completes: never half a file.
    ``mode``: the file's permission bits (default: mkstemp's owner-only)."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or ".")
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        with os.fdopen(fd, "wb", buffering=1 << 20) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def save_npy_atomic(path: str | os.PathLike[str], value: np.ndarray) -> None:
    buf = io.BytesIO()
    np.save(buf, value, allow_pickle=False)
    write_atomic(path, buf.getvalue())

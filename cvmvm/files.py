# About 700 lines: every file cvmvm reads or writes passes here, and reads and writes share one error mapping.
"""Reading and writing the files cvmvm handles: bounded reads, and writes committed as one unit.

Reading: a path must name a regular file (a device, fifo, socket or directory
is refused from its ``stat``, before it is opened), its size is checked against
the caller's limit (or the limit of the kind its first bytes show) before
anything is allocated, and it is read in bounded steps.  A .npy file's header
is parsed by hand, and the data size it declares is checked against the file's
real size before the data is read.

Writing (README "Reliability"): ``Outputs`` checks every output path before the
command does its work (its directory exists, it is not one of the command's
inputs, no two outputs are one file), then commits all of them as one unit:
each file is written under a temporary name beside its final name and synced;
when there is more than one, a commit record listing them is written into each
directory involved, the one in the first directory last (the commit point);
then every file is renamed into place, the directories are synced and the
records deleted.  Each directory is locked (``flock``) while a unit commits
into it, and the next unit that commits there first finishes what a killed
one left: a unit whose commit point exists is completed, any other's files are
removed.  Until the commit point every final name holds its old file.

Every failure is an ``io.*`` error that names the path as the caller gave it,
never a temporary file.
"""

from __future__ import annotations

import ast
import errno
import fcntl
import hashlib
import io
import json
import os
import re
import secrets
import stat
import time
from contextlib import contextmanager
from typing import Any, BinaryIO, Callable, Iterable, Iterator, Union

import numpy as np

from isa.errors import CvmError, InputError, IOFailure, LimitError, MalformedError, UsageError, shown
from serializer import strict

PathLike = Union[str, "os.PathLike[str]"]

MAX_FILE_BYTES = 1 << 32   # nothing cvmvm reads may exceed 4 GiB
READ_STEP = 1 << 24        # the most one read call asks for


# -- errors --------------------------------------------------------------------

_KINDS = ((stat.S_ISREG, "regular file"), (stat.S_ISDIR, "directory"), (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
          (stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"), (stat.S_ISLNK, "symbolic link"))


def file_kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "special file")


def _reason(e: OSError) -> str | None:
    """The io reason an errno names, or None for a failure of the read or write itself."""
    if e.errno in (errno.ENOENT, errno.ENOTDIR):
        return "not_found"
    if e.errno in (errno.EACCES, errno.EPERM):
        return "permission"
    if e.errno in (errno.EISDIR, errno.ELOOP, errno.ENXIO):
        return "not_regular"
    return None


def read_failure(e: OSError, what: str, path: PathLike) -> IOFailure:
    message = f"{what} {path}: {e.strerror or e}"
    reason = _reason(e)
    return IOFailure("read", message) if reason is None else IOFailure(reason, message)


def write_failure(e: OSError, what: str, path: PathLike) -> IOFailure:
    message = f"cannot write {what} {path}: {e.strerror or e}"
    reason = _reason(e)
    return IOFailure("write", message) if reason is None else IOFailure(reason, message)


def _too_large(size: int, limit: int, what: str, path: PathLike) -> LimitError:
    return LimitError("bytes", f"{what} {path}: {size} bytes exceed the limit of {limit}")


# -- reading -------------------------------------------------------------------

def open_regular(path: PathLike, what: str, follow: bool = True) -> tuple[io.FileIO, int]:
    """An unbuffered binary file object of a regular file, and its size.

    ``follow=False`` refuses a symbolic link itself (the store's files).  The
    kind is checked on ``stat`` before the open, so a fifo or a device is never
    opened, and again on the open file (it may have been swapped between).
    """
    _named(path, what)
    try:
        st = os.stat(path, follow_symlinks=follow)
        if not stat.S_ISREG(st.st_mode):
            raise IOFailure("not_regular", f"{what} {path}: a {file_kind(st.st_mode)}, not a regular file")
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
        fd = os.open(path, flags)
    except OSError as e:
        raise read_failure(e, what, path) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise IOFailure("not_regular", f"{what} {path}: a {file_kind(st.st_mode)}, not a regular file")
    return io.FileIO(fd, "rb"), st.st_size


def read_bounded(f: BinaryIO, expected: int, limit: int, what: str, path: PathLike, start: bytes = b"") -> bytes:
    """``start`` (bytes already read from ``f``) and everything left in ``f``, expected to be
    ``expected`` bytes in all, in steps of at most READ_STEP; a file that grows past ``limit``
    while it is read is refused."""
    parts: list[bytes] = [start] if start else []
    total = len(start)
    while True:
        want = expected - total if total < expected else 1 << 16
        try:
            chunk = f.read(min(want, READ_STEP, limit + 1 - total))
        except OSError as e:
            raise read_failure(e, what, path) from None
        if not chunk:
            break
        parts.append(chunk)
        total += len(chunk)
        if total > limit:
            raise _too_large(total, limit, what, path)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def read_bytes(path: PathLike, what: str, limit: int = MAX_FILE_BYTES, *, follow: bool = True) -> bytes:
    """The whole file, after checking that it is a regular file of at most ``limit`` bytes."""
    f, size = open_regular(path, what, follow)
    with f:
        if size > limit:
            raise _too_large(size, limit, what, path)
        return read_bounded(f, size, limit, what, path)


def given_bytes(source: object, what: str, limit_of: Callable[[bytes], tuple[int, str]]) -> tuple[bytes, str]:
    """The bytes of a file a Python caller gave: a bytes-like object is the file itself, a str or
    os.PathLike names it (read by ``read_by_head`` under ``limit_of``); and how to name it in
    messages.  Bytes given directly are held to the same limit before they are copied: a view of a
    broadcast array claims as many bytes as it likes and holds few.  Anything else is
    usage.argument: an int would be opened as a file descriptor, None or a list reach os.stat's
    TypeError, a released memoryview its ValueError."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        try:
            view = memoryview(source)
            size = view.nbytes
            if view.c_contiguous:
                head, data = view.cast("B")[:HEAD_BYTES].tobytes(), None
            else:   # its first bytes are not a slice away: bounded by every file's limit, then copied
                if size > MAX_FILE_BYTES:
                    raise LimitError("bytes", f"{what}: {size} bytes exceed the limit of {MAX_FILE_BYTES}")
                data = view.tobytes()
                head = data[:HEAD_BYTES]
        except ValueError:   # a released memoryview
            raise UsageError("argument", f"{what}: a released memoryview") from None
        limit, kind = limit_of(head)
        if size > limit:
            raise LimitError("bytes", f"{kind}: {size} bytes exceed the limit of {limit}")
        if data is None:   # bytes are immutable: no copy of them is needed
            data = source if type(source) is bytes else view.tobytes()
        return data, what
    if isinstance(source, (str, os.PathLike)):
        try:
            path = os.fspath(source)
        except TypeError:    # a __fspath__ that returns neither str nor bytes
            path = None
        if isinstance(path, str):
            return read_by_head(path, what, limit_of), path
    raise UsageError("argument", f"{what}: expected a path (a str or os.PathLike) or the file's bytes, "
                                 f"got {type(source).__name__}")


HEAD_BYTES = 64   # enough to tell any kind of file cvmvm reads from the bytes it begins with


def read_by_head(path: PathLike, what: str, limit_of: Callable[[bytes], tuple[int, str]]) -> bytes:
    """The whole file, under the limit of the kind of file it is: ``limit_of`` gives, for its
    first HEAD_BYTES bytes, the limit and what to call the file in messages.  A file over its
    kind's limit is refused from its size before more than those bytes is read: read first under
    any file's 4 GiB, a 1 GiB graph JSON (limited to 64 MiB) cost 12 s and 2 GB to refuse."""
    f, size = open_regular(path, what)
    with f:
        try:
            head = f.read(min(HEAD_BYTES, size))
        except OSError as e:
            raise read_failure(e, what, path) from None
        limit, kind = limit_of(head)
        if size > limit:
            raise _too_large(size, limit, kind, path)
        return read_bounded(f, size, limit, kind, path, head)


# .npy (numpy's format.py, versions 1.0-3.0): magic, version, header length, a
# Python dict literal, data.  numpy reads headers of at most 10,000 bytes by default.
NPY_MAGIC = b"\x93NUMPY"
MAX_NPY_HEADER = 10_000
NPY_KEYS = {"descr", "fortran_order", "shape"}
# Bool, integers, floats: all a VM input can be.  A multi-byte type names its byte order: numpy
# reads '|i4' and '=i4' in the host's, so the same file would be two tensors on two machines.
_SIMPLE_DESCR = re.compile(r"[<>|=][biu]1|[<>][iuf][248]")
_ORDERLESS_DESCR = re.compile(r"[|=][iuf][248]")
_LONG_NUMBER = re.compile(r"[0-9]{20}")   # longer than any valid dimension (< 2^64)
# A number token: a digit not inside a name or another number ('<i4' holds a letter's digit).
_NUMBER = re.compile(r"(?<![\w.])[0-9][\w.]*")
_DECIMAL = re.compile(r"[0-9]+")


def _npy_header(f: BinaryIO, path: PathLike) -> tuple[np.dtype, tuple[int, ...], bool]:
    def bad(message: str) -> MalformedError:
        return MalformedError("npy", f"{path}: not a valid .npy file ({message})")

    lead = f.read(8)
    if len(lead) < 8 or lead[:6] != NPY_MAGIC:
        raise bad("no .npy magic")
    version = (lead[6], lead[7])
    if version not in ((1, 0), (2, 0), (3, 0)):
        raise bad(f"unsupported version {version[0]}.{version[1]}")
    width = 2 if version == (1, 0) else 4
    raw_length = f.read(width)
    if len(raw_length) < width:
        raise bad("truncated header length")
    length = int.from_bytes(raw_length, "little")
    if length > MAX_NPY_HEADER:
        raise bad(f"header of {length} bytes exceeds {MAX_NPY_HEADER}")
    raw = f.read(length)
    if len(raw) < length:
        raise bad(f"header of {length} bytes is truncated to {len(raw)}")
    try:
        text = raw.decode("utf-8" if version == (3, 0) else "latin-1")
    except UnicodeDecodeError:
        raise bad("header is not UTF-8") from None
    # int() of a long digit string depends on PYTHONINTMAXSTRDIGITS: refuse it first.
    if _LONG_NUMBER.search(text):
        raise bad("header holds a number of 20 or more digits")
    # 0x..., 0o..., 0b... and 1_000 pass the digit count above with any value: numpy writes
    # plain decimals, so nothing else is read.
    for m in _NUMBER.finditer(text):
        if not _DECIMAL.fullmatch(m.group()):
            raise bad(f"header holds {m.group()[:40]!r}, not a plain decimal integer")
    try:
        header = ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise bad("header is not a Python literal") from None
    if type(header) is not dict or set(header) != NPY_KEYS:
        raise bad(f"header must be a dict with exactly the keys {sorted(NPY_KEYS)}")
    descr, fortran, shape = header["descr"], header["fortran_order"], header["shape"]
    if type(fortran) is not bool:
        raise bad("fortran_order must be True or False")
    if type(shape) is not tuple or any(type(d) is not int or d < 0 for d in shape) or len(shape) > 64:
        raise bad("shape must be a tuple of at most 64 non-negative integers")
    if type(descr) is not str:
        raise InputError("dtype", f"{path}: structured arrays are not accepted")
    if descr in ("|O", "O"):
        raise MalformedError("npy", f"{path}: object arrays are not accepted (their data is pickled)")
    # Only the simple descriptors numpy writes for these kinds ('<i4', '|b1', '>f8'): np.dtype()
    # of an arbitrary string can raise almost anything (',i8' is a SyntaxError).
    if _ORDERLESS_DESCR.fullmatch(descr):
        raise bad(f"descr {descr!r} names no byte order ('<' or '>')")
    if not _SIMPLE_DESCR.fullmatch(descr):
        raise InputError("dtype", f"{path}: dtype {descr[:40]!r} is not a bool, integer or float dtype")
    return np.dtype(descr), shape, fortran


def read_npy(path: PathLike, limit: int = MAX_FILE_BYTES) -> np.ndarray:
    """A .npy array (read-only), never unpickling: the header is parsed and the data size it
    declares checked against the file's real size before the data is read."""
    f, size = open_regular(path, ".npy file")
    with f:
        try:
            dtype, shape, fortran = _npy_header(f, path)
            offset = f.tell()
        except OSError as e:
            raise read_failure(e, ".npy file", path) from None
        # numpy multiplies the dimensions other than 0 even for an empty array, and fails on a
        # product past 2^63: they are bounded as if the array held data.
        extent = 1
        for d in shape:
            extent *= max(d, 1)
        if extent * dtype.itemsize > limit:
            what = "array" if all(shape) else "empty array's dimensions other than 0 describe an array"
            raise LimitError("bytes", f"{path}: {what} of {extent} x {dtype.itemsize} bytes, over the limit of "
                                      f"{limit}")
        count = extent if all(shape) else 0
        nbytes = count * dtype.itemsize
        if offset + nbytes != size:
            raise MalformedError("npy", f"{path}: the header declares {nbytes} bytes of data, the file holds "
                                        f"{size - offset}")
        data = read_bounded(f, nbytes, nbytes, ".npy file", path)
    if len(data) != nbytes:
        raise MalformedError("npy", f"{path}: the file shrank while it was read")
    return np.frombuffer(data, dtype=dtype, count=count).reshape(shape, order="F" if fortran else "C")


def npy_bytes(value: np.ndarray) -> bytes:
    """An array as little-endian .npy bytes (never pickled): the same file on every machine, where
    np.save writes the host's order (the VM's arrays are big-endian on a big-endian host)."""
    buf = io.BytesIO()
    np.save(buf, value.astype(value.dtype.newbyteorder("<"), copy=False), allow_pickle=False)
    return buf.getvalue()


# -- writing: outputs committed as one unit ------------------------------------------

TOKEN_HEX = 16
_TEMP = re.compile(r"\..+\.cvmvm-[0-9a-f]{%d}\.tmp" % TOKEN_HEX, re.S)
_RECORD = re.compile(r"\.cvmvm-([0-9a-f]{%d})\.commit" % TOKEN_HEX)
COMMIT_FORMAT = "cvmvm-commit/1"
MAX_RECORD_BYTES = 1 << 20


NAME_MAX = 255   # bytes in a file name, on every Linux file system
_TEMP_EXTRA = len(".") + len(".cvmvm-") + TOKEN_HEX + len(".tmp")


def temp_name(name: str, token: str) -> str:
    """The temporary name of final name ``name`` in the unit ``token``.  A name too long to take
    the 28 bytes more is cut, and marked with a hash of the whole so that two long names of one
    unit never share a temporary file: any name the system accepts can be written."""
    raw = os.fsencode(name)
    if len(raw) + _TEMP_EXTRA > NAME_MAX:
        mark = "~" + hashlib.sha256(raw).hexdigest()[:8]
        name = os.fsdecode(raw[:NAME_MAX - _TEMP_EXTRA - len(mark)]) + mark
    return f".{name}.cvmvm-{token}.tmp"


def record_name(token: str) -> str:
    return f".cvmvm-{token}.commit"


def is_own_temp(name: str) -> bool:
    """A name of cvmvm's own temporary files or commit records (never a final name)."""
    return bool(_TEMP.fullmatch(name) or _RECORD.fullmatch(name))


def _named(path: PathLike, what: str) -> None:
    """A path the system can take: no NUL byte (os functions raise ValueError on one; only a
    Python caller can pass it, a command line cannot)."""
    if "\0" in os.fspath(path):
        raise UsageError("argument", f"{what}: the path {shown(os.fspath(path))} holds a NUL byte")


def _stat(path: PathLike) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def _lstat(path: PathLike) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_new(path: str, data: bytes, mode: int = 0o666) -> None:
    """Create ``path`` (which must not exist) with ``mode`` less the umask, write and sync it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view[:READ_STEP]):]
        os.fsync(fd)
    finally:
        os.close(fd)


def _lock_waiting(fd: int) -> None:
    """``flock(fd, LOCK_EX)``, asked without blocking and asked again after short sleeps.  A
    blocking flock can miss Ctrl-C for good: a SIGINT that lands after Python last checked for
    signals but before the call blocks interrupts nothing, and the command would wait for the
    other unit however long it holds the lock.  A sleep ends, and the interrupt is raised."""
    pause = 0.001
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            time.sleep(pause)
            pause = min(2 * pause, 0.05)


class _Locks:
    """Exclusive ``flock``s on directories, taken in sorted order (two units never deadlock)."""

    def __init__(self) -> None:
        self.fds: list[int] = []
        self.held: set[str] = set()   # directories locked; a file system without flock gets none

    def take(self, dirs: Iterable[str]) -> None:
        for d in sorted(dirs):
            fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            self.fds.append(fd)
            try:
                _lock_waiting(fd)
            except OSError as e:
                if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                continue
            self.held.add(d)

    def release(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds.clear()
        self.held.clear()


def _valid_record(record: Any, directory: str, token: str) -> bool:
    """A commit record as cvmvm writes it: it lists ``directory``, and renames only its own
    temporary files to final names beside them, in the directories it lists."""
    if type(record) is not dict or record.get("format") != COMMIT_FORMAT:
        return False
    dirs, renames, removes = record.get("dirs"), record.get("renames"), record.get("removes")
    if type(dirs) is not list or directory not in dirs or any(type(d) is not str for d in dirs):
        return False
    if type(renames) is not list or type(removes) is not list:
        return False
    for pair in renames:
        if type(pair) is not list or len(pair) != 2 or any(type(p) is not str for p in pair):
            return False
        temp, final = pair
        if (os.path.dirname(final) not in dirs or os.path.dirname(temp) != os.path.dirname(final)
                or os.path.basename(temp) != temp_name(os.path.basename(final), token)):
            return False
    return all(type(p) is str and os.path.dirname(p) in dirs for p in removes)


def _read_record(path: str, directory: str, token: str) -> dict[str, Any] | None:
    """The commit record at ``path``, or None when it is not one of ours.  Its owner and size are
    checked on the open file before a byte is read: a record anyone else planted is never parsed
    (one of "[" * 100000 made every later write there fail with RecursionError)."""
    try:
        f, size = open_regular(path, "commit record", follow=False)
    except CvmError:
        return None
    with f:
        try:
            if os.fstat(f.fileno()).st_uid != os.getuid() or size > MAX_RECORD_BYTES:
                return None
            data = read_bounded(f, size, MAX_RECORD_BYTES, "commit record", path)
            record = strict.parse_json(data.decode("utf-8"), "commit_record", path)
        except (OSError, ValueError, CvmError):
            return None
    return record if _valid_record(record, directory, token) else None


def _pending(directory: str) -> list[tuple[str, dict[str, Any] | None]]:
    """The commit records in a directory: (path, the record, or None when it is not one of ours:
    unreadable, of another user, not cvmvm's JSON, or naming files it has no business with)."""
    found = []
    for name in sorted(os.listdir(directory)):
        m = _RECORD.fullmatch(name)
        if m:
            path = os.path.join(directory, name)
            found.append((path, _read_record(path, directory, m.group(1))))
    return found


def _finish(record_path: str, record: dict[str, Any] | None) -> None:
    """Complete a killed unit whose commit point exists; undo any other.  Caller holds every lock."""
    try:
        _finish_unit(record_path, record)
    except OSError as e:
        # Named as what it is, not as the output of the command that found it.
        reason = _reason(e)
        raise IOFailure(reason or "write", f"cannot finish the interrupted write that {record_path} records: "
                                           f"{e.filename or record_path}: {e.strerror or e}") from None


def _finish_unit(record_path: str, record: dict[str, Any] | None) -> None:
    if record is None:
        if os.path.lexists(record_path):
            os.unlink(record_path)
        return
    name = os.path.basename(record_path)
    dirs = [d for d in record["dirs"] if os.path.isdir(d)]
    committed = os.path.exists(os.path.join(record["dirs"][0], name))
    for temp, final in record["renames"]:
        if os.path.lexists(temp):
            if committed:
                os.replace(temp, final)
            else:
                os.unlink(temp)
    if committed:
        for final in record["removes"]:
            if os.path.lexists(final):
                os.unlink(final)
    for d in dirs:
        _fsync_dir(d)
    records = [os.path.join(d, name) for d in dirs]
    for path in sorted(records, key=lambda p: p == os.path.join(record["dirs"][0], name)):   # commit point last
        if os.path.lexists(path):
            os.unlink(path)
            _fsync_dir(os.path.dirname(path))


def _involved(directory: str) -> set[str]:
    """The existing directories named by the commit records found in ``directory``."""
    return {d for _, r in _pending(directory) if r is not None for d in r["dirs"] if os.path.isdir(d)}


def _recover(directory: str) -> None:
    """Finish every killed unit recorded in ``directory``, then remove stale temporary files.
    Any temporary file left once its records are handled belongs to no live unit: a unit
    writes only while it holds this directory's lock."""
    for path, record in _pending(directory):
        _finish(path, record)
    for name in os.listdir(directory):
        if _TEMP.fullmatch(name):
            try:
                os.unlink(os.path.join(directory, name))
            except FileNotFoundError:
                pass


def recover(directory: PathLike) -> None:
    """Finish or undo what a killed command left in ``directory`` (a command writing there does this first)."""
    with _locked([os.path.realpath(directory)]):
        pass


@contextmanager
def _locked(dirs: list[str]) -> Iterator[None]:
    """Lock ``dirs`` and every directory their pending records involve, and recover them."""
    need = set(dirs)
    locks = _Locks()
    try:
        while True:
            locks.take(need)
            more = set().union(*(_involved(d) for d in need)) - need
            if not more:
                break
            locks.release()
            need |= more
        # Without a lock another unit may be writing there: nothing is finished or removed then.
        for d in sorted(need & locks.held):
            _recover(d)
        yield
    finally:
        locks.release()


class Outputs:
    """The files one command writes.

    Declare each output before the work (``file``, ``directory``): the path is
    checked at once.  Then ``put`` the bytes and ``commit``: all of them are
    written as one unit.  ``reads`` are the command's input paths: an output
    that is one of them is refused.
    """

    def __init__(self, reads: Iterable[PathLike | None] = ()) -> None:
        self._reads = [(str(p), st) for p in reads if p is not None for st in [_stat(p)] if st is not None]
        self._files: dict[str, tuple[str, str]] = {}          # real path -> (what, path as given)
        self._dirs: dict[str, tuple[str, str, re.Pattern[str]]] = {}   # real path -> (what, given, owned names)
        self._data: dict[str, bytes] = {}
        self._modes: dict[str, int] = {}
        self._fresh: dict[str, str] = {}   # real path -> why it must not exist when the unit is written

    # -- declaring ---------------------------------------------------------------

    def _same_as_input(self, real: str, what: str, given: str) -> None:
        st = _stat(given)
        for path, read in self._reads:
            if os.path.realpath(path) == real or (st is not None and (st.st_dev, st.st_ino) == (read.st_dev, read.st_ino)):
                raise UsageError("conflict", f"{what} {given} is also an input ({path}): refusing to overwrite it")

    def _owned_by_directory(self, real: str) -> str | None:
        parent, name = os.path.split(real)
        hit = self._dirs.get(parent)
        return hit[1] if hit is not None and hit[2].fullmatch(name) else None

    def file(self, path: PathLike, what: str, fresh: str | None = None) -> str:
        """Declare an output file; returns the key to ``put`` under.  Its directory must exist.
        ``fresh``: the file must not exist when the unit is written (checked under the lock), and
        why, for the usage.argument error if it does."""
        given = str(path)
        _named(given, what)
        if not given or given.endswith(os.sep):
            raise IOFailure("not_regular", f"cannot write {what} {given!r}: not a file name")
        parent = os.path.dirname(given) or "."
        st = _stat(parent)
        if st is None or not stat.S_ISDIR(st.st_mode):
            raise IOFailure("not_found", f"cannot write {what} {given}: directory {parent} does not exist")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise IOFailure("permission", f"cannot write {what} {given}: directory {parent} is not writable")
        if len(os.fsencode(os.path.basename(given))) > NAME_MAX:
            # Refused here, not by the rename after the commit point, which would leave the unit to recovery.
            raise write_failure(OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG)), what, given)
        target = _stat(given)
        if target is not None and not stat.S_ISREG(target.st_mode):
            raise IOFailure("not_regular", f"cannot write {what} {given}: it is a {file_kind(target.st_mode)}")
        # The directory resolved, the name not: an output that is a symbolic link is replaced, never written through.
        real = os.path.join(os.path.realpath(parent), os.path.basename(given))
        self._same_as_input(real, what, given)
        if real in self._files:
            raise UsageError("conflict", f"{what} {given} is also {self._files[real][0]}: give each output its own file")
        owner = self._owned_by_directory(real)
        if owner is not None:
            raise UsageError("conflict", f"{what} {given} is a file that {owner} writes")
        self._files[real] = (what, given)
        if fresh is not None:
            self._fresh[real] = fresh
        return real

    def directory(self, path: PathLike, what: str, owned: str) -> str:
        """Declare an output directory, created at commit if missing (its parent must exist), in
        which this command writes (and removes stale) files whose names match ``owned``."""
        given = str(path)
        _named(given, what)
        target = _stat(given)
        if target is None:
            parent = os.path.dirname(os.path.normpath(given)) or "."
            pst = _stat(parent)
            if pst is None or not stat.S_ISDIR(pst.st_mode):
                raise IOFailure("not_found", f"cannot create {what} {given}: directory {parent} does not exist")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise IOFailure("permission", f"cannot create {what} {given}: directory {parent} is not writable")
        elif not stat.S_ISDIR(target.st_mode):
            raise IOFailure("not_regular", f"{what} {given}: a {file_kind(target.st_mode)}, not a directory")
        elif not os.access(given, os.W_OK | os.X_OK):
            raise IOFailure("permission", f"cannot write into {what} {given}: not writable")
        real = os.path.realpath(given)
        pattern = re.compile(owned)
        for path_, _ in self._reads:
            parent, name = os.path.split(os.path.realpath(path_))
            if parent == real and pattern.fullmatch(name):
                raise UsageError("conflict", f"{what} {given} would replace the input {path_}")
        for f, (fwhat, fgiven) in self._files.items():
            parent, name = os.path.split(f)
            if parent == real and pattern.fullmatch(name):
                raise UsageError("conflict", f"{fwhat} {fgiven} is a file that {what} writes")
        if real in self._dirs:
            raise UsageError("conflict", f"{what} {given} is also {self._dirs[real][0]}")
        self._dirs[real] = (what, given, pattern)
        return real

    # -- writing -------------------------------------------------------------------

    def put(self, key: str, data: bytes, mode: int = 0o666) -> None:
        """The bytes of output ``key``; ``mode`` (less the umask) for a file only its owner may read."""
        if key not in self._files:
            raise KeyError(key)
        self._data[key] = data
        self._modes[key] = mode

    def put_in(self, directory: str, name: str, data: bytes) -> None:
        if directory not in self._dirs or not self._dirs[directory][2].fullmatch(name):
            raise KeyError((directory, name))
        self._data[os.path.join(directory, name)] = data

    def _given(self, real: str) -> tuple[str, str]:
        if real in self._files:
            return self._files[real]
        parent, name = os.path.split(real)
        what, given, _ = self._dirs[parent]
        return what, os.path.join(given, name)

    def commit(self) -> None:
        """Write every file put, as one unit; an ``io.*`` error names the path that failed."""
        for real, (what, given, _) in sorted(self._dirs.items()):
            if not os.path.isdir(real):
                try:
                    os.mkdir(real)
                    _fsync_dir(os.path.dirname(real))
                except FileExistsError:
                    pass
                except OSError as e:
                    raise write_failure(e, what, given) from None
        dirs = sorted({os.path.dirname(p) for p in self._data} | set(self._dirs))
        if not dirs:
            return
        try:
            with _locked(dirs):
                self._commit_locked(dirs)
        except OSError as e:   # locking, or removing what a killed command left
            what, given = self._given(min(self._data)) if self._data else self._dirs[dirs[0]][:2]
            raise write_failure(e, what, given) from None

    def _commit_locked(self, dirs: list[str]) -> None:
        for real, why in sorted(self._fresh.items()):
            if os.path.lexists(real):
                raise UsageError("argument", f"{self._files[real][1]} exists; {why}")
        token = secrets.token_hex(TOKEN_HEX // 2)
        removes = sorted(os.path.join(d, name) for d, (_, _, pattern) in self._dirs.items()
                         for name in os.listdir(d)
                         if pattern.fullmatch(name) and os.path.join(d, name) not in self._data)
        renames = [(os.path.join(os.path.dirname(p), temp_name(os.path.basename(p), token)), p)
                   for p in sorted(self._data)]
        records = [os.path.join(d, record_name(token)) for d in dirs]
        record = {"format": COMMIT_FORMAT, "dirs": dirs, "renames": renames, "removes": removes}
        # A final name that is a directory now (an output directory's files are named only here, and
        # a declared file may have become one) would fail its rename after the commit point and leave
        # the unit to every later command's recovery: refused before anything is written.
        for final in [f for _, f in renames] + removes:
            st = _stat(final) if final in self._data else _lstat(final)
            if st is not None and not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
                what, given = self._given(final)
                raise IOFailure("not_regular", f"cannot write {what} {given}: it is a {file_kind(st.st_mode)}")
        written: list[str] = []   # what to remove if the unit fails before its commit point
        committed = False
        current = self._given(renames[0][1]) if renames else self._dirs[dirs[0]][:2]
        try:
            for temp, final in renames:
                current = self._given(final)
                written.append(temp)
                _write_new(temp, self._data[final], self._modes.get(final, 0o666))
            if len(renames) + len(removes) > 1:
                doc = json.dumps(record, sort_keys=True).encode("utf-8")
                for path in records[1:] + records[:1]:   # the first directory's record is the commit point
                    temp = os.path.join(os.path.dirname(path), temp_name(os.path.basename(path), token))
                    written.append(temp)
                    _write_new(temp, doc)
                    written.append(path)   # before the rename: an interrupt just after it leaves no record
                    os.replace(temp, path)
                    _fsync_dir(os.path.dirname(path))
            for temp, final in renames:
                current = self._given(final)
                os.replace(temp, final)
                committed = True
            for final in removes:
                current = self._given(final)
                os.unlink(final)
                committed = True
            for d in dirs:
                _fsync_dir(d)
            for path in records[1:] + records[:1]:
                if os.path.lexists(path):
                    os.unlink(path)
            for d in dirs:
                _fsync_dir(d)
        except BaseException as e:
            if not committed and not (records and os.path.lexists(records[0])):
                for path in written:   # before the commit point: every old file stays as it was
                    try:
                        os.unlink(path)
                    except OSError:
                        pass
            elif not isinstance(e, OSError) and records and os.path.lexists(records[0]):
                # Past the commit point, Ctrl-C or SIGTERM finishes the unit as recovery would, then
                # goes on: left to the next command, every name stayed old, new or mixed until then.
                # A write that failed is left to recovery: it may fail the same way again.
                try:
                    _finish(records[0], record)
                except CvmError:
                    pass
            if isinstance(e, OSError):
                raise write_failure(e, *current) from None
            raise


def make_directory(path: PathLike, what: str) -> None:
    """Create an output directory if it is missing (its parent must exist: parents are never
    made), or check that it is one."""
    try:
        os.mkdir(path)
    except FileExistsError:
        if not os.path.isdir(path):
            raise IOFailure("not_regular", f"{what} {path} is not a directory") from None
    except OSError as e:
        raise write_failure(e, what, path) from None


def write_file(path: PathLike, data: bytes, what: str, reads: Iterable[PathLike | None] = (),
               mode: int = 0o666) -> None:
    """One output file, checked and written atomically (synced, renamed into place, directory synced)."""
    out = Outputs(reads)
    key = out.file(path, what)
    out.put(key, data, mode)
    out.commit()


@contextmanager
def output_stream(path: PathLike, what: str, reads: Iterable[PathLike | None] = ()) -> Iterator[BinaryIO]:
    """One output file written as a stream (a transaction file of a million records): checked at
    once, written under a temporary name while its directory is locked, synced and renamed into
    place only when the block completes; if it does not, nothing is left and the old file stays."""
    key = Outputs(reads).file(path, what)
    directory, name = os.path.split(key)
    temp = os.path.join(directory, temp_name(name, secrets.token_hex(TOKEN_HEX // 2)))
    try:
        with _locked([directory]):
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
            try:
                with os.fdopen(fd, "wb", buffering=1 << 20) as f:
                    yield f
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(temp, key)
                _fsync_dir(directory)
            except BaseException:
                if os.path.lexists(temp):
                    os.unlink(temp)
                raise
    except OSError as e:
        raise write_failure(e, what, path) from None

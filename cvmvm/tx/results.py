"""Replay results: one JSON line per transaction, the results file, resume, and the report.

The line format (docs/FORMAT.md section 8) is what ``--output`` streams and
``--json`` lists; a results file is a header line, then one line per
transaction in transaction order, each written whole.  ``Report`` counts
outcomes as they arrive and renders the summary; errors that are a model's,
not a transaction's (a model not in the store), are reported once per model.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from isa import errors
from isa.errors import CvmError, IOFailure, MalformedError, UsageError
from serializer import strict
from cvmvm import files
from cvmvm.tx.replay import ERROR, MISMATCH, OK, Outcome
from cvmvm.vm.verify import Limits

RESULTS_FORMAT = "cvmvm-replay-results"
RESULTS_VERSION = 2         # 2: the header records the run's limits
MAX_LINE = 1 << 16          # a results line is far shorter; a longer one is not ours
MODEL_ERROR_INDICES = 5     # transactions named per model-level error in the text report


# -- one line per transaction -----------------------------------------------------------

def outcome_json(o: Outcome) -> dict[str, Any]:
    row: dict[str, Any] = {"index": o.index, "offset": o.offset, "tx": o.tx.hex(), "status": o.status}
    if o.status == MISMATCH:
        row["fields"] = list(o.fields)
    if o.status == ERROR:
        row.update(error=o.error, message=o.message)
    if o.model is not None:
        row["model"] = o.model.hex()
    if o.output_hash is not None and o.trace_root is not None:
        row.update(output_hash=o.output_hash.hex(), trace_root=o.trace_root.hex(), ops=o.ops)
    return row


def outcome_line(o: Outcome) -> str:
    """The outcome as one line of JSON (keys sorted, no newline)."""
    if o.status == OK:  # the common case, formatted directly: same text as json.dumps(..., sort_keys=True)
        return (f'{{"index": {o.index}, "offset": {o.offset}, "ops": {o.ops}, '
                f'"output_hash": "{o.output_hash.hex()}", "status": "ok", '  # type: ignore[union-attr]
                f'"trace_root": "{o.trace_root.hex()}", "tx": "{o.tx.hex()}"}}')  # type: ignore[union-attr]
    return json.dumps(outcome_json(o), sort_keys=True)


def _bad(message: str) -> MalformedError:
    return MalformedError("results", message)


def _hexbytes(row: dict[str, Any], key: str, size: int = 32) -> bytes:
    value = row[key]
    try:
        got = bytes.fromhex(value) if type(value) is str else b""
    except ValueError:
        got = b""
    if len(got) != size:
        raise _bad(f"{key}: expected {2 * size} hex digits")
    return got


def _parsed(line: bytes, what: str) -> Any:
    """Strict JSON: a file on disk may have been edited, and json.loads of a line nested
    thousands deep raises RecursionError."""
    try:
        return strict.parse_json(line.decode("utf-8"), "results", what)
    except UnicodeDecodeError as e:
        raise _bad(f"{what} is not UTF-8 ({e.reason} at byte {e.start})") from None


# The keys of a line of each status, beside index, offset, tx and status: those it must hold, and
# those it may.  The re-execution's three are there together, when it ran (an error stopped it).
_RUN = frozenset({"output_hash", "trace_root", "ops"})
_KEYS = {OK: (_RUN, frozenset()), MISMATCH: (frozenset({"fields"}), _RUN),
         ERROR: (frozenset({"error", "message"}), frozenset({"model"}))}
_COMMON = frozenset({"index", "offset", "tx", "status"})


def _count(row: dict[str, Any], key: str) -> int:
    value = row[key]
    if type(value) is not int or value < 0:
        raise _bad(f"{key}: expected a non-negative integer")
    return value


def _text(value: Any, key: str) -> str:
    if type(value) is not str:
        raise _bad(f"{key}: expected a string")
    return value


def outcome_from_line(line: bytes) -> Outcome:
    """A results line -> its Outcome; anything but a line this module writes is refused.  Every
    key is checked for its status and type before the Outcome is made: an edited line must not
    reach the report (which counts fields and error codes as dict keys) or the writer with a
    value of another type."""
    row = _parsed(line, "the line")
    if type(row) is not dict:
        raise _bad("expected a JSON object")
    status = row.get("status")
    if type(status) is not str or status not in _KEYS:
        raise _bad(f"status {errors.shown(status)} is not ok, mismatch or error")
    must, may = _KEYS[status]
    keys = set(row)
    if (_COMMON | must) - keys:
        raise _bad(f"a line of status {status} without {', '.join(sorted((_COMMON | must) - keys))}")
    if keys - _COMMON - must - may:
        raise _bad(f"a line of status {status} with {errors.shown(sorted(keys - _COMMON - must - may))}")
    ran = keys & _RUN
    if ran and ran != _RUN:
        raise _bad(f"{', '.join(sorted(ran))} without {', '.join(sorted(_RUN - ran))}")
    fields = row.get("fields", [])
    if type(fields) is not list or (status == MISMATCH and not fields):
        raise _bad("fields: expected a list of the receipt fields that do not hold")
    o = Outcome(_count(row, "index"), _count(row, "offset"), _hexbytes(row, "tx"), status,
                tuple(_text(f, "fields") for f in fields),
                _text(row["error"], "error") if status == ERROR else None,
                _text(row["message"], "message") if status == ERROR else "",
                _hexbytes(row, "output_hash") if ran else None, _hexbytes(row, "trace_root") if ran else None,
                _count(row, "ops") if ran else None, _hexbytes(row, "model") if "model" in row else None)
    if outcome_line(o).encode() != line.rstrip(b"\n"):
        raise _bad("the line is not one this cvmvm writes")
    return o


# -- the results file --------------------------------------------------------------------

def _header_doc(signer: bytes | None, limits: Limits) -> dict[str, Any]:
    # What decides an outcome besides the files: a run under other limits or another signer
    # reports other outcomes, so a resumed run must use the same.
    return {"format": RESULTS_FORMAT, "version": RESULTS_VERSION, "signer": None if signer is None else signer.hex(),
            "limits": {"memory": limits.memory, "ops": limits.ops, "work": limits.work}}


def _header(signer: bytes | None, limits: Limits) -> bytes:
    return (json.dumps(_header_doc(signer, limits), sort_keys=True) + "\n").encode()


def _lock(fd: int, p: Path) -> None:
    """One run writes a results file at a time: two resuming one file would interleave their lines."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UsageError("conflict", f"--output {p}: another replay is writing it") from None
    except OSError as e:
        if e.errno != errno.ENOLCK:   # a file system without locks: as unlocked as before
            os.close(fd)
            raise files.write_failure(e, "--output", p) from None


class ResultsFile:
    """Appends whole lines: each burst of outcomes in one write, so an interrupted run leaves
    complete lines, but for a last one without its newline where the interruption stopped a write
    part way (a machine that failed mid-write, or a kill -9 between two pages of one write: Linux
    checks for a fatal signal before each page it copies).  ``resume`` drops such a line, and no
    reader takes it for one."""

    def __init__(self, path: Path, fd: int, done: int) -> None:
        self.path = path
        self.fd = fd
        self.done = done  # transactions already in the file

    @classmethod
    def create(cls, path: str | os.PathLike[str], signer: bytes | None, limits: Limits = Limits()) -> ResultsFile:
        p = Path(path)
        try:
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o666)
        except FileExistsError:
            if os.path.islink(p):
                raise IOFailure("not_regular", f"--output {p}: a symbolic link; a results file is appended "
                                                     f"to, never through a link") from None
            raise UsageError("argument", f"--output {p}: the file exists; continue it with --resume, "
                                         f"or give a new name") from None
        except OSError as e:
            raise files.write_failure(e, "--output", p) from None
        _lock(fd, p)
        out = cls(p, fd, 0)
        try:
            out._write(_header(signer, limits))
        except BaseException:
            # The file is this run's (O_EXCL) and holds nothing done: none is left, rather than
            # part of a header that a --resume would refuse as not a results file.
            with contextlib.suppress(OSError):   # the write's failure is the one to report
                os.unlink(p)
            os.close(fd)
            raise
        return out

    def write(self, outcomes: list[Outcome]) -> None:
        fresh = [o for o in outcomes if o.index >= self.done]
        if fresh:
            self._write("".join(outcome_line(o) + "\n" for o in fresh).encode())

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.fd, view):]
        except OSError as e:
            raise files.write_failure(e, "--output", self.path) from None

    def close(self) -> None:
        try:
            os.fsync(self.fd)
        except OSError as e:
            raise files.write_failure(e, "--output", self.path) from None
        finally:
            os.close(self.fd)


def _check_header(head: bytes, p: Path, signer: bytes | None, limits: Limits) -> None:
    """A results file's first line, against this run's: what differs, named."""
    if head == _header(signer, limits):
        return
    try:
        doc = _parsed(head, "the header") if head.endswith(b"\n") else None
    except MalformedError:
        doc = None
    if type(doc) is not dict or doc.get("format") != RESULTS_FORMAT:
        raise _bad(f"{p}: not a cvmvm replay results file (its first line is no {RESULTS_FORMAT} header)")
    if doc.get("version") != RESULTS_VERSION:
        raise _bad(f"{p}: a results file of version {errors.shown(doc.get('version'))}; this cvmvm continues "
                   f"version {RESULTS_VERSION} (replay again to a new file)")
    want = _header_doc(signer, limits)
    if doc.get("signer") != want["signer"]:
        raise UsageError("conflict", f"--resume {p}: the results were made with another --signer")
    if doc.get("limits") != want["limits"]:
        raise UsageError("conflict", f"--resume {p}: the results were made under other limits "
                                     f"({errors.shown(doc.get('limits'))}); give the same --memory-limit, "
                                     f"--work-limit and --ops-limit")
    raise _bad(f"{p}: its header is not the one this cvmvm writes (line ends, spacing or keys differ)")


def resume(path: str | os.PathLike[str], signer: bytes | None,
           limits: Limits = Limits()) -> tuple[ResultsFile, Iterator[Outcome]]:
    """Open a results file to continue it: its outcomes so far (read lazily, in order) and the
    file, positioned after its last whole line.  Only a last line may lack its newline (a write
    stopped part way); a line longer than MAX_LINE anywhere else is not one of ours."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise IOFailure("not_regular", f"--output {p}: a symbolic link; a results file is appended "
                                                 f"to, never through a link") from None
        raise files.read_failure(e, "--output (--resume)", p) from None
    _lock(fd, p)
    try:
        with os.fdopen(os.dup(fd), "rb") as f:
            head = _read_line(f, p)
            if not head:
                # Killed between the file's creation and its header's write: nothing was done.
                out = ResultsFile(p, fd, 0)
                out._write(_header(signer, limits))
                return out, iter(())
            _check_header(head, p, signer, limits)
            count, end = 0, len(head)
            while True:
                line = _read_line(f, p)
                if not line.endswith(b"\n"):
                    if line and _read_line(f, p, 1):
                        raise _bad(f"{p}: line {count + 2} is longer than {MAX_LINE} bytes: not a line cvmvm writes")
                    break
                count += 1
                end += len(line)
        os.ftruncate(fd, end)  # drop a last line without its newline, if any
    except OSError as e:
        os.close(fd)
        raise files.write_failure(e, "--output", p) from None
    except BaseException:
        os.close(fd)
        raise
    return ResultsFile(p, fd, count), _previous(p, len(head), count)


def _read_line(f: Any, p: Path, size: int = MAX_LINE) -> bytes:
    try:
        return f.readline(size)
    except OSError as e:
        raise files.read_failure(e, "--output (--resume)", p) from None


def _previous(path: Path, start: int, count: int) -> Iterator[Outcome]:
    with open(path, "rb") as f:
        f.seek(start)
        for index in range(count):
            try:
                o = outcome_from_line(f.readline(MAX_LINE))
            except MalformedError as e:
                raise _bad(f"{path}: line {index + 2}: {e.message}") from None
            if o.index != index:
                raise _bad(f"{path}: line {index + 2} is of transaction {o.index}, expected {index}")
            yield o


# -- the report ---------------------------------------------------------------------------

@dataclass
class ModelError:
    code: str
    message: str
    count: int = 0
    indices: list[int] = field(default_factory=list)


@dataclass
class Report:
    """Counts of every outcome so far, and the errors that are a model's."""

    total: int = 0
    ok: int = 0
    mismatch: int = 0
    error: int = 0
    by_field: dict[str, int] = field(default_factory=dict)
    by_error: dict[str, int] = field(default_factory=dict)
    model_errors: dict[bytes, ModelError] = field(default_factory=dict)
    file_error: CvmError | None = None

    def add(self, o: Outcome) -> None:
        self.total += 1
        if o.status == OK:
            self.ok += 1
            return
        if o.status == MISMATCH:
            self.mismatch += 1
            for f in o.fields:
                self.by_field[f] = self.by_field.get(f, 0) + 1
            return
        self.error += 1
        code = o.error or ""
        self.by_error[code] = self.by_error.get(code, 0) + 1
        if o.model is not None:
            m = self.model_errors.setdefault(o.model, ModelError(code, o.message))
            m.count += 1
            if len(m.indices) < MODEL_ERROR_INDICES:
                m.indices.append(o.index)

    def summary(self) -> dict[str, Any]:
        s: dict[str, Any] = {
            "total": self.total, "ok": self.ok, "mismatch": self.mismatch, "error": self.error,
            "mismatched_fields": dict(sorted(self.by_field.items())), "errors": dict(sorted(self.by_error.items())),
            "model_errors": [{"model": h.hex(), "error": m.code, "message": m.message, "transactions": m.count}
                             for h, m in sorted(self.model_errors.items())]}
        if self.file_error is not None:
            s["file_error"] = {"error": self.file_error.code, "message": self.file_error.message}
        return s

    def lines(self) -> Iterator[str]:
        """The model-level errors, then the counts by kind."""
        for h, m in sorted(self.model_errors.items()):
            more = ", ..." if m.count > len(m.indices) else ""
            yield (f"model {h.hex()}: error {m.code}: {m.message} ({m.count} transactions: "
                   f"tx {', '.join(map(str, m.indices))}{more})")
        yield f"{self.total} transactions: {self.ok} ok, {self.mismatch} mismatch, {self.error} error"
        for kind, counts in (("mismatched", self.by_field), ("errors", self.by_error)):
            if counts:
                yield f"  {kind}: " + ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))


def describe(o: Outcome) -> str:
    if o.status == OK:
        return f"tx {o.index}: ok"
    if o.status == MISMATCH:
        return f"tx {o.index}: mismatch {','.join(o.fields)}"
    return f"tx {o.index}: error {o.error}: {o.message}"


def shown(o: Outcome, every: bool) -> bool:
    """Whether the text report gives the transaction its own line (a model's error is given once)."""
    return every or (o.status != OK and o.model is None)


"""`cvmvm replay` as a command: results streamed to a file and resumed (also after kill -9),
memory that does not grow with the file, Ctrl-C, and command-line mistakes."""

from __future__ import annotations

import errno
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from isa.errors import CvmError
from serializer.records import transactions
from cvmvm.cli.common import EXIT_CODES
from cvmvm.tx import results
from tests import interrupt
from tests.test_receipt import KEY, REPO, cli_json


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    """3000 unsigned digits transactions, some bad on purpose (tx demo)."""
    out = tmp_path_factory.mktemp("demo")
    assert _cli("tx", "demo", "3000", str(out), "--unsigned").returncode == 0
    return out


def repeated(demo: Path, out: Path, times: int) -> Path:
    """A directory like ``demo`` whose transaction file holds demo's transactions ``times`` over."""
    out.mkdir()
    (out / "store").symlink_to(demo / "store", target_is_directory=True)
    with open(demo / "txs.cvmtx", "rb") as f:
        bodies = [r.body for r in transactions.iter_records(f, "demo")]
    with open(out / "txs.cvmtx", "wb") as f:
        writer = transactions.TxWriter(f)
        for _ in range(times):
            for body in bodies:
                writer.add_record(body)
        writer.close()
    return out


def _cli(*argv: str, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cvmvm", *argv], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout, **kw)


def _replay(demo: Path, *extra: str) -> list[str]:
    return ["replay", str(demo / "txs.cvmtx"), "--store", str(demo / "store"), *extra]


# -- results file and resume -------------------------------------------------------------------

def test_output_lines_are_the_json_results(demo, tmp_path, capsys):
    code, info = cli_json(capsys, _replay(demo, "--output", str(tmp_path / "r.jsonl")))
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    assert json.loads(lines[0]) == {"format": "cvmvm-replay-results", "version": 2, "signer": None,
                                    "limits": {"memory": 2 ** 31, "ops": None, "work": 5 * 10 ** 9}}
    assert [json.loads(line) for line in lines[1:]] == info["results"]
    assert [r["index"] for r in info["results"]] == list(range(3000))
    assert all(results.outcome_line(results.outcome_from_line(line.encode())) == line for line in lines[1:])
    # An existing results file is never overwritten without --resume.
    code, again = cli_json(capsys, _replay(demo, "--output", str(tmp_path / "r.jsonl")))
    assert code == EXIT_CODES["usage"] and again["error"] == "usage.argument"


def test_resume_from_any_prefix_gives_the_uninterrupted_report(demo, tmp_path, capsys):
    from cvmvm.cli.main import main

    full = tmp_path / "full.jsonl"
    assert main(_replay(demo, "--output", str(full), "--batch", "100")) == 1
    text = capsys.readouterr().out
    data = full.read_bytes()
    header = data.index(b"\n") + 1
    for cut in (header, header + 1, len(data) // 3, len(data) // 2 + 7, len(data) - 1, len(data)):
        part = tmp_path / f"part{cut}.jsonl"
        part.write_bytes(data[:cut])
        assert main(_replay(demo, "--output", str(part), "--resume", "--batch", "64")) == 1
        assert capsys.readouterr().out == text, cut
        assert part.read_bytes() == data, cut
    code, info = cli_json(capsys, _replay(demo, "--output", str(full), "--resume"))
    assert code == 1 and info["summary"]["total"] == 3000 and len(info["results"]) == 3000


def test_resume_refuses_other_results(demo, tmp_path, capsys):
    other = tmp_path / "other"
    assert _cli("tx", "demo", "40", str(other)).returncode == 0    # signed: other transactions than demo's
    (tmp_path / "pub").write_bytes(KEY.public_key().public_bytes_raw())
    r = tmp_path / "r.jsonl"
    cli_json(capsys, ["replay", str(other / "txs.cvmtx"), "--store", str(other / "store"), "--output", str(r)])
    lines = r.read_bytes().splitlines(keepends=True)
    r.write_bytes(b"".join(lines[:2] + lines[3:]))    # a line missing in the middle
    code, info = cli_json(capsys, _replay(other, "--output", str(r), "--resume"))
    assert code == EXIT_CODES["malformed"] and info["error"] == "malformed.results"
    r.write_bytes(b"".join(lines[:10]))
    code, info = cli_json(capsys, _replay(demo, "--output", str(r), "--resume"))  # another transaction file
    assert code == EXIT_CODES["malformed"] and info["error"] == "malformed.results"
    code, info = cli_json(capsys, _replay(other, "--output", str(r), "--resume", "--signer", str(tmp_path / "pub")))
    assert code == EXIT_CODES["usage"] and info["error"] == "usage.conflict"
    r.write_bytes(lines[0] + lines[1].replace(b'"ok"', b'"OK"'))
    code, info = cli_json(capsys, _replay(other, "--output", str(r), "--resume"))
    assert code == EXIT_CODES["malformed"] and info["error"] == "malformed.results"


@pytest.fixture(scope="module")
def finished(demo, tmp_path_factory) -> bytes:
    """The results file of an uninterrupted replay of ``demo``."""
    out = tmp_path_factory.mktemp("finished") / "r.jsonl"
    assert _cli(*_replay(demo, "--output", str(out), "--quiet")).returncode == 1
    return out.read_bytes()


def _resumed(capsys, demo, path, *extra) -> tuple[int, dict]:
    return cli_json(capsys, _replay(demo, "--output", str(path), "--resume", *extra))


def test_a_long_line_in_the_middle_is_malformed_not_dropped(demo, finished, tmp_path, capsys):
    # Defect: a line over 64 KiB was taken for a last line cut short: the file was truncated there.
    lines = finished.splitlines(keepends=True)
    r = tmp_path / "r.jsonl"
    r.write_bytes(b"".join(lines[:11]) + b"x" * 70_000 + b"\n" + b"".join(lines[11:]))
    before = r.read_bytes()
    code, info = _resumed(capsys, demo, r)
    assert code == EXIT_CODES["malformed"] and "line 12 is longer" in info["message"] and r.read_bytes() == before


@pytest.mark.parametrize("edit, code, words", [
    (lambda h: h.replace(b"\n", b"\r\n"), "malformed.results", "header is not the one"),
    (lambda h: h.replace(b'"version": 2', b'"version": 1'), "malformed.results", "version 1"),
    (lambda h: h[:50], "malformed.results", "not a cvmvm replay results file"),
    (lambda h: h.replace(b'"work": 5000000000', b'"work": 1000'), "usage.conflict", "other limits"),
])
def test_a_header_that_differs_is_named(demo, finished, tmp_path, capsys, edit, code, words):
    # Defect: every header but the exact one was "made with another --signer".
    head, rest = finished.split(b"\n", 1)
    r = tmp_path / "r.jsonl"
    r.write_bytes(edit(head + b"\n") + rest)
    got, info = _resumed(capsys, demo, r)
    assert info["error"] == code and words in info["message"], info


def test_a_resume_under_other_limits_is_refused(demo, tmp_path, capsys):
    r = tmp_path / "r.jsonl"
    cli_json(capsys, _replay(demo, "--output", str(r), "--work-limit", "1000"))
    r.write_bytes(b"".join(r.read_bytes().splitlines(keepends=True)[:31]))
    code, info = _resumed(capsys, demo, r)
    assert code == EXIT_CODES["usage"] and info["error"] == "usage.conflict"
    code, info = _resumed(capsys, demo, r, "--work-limit", "1000")
    assert info["summary"]["total"] == 3000 and info["summary"]["error"] == 3000


@pytest.mark.parametrize("edit", ["line", "header"])
@pytest.mark.parametrize("bad", [b"[" * 30_000 + b"]" * 30_000, b'{"index": ' + b"9" * 5_000 + b"}",
                                 b'{"index": 0, "index": 0}', b"NaN", b"\xff"],
                         ids=["deep", "long-int", "twice", "nan", "not-utf8"])
def test_an_edited_results_file_is_malformed_not_a_crash(demo, finished, tmp_path, capsys, edit, bad):
    # Defect: a line nested 30,000 deep was internal.bug (json.loads' RecursionError) under the
    # recursion limit of a fresh interpreter (something in a test process may raise it).
    lines = finished.splitlines(keepends=True)
    r = tmp_path / "r.jsonl"
    r.write_bytes(lines[0] + lines[1] + bad + b"\n" if edit == "line" else bad + b"\n" + lines[1])
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        code, info = _resumed(capsys, demo, r)
    finally:
        sys.setrecursionlimit(limit)
    assert code == EXIT_CODES["malformed"] and info["error"] == "malformed.results"


def test_an_empty_results_file_is_resumed_from_the_start(demo, finished, tmp_path, capsys):
    # A kill between the file's creation and its header's write leaves it empty.
    r = tmp_path / "r.jsonl"
    r.write_bytes(b"")
    code, info = _resumed(capsys, demo, r)
    assert code == 1 and r.read_bytes() == finished


def test_a_line_at_another_offset_is_refused(demo, finished, tmp_path, capsys):
    lines = finished.splitlines(keepends=True)
    r = tmp_path / "r.jsonl"
    r.write_bytes(lines[0] + re.sub(rb'"offset": [0-9]+', b'"offset": 99999', lines[1]) + b"".join(lines[2:11]))
    code, info = _resumed(capsys, demo, r)
    assert code == EXIT_CODES["malformed"] and info["error"] == "malformed.results"


def _genuine(finished: bytes) -> dict[tuple[str, bool], bytes]:
    """The first line of each kind in ``finished``: ok, mismatch, error of a transaction, error of a model."""
    kinds: dict[tuple[str, bool], bytes] = {}
    for line in finished.splitlines()[1:]:
        row = json.loads(line)
        kinds.setdefault((row["status"], "model" in row), line)
    assert set(kinds) == {("ok", False), ("mismatch", False), ("error", False), ("error", True)}
    return kinds


_WRONG = {
    "count": [None, True, 1.5, "1", [1], {"k": 1}, -1],
    "text": [None, True, 1, 1.5, [1], ["a"], {"k": 1}],
    "hex": [None, True, 1, [1], {"k": 1}, "x", "00", "ab" * 33],
    "fields": [None, True, 1, "output_hash", [1], [[1]], [None], [], {"k": 1}],
    "status": [None, 1, [1], {"k": 1}, "OK", "ok", "mismatch", "error"],
}
_KIND = {"index": "count", "offset": "count", "ops": "count", "error": "text", "message": "text", "tx": "hex",
         "output_hash": "hex", "trace_root": "hex", "model": "hex", "fields": "fields", "status": "status"}


def _edits(line: bytes) -> list[tuple[str, dict]]:
    """Every edit of a genuine line that makes it a line cvmvm does not write: each key dropped,
    each given a value of another type (or out of range), each key it does not have added."""
    row = json.loads(line)
    optional = {"model"} if row["status"] == "error" else set()   # an error of a model, or of the transaction
    out = []
    for key in row:
        if key not in optional:
            out.append((f"no {key}", {k: v for k, v in row.items() if k != key}))
        out += [(f"{key}={v!r}", {**row, key: v}) for v in _WRONG[_KIND[key]] if v != row[key]]
    extra = {"fields": ["output_hash"], "error": "input.shape", "message": "m", "model": "ab" * 32,
             "output_hash": "ab" * 32, "trace_root": "ab" * 32, "ops": 1, "other": 1}
    out += [(f"+{key}", {**row, key: v}) for key, v in extra.items() if key not in row and key not in optional]
    return out


def test_every_edit_of_a_results_line_is_malformed_results(finished):
    # Defect: an ok line without output_hash was internal.bug (AttributeError in outcome_line), an
    # error code or a field that is a list internal.bug (unhashable, in Report.add).
    for line in _genuine(finished).values():
        assert results.outcome_line(results.outcome_from_line(line)) == line.decode()
        for what, row in _edits(line):
            with pytest.raises(CvmError) as e:
                results.outcome_from_line(json.dumps(row, sort_keys=True).encode() + b"\n")
            assert e.value.code == "malformed.results", (what, e.value)


@pytest.mark.parametrize("kind, edit", [
    (("ok", False), lambda row: row.pop("output_hash")),
    (("error", False), lambda row: row.update(error=[1])),
    (("mismatch", False), lambda row: row.update(fields=[[1]])),
], ids=["ok-without-output_hash", "error-a-list", "fields-of-lists"])
def test_an_edited_line_on_resume_is_malformed_results(demo, finished, tmp_path, capsys, kind, edit):
    lines = finished.splitlines(keepends=True)
    line = _genuine(finished)[kind]
    row = json.loads(line)
    edit(row)
    r = tmp_path / "r.jsonl"
    r.write_bytes(b"".join(lines[:row["index"] + 1]) + json.dumps(row, sort_keys=True).encode() + b"\n")
    code, info = _resumed(capsys, demo, r)
    assert code == EXIT_CODES["malformed"] and info["error"] == "malformed.results", info
    assert f"line {row['index'] + 2}" in info["message"]


def _size_limited(limit: int):
    """A child's limit on the size of the files it writes: a write past it fails with EFBIG
    (SIGXFSZ, which would kill it, ignored as Python does)."""
    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return limited


@pytest.mark.parametrize("limit", [0, 40, 8192], ids=["no-header", "part-header", "mid-stream"])
def test_a_failed_write_of_the_results_file_is_io_write(demo, finished, tmp_path, limit):
    # Defect: EFBIG (or ENOSPC) from a write of --output was internal.bug.
    r = tmp_path / "r.jsonl"
    run = _cli(*_replay(demo, "--output", str(r)), preexec_fn=_size_limited(limit))
    assert run.returncode == EXIT_CODES["io"], run.stderr
    assert run.stderr.startswith("cvmvm: error io.write: cannot write --output") and run.stderr.count("\n") == 1
    if limit < len(finished.split(b"\n", 1)[0]):
        assert not r.exists()   # nothing done: no file that a --resume would refuse as not a results file
    else:
        # Whole lines up to where the write failed; a --resume completes them.
        assert r.stat().st_size == limit and finished.startswith(r.read_bytes())
        assert _cli(*_replay(demo, "--output", str(r), "--resume")).returncode == 1
        assert r.read_bytes() == finished


@pytest.mark.parametrize("fail_at", [1, 3])
@pytest.mark.parametrize("resume", [False, True])
def test_a_full_disk_under_the_results_file_is_io_write(demo, finished, tmp_path, capsys, monkeypatch,
                                                        fail_at, resume):
    from cvmvm.cli.main import main

    r = tmp_path / "r.jsonl"
    if resume:
        r.write_bytes(b"")   # resumed from the start: its header is written first
    real_write, calls = os.write, []

    def write(fd: int, data) -> int:
        if os.readlink(f"/proc/self/fd/{fd}") == os.path.realpath(r):
            calls.append(len(data))
            if len(calls) == fail_at:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    code = main(_replay(demo, "--output", str(r), "--quiet", *(["--resume"] if resume else [])))
    err = capsys.readouterr().err
    assert code == EXIT_CODES["io"] and err == f"cvmvm: error io.write: cannot write --output {r}: " \
                                               f"{os.strerror(errno.ENOSPC)}\n"
    assert len(calls) == fail_at
    if fail_at == 1 and not resume:
        assert not r.exists()
    else:
        assert finished.startswith(r.read_bytes())


@pytest.mark.parametrize("output", [False, True])
def test_a_fifo_as_transaction_file_is_refused_unopened(demo, tmp_path, output):
    # Defect: the progress bar's count opened the fifo before its kind was checked, and waited
    # for a writer forever.
    fifo = tmp_path / "txs.cvmtx"
    os.mkfifo(fifo)
    r = tmp_path / "r.jsonl"
    run = _cli("replay", str(fifo), "--store", str(demo / "store"), *(["--output", str(r)] if output else []),
               timeout=30)
    assert run.returncode == EXIT_CODES["io"] and run.stdout == ""
    assert run.stderr == f"cvmvm: error io.not_regular: transaction file {fifo}: a fifo, not a regular file\n"
    assert not r.exists()   # refused before the results file is made


@pytest.mark.parametrize("dangling", [False, True])
def test_a_results_file_is_never_written_through_a_link(demo, finished, tmp_path, capsys, dangling):
    target = tmp_path / "target.jsonl"
    if not dangling:
        target.write_bytes(finished[:500])
    (tmp_path / "link.jsonl").symlink_to(target)
    for extra in ([], ["--resume"]):
        code, info = cli_json(capsys, _replay(demo, "--output", str(tmp_path / "link.jsonl"), *extra))
        assert code == EXIT_CODES["io"] and info["error"] == "io.not_regular", (extra, info)
    assert dangling or target.read_bytes() == finished[:500]


def test_one_replay_writes_a_results_file_at_a_time(demo, finished, tmp_path, capsys):
    import fcntl
    r = tmp_path / "r.jsonl"
    r.write_bytes(finished[:500])
    with open(r, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)   # as a running replay holds it
        code, info = _resumed(capsys, demo, r)
    assert code == EXIT_CODES["usage"] and info["error"] == "usage.conflict" and "another replay" in info["message"]
    assert r.read_bytes() == finished[:500]


def test_a_resumed_file_is_handed_on_in_bursts(demo, finished, tmp_path, monkeypatch):
    # Defect: every outcome read back waited in memory until the first new one was sent.
    from cvmvm.tx import schedule
    from cvmvm.tx.store import Store
    monkeypatch.setattr(schedule, "RESUMED_BURST", 256)
    r = tmp_path / "r.jsonl"
    r.write_bytes(finished)
    out, previous = results.resume(r, None)
    try:
        bursts = [len(b) for b in schedule.replay_file(demo / "txs.cvmtx", Store(demo / "store"),
                                                       schedule.Options(batch_size=64), previous)]
    finally:
        out.close()
    assert sum(bursts) == 3000 and max(bursts) <= 256


def _started(big: Path, out: Path, lines: int, *args: str) -> subprocess.Popen:
    """A replay of ``big`` writing ``out``, in its own session, once ``out`` holds ``lines`` lines."""
    proc = subprocess.Popen([sys.executable, "-m", "cvmvm", *_replay(big, "--output", str(out), *args)],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=interrupt.foreground)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if out.exists() and out.read_bytes().count(b"\n") > lines:
            break
        time.sleep(0.005)
    assert proc.poll() is None
    return proc


def test_kill_9_loses_only_what_was_in_flight(demo, tmp_path):
    # 30,000 transactions: the last kill point leaves more than half a second of work even on a
    # fast machine, so the kill always lands mid-run however late the polling loop wakes up.
    big = repeated(demo, tmp_path / "big", 10)
    whole = tmp_path / "whole.jsonl"
    reference = _cli(*_replay(big, "--json", "--output", str(whole)))
    want = whole.read_bytes().splitlines(keepends=True)
    for round, wait_lines in enumerate((50, 6000, 13000)):
        out = tmp_path / f"r{round}.jsonl"
        proc = _started(big, out, wait_lines, "--batch", "16", "--workers", "2" if round == 1 else "1")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        lines = out.read_bytes().splitlines(keepends=True)
        # Every line as the uninterrupted run writes it; the last without its newline only where the
        # kill stopped a write between two pages of the file (Linux checks for a fatal signal
        # before each page it copies).
        complete = len(lines) - (not lines[-1].endswith(b"\n"))
        cut = lines[-1] if complete < len(lines) else b""
        assert lines[:complete] == want[:complete] and want[complete].startswith(cut)
        assert wait_lines < complete - 1 < 30000
        resumed = _cli(*_replay(big, "--output", str(out), "--resume", "--json"))
        assert (resumed.returncode, resumed.stdout) == (reference.returncode, reference.stdout)
        assert out.read_bytes() == whole.read_bytes()
        assert _session_processes(proc.pid) == []


# -- bounded memory -------------------------------------------------------------------------------

_RSS = """
import resource, sys
from cvmvm.cli.main import main
code = main(sys.argv[1:])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
sys.exit(code)
"""


def test_memory_does_not_grow_with_the_number_of_transactions(demo, tmp_path):
    big = repeated(demo, tmp_path / "big", 10)
    peaks = []
    for d in (demo, big):
        run = subprocess.run([sys.executable, "-c", _RSS, *_replay(d, "--output", str(tmp_path / f"{d.name}.jsonl"))],
                             capture_output=True, text=True, cwd=REPO, timeout=300)
        assert run.returncode == 1, run.stderr
        peaks.append(int(run.stderr.split()[-1]))
    # Ten times the transactions: the peak grows by less than the file itself (~21 MB more).
    assert peaks[1] - peaks[0] < 12 * 1024, peaks


# -- Ctrl-C -----------------------------------------------------------------------------------------

def _session_processes(sid: int) -> list[int]:
    """Processes still alive in the session (a terminal's job) the replay was started in."""
    alive = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                alive.append(int(entry.name))
    return alive


@pytest.mark.parametrize("workers", ["1", "2"])
def test_ctrl_c_prints_no_traceback_and_leaves_no_worker(demo, tmp_path, workers):
    big = repeated(demo, tmp_path / "big", 20)   # long enough to be interrupted
    out = tmp_path / "r.jsonl"
    proc = _started(big, out, 100, "--batch", "8", "--workers", workers)
    os.killpg(proc.pid, signal.SIGINT)   # what a terminal sends to the whole job
    _, err = proc.communicate(timeout=60)
    lines = out.read_bytes().count(b"\n")
    assert proc.returncode == 130 and "Traceback" not in err and err.strip().splitlines() == ["cvmvm: interrupted"], \
        f"exit {proc.returncode} after {lines} results lines, stderr:\n{err}"
    deadline = time.monotonic() + 20
    while _session_processes(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _session_processes(proc.pid) == []
    assert out.read_bytes().endswith(b"\n")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_driver_ended_alone_leaves_no_worker(demo, tmp_path, sig):
    """The signal reaches the driver only (kill PID, timeout, systemd, the OOM killer), not its job:
    workers held the pool's queue open themselves, and waited for work for ever with the forkserver
    and the resource tracker beside them.  SIGTERM is one line and exit 143, as Ctrl-C is 130."""
    big = repeated(demo, tmp_path / "big", 20)
    out = tmp_path / "r.jsonl"
    proc = _started(big, out, 100, "--batch", "8", "--workers", "2")
    os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=60)
    if sig == signal.SIGTERM:
        assert proc.returncode == 143 and err.strip().splitlines() == ["cvmvm: terminated"], err
    else:
        assert proc.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 20
    while _session_processes(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _session_processes(proc.pid)
    for pid in left:   # not to outlive a failing test
        os.kill(pid, signal.SIGKILL)
    assert left == []
    resumed = _cli(*_replay(big, "--output", str(out), "--resume", "--json"))
    assert resumed.returncode == _cli(*_replay(big, "--json")).returncode


def test_a_killed_worker_ends_the_replay_with_internal_worker_and_resume_completes(demo, tmp_path):
    """A worker lost mid-run (the OOM killer, kill -9) is a defined outcome, never a hang."""
    big = repeated(demo, tmp_path / "big", 10)
    reference = _cli(*_replay(big, "--json"))
    out = tmp_path / "r.jsonl"
    proc = _started(big, out, 1000, "--batch", "16", "--workers", "2")
    # Workers are forked by the forkserver: its children in the replay's session.
    parents = {p: int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1])
               for p in _session_processes(proc.pid)}
    server = [p for p in parents if b"forkserver" in Path(f"/proc/{p}/cmdline").read_bytes()]
    workers = [p for p, parent in parents.items() if parent in server]
    assert workers
    os.kill(workers[0], signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 7 and err.startswith("cvmvm: error internal.worker:"), err
    assert out.read_bytes().endswith(b"\n")
    resumed = _cli(*_replay(big, "--output", str(out), "--resume", "--json"))
    assert (resumed.returncode, resumed.stdout) == (reference.returncode, reference.stdout)


# -- command-line mistakes ----------------------------------------------------------------------------

@pytest.mark.parametrize("extra", [["--workers", "0"], ["--batch", "0"], ["--workers", "-1"], ["--batch", "x"]])
def test_zero_workers_or_batch_is_a_usage_error(demo, extra):
    run = _cli(*_replay(demo, *extra))
    assert run.returncode == 2 and "Traceback" not in run.stderr


def test_resume_needs_output(demo, capsys):
    code, info = cli_json(capsys, _replay(demo, "--resume"))
    assert code == 2 and info["error"] == "usage.conflict"


def test_a_missing_store_is_one_error(demo, tmp_path):
    run = _cli("replay", str(demo / "txs.cvmtx"), "--store", str(tmp_path / "nowhere"))
    assert run.returncode == EXIT_CODES["io"] and run.stdout == ""
    assert len(run.stderr.strip().splitlines()) == 1 and "nowhere" in run.stderr


def test_a_missing_model_is_one_error_per_model(demo, tmp_path, capsys):
    from cvmvm.cli.main import main

    assert main(_replay(demo)) == 1
    lines = capsys.readouterr().out.splitlines()
    unknown = [line for line in lines if "input.unknown_model" in line and not line.startswith("  ")]
    assert len(unknown) == 1 and unknown[0].startswith("model ")


def test_a_private_key_as_signer_is_refused(demo, tmp_path, capsys):
    assert _cli("keygen", str(tmp_path / "k")).returncode == 0
    code, info = cli_json(capsys, _replay(demo, "--signer", str(tmp_path / "k")))
    assert code == 2 and info["error"] == "usage.argument" and "k.pub" in info["message"]


def test_a_small_order_key_as_signer_is_refused(demo, tmp_path, capsys):
    # The identity point: OpenSSL accepts a "signature" under it for any message (FORMAT.md section 7).
    (tmp_path / "identity.pub").write_bytes((1).to_bytes(32, "little"))
    code, info = cli_json(capsys, _replay(demo, "--signer", str(tmp_path / "identity.pub")))
    assert code == EXIT_CODES["malformed"] and info["error"] == "malformed.key"
    assert "no signature is valid under it" in info["message"]


def test_ray_without_ray_says_which_extra(demo, tmp_path):
    blocker = tmp_path / "noray"
    blocker.mkdir()
    (blocker / "ray.py").write_text("raise ImportError('No module named ray')\n")
    run = _cli(*_replay(demo, "--ray"), env={**os.environ, "PYTHONPATH": str(blocker)})
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "cvmvm[ray]" in run.stderr


def test_a_truncated_file_is_replayed_up_to_where_it_ends(demo, tmp_path, capsys):
    data = (demo / "txs.cvmtx").read_bytes()
    cut = len(data) // 2
    (tmp_path / "cut.cvmtx").write_bytes(data[:cut])
    code, info = cli_json(capsys, ["replay", str(tmp_path / "cut.cvmtx"), "--store", str(demo / "store")])
    assert code == EXIT_CODES["malformed"]
    assert info["summary"]["file_error"]["error"] == "malformed.txs"
    assert f"truncated at byte {cut}" in info["summary"]["file_error"]["message"]
    assert 0 < info["summary"]["total"] == len(info["results"]) < 3000
    run = _cli("replay", str(tmp_path / "cut.cvmtx"), "--store", str(demo / "store"))
    assert run.returncode == EXIT_CODES["malformed"] and run.stderr.count("\n") == 1
    assert run.stderr.startswith("cvmvm: error malformed.txs:") and "transactions:" in run.stdout


class _Terminal:
    """A stderr that says it is a terminal, keeping what is written to it."""

    def __init__(self) -> None:
        self.text: list[str] = []

    def isatty(self) -> bool:
        return True

    def write(self, s: str) -> int:
        self.text.append(s)
        return len(s)

    def flush(self) -> None:
        pass


@pytest.mark.parametrize("quiet", [False, True])
def test_progress_bar_on_a_terminal_unless_quiet(demo, monkeypatch, quiet):
    pytest.importorskip("tqdm", reason="the progress extra is not installed")
    from cvmvm.cli.main import main

    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(_replay(demo, *(["--quiet"] if quiet else []))) == 1
    shown = "".join(terminal.text)
    if quiet:
        assert shown == ""
    else:
        assert "3.00k/3.00k" in shown and "tx/s" in shown and "mismatch" in shown and " error" in shown


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("address, says", [
    (None, "nothing answers there"),               # a closed port: Ray alone tries for about 14 minutes
    ("no-port-here", "not HOST:PORT"),
    ("127.0.0.1:99999", "not HOST:PORT"),
    ("127.0.0.1:", "not HOST:PORT"),
])
def test_ray_at_an_address_with_no_cluster_fails_at_once(demo, address, says):
    pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'cvmvm[ray]')")
    address = address or f"127.0.0.1:{_closed_port()}"
    start = time.monotonic()
    run = _cli(*_replay(demo, f"--ray={address}"))
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert run.stderr.startswith("cvmvm: error usage.ray_cluster:") and says in run.stderr and address in run.stderr
    assert time.monotonic() - start < 120 and run.stdout == ""


def test_ray_at_an_address_where_something_else_answers_is_one_line(demo):
    """A socket that listens and is not a Ray cluster: while Ray tries it, its C++ client writes
    warnings straight to descriptor 2 (six lines with Ray 2.60), and the command still prints its
    one line.  One attempt (Ray's variable) rather than cvmvm's two, to keep the test short."""
    pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'cvmvm[ray]')")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"127.0.0.1:{server.getsockname()[1]}"
        run = _cli(*_replay(demo, f"--ray={address}"), env={**os.environ, "RAY_gcs_server_port_wait_time_s": "1"})
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert run.stderr.startswith(f"cvmvm: error usage.ray_cluster: --ray {address}: Ray could not start or join")
    assert run.stdout == ""


def test_what_ray_writes_to_descriptor_2_while_it_joins_is_shown_only_when_it_joins(capfd):
    from cvmvm.tx import schedule
    with schedule._native_stderr_held():
        os.write(2, b"written while joining\n")
    with pytest.raises(ConnectionError), schedule._native_stderr_held():
        os.write(2, b"written while failing\n")
        raise ConnectionError
    os.write(2, b"written after\n")
    assert capfd.readouterr().err == "written while joining\nwritten after\n"


def test_ray_auto_with_no_cluster_is_one_line_not_a_bug(demo, tmp_path):
    pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'cvmvm[ray]')")
    # Ray finds a running cluster through files under its temporary directory: an empty one has none.
    run = _cli(*_replay(demo, "--ray=auto"), env={**os.environ, "RAY_TMPDIR": str(tmp_path), "TMPDIR": str(tmp_path)})
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert run.stderr.startswith("cvmvm: error usage.ray_cluster:") and "ConnectionError" in run.stderr

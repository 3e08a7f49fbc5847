"""A second process that hashes a traced run's large tensors while the run goes on.

A tensor's commitment is a tree of one SHA-256 call per 4096-byte chunk, some
6,000 calls per perf run.  hashlib releases the GIL only inside each call, so a
hashing *thread* takes the GIL back 6,000 times against an executor whose small
numpy calls hold it: on a 2-core machine both slowed down, and a traced perf run
took longer with two hashing threads (45 ms) than hashing inline (34 ms).  A
thread with the compiled hasher (below: one call a body, without the GIL, the
executor copying nothing) still lost to the process: perf traced at
1.39-1.46x untraced against 1.35-1.39x (2026-11-29), and again hashing the 4-byte bodies
in place, copying nothing: 2.2-2.5x against 1.4-1.5x.  Not for the GIL but for memory: tensors
held until hashed are not reused by the allocator, so the executor writes its next ones into
fresh pages and cold memory (docs/BENCHMARKS.md, 2026-11-29, 22:53).  A process has its own
interpreter: the executor copies each large body into a
buffer both processes map, names its blocks on a pipe, and goes on; the
process sends back each block's root (perf traced: 23 ms).  With numba (the
``speed`` extra) the process compiles serializer.sha's hasher before it says it
is ready and hashes each block in one call from compiled code, instead of a
hashlib call per chunk: at OpenSSL's rate, or sixteen chunks at a time where the
CPU has AVX-512 (1.6-2.0x OpenSSL's rate), four through SHA-NI where it has that and
not AVX-512, or AVX-512 and SHA-NI on AMD's Zen (1.9-2.1x) (serializer.sha_lanes)
(``HashWorker.compiled``).

Only timing depends on it: a block root is ``serializer.hashing.blocks_root`` of
the same bytes in either process, and every block the process cannot answer (it
died, never started, or answered nothing for ANSWER_SECONDS while every claim
slot was taken, and was killed) is hashed by the executor from the same buffer.
So is every block still unanswered when a run asks for its roots
(``HashWorker.roots``), or when the ring is full: the executor claims it, newest
first, while the process goes on from the oldest and skips what was claimed.
The process runs at a lower priority (cvmvm.vm.hashchild); this keeps a process
starved by other work from holding a run back.  No thread waits for the
answers: a run reads them when it needs them.  A reader thread took the GIL
from the executor at every batch of answers (perf-large traced 45.9-46.5 ms
with it, 44.8-45.2 without, alternating on 2026-11-29).
The buffer is a ring of RING_BYTES, reused in request order; a body that does
not fit is hashed inline.

Answers are matched to blocks by their order alone, so an exception raised between two bytecodes
(Ctrl-C in a notebook, a node's timeout by ``signal.alarm``) must never leave a request sent and
not recorded, or answers read and not taken: every later block would get another's root.  Sending
and reading each mark the worker dirty while they run; a worker found dirty by the next caller is
abandoned (the process killed, its blocks hashed by the executor) and a new one started.  Where the
exception lands does not matter, so no handler has to run for this to hold.

One worker per process, started on the second traced run that has a large
tensor (a single ``cvmvm run --trace`` never pays for it) and used once it has
said it is ready; a forked child starts its own.  With numba, the executor writes channel-last
bodies (1-byte lanes, rank 4) through serializer.sha's compiled mover, compiled in a thread when
the worker starts: numpy's copy took some 2 of a traced perf run's 6 ms more than an untraced one.
"""

from __future__ import annotations

import atexit
import mmap
import os
import select
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import IO, Callable

import numpy as np

from serializer import sha

RING_BYTES = 1 << 25
# Bodies go back to the ring's start once this much of it is used, when the start is free: the
# bytes written there last are still in the caches, and writing over cold memory cost the
# executor about a third more (perf traced: 4.4-4.7 ms of copies with the whole ring, 3.4 with 8 MiB).
# The rest of the ring is for bodies that do not fit the warm stretch and for a slow process.
WARM_BYTES = 1 << 23
# A process that answers nothing for this long (stopped, stuck, starved) is given up: its blocks
# are hashed by the executor, and a traced run never waits on it for ever.
ANSWER_SECONDS = 30.0
BLOCK_BYTES = 1 << 20     # a request: 256 chunks of 4096 bytes
# A claim byte a block, in the shared buffer after the ring; a slot is taken again only once its last
# block was answered, so at most this many blocks are sent and unanswered.  Their requests and
# answers (20 and 33 bytes each) then never fill both pipes at once (16 KiB each at the least, on
# macOS), so neither process can block the other while nobody reads the answers.
CLAIMS = 1024
_REQUEST = struct.Struct("<QIII")
_ANSWER = 33   # b"H" and a root, or b"S" and zeros: the block was claimed here (hashchild)
_HASHED = ord("H")
_READ_BYTES = 1 << 16
_CHILD = Path(__file__).with_name("hashchild.py")
_ROOT = Path(__file__).resolve().parent.parent.parent   # holds the serializer package


class Block:
    """One block in flight: its bytes in the ring, and its root once the process sent it or this
    process hashed it (``claimed``: whatever the process sends for it is ignored).  ``done``: its
    ring bytes are free (its root is known, or the process is gone and this one hashes them).
    Two threads may hash one claimed block at once: its bytes cannot be written over before it is
    done, and the first root stored is the one kept, so a thread that read bytes written over after
    that returns the root stored, not its own."""

    __slots__ = ("offset", "length", "chunk", "slot", "root", "done", "claimed")

    def __init__(self, offset: int, length: int, chunk: int, slot: int = 0) -> None:
        self.offset, self.length, self.chunk, self.slot = offset, length, chunk, slot
        self.root: bytes | None = None
        self.done = False
        self.claimed = False


class HashWorker:
    """The hashing process and the ring it shares with this one.  No thread waits for its answers:
    whoever needs them reads them (``_poll``, ``_collect``), so nothing takes the GIL from the
    executor when an answer arrives."""

    def __init__(self, ring_bytes: int = RING_BYTES, answer_seconds: float = ANSWER_SECONDS,
                 warm_bytes: int = WARM_BYTES) -> None:
        self.ring_bytes = ring_bytes
        self.warm_bytes = min(warm_bytes, ring_bytes)
        self.answer_seconds = answer_seconds
        self._lock = threading.Lock()        # the ring, the request order and the blocks' states
        self._read_lock = threading.Lock()   # one thread reads the answers at a time
        self._sending = False                # requests being sent and recorded (the lock held)
        self._reading = False                # answers being read and taken (the read lock held)
        self._inflight: deque[Block] = deque()     # holding ring bytes, in request order
        self._unanswered: deque[Block] = deque()   # sent, awaiting their roots, in request order
        self._put_lock = threading.Lock()          # one body at a time: reserve, write, send
        self._started = False                      # the process said it is ready
        self._partial = b""                        # an answer read in part
        self.broken = False
        self.abandoned = False                     # given up after an interrupted send or read
        self.answered = 0                          # blocks whose roots the process sent
        self.compiled = False                      # it hashes through serializer.sha's compiled hasher
        self._sent = 0                             # blocks sent so far (their claim slots go round)
        self._file = _shared_file(ring_bytes + CLAIMS)
        self._ring = mmap.mmap(self._file.fileno(), ring_bytes + CLAIMS)
        self.array = np.frombuffer(self._ring, dtype=np.uint8, count=ring_bytes)
        self._claims = np.frombuffer(self._ring, dtype=np.uint8, offset=ring_bytes)
        self._proc = subprocess.Popen(
            [sys.executable, "-I", str(_CHILD), str(_ROOT), str(self._file.fileno()), str(ring_bytes), str(CLAIMS)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, pass_fds=(self._file.fileno(),))
        self._stdin: IO[bytes] = self._proc.stdin  # type: ignore[assignment]
        self._answers = self._proc.stdout.fileno()  # type: ignore[union-attr]   # read unbuffered
        self._owner = os.getpid()

    @property
    def pid(self) -> int:
        """The hashing process's id (bench/chain.py adds its CPU time to the run's)."""
        return self._proc.pid

    @property
    def ready(self) -> bool:
        """Whether it is settled: ready for blocks, or given up (``broken``).  Asks it, without waiting."""
        if not (self._started or self.broken):
            self._poll()
        return self._started or self.broken

    def wait_ready(self, timeout: float) -> bool:
        """``ready``, waiting for it up to ``timeout`` seconds."""
        return self._collect(lambda: self._started or self.broken, timeout)

    def _poll(self) -> None:
        """Take whatever answers have arrived, without waiting (nor when another thread reads)."""
        if self.broken or not self._read_lock.acquire(blocking=False):
            return
        try:
            self._read(0)
        finally:
            self._read_lock.release()

    def _collect(self, settled: Callable[[], bool], timeout: float) -> bool:
        """Take answers until ``settled()``, the process is gone, or ``timeout`` seconds passed;
        whether ``settled()``."""
        deadline = time.monotonic() + timeout
        while not settled():
            left = deadline - time.monotonic()
            if self.broken or left <= 0:
                return settled()
            with self._read_lock:
                if not (settled() or self.broken):
                    self._read(min(left, 0.05))
        return True

    def _read(self, seconds: float) -> None:
        """Take the answers that arrive within ``seconds`` (the read lock held)."""
        if self._reading:   # an earlier read was interrupted: answers may have been read and lost
            with self._lock:
                self._abandon()
            return
        if select.select([self._answers], [], [], seconds)[0]:
            # Marked only now: an interrupt while waiting (where a run's end spends its time) loses nothing.
            self._reading = True
            self._take(os.read(self._answers, _READ_BYTES))
            self._reading = False

    def _take(self, data: bytes) -> None:
        """Answers read from the process (the read lock held); none at all: it is gone."""
        if not data:
            self._fail()
            return
        if not self._started:
            if data[:1] not in (b"R", b"C"):
                self._fail()
                return
            self.compiled, self._started, data = data[:1] == b"C", True, data[1:]
        data = self._partial + data
        whole = len(data) - len(data) % _ANSWER
        self._partial = data[whole:]
        with self._lock:
            if self._sending:   # a send was interrupted: answers to requests never recorded may come
                self._abandon()
                return
            for at in range(0, whole, _ANSWER):
                if not self._unanswered:   # more answers than requests
                    break
                block = self._unanswered.popleft()
                if block.claimed:
                    continue
                if data[at] != _HASHED:   # skipped a block nobody claimed: never taken as a root
                    break
                block.root = data[at + 1:at + _ANSWER]
                block.done = True
                self.answered += 1
            else:
                return
        self._fail()

    def _answered(self, block: Block) -> None:
        """Until the process's answer for ``block`` is taken, or it is given up for answering nothing
        in time.  Its answer, not its root: a block claimed and hashed here is done long before the
        process's skip for it frees its claim slot (waiting for ``done`` read nothing, for ever)."""
        if not self._collect(lambda: self.broken or not self._unanswered or self._unanswered[0] is not block,
                             self.answer_seconds):
            self._proc.kill()
            self._fail()

    def _fail(self) -> None:
        """The process is gone: every block it did not answer is the executor's to hash."""
        with self._lock:
            self._give_up()

    def _give_up(self) -> None:
        """``_fail``, the lock held."""
        self.broken = True
        for block in self._unanswered:
            block.done = True

    def _abandon(self) -> None:
        """A send or a read was interrupted, so answers can no longer be matched to blocks: the
        process is killed and given up (the lock held)."""
        self.abandoned = True
        self._proc.kill()
        self._give_up()

    def _reserve(self, length: int) -> int | None:
        """An offset where ``length`` bytes may be written, or None when the ring cannot hold them.
        When it is full, the oldest blocks are claimed and hashed here unless the process answered
        them (``root``): a ring is freed in request order, so the blocks in flight always fill one
        stretch of it, from the oldest to the newest.  Past the warm stretch (WARM_BYTES) it starts
        again at 0 when it can, before the ring's end."""
        length = -(-length // 64) * 64    # every body starts on a cache line
        if length > self.ring_bytes:
            return None
        while True:
            with self._lock:
                if self.broken:
                    return None
                while self._inflight and self._inflight[0].done:
                    self._inflight.popleft()
                if not self._inflight:
                    return 0
                oldest, newest = self._inflight[0], self._inflight[-1]
                end = -(-(newest.offset + newest.length) // 64) * 64
                if newest.offset >= oldest.offset:    # free: [end, ring_bytes) and [0, oldest)
                    if end + length <= self.warm_bytes:
                        return end
                    if oldest.offset >= length:
                        return 0
                    if self.ring_bytes - end >= length:
                        return end
                elif oldest.offset - end >= length:   # wrapped; free: [end, oldest)
                    return end
            self.root(oldest)

    def _slots_free(self, count: int) -> bool:
        """Whether ``count`` more blocks may be sent: every block sent CLAIMS blocks before them was
        answered, so their claim slots are free.  Waits for the oldest unanswered ones when not."""
        while True:
            with self._lock:
                if self.broken:
                    return False
                if len(self._unanswered) + count <= CLAIMS:
                    return True
                oldest = self._unanswered[0]
            self._answered(oldest)

    def put(self, length: int, chunk: int, write: Callable[[np.ndarray], None]) -> list[Block] | None:
        """Have ``write`` fill ``length`` bytes of the ring and send them, in blocks of BLOCK_BYTES
        (whole chunks, so that block roots are nodes of the chunk tree); None when the ring cannot
        take them (too long, or the process is gone): the caller hashes them itself."""
        with self._put_lock:
            starts = range(0, length, BLOCK_BYTES)
            offset = self._reserve(length) if self._slots_free(len(starts)) else None
            if offset is None:
                return None
            write(self.array[offset:offset + length])
            blocks = []
            for i in starts:
                blocks.append(Block(offset + i, min(BLOCK_BYTES, length - i), chunk, self._sent % CLAIMS))
                self._claims[blocks[-1].slot] = 0
                self._sent += 1
            with self._lock:
                if self._sending:
                    self._abandon()
                if not self.broken:
                    self._sending = True
                    try:
                        self._stdin.write(b"".join(_REQUEST.pack(b.offset, b.length, chunk, b.slot) for b in blocks))
                        self._stdin.flush()
                    except OSError:
                        self._give_up()
                if self.broken:
                    for b in blocks:
                        b.done = True
                else:
                    self._inflight.extend(blocks)
                    self._unanswered.extend(blocks)
                    self._sending = False
            return blocks

    def roots(self, blocks: list[Block]) -> list[bytes]:
        """The blocks' roots (``root``), the newest first: while this process hashes the newest
        unanswered ones, the hashing process goes on from the oldest."""
        return [self.root(b) for b in reversed(blocks)][::-1]

    def root(self, block: Block) -> bytes:
        """The block's root: the process's answer, or computed here from the same bytes when it has
        not answered yet (the block claimed: the process skips it) or cannot."""
        if not block.done:
            self._poll()
        with self._lock:
            if not block.done:
                block.claimed = True
                self._claims[block.slot] = 1
        if block.root is None:
            # No waiting for another claimer: one interrupted while hashing would never finish.
            root = sha.block_root(sha.compiled_hasher(), self.array[block.offset:block.offset + block.length], block.chunk)
            with self._lock:
                if block.root is None:
                    block.root = root
                block.done = True   # its bytes may be written over now
        return block.root

    def close(self) -> None:
        if os.getpid() != self._owner:   # a forked child's copy (its atexit list is its parent's)
            return
        try:
            self._stdin.close()
            self._proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self._proc.kill()

    def disown(self) -> None:
        """In a forked child: let go of the parent's pipes and buffer.  Each descriptor is pointed
        at /dev/null rather than closed, so that the file objects' own closing, whenever it comes,
        can neither flush into the parent's pipe nor close a descriptor the child reused; the
        process then sees the end of its input when the parent closes it."""
        devnull = os.open(os.devnull, os.O_RDWR)
        try:
            for fd in ([] if self._stdin.closed else [self._stdin.fileno()]) + [self._answers, self._file.fileno()]:
                os.dup2(devnull, fd)
        finally:
            os.close(devnull)


def _shared_file(size: int) -> IO[bytes]:
    """Memory both processes map: an anonymous memory file where the system has them (Linux),
    else a temporary file (unlinked at once)."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("cvmvm-hash")   # close-on-exec: only the hashing process gets it (pass_fds)
        os.ftruncate(fd, size)
        return open(fd, "r+b", buffering=0)
    f = tempfile.TemporaryFile()
    f.truncate(size)
    return f


_state_lock = threading.Lock()
_worker: HashWorker | None = None
_asked = 0            # traced runs with a large tensor so far in this process
_failed = False       # starting the process failed: never again in this process


def worker() -> HashWorker | None:
    """The process's hashing worker when it is ready to take blocks; None before (the caller
    hashes inline).  Started on the second call."""
    global _worker, _asked, _failed
    w = _worker
    if w is not None and w.ready:
        if not w.broken and w._proc.poll() is not None:
            # Exited since: a run that claimed what the process left reads no answer, so without this
            # the next run would learn it only when its first request failed, its bodies copied in vain.
            w._fail()
        if not w.abandoned:
            return None if w.broken else w
        # Given up after an interruption, not for failing: a new one now, ready for the runs after this.
        with _state_lock:
            _forget_abandoned()
            _asked = max(_asked, 1)
    with _state_lock:
        _asked += 1
        if _worker is None and _asked >= 2 and not _failed:
            try:
                _worker = HashWorker()
            except OSError:
                _failed = True
            else:
                atexit.register(_worker.close)
                # The executor's writes into the ring and its hasher for what it claims, compiled beside the
                # runs as the process compiles its own.
                threading.Thread(target=_compile, daemon=True, name="cvmvm-mover-compile").start()
    return None


def start(timeout: float = 30.0) -> HashWorker | None:
    """The worker, started now if it is not yet, once it is ready (benchmarks and tests measure
    the steady state); None when it cannot start or did not get ready in time."""
    global _worker
    with _state_lock:
        _forget_abandoned()
        if _worker is None:
            try:
                _worker = HashWorker()
            except OSError:
                return None
            atexit.register(_worker.close)
        w = _worker
    _compile()
    return w if w.wait_ready(timeout) and not w.broken else None


def _forget_abandoned() -> None:
    """Closes a worker given up after an interruption, so that a new one is started (the state lock
    held)."""
    global _worker
    if _worker is not None and _worker.abandoned:
        atexit.unregister(_worker.close)
        _worker.close()
        _worker = None


def _compile() -> None:
    sha.channel_mover()
    sha.hasher()


def _forget_in_child() -> None:
    """A forked child shares its parent's pipes: it lets them go, so that the parent's process still
    ends when the parent is done with it, and starts a worker of its own if it needs one."""
    global _worker, _asked
    if _worker is not None:
        _worker.disown()
    _worker, _asked = None, 0


os.register_at_fork(after_in_child=_forget_in_child)

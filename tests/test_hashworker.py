"""The hashing process (cvmvm.vm.hashworker): every block root it gives is serializer.hashing's, the
ring never hands out bytes still in flight, and whatever happens to the process (it never starts,
it dies with blocks in flight) a traced run gives the same trace."""

from __future__ import annotations

import os
import random
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from serializer import sha
from serializer.hashing import CHUNK_SIZE, chunk_leaves, tree_root
from cvmvm.vm import hashworker
from tests.fixture_script import generate


@pytest.fixture(scope="module")
def small_ring():
    worker = hashworker.HashWorker(1 << 16)
    assert worker.wait_ready(30) and not worker.broken
    yield worker
    worker.close()


def root_of(data: bytes) -> bytes:
    """A block's root by the definition: the tree of its 4096-byte chunks' leaves."""
    return tree_root(chunk_leaves(memoryview(data), CHUNK_SIZE))


def put_bytes(worker: hashworker.HashWorker, data: bytes) -> list[hashworker.Block] | None:
    def write(out: np.ndarray) -> None:
        out[:] = np.frombuffer(data, dtype=np.uint8)
    return worker.put(len(data), CHUNK_SIZE, write)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 40000), min_size=1, max_size=12), st.integers(0, 2**32))
def test_block_roots_are_the_chunk_tree_roots_while_the_ring_wraps(small_ring, sizes, seed):
    """Bodies of many sizes through a 64 KiB ring, several in flight at once: each block's root is
    the root of its own bytes' chunk tree (a region handed out twice would give a wrong one)."""
    rnd = random.Random(seed)
    sent = []
    for n in sizes:
        data = rnd.randbytes(n)
        blocks = put_bytes(small_ring, data)
        assert blocks is not None
        sent.append((data, blocks))
        if rnd.random() < 0.3:   # sometimes collect early, sometimes let the ring fill
            data, blocks = sent.pop(0)
            assert [small_ring.root(b) for b in blocks] == [root_of(data)]
    for data, blocks in sent:
        want = [root_of(data[i:i + hashworker.BLOCK_BYTES]) for i in range(0, len(data), hashworker.BLOCK_BYTES)]
        assert [small_ring.root(b) for b in blocks] == want
    assert not small_ring.broken


@pytest.fixture(scope="module")
def warm_ring():
    worker = hashworker.HashWorker(1 << 16, warm_bytes=1 << 14)
    assert worker.wait_ready(30) and not worker.broken
    yield worker
    worker.close()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 40000), min_size=1, max_size=12), st.integers(0, 2**32))
def test_block_roots_hold_while_bodies_go_back_to_the_warm_stretch(warm_ring, sizes, seed):
    """The same with a 16 KiB warm stretch: bodies go back to the start early, or past the stretch
    when the start is taken, and no region is handed out twice."""
    test_block_roots_are_the_chunk_tree_roots_while_the_ring_wraps.hypothesis.inner_test(warm_ring, sizes, seed)


def test_bodies_go_back_to_the_start_after_the_warm_stretch():
    worker = hashworker.HashWorker(1 << 16, warm_bytes=1 << 14)
    try:
        assert worker.wait_ready(30)
        first = os.urandom(10000)
        assert [worker.root(b) for b in put_bytes(worker, first)] == [root_of(first)]
        os.kill(worker._proc.pid, signal.SIGSTOP)     # nothing is answered now: what is in flight stays
        try:
            sent = [os.urandom(10000) for _ in range(3)]
            blocks = [put_bytes(worker, data) for data in sent]
        finally:
            os.kill(worker._proc.pid, signal.SIGCONT)
        # The start is free: the second body goes there, not after the first; the third fits the warm
        # stretch after it; the fourth does not, and the start is in flight: past the stretch.
        assert [b[0].offset for b in blocks] == [0, 10048, 20096]
        assert [worker.root(b[0]) for b in blocks] == [root_of(data) for data in sent]
        assert not worker.broken
    finally:
        worker.close()


def test_past_the_warm_stretch_a_body_goes_to_the_start_before_the_oldest_block():
    """The allocation itself, with blocks made by hand: the oldest block in flight starts at
    10048, so past the warm stretch a body that fits before it goes to 0, and one that does not
    goes after the newest, as long as the ring's end has room."""
    worker = hashworker.HashWorker(1 << 16, warm_bytes=1 << 14)
    answered, waiting = hashworker.Block(0, 10000, CHUNK_SIZE), hashworker.Block(10048, 10000, CHUNK_SIZE)
    answered.done = True
    worker._inflight.extend([answered, waiting])
    try:
        assert worker._reserve(5000) == 0
        assert worker._reserve(20000) == 20096
    finally:
        worker._inflight.clear()
        worker.close()


def test_a_body_longer_than_the_ring_is_refused(small_ring):
    assert put_bytes(small_ring, bytes(small_ring.ring_bytes + 1)) is None


def test_bodies_longer_than_a_block_are_cut_into_blocks_of_whole_chunks():
    worker = hashworker.start()
    assert worker is not None
    data = os.urandom(2 * hashworker.BLOCK_BYTES + 3 * CHUNK_SIZE + 17)
    blocks = put_bytes(worker, data)
    assert [b.length for b in blocks] == [hashworker.BLOCK_BYTES, hashworker.BLOCK_BYTES, 3 * CHUNK_SIZE + 17]
    assert [worker.root(b) for b in blocks] == [root_of(data[b.offset - blocks[0].offset:][:b.length]) for b in blocks]


def within(seconds: float, fn):
    """``fn()``'s value, run in a daemon thread: a hang fails the test instead of holding it (and the
    suite) for ever."""
    import threading
    got: list = []
    thread = threading.Thread(target=lambda: got.append(fn()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert got, f"still running after {seconds} s"
    return got[0]


def until(worker: hashworker.HashWorker, condition, seconds: float = 10.0) -> bool:
    """Whether ``condition()`` holds within ``seconds``, the worker's answers taken meanwhile (no
    thread takes them: a run does, when it needs them)."""
    return worker._collect(condition, seconds)


def test_blocks_in_flight_when_the_process_dies_are_hashed_here():
    worker = hashworker.HashWorker(1 << 20)
    assert worker.wait_ready(30)
    os.kill(worker._proc.pid, signal.SIGSTOP)      # nothing it receives now is answered
    data = os.urandom(300000)
    blocks = put_bytes(worker, data)
    os.kill(worker._proc.pid, signal.SIGKILL)
    assert worker.roots(blocks) == [root_of(data)]
    assert until(worker, lambda: worker.broken) and put_bytes(worker, data) is None
    worker.close()


def test_a_request_that_cannot_be_sent_gives_the_process_up():
    """A dead process's pipe refuses the next request: the process is given up as when it is seen
    to be gone, every block it did not answer is the executor's, and every root is still right."""
    worker = hashworker.HashWorker(1 << 20)
    assert worker.wait_ready(30)
    os.kill(worker._proc.pid, signal.SIGSTOP)
    first, second = os.urandom(20000), os.urandom(9000)
    (sent,) = put_bytes(worker, first)
    os.kill(worker._proc.pid, signal.SIGKILL)
    worker._proc.wait(10)
    (unsent,) = put_bytes(worker, second)   # written into the ring; its request fails
    assert worker.broken and sent.done and unsent.done and not sent.claimed
    assert worker.roots([sent, unsent]) == [root_of(first), root_of(second)]
    assert put_bytes(worker, second) is None
    worker.close()


def test_a_stopped_process_holds_no_run_back():
    """Stopped (SIGSTOP), it answers nothing: the roots a run asks for are claimed and hashed here at
    once, long before answer_seconds.  Resumed, it skips what was claimed and answers what follows."""
    worker = hashworker.HashWorker(1 << 20, answer_seconds=60)
    assert worker.wait_ready(30)
    os.kill(worker._proc.pid, signal.SIGSTOP)
    data = [os.urandom(n) for n in (300000, 5000, 70000)]
    blocks = [b for d in data for b in put_bytes(worker, d)]
    began = time.monotonic()
    assert worker.roots(blocks) == [root_of(d) for d in data]
    assert time.monotonic() - began < 10 and all(b.claimed for b in blocks) and not worker.broken
    answered = worker.answered
    os.kill(worker._proc.pid, signal.SIGCONT)
    more = os.urandom(9000)
    (block,) = put_bytes(worker, more)
    assert until(worker, lambda: block.done)
    assert not block.claimed and block.root == root_of(more) and worker.answered == answered + 1
    assert not worker.broken
    worker.close()


def test_an_answer_for_a_claimed_block_is_not_taken():
    """A block claimed here after the process began it: its answer arrives, and is ignored."""
    worker = hashworker.HashWorker(1 << 20)
    assert worker.wait_ready(30)
    os.kill(worker._proc.pid, signal.SIGSTOP)
    data = os.urandom(20000)
    (block,) = put_bytes(worker, data)
    assert worker.root(block) == root_of(data)
    block.root = b"mine"                   # what the process sends for it must not replace this
    worker._claims[block.slot] = 0         # as if the process had begun it before the claim
    answered = worker.answered
    os.kill(worker._proc.pid, signal.SIGCONT)
    more = os.urandom(9000)
    (after,) = put_bytes(worker, more)
    assert until(worker, lambda: after.done) and after.root == root_of(more)
    assert block.root == b"mine" and worker.answered == answered + 1 and not worker.broken
    worker.close()


def test_a_skip_for_a_block_nobody_claimed_is_never_a_root():
    """The process skips only what this process claimed; a skip for anything else (a claim byte
    set by something else) gives the process up, and the block is hashed here."""
    worker = hashworker.HashWorker(1 << 20)
    assert worker.wait_ready(30)
    os.kill(worker._proc.pid, signal.SIGSTOP)
    data = os.urandom(20000)
    (block,) = put_bytes(worker, data)
    worker._claims[block.slot] = 1
    os.kill(worker._proc.pid, signal.SIGCONT)
    assert until(worker, lambda: worker.broken)
    assert not block.claimed and worker.root(block) == root_of(data)
    worker.close()


def test_a_process_that_answers_nothing_in_time_is_given_up(monkeypatch):
    """Every claim slot taken by a block a stopped process never answered: after answer_seconds the
    executor kills it, and the next body is refused to it."""
    monkeypatch.setattr(hashworker, "CLAIMS", 2)
    worker = hashworker.HashWorker(1 << 20, answer_seconds=0.5)
    assert worker.wait_ready(30)
    os.kill(worker._proc.pid, signal.SIGSTOP)
    data = [os.urandom(3000) for _ in range(3)]
    blocks = put_bytes(worker, data[0]) + put_bytes(worker, data[1])
    assert [b.slot for b in blocks] == [0, 1]
    assert put_bytes(worker, data[2]) is None    # waited for a slot, then gave the process up
    assert worker.broken and worker._proc.wait(10) == -signal.SIGKILL
    assert worker.roots(blocks) == [root_of(d) for d in data[:2]]
    worker.close()


def test_a_full_ring_whose_process_answers_nothing_takes_the_next_body():
    """The oldest block is claimed and hashed here, and its bytes are written over."""
    worker = hashworker.HashWorker(1 << 16, answer_seconds=60)
    assert worker.wait_ready(30)
    os.kill(worker._proc.pid, signal.SIGSTOP)
    first, second = os.urandom(40000), os.urandom(40000)
    (old,) = put_bytes(worker, first)
    (new,) = put_bytes(worker, second)
    assert old.claimed and old.root == root_of(first) and new.offset == old.offset == 0
    assert worker.root(new) == root_of(second) and not worker.broken
    os.kill(worker._proc.pid, signal.SIGCONT)
    worker.close()


def traced(name: str) -> bytes:
    model = generate.load_fixture_model(name)
    return model.run({"data": generate.load_fixture_inputs(name)[0]}, trace=True).trace.root


def test_a_run_whose_process_dies_midway_gives_the_same_trace(monkeypatch):
    want = traced("perf")
    worker = hashworker.HashWorker()
    monkeypatch.setattr(hashworker, "_worker", worker)
    assert worker.wait_ready(30)
    from cvmvm.vm import trace as tracing
    real_call = tracing.Tracer.__call__
    killed = []

    def observe(self, tensor, value):   # the process dies halfway through the run
        real_call(self, tensor, value)
        if tensor == 80 and not killed:
            os.kill(worker._proc.pid, signal.SIGKILL)
            killed.append(tensor)
    monkeypatch.setattr(tracing.Tracer, "__call__", observe)
    assert traced("perf") == want and killed
    worker._proc.wait(10)
    monkeypatch.undo()
    monkeypatch.setattr(hashworker, "_worker", worker)
    # The run may have claimed every block the process left and read no answer: the next run's
    # worker() sees the exit.
    assert hashworker.worker() is None and worker.broken
    assert traced("perf") == want    # later runs hash inline
    worker.close()


def test_a_run_whose_process_is_stopped_gives_the_same_trace(monkeypatch):
    """Every block claimed and hashed here, newest first, and put back in tensor order."""
    want = traced("perf")
    worker = hashworker.HashWorker(answer_seconds=60)
    monkeypatch.setattr(hashworker, "_worker", worker)
    assert worker.wait_ready(30)
    os.kill(worker._proc.pid, signal.SIGSTOP)
    try:
        assert traced("perf") == want and worker.answered == 0 and not worker.broken
    finally:
        os.kill(worker._proc.pid, signal.SIGCONT)
    worker.close()


def test_traced_runs_in_threads_share_the_process(monkeypatch):
    """Four threads' traced perf runs through one process and a 1 MiB ring: one run claims the
    blocks of another's to free the ring while their owner asks for them too, and a third reads
    the answers.  Every trace is the same.  (When two threads could hash one claimed block, the
    ring freed it after the first, and the second took a root of bytes written over: two or three
    wrong traces in these 24 runs, every time.)"""
    want = traced("perf")
    worker = hashworker.HashWorker(1 << 20)
    monkeypatch.setattr(hashworker, "_worker", worker)
    assert worker.wait_ready(30)
    with ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            assert list(pool.map(lambda _: traced("perf"), range(8))) == [want] * 8
    assert worker._sent > 0 and not worker.broken
    worker.close()


def test_a_process_that_never_starts_leaves_runs_inline(monkeypatch):
    want = traced("perf")
    monkeypatch.setattr(hashworker, "_CHILD", hashworker._CHILD.with_name("no-such-file.py"))
    worker = hashworker.HashWorker()
    assert worker.wait_ready(30) and worker.broken
    monkeypatch.setattr(hashworker, "_worker", worker)
    assert hashworker.worker() is None
    assert traced("perf") == want


def test_started_on_the_second_traced_run_with_a_large_tensor(monkeypatch):
    monkeypatch.setattr(hashworker, "_worker", None)
    monkeypatch.setattr(hashworker, "_asked", 0)
    assert hashworker.worker() is None and hashworker._worker is None
    assert hashworker.worker() is None and hashworker._worker is not None   # started, not yet ready
    started = hashworker._worker
    assert started.wait_ready(30)
    assert hashworker.worker() is started
    started.close()


def test_a_forked_child_starts_its_own():
    assert hashworker.start() is not None
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: its parent's worker is not its own
        os.write(write, b"1" if hashworker._worker is None else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"
    os.close(read)
    os.close(write)
    assert hashworker._worker is not None


def interrupt(*args, **kwargs):
    """Stands in for a call that Ctrl-C ends."""
    raise KeyboardInterrupt


def interrupted_while_hashed_here(monkeypatch, worker: hashworker.HashWorker, blocks: list) -> None:
    """``worker.roots(blocks)`` ended by Ctrl-C while this process hashes the newest of them."""
    monkeypatch.setattr(sha, "block_root", interrupt)
    with pytest.raises(KeyboardInterrupt):
        worker.roots(blocks)
    monkeypatch.undo()


class InterruptedFlush:
    """The worker's request pipe, whose next flush raises KeyboardInterrupt once the bytes are
    written: a Ctrl-C that arrived during the system call, acted on at the next bytecode."""

    def __init__(self, pipe) -> None:
        self.pipe, self.armed = pipe, True

    def write(self, data: bytes) -> int:
        return self.pipe.write(data)

    def flush(self) -> None:
        self.pipe.flush()
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt

    def close(self) -> None:
        self.pipe.close()

    @property
    def closed(self) -> bool:
        return self.pipe.closed

    def fileno(self) -> int:
        return self.pipe.fileno()


def test_an_interrupted_send_never_gives_a_block_another_bodys_root():
    """Interrupted after its request went out and before its blocks were recorded: the process
    still answers that request, so the next body's block would take the first body's root (it
    did).  The worker is given up instead, and every root is hashed here."""
    worker = hashworker.HashWorker(1 << 22)
    assert worker.wait_ready(30)
    first, second = bytes([1]) * (1 << 16), bytes([2]) * (1 << 16)
    worker._stdin = InterruptedFlush(worker._stdin)
    with pytest.raises(KeyboardInterrupt):
        put_bytes(worker, first)
    time.sleep(0.2)   # the process answers the lost request meanwhile
    blocks = put_bytes(worker, second)
    assert blocks is None or worker.roots(blocks) == [root_of(second)]
    more = os.urandom(30000)
    blocks = put_bytes(worker, more)
    assert blocks is None or worker.roots(blocks) == [root_of(more)]
    assert until(worker, lambda: worker.broken) and worker.abandoned
    assert worker._proc.wait(10) is not None
    worker.close()


def test_answers_read_and_lost_to_an_interrupt_give_the_worker_up(monkeypatch):
    """Interrupted between reading answers and taking them: those answers are gone, and the next
    ones would be matched to the wrong blocks.  The next read gives the worker up."""
    worker = hashworker.HashWorker(1 << 22)
    assert worker.wait_ready(30)
    os.kill(worker._proc.pid, signal.SIGSTOP)
    data = [os.urandom(20000) for _ in range(3)]
    blocks = [put_bytes(worker, d)[0] for d in data]
    os.kill(worker._proc.pid, signal.SIGCONT)
    time.sleep(0.2)
    monkeypatch.setattr(worker, "_take", interrupt)   # answers read, and lost
    with pytest.raises(KeyboardInterrupt):
        until(worker, lambda: blocks[0].done, 5)
    monkeypatch.undo()
    assert until(worker, lambda: worker.broken) and worker.abandoned
    assert worker.roots(blocks) == [root_of(d) for d in data]
    worker.close()


def test_an_interrupt_while_waiting_for_answers_keeps_the_worker(monkeypatch):
    """Waiting for answers is where a run's end spends its time, and nothing is lost there: the
    worker goes on, not given up."""
    worker = hashworker.HashWorker(1 << 22)
    assert worker.wait_ready(30)
    os.kill(worker._proc.pid, signal.SIGSTOP)
    data = os.urandom(20000)
    (block,) = put_bytes(worker, data)
    monkeypatch.setattr(hashworker.select, "select", interrupt)
    with pytest.raises(KeyboardInterrupt):
        until(worker, lambda: block.done, 5)
    monkeypatch.undo()
    os.kill(worker._proc.pid, signal.SIGCONT)
    assert until(worker, lambda: block.done) and block.root == root_of(data)
    assert not worker.broken and not worker.abandoned
    worker.close()


def test_a_block_whose_hashing_here_was_interrupted_is_hashed_again(monkeypatch):
    """Claimed and interrupted while this process hashed it: it stays claimed and not done, and
    the next body that needs its ring space waited for it for ever.  Now whoever needs it hashes
    it."""
    worker = hashworker.HashWorker(1 << 20)
    assert worker.wait_ready(30)
    os.kill(worker._proc.pid, signal.SIGSTOP)     # a slow process: the run hashes inline
    data = os.urandom(1 << 19)
    blocks = put_bytes(worker, data)
    interrupted_while_hashed_here(monkeypatch, worker, blocks)
    assert blocks[0].claimed and not blocks[0].done
    os.kill(worker._proc.pid, signal.SIGCONT)
    later = [os.urandom(1 << 19), os.urandom(1 << 19)]   # the bodies that need its space
    got = within(60, lambda: [worker.roots(put_bytes(worker, d)) for d in later])
    assert got == [[root_of(d)] for d in later]
    assert worker.root(blocks[0]) == root_of(data)
    worker.close()


def test_claim_slots_of_blocks_hashed_here_are_freed_by_the_process_answers():
    """Every claim slot taken by a block that runs claimed and hashed here while the process was
    stopped: those blocks are done long before the process's skips free their slots.  The next
    put waited for the oldest to be done (it was), read nothing, and spun for ever."""
    worker = hashworker.HashWorker(1 << 22)
    assert worker.wait_ready(30)
    os.kill(worker._proc.pid, signal.SIGSTOP)
    data = os.urandom(4096)
    for _ in range(hashworker.CLAIMS):
        assert worker.roots(put_bytes(worker, data)) == [root_of(data)]   # each run's end claims its block
    os.kill(worker._proc.pid, signal.SIGCONT)
    blocks = within(60, lambda: put_bytes(worker, data))
    assert blocks is not None and worker.roots(blocks) == [root_of(data)] and not worker.broken
    worker.close()


def test_a_block_interrupted_while_hashed_here_does_not_hold_its_claim_slot(monkeypatch):
    """Its skip from the process frees its slot; waiting for it to be done waited the whole
    answer_seconds, then gave the worker up for good."""
    worker = hashworker.HashWorker(1 << 22, answer_seconds=60)
    assert worker.wait_ready(30)
    os.kill(worker._proc.pid, signal.SIGSTOP)
    data = os.urandom(4096)
    first = put_bytes(worker, data)
    interrupted_while_hashed_here(monkeypatch, worker, first)
    for _ in range(hashworker.CLAIMS - 1):
        put_bytes(worker, data)
    os.kill(worker._proc.pid, signal.SIGCONT)
    started = time.monotonic()
    blocks = within(60, lambda: put_bytes(worker, data))
    assert time.monotonic() - started < 30 and not worker.broken
    assert worker.roots(blocks) == [root_of(data)] and worker.root(first[0]) == root_of(data)
    worker.close()


def test_after_an_interruption_a_new_worker_is_started(monkeypatch):
    """An abandoned worker is not a failed one: the next traced run starts a new process, ready
    for the runs after it, instead of hashing inline for the rest of the process's life."""
    abandoned = hashworker.HashWorker(1 << 20)
    assert abandoned.wait_ready(30)
    with abandoned._lock:
        abandoned._abandon()
    monkeypatch.setattr(hashworker, "_worker", abandoned)
    monkeypatch.setattr(hashworker, "_asked", 2)
    assert hashworker.worker() is None
    fresh = hashworker._worker
    assert fresh is not None and fresh is not abandoned and fresh.wait_ready(30)
    assert hashworker.worker() is fresh
    # One started by start() (benchmarks, tests) is replaced as soon, by worker() or start().
    with fresh._lock:
        fresh._abandon()
    monkeypatch.setattr(hashworker, "_asked", 0)
    assert hashworker.worker() is None
    fresh = hashworker._worker
    assert fresh is not None and not fresh.abandoned and fresh.wait_ready(30)
    with fresh._lock:
        fresh._abandon()
    assert hashworker.start() not in (None, fresh)
    fresh = hashworker._worker
    want = traced("perf")
    assert traced("perf") == want and fresh._sent > 0
    fresh.close()


def test_a_run_interrupted_midway_leaves_the_next_runs_right(monkeypatch):
    want = traced("perf")
    worker = hashworker.HashWorker()
    monkeypatch.setattr(hashworker, "_worker", worker)
    assert worker.wait_ready(30)
    from cvmvm.vm import trace as tracing
    real_call = tracing.Tracer.__call__

    def interrupt(self, tensor, value):
        real_call(self, tensor, value)
        if tensor == 80:
            raise KeyboardInterrupt
    monkeypatch.setattr(tracing.Tracer, "__call__", interrupt)
    with pytest.raises(KeyboardInterrupt):
        traced("perf")
    monkeypatch.setattr(tracing.Tracer, "__call__", real_call)
    assert [traced("perf") for _ in range(3)] == [want] * 3
    hashworker._worker.close()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc")
def test_a_forked_child_lets_its_parents_pipes_go():
    """The child's copies of the request pipe kept the process waiting for input after the
    parent closed its own (its exit took 5 s longer, then killed it), and the child's exit ran the
    parent's close.  Now they point at /dev/null, and the parent's worker goes on."""
    parent = hashworker.start()
    assert parent is not None
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        parent.close()   # what the inherited atexit list runs at the child's exit
        fds = (parent._stdin.fileno(), parent._answers)
        os.write(write, b"1" if all(os.readlink(f"/proc/self/fd/{fd}") == os.devnull for fd in fds) else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"
    os.close(read)
    os.close(write)
    data = os.urandom(300000)
    assert parent._proc.poll() is None and parent.roots(put_bytes(parent, data)) == [root_of(data)]
    assert not parent.broken


def test_the_process_runs_at_a_lower_priority(small_ring):
    """Where it shares a core with a BLAS thread, the GEMM's half there goes first (hashchild.NICE)."""
    if not hasattr(os, "nice"):
        pytest.skip("no process priorities here")
    assert os.getpriority(os.PRIO_PROCESS, small_ring.pid) == min(19, os.nice(0) + 10)


def test_with_numba_the_process_hashes_through_the_compiled_hasher(small_ring):
    """It says so when it is ready; the roots it gives are checked against the definition above."""
    pytest.importorskip("numba")
    assert small_ring.compiled


def test_channel_last_bodies_go_into_the_ring_through_the_compiled_mover(monkeypatch):
    """perf's 1-byte rank-4 tensors, written by numpy and by serializer.sha's mover: the same trace."""
    pytest.importorskip("numba")
    assert hashworker.start() is not None
    mover = sha.compiled_channel_mover()
    assert mover is not None
    monkeypatch.setattr(sha, "_movers", [None])
    want = traced("perf")
    moved: list[tuple[int, ...]] = []
    monkeypatch.setattr(sha, "_movers", [lambda value, lanes: moved.append(value.shape) or mover(value, lanes)])
    assert traced("perf") == want
    assert moved and all(len(shape) == 3 for shape in moved)


def test_the_process_imports_no_more_than_the_hashing():
    """It runs by path (python -I), with the directory of the serializer package and nothing else of
    cvmvm: importing the VM there would cost a second start-up for nothing."""
    source = hashworker._CHILD.read_text(encoding="utf-8")
    assert "import cvmvm" not in source and "from cvmvm" not in source

"""The hashing process of cvmvm.vm.hashworker: run by its path, never imported.

It needs serializer.hashing and the standard library, not the cvmvm package
(whose import would load the whole VM); with numba installed (the ``speed``
extra) it compiles serializer.sha's hasher before it says it is ready, some
3 s during which the parent hashes its blocks itself, and then hashes each
block in one compiled call: at OpenSSL's rate (0.63 ms a MiB, against
hashlib's 0.8 with a call per 4 KiB chunk), or sixteen chunks at a time in
lanes where the CPU has AVX-512, else (or on AMD's Zen) four through SHA-NI
where it has that (serializer.sha_lanes; 0.33-0.42 and 0.30-0.41): the same
roots.  Arguments: the directory that holds the ``serializer`` package, the
descriptor of the shared buffer, its size.

Requests on stdin, 20 bytes each: u64le offset, u32le length, u32le chunk
size, naming bytes of the shared buffer the parent wrote, and u32le claim, a
byte of the claims table that follows the ring in the same buffer.  The reply on
stdout, in request order, is 33 bytes: b"H" and the root of their chunk tree
(serializer.hashing); or b"S" and 32 zero bytes when the parent had claimed
the block (nonzero claim byte) before it was begun: the parent hashed it
itself, and takes no root from here for it.  One byte first, once the imports
are done: b"C" when it hashes through the compiled hasher, else b"R".  End of
stdin ends it.

It runs at a lower priority (NICE): where it shares a core with the executor's
BLAS thread, a GEMM no longer waits for that thread's half (perf-large traced:
46.4-46.5 ms against 49.6-50.9 at equal priority, alternating, 2026-11-29).  A
process starved by other work costs no more than inline hashing: the parent
hashes every block not yet answered when it needs the roots, newest first,
while this one goes on from the oldest and skips what the parent claimed.
"""

import mmap
import os
import select
import signal
import struct
import sys

import numpy as np

FLUSH_BYTES = 1 << 20
# A ninth of a core's share against an equal-priority thread (Linux CFS weights 110 and 1024).  19
# (weight 15) was no faster on an idle machine, and left the process less of a loaded one.
NICE = 10
SKIPPED = b"S" + bytes(32)


def main() -> None:
    # Ctrl-C is the parent's to handle; this process ends when the parent closes its stdin (or dies).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(os, "nice"):
        os.nice(NICE)
    root, fd, size, claims = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    sys.path.insert(0, root)
    from serializer.sha import block_root, hasher

    try:
        fast = hasher()
    except Exception:   # a hasher that cannot be had (libcrypto failed its known answers): hashlib's roots
        fast = None
    shared = memoryview(mmap.mmap(fd, size + claims))
    ring, claimed = shared[:size], np.frombuffer(shared[size:], dtype=np.uint8)
    array = np.frombuffer(ring, dtype=np.uint8)
    stdin = sys.stdin.fileno()   # read unbuffered: select then sees every request not yet read
    out = sys.stdout.buffer
    out.write(b"R" if fast is None else b"C")
    out.flush()
    request = struct.Struct("<QIII")
    unsent = 0   # bytes hashed since the last answers went out, plus one a skipped block
    while True:
        # Answers go out when no request waits (the parent may be waiting for them), else after a
        # mebibyte of hashing (some 0.4 ms): a write a block would cost a system call each, and the
        # parent reads them only when it needs them (a full ring, or a run's end).
        if unsent and (unsent >= FLUSH_BYTES or not select.select([stdin], [], [], 0)[0]):
            out.flush()
            unsent = 0
        data = _read(stdin, request.size)
        if len(data) != request.size:
            return
        offset, length, chunk, claim = request.unpack(data)
        if claimed[claim]:
            out.write(SKIPPED)
            unsent += 1
            continue
        out.write(b"H")
        out.write(block_root(fast, array[offset:offset + length], chunk))
        unsent += length


def _read(fd: int, size: int) -> bytes:
    """``size`` bytes, or fewer at the end of the input."""
    data = os.read(fd, size)
    while data and len(data) < size:
        more = os.read(fd, size - len(data))
        if not more:
            break
        data += more
    return data


if __name__ == "__main__":
    main()

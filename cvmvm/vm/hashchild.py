"""The hashing process of cvmvm.vm.hashworker: run by its path, never imported.

It needs serializer.hashing and the standard library, not the cvmvm package
(whose import would load the whole VM); with numba installed (the ``speed``
extra) it compiles serializer.sha's hasher before it says it is ready, some
3 s during which the parent hashes its blocks itself, and then hashes each
block in one compiled call: at OpenSSL's rate (0.63 ms a MiB, against
hashlib's 0.8 with a call per 4 KiB chunk), or on a CPU with AVX-512 sixteen
chunks at a time in serializer.sha_lanes (0.40): the same roots.  Arguments: the directory that holds
the ``serializer`` package, the descriptor of the shared buffer, its size.

Requests on stdin, 16 bytes each: u64le offset, u32le length, u32le chunk
size, naming bytes of the shared buffer the parent wrote; the reply on stdout
is the root of their chunk tree (serializer.hashing), 32 bytes, in request
order.  One byte first, once the imports are done: b"C" when it hashes through
the compiled hasher, else b"R".  End of stdin ends it.
"""

import mmap
import os
import select
import signal
import struct
import sys

import numpy as np

FLUSH_BYTES = 1 << 20


def main() -> None:
    # Ctrl-C is the parent's to handle; this process ends when the parent closes its stdin (or dies).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    root, fd, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    sys.path.insert(0, root)
    from serializer.hashing import blocks_root
    from serializer.sha import hasher

    try:
        fast = hasher()
    except Exception:   # a hasher that cannot be had (libcrypto failed its known answers): hashlib's roots
        fast = None
    ring = memoryview(mmap.mmap(fd, size))
    array = np.frombuffer(ring, dtype=np.uint8)
    stdin = sys.stdin.fileno()   # read unbuffered: select then sees every request not yet read
    out = sys.stdout.buffer
    out.write(b"R" if fast is None else b"C")
    out.flush()
    request = struct.Struct("<QII")
    unsent = 0   # bytes hashed since the last answers went out
    while True:
        # Answers go out when no request waits (the parent may be waiting for them), else after a
        # mebibyte of hashing (some 0.7 ms): each write wakes the parent's reader thread, which then
        # takes the GIL from the executor, so a hundred blocks a run are answered in a few writes.
        if unsent and (unsent >= FLUSH_BYTES or not select.select([stdin], [], [], 0)[0]):
            out.flush()
            unsent = 0
        data = _read(stdin, request.size)
        if len(data) != request.size:
            return
        offset, length, chunk = request.unpack(data)
        if fast is None:
            out.write(blocks_root(ring[offset:offset + length], chunk))
        else:
            out.write(fast.blocks_root(array[offset:offset + length], chunk))
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

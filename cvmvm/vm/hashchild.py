"""The hashing process of cvmvm.vm.hashworker: run by its path, never imported.

It needs serializer.hashing and the standard library, not the cvmvm package
(whose import would load the whole VM).  Arguments: the directory that holds
the ``serializer`` package, the descriptor of the shared buffer, its size.

Requests on stdin, 16 bytes each: u64le offset, u32le length, u32le chunk
size, naming bytes of the shared buffer the parent wrote; the reply on stdout
is the root of their chunk tree (serializer.hashing), 32 bytes, in request
order.  One byte b"R" first, once the imports are done.  End of stdin ends it.
"""

import mmap
import signal
import struct
import sys


def main() -> None:
    # Ctrl-C is the parent's to handle; this process ends when the parent closes its stdin (or dies).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    root, fd, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    sys.path.insert(0, root)
    from serializer.hashing import blocks_root

    ring = memoryview(mmap.mmap(fd, size))
    read = sys.stdin.buffer.read
    out = sys.stdout.buffer
    out.write(b"R")
    out.flush()
    request = struct.Struct("<QII")
    while True:
        data = read(request.size)
        if len(data) != request.size:
            return
        offset, length, chunk = request.unpack(data)
        out.write(blocks_root(ring[offset:offset + length], chunk))
        out.flush()


if __name__ == "__main__":
    main()

"""SHA-256 of sixteen messages at once, one in each 32-bit lane of a 512-bit vector, compiled by
LLVM: the compiled hasher's (serializer.sha) commitments and trace trees of many items alike;
and of four chunks of a body at once through the CPU's SHA extensions.

Why by hand: a replayed digits transaction's traced run hashes 292 SHA-256 blocks for its small
tensors' commitments and about 60 for its trace tree, and through libcrypto (SHA-NI, one
message at a time, called from numba) a block costs 44-47 ns here, over a third of the
transaction.  The items of a batch share one plan: item i's chunk k, inner node j or
commitment r is a message of the same length as every other item's, so sixteen of them can run
in lockstep, one per lane.  On this project's AMD EPYC (Zen 4, AVX-512) a block then costs
about 25 ns, staging the messages included (20 ns the compression alone).  A large body's
4096-byte chunks are alike too: the hashing process (cvmvm.vm.hashworker) hashes sixteen
of them at a time, 0.35 ms a MiB against libcrypto's 0.63.  No maintained
library hashes many short messages in lanes from Python: OpenSSL keeps its multi-buffer code
to TLS.

Where the CPU has the SHA extensions (SHA-NI) and not AVX-512, a body's chunks go four at a
time through them instead (``compile_streams``): libcrypto uses them too, but one message at a
time, and each round waits for the one before; four messages interleaved keep the unit busy.  A
MiB took 0.41 ms so on an AMD EPYC Zen 3 (AVX2, no AVX-512), against libcrypto's 0.76
(bench/chain.py).  Where there is AVX-512 too, which is faster depends on the CPU's kind
(``streams_first``): the lanes on Intel's (0.42 ms against the streams' 0.70 on a Xeon, 0.33
against 0.56 on a Rocket Lake Xeon), the streams on AMD's Zen 4, whose SHA-NI is fast and
whose AVX-512 runs on 256-bit units (0.30 against the lanes' 0.37); there the lanes still hash
the commitments and trace trees of many items.

What is hand-written is SHA-256 (FIPS 180-4: padding, section 5.1.1; the compression,
section 6.2.2) over vectors, as LLVM IR built with llvmlite and compiled by LLVM for this CPU,
which lowers it to AVX-512 where there is one and to narrower vectors elsewhere, with the same
results; the streams call x86's SHA intrinsics, which LLVM compiles only for a CPU that has
them.  Nothing hashed depends on either: serializer.sha uses them only where its known answers
through them are hashlib's, the lanes only on a CPU with AVX-512 (elsewhere they are slower than
libcrypto), the streams only on one with SHA-NI.  The IR's words are little-endian loads
byte-swapped: every CPU with AVX-512 or SHA-NI is little-endian, and ``fast_here`` and
``sha_here`` check it.

This module imports llvmlite (numba's, the ``speed`` extra); serializer.sha imports it only then.
"""

from __future__ import annotations

import ctypes
import sys
from contextlib import contextmanager
from typing import Any, Callable, Iterator, NamedTuple

import numpy as np
from llvmlite import ir

from isa.errors import InternalError
from serializer.hashing import BulkPlan

LANES = 16

# FIPS 180-4, section 4.2.2 and 5.3.3.
_K = (0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
      0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
      0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
      0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
      0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
      0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
      0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
      0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2)
_H0 = np.array([0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19],
               dtype=np.uint32)

_I32, _I64 = ir.IntType(32), ir.IntType(64)
_V = ir.VectorType(_I32, LANES)


def _word(v: int) -> ir.Constant:
    return ir.Constant(_I32, v - (1 << 32) if v >= 1 << 31 else v)   # IR's i32 constants are signed


def _splat(v: int) -> ir.Constant:
    return ir.Constant(_V, [_word(v)] * LANES)


def _indices(idx: list[int]) -> ir.Constant:
    return ir.Constant(ir.VectorType(_I32, len(idx)), [ir.Constant(_I32, i) for i in idx])


def _transpose(builder: ir.IRBuilder, rows: list[Any]) -> list[Any]:
    """Sixteen vectors of sixteen words transposed (row i's word j becomes row j's word i): four
    rounds of pairwise shuffles, each swapping the off-diagonal halves of 2h x 2h blocks."""
    for h in (8, 4, 2, 1):
        new = list(rows)
        for i in range(LANES):
            if i & h:
                continue
            low = [j if not j & h else LANES + j - h for j in range(LANES)]
            high = [j + h if not j & h else LANES + j for j in range(LANES)]
            new[i] = builder.shuffle_vector(rows[i], rows[i + h], _indices(low))
            new[i + h] = builder.shuffle_vector(rows[i], rows[i + h], _indices(high))
        rows = new
    return rows


def _address(builder: ir.IRBuilder, base: Any, lane: int, stride: Any, ty: ir.Type) -> Any:
    at = builder.add(base, builder.mul(ir.Constant(_I64, lane), stride))
    return builder.inttoptr(at, ty.as_pointer())


def _emit_compress(module: ir.Module) -> None:
    """``void compress(i64 state, i64 messages, i64 stride, i64 blocks)``: SHA-256's compression
    of ``blocks`` (at least one) 64-byte blocks of each lane's padded message (lane l's at address
    ``messages + l * stride``) into ``state`` (eight vectors at that address, word w of lane l at
    4 * (16 w + l))."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [_I64] * 4), name="compress")
    state, messages, stride, blocks = fn.args
    entry, body, done = fn.append_basic_block("entry"), fn.append_basic_block("block"), fn.append_basic_block("done")
    builder = ir.IRBuilder(entry)
    builder.branch(body)
    builder.position_at_end(body)
    index = builder.phi(_I64)
    index.add_incoming(ir.Constant(_I64, 0), entry)
    fshr = ir.Function(module, ir.FunctionType(_V, [_V] * 3), "llvm.fshr.v16i32")
    bswap = ir.Function(module, ir.FunctionType(_V, [_V]), "llvm.bswap.v16i32")

    def ror(x: Any, n: int) -> Any:
        return builder.call(fshr, [x, x, _splat(n)])

    def xor3(a: Any, b: Any, c: Any) -> Any:
        return builder.xor(builder.xor(a, b), c)

    words = builder.inttoptr(state, _V.as_pointer())
    block = builder.add(messages, builder.mul(index, ir.Constant(_I64, 64)))
    rows = [builder.load(_address(builder, block, lane, stride, _V), align=1) for lane in range(LANES)]
    w = [builder.call(bswap, [r]) for r in _transpose(builder, rows)]   # the words are big-endian
    saved = [builder.load(builder.gep(words, [ir.Constant(_I32, i)]), align=4) for i in range(8)]
    a, b, c, d, e, f, g, h = saved
    for r in range(64):
        if r >= 16:   # the schedule, sixteen words deep
            x, y = w[(r - 15) % 16], w[(r - 2) % 16]
            s0 = xor3(ror(x, 7), ror(x, 18), builder.lshr(x, _splat(3)))
            s1 = xor3(ror(y, 17), ror(y, 19), builder.lshr(y, _splat(10)))
            w[r % 16] = builder.add(builder.add(w[r % 16], s0), builder.add(w[(r - 7) % 16], s1))
        big_s1 = xor3(ror(e, 6), ror(e, 11), ror(e, 25))
        choose = builder.xor(g, builder.and_(e, builder.xor(f, g)))
        t1 = builder.add(builder.add(h, big_s1), builder.add(choose, builder.add(w[r % 16], _splat(_K[r]))))
        big_s0 = xor3(ror(a, 2), ror(a, 13), ror(a, 22))
        majority = builder.or_(builder.and_(a, b), builder.and_(c, builder.or_(a, b)))
        h, g, f, e, d, c, b, a = g, f, e, builder.add(d, t1), c, b, a, builder.add(t1, builder.add(big_s0, majority))
    for i, v in enumerate((a, b, c, d, e, f, g, h)):
        builder.store(builder.add(saved[i], v), builder.gep(words, [ir.Constant(_I32, i)]), align=4)
    following = builder.add(index, ir.Constant(_I64, 1))
    index.add_incoming(following, body)
    builder.cbranch(builder.icmp_signed("<", following, blocks), body, done)
    builder.position_at_end(done)
    builder.ret_void()


def _emit_digests(module: ir.Module) -> None:
    """``void digests(i64 out, i64 stride, i64 state)``: each lane's digest of ``state`` (as
    ``compress`` keeps it), 32 bytes, lane l's written at address ``out + l * stride``."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [_I64] * 3), name="digests")
    out, stride, state = fn.args
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    bswap = module.get_global("llvm.bswap.v16i32")
    words = builder.inttoptr(state, _V.as_pointer())
    rows = [builder.call(bswap, [builder.load(builder.gep(words, [ir.Constant(_I32, i)]), align=4)])
            for i in range(8)] + [ir.Constant(_V, None)] * 8
    half = ir.VectorType(_I32, 8)
    for lane, row in enumerate(_transpose(builder, rows)):
        digest = builder.shuffle_vector(row, row, _indices(list(range(8))))
        builder.store(digest, _address(builder, out, lane, stride, half), align=1)
    builder.ret_void()


@contextmanager
def _counted(builder: ir.IRBuilder, count: Any) -> Iterator[Any]:
    """``for i in range(count)`` in IR: the body is what the ``with`` block emits."""
    fn, before = builder.function, builder.block
    head, body, after = fn.append_basic_block(), fn.append_basic_block(), fn.append_basic_block()
    builder.branch(head)
    builder.position_at_end(head)
    i = builder.phi(_I64)
    i.add_incoming(ir.Constant(_I64, 0), before)
    builder.cbranch(builder.icmp_signed("<", i, count), body, after)
    builder.position_at_end(body)
    yield i
    i.add_incoming(builder.add(i, ir.Constant(_I64, 1)), builder.block)
    builder.branch(head)
    builder.position_at_end(after)


def _pad(builder: ir.IRBuilder, end: Any, tail: Any, bits: Any) -> None:
    """FIPS 180-4's padding (section 5.1.1) of a message staged up to address ``end``: the byte
    0x80, zeros up to address ``tail``, and there the message's length in bits, ``bits`` (already
    big-endian), in 8 bytes."""
    byte = ir.IntType(8)
    memset = builder.module.declare_intrinsic("llvm.memset", [byte.as_pointer(), _I64])
    builder.store(ir.Constant(byte, 0x80), builder.inttoptr(end, byte.as_pointer()))
    start = builder.add(end, ir.Constant(_I64, 1))
    builder.call(memset, [builder.inttoptr(start, byte.as_pointer()), ir.Constant(byte, 0), builder.sub(tail, start),
                          ir.Constant(ir.IntType(1), 0)])
    builder.store(bits, builder.inttoptr(tail, _I64.as_pointer()), align=1)


def _initial_state(builder: ir.IRBuilder, state: Any) -> None:
    """Every lane's state at ``state`` (as ``compress`` keeps it) set to SHA-256's initial hash."""
    words = builder.inttoptr(state, _V.as_pointer())
    for i, h in enumerate(_H0.tolist()):
        builder.store(_splat(h), builder.gep(words, [ir.Constant(_I32, i)]), align=4)


def _emit_hash_lanes(module: ir.Module, name: str, lengths: tuple[int | None, int | None, int | None]) -> None:
    """``void <name>(i64 state, i64 scratch, i64 head, i64 head_length, i64 first, i64
    first_stride, i64 first_length, i64 second, i64 second_stride, i64 second_length, i64 out, i64
    out_stride)``: lane l's SHA-256 of ``head_length`` bytes at ``head`` (every lane's), then
    ``first_length`` bytes at ``first + l * first_stride``, then ``second_length`` bytes at
    ``second + l * second_stride``, written at ``out + l * out_stride``.  Each message is padded
    (FIPS 180-4, section 5.1.1) in ``scratch``, which holds sixteen of them.  A length given in
    ``lengths`` (head, first, second) is fixed, and its argument ignored: LLVM then copies and
    pads with a few moves rather than calls to memcpy, which cost as much as a block here."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [_I64] * 12), name=name)
    (state, scratch, head, head_length, first, first_stride, first_length, second, second_stride, second_length,
     out, out_stride) = fn.args
    head_length, first_length, second_length = (arg if fixed is None else ir.Constant(_I64, fixed)
                                                 for arg, fixed in zip((head_length, first_length, second_length),
                                                                       lengths))
    builder = ir.IRBuilder(fn.append_basic_block())
    byte, i1 = ir.IntType(8), ir.IntType(1)
    memcpy = module.declare_intrinsic("llvm.memcpy", [byte.as_pointer(), byte.as_pointer(), _I64])
    swap64 = module.declare_intrinsic("llvm.bswap", [_I64])
    no = ir.Constant(i1, 0)

    def at(address: Any) -> Any:
        return builder.inttoptr(address, byte.as_pointer())

    length = builder.add(builder.add(head_length, first_length), second_length)
    blocks = builder.add(builder.udiv(builder.add(length, ir.Constant(_I64, 8)), ir.Constant(_I64, 64)),
                         ir.Constant(_I64, 1))
    stride = builder.mul(blocks, ir.Constant(_I64, 64))
    bits = builder.call(swap64, [builder.mul(length, ir.Constant(_I64, 8))])   # big-endian
    with _counted(builder, ir.Constant(_I64, LANES)) as lane:
        message = builder.add(scratch, builder.mul(lane, stride))
        builder.call(memcpy, [at(message), at(head), head_length, no])
        middle = builder.add(message, head_length)
        builder.call(memcpy, [at(middle), at(builder.add(first, builder.mul(lane, first_stride))), first_length, no])
        builder.call(memcpy, [at(builder.add(middle, first_length)),
                              at(builder.add(second, builder.mul(lane, second_stride))), second_length, no])
        _pad(builder, builder.add(message, length), builder.sub(builder.add(message, stride), ir.Constant(_I64, 8)),
             bits)
    _initial_state(builder, state)
    builder.call(module.get_global("compress"), [state, scratch, stride, blocks])
    builder.call(module.get_global("digests"), [out, out_stride, state])
    builder.ret_void()


def _emit_bulk(module: ir.Module) -> None:
    """``void bulk(i64 buffer, i64 size, i64 groups, i64 chunks, i64 leaves, i64 pairs, i64 inner,
    i64 roots, i64 tensors, i64 prefixes, i64 spans, i64 nodes, i64 out, i64 leaf, i64 branch, i64
    scratch, i64 state)``: serializer.sha's ``bulk`` (a BulkPlan's commitments) of ``groups``
    times sixteen items, lane l of group g being item 16 g + l, whose bodies start at ``buffer +
    size * item``; ``chunks``, ``pairs``, ``roots`` and ``spans`` address the plan's int64 arrays
    (``leaves``, ``inner`` and ``tensors`` their rows), ``leaf`` and ``branch`` the one-byte
    prefixes; ``nodes`` holds a lane's nodes each, ``scratch`` sixteen messages."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [_I64] * 17), name="bulk")
    (buffer, size, groups, chunks, leaves, pairs, inner, roots, tensors, prefixes, spans, nodes, out, leaf, branch,
     scratch, state) = fn.args
    builder = ir.IRBuilder(fn.append_basic_block())
    hash_leaves, hash_pairs, hash_roots = (module.get_global(n) for n in ("hash_leaves", "hash_pairs", "hash_roots"))
    zero, one, word = ir.Constant(_I64, 0), ir.Constant(_I64, 1), ir.Constant(_I64, 32)

    def element(array: Any, index: Any) -> Any:
        return builder.load(builder.gep(builder.inttoptr(array, _I64.as_pointer()), [index]), align=8)

    def node(k: Any) -> Any:
        return builder.add(nodes, builder.mul(k, word))

    stride = builder.mul(builder.add(leaves, inner), word)   # one lane's nodes
    with _counted(builder, groups) as group:
        first = builder.mul(group, ir.Constant(_I64, LANES))
        items = builder.add(buffer, builder.mul(first, size))
        with _counted(builder, leaves) as i:
            start, end = element(chunks, builder.mul(i, ir.Constant(_I64, 2))), \
                element(chunks, builder.add(builder.mul(i, ir.Constant(_I64, 2)), one))
            builder.call(hash_leaves, [state, scratch, leaf, one, builder.add(items, start), size, builder.sub(end, start),
                                      zero, zero, zero, node(i), stride])
        with _counted(builder, inner) as j:
            left, right = element(pairs, builder.mul(j, ir.Constant(_I64, 2))), \
                element(pairs, builder.add(builder.mul(j, ir.Constant(_I64, 2)), one))
            builder.call(hash_pairs, [state, scratch, branch, one, node(left), stride, word, node(right), stride, word,
                                      node(builder.add(leaves, j)), stride])
        row = builder.mul(tensors, word)   # an item's commitments
        commitments = builder.add(out, builder.mul(first, row))
        with _counted(builder, tensors) as k:
            begin, finish = element(spans, k), element(spans, builder.add(k, one))
            builder.call(hash_roots, [state, scratch, builder.add(prefixes, begin), builder.sub(finish, begin),
                                      node(element(roots, k)), stride, word, zero, zero, zero,
                                      builder.add(commitments, builder.mul(k, word)), row])
    builder.ret_void()


def _emit_fold(module: ir.Module) -> None:
    """``void fold(i64 levels, i64 groups, i64 leaves, i64 branch, i64 scratch, i64 state)``:
    serializer.sha's ``tree`` (each tree of ``leaves`` 32-byte nodes folded level by level in
    place, its root left in its first node) of ``groups`` times sixteen trees laid end to end at
    ``levels``, lane l of group g folding tree 16 g + l; ``branch`` addresses the one-byte prefix."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [_I64] * 6), name="fold")
    levels, groups, leaves, branch, scratch, state = fn.args
    builder = ir.IRBuilder(fn.append_basic_block())
    hash_pairs = module.get_global("hash_pairs")
    byte = ir.IntType(8)
    memcpy = module.declare_intrinsic("llvm.memcpy", [byte.as_pointer(), byte.as_pointer(), _I64])
    one, two, word = ir.Constant(_I64, 1), ir.Constant(_I64, 2), ir.Constant(_I64, 32)
    stride = builder.mul(leaves, word)   # one tree
    with _counted(builder, groups) as group:
        base = builder.add(levels, builder.mul(builder.mul(group, ir.Constant(_I64, LANES)), stride))
        # while count > 1: node i of the next level is written after nodes 2i and 2i+1 of this one
        # were read (all sixteen lanes staged first), and an odd last node moves up as it is.
        before, fn_ = builder.block, builder.function
        test, body, after = fn_.append_basic_block(), fn_.append_basic_block(), fn_.append_basic_block()
        builder.branch(test)
        builder.position_at_end(test)
        count = builder.phi(_I64)
        count.add_incoming(leaves, before)
        builder.cbranch(builder.icmp_signed(">", count, one), body, after)
        builder.position_at_end(body)
        half = builder.sdiv(count, two)
        with _counted(builder, half) as i:
            left = builder.add(base, builder.mul(i, ir.Constant(_I64, 64)))
            builder.call(hash_pairs, [state, scratch, branch, one, left, stride, word, builder.add(left, word), stride,
                                      word, builder.add(base, builder.mul(i, word)), stride])
        odd = builder.icmp_signed("!=", builder.srem(count, two), ir.Constant(_I64, 0))
        with builder.if_then(odd):
            with _counted(builder, ir.Constant(_I64, LANES)) as lane:
                tree = builder.add(base, builder.mul(lane, stride))
                source = builder.add(tree, builder.mul(builder.sub(count, one), word))
                dest = builder.add(tree, builder.mul(half, word))
                builder.call(memcpy, [builder.inttoptr(dest, byte.as_pointer()),
                                      builder.inttoptr(source, byte.as_pointer()), word, ir.Constant(ir.IntType(1), 0)])
        count.add_incoming(builder.add(half, builder.srem(count, two)), builder.block)
        builder.branch(test)
        builder.position_at_end(after)
    builder.ret_void()


def _leaf_message(builder: ir.IRBuilder, leaf: Any, chunk: Any) -> tuple[Any, Any, Any]:
    """For the leaves of ``chunk``-byte chunks (a multiple of 64, at least 128): the prefix byte (at
    address ``leaf``), the message's length in bits (big-endian) and the count of its middle
    blocks, those read where they lie (the prefix shifts the chunk by a byte: ``chunk / 64 - 1``)."""
    swap64 = builder.module.declare_intrinsic("llvm.bswap", [_I64])
    one, sixty_four = ir.Constant(_I64, 1), ir.Constant(_I64, 64)
    prefix = builder.load(builder.inttoptr(leaf, ir.IntType(8).as_pointer()))
    bits = builder.call(swap64, [builder.mul(builder.add(chunk, one), ir.Constant(_I64, 8))])
    return prefix, bits, builder.sub(builder.udiv(chunk, sixty_four), one)


def _stage_ends(builder: ir.IRBuilder, source: Any, stage: Any, chunk: Any, prefix: Any, bits: Any) -> None:
    """A leaf message's first block at ``stage`` (the prefix and the first 63 bytes of the chunk at
    ``source``) and its last 64 bytes on (the chunk's last byte and the padding, ``bits`` long)."""
    byte = ir.IntType(8)
    memcpy = builder.module.declare_intrinsic("llvm.memcpy", [byte.as_pointer(), byte.as_pointer(), _I64])

    def at(address: Any) -> Any:
        return builder.inttoptr(address, byte.as_pointer())

    def n(v: int) -> ir.Constant:
        return ir.Constant(_I64, v)

    builder.store(prefix, at(stage))
    builder.call(memcpy, [at(builder.add(stage, n(1))), at(source), n(63), ir.Constant(ir.IntType(1), 0)])
    builder.store(builder.load(at(builder.add(source, builder.sub(chunk, n(1))))), at(builder.add(stage, n(64))))
    _pad(builder, builder.add(stage, n(65)), builder.add(stage, n(120)), bits)


def _emit_chunk_leaves(module: ir.Module) -> None:
    """``void chunk_leaves(i64 body, i64 chunk, i64 groups, i64 leaf, i64 out, i64 scratch, i64
    state)``: the leaves (SHA-256 of the one-byte prefix at ``leaf`` and the chunk) of ``groups``
    times sixteen chunks of ``chunk`` bytes laid end to end at ``body``, lane l of group g hashing
    chunk 16 g + l, written 32 bytes each from ``out``.  ``chunk`` is a multiple of 64, at least
    128: a leaf's message is then its first block (the prefix and 63 bytes), ``chunk / 64 - 1``
    blocks read where they lie in the body, and a last block of one byte and the padding.  Only
    the first and last blocks are staged, in ``scratch`` (sixteen of each): copying whole chunks
    first, as ``hash_leaves`` does, cost a large body a third more."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [_I64] * 7), name="chunk_leaves")
    body, chunk, groups, leaf, out, scratch, state = fn.args
    builder = ir.IRBuilder(fn.append_basic_block())
    compress, digests = module.get_global("compress"), module.get_global("digests")

    def n(v: int) -> ir.Constant:
        return ir.Constant(_I64, v)

    prefix, bits, middle = _leaf_message(builder, leaf, chunk)
    with _counted(builder, groups) as group:
        first = builder.add(body, builder.mul(builder.mul(group, n(LANES)), chunk))
        with _counted(builder, n(LANES)) as lane:
            _stage_ends(builder, builder.add(first, builder.mul(lane, chunk)),
                        builder.add(scratch, builder.mul(lane, n(128))), chunk, prefix, bits)
        _initial_state(builder, state)
        builder.call(compress, [state, scratch, n(128), n(1)])
        builder.call(compress, [state, builder.add(first, n(63)), chunk, middle])
        builder.call(compress, [state, builder.add(scratch, n(64)), n(128), n(1)])
        builder.call(digests, [builder.add(out, builder.mul(group, n(32 * LANES))), n(32), state])
    builder.ret_void()


_V4 = ir.VectorType(_I32, 4)
STREAMS = 4
# The state of one stream as the SHA extensions keep it: (F, E, B, A) and (H, G, D, C), lowest word first.
_NI_H0 = ([_H0[5], _H0[4], _H0[1], _H0[0]], [_H0[7], _H0[6], _H0[3], _H0[2]])


def _emit_ni_compress(module: ir.Module) -> None:
    """``void ni_compress(i64 state, i64 m0, i64 m1, i64 m2, i64 m3, i64 blocks)``: SHA-256's
    compression of ``blocks`` (at least one) 64-byte blocks of four messages (stream s's at
    ``m<s>``, its blocks laid end to end) into ``state`` (eight vectors: stream s's two at 32 s, as
    ``_NI_H0`` lays them out), through the CPU's SHA extensions.  Four independent streams in one
    instruction stream because a round's result is the next round's input: one stream waits for
    each ``sha256rnds2`` in turn, several keep the unit busy.  On an AMD EPYC Zen 3, a C loop of the
    same instructions hashed 1.5 GB/s one stream alone and 3.0 four at once; this code 2.6, against
    libcrypto's 1.4 (two streams: 2.2-2.6; five or six: no faster than four)."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [_I64] * (STREAMS + 2)), name="ni_compress")
    state, *messages, blocks = fn.args
    entry, body, done = fn.append_basic_block("entry"), fn.append_basic_block("block"), fn.append_basic_block("done")
    builder = ir.IRBuilder(entry)
    rounds = ir.Function(module, ir.FunctionType(_V4, [_V4] * 3), "llvm.x86.sha256rnds2")
    message1 = ir.Function(module, ir.FunctionType(_V4, [_V4] * 2), "llvm.x86.sha256msg1")
    message2 = ir.Function(module, ir.FunctionType(_V4, [_V4] * 2), "llvm.x86.sha256msg2")
    bswap = ir.Function(module, ir.FunctionType(_V4, [_V4]), "llvm.bswap.v4i32")
    vectors = builder.inttoptr(state, _V4.as_pointer())
    slots = [builder.gep(vectors, [ir.Constant(_I32, i)]) for i in range(2 * STREAMS)]
    loaded = [builder.load(slot, align=4) for slot in slots]
    builder.branch(body)
    builder.position_at_end(body)
    index = builder.phi(_I64)
    index.add_incoming(ir.Constant(_I64, 0), entry)
    phis = []
    for v in loaded:
        phi = builder.phi(_V4)
        phi.add_incoming(v, entry)
        phis.append(phi)
    abef, cdgh = phis[0::2], phis[1::2]
    offset = builder.mul(index, ir.Constant(_I64, 64))
    blocks_at = [builder.add(m, offset) for m in messages]
    schedule: list[list[Any]] = [[] for _ in range(STREAMS)]
    for q in range(16):   # four rounds a step, each stream in turn
        k = ir.Constant(_V4, [_word(v) for v in _K[4 * q:4 * q + 4]])
        for s in range(STREAMS):
            w = schedule[s]
            if q < 4:   # the block's words, big-endian
                at = builder.inttoptr(builder.add(blocks_at[s], ir.Constant(_I64, 16 * q)), _V4.as_pointer())
                word = builder.call(bswap, [builder.load(at, align=1)])
            else:
                word = builder.call(message1, [w[q - 4], w[q - 3]])
                word = builder.add(word, builder.shuffle_vector(w[q - 2], w[q - 1], _indices([1, 2, 3, 4])))
                word = builder.call(message2, [word, w[q - 1]])
            w.append(word)
            keyed = builder.add(word, k)
            cdgh[s] = builder.call(rounds, [cdgh[s], abef[s], keyed])
            upper = builder.shuffle_vector(keyed, keyed, _indices([2, 3, 0, 0]))
            abef[s] = builder.call(rounds, [abef[s], cdgh[s], upper])
    added = [builder.add(new, old) for s in range(STREAMS) for new, old in ((abef[s], phis[2 * s]),
                                                                             (cdgh[s], phis[2 * s + 1]))]
    for phi, v in zip(phis, added):
        phi.add_incoming(v, body)
    following = builder.add(index, ir.Constant(_I64, 1))
    index.add_incoming(following, body)
    builder.cbranch(builder.icmp_signed("<", following, blocks), body, done)
    builder.position_at_end(done)
    for slot, v in zip(slots, added):
        builder.store(v, slot, align=4)
    builder.ret_void()


def _emit_ni_leaves(module: ir.Module) -> None:
    """``void ni_leaves(i64 body, i64 chunk, i64 groups, i64 leaf, i64 out, i64 scratch, i64
    state)``: ``chunk_leaves`` four chunks at a time through ``ni_compress``: stream s of group g
    hashes chunk 4 g + s.  The same staging: each stream's first and last blocks in ``scratch``
    (128 bytes a stream), its middle blocks read where they lie."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [_I64] * 7), name="ni_leaves")
    body, chunk, groups, leaf, out, scratch, state = fn.args
    builder = ir.IRBuilder(fn.append_basic_block())
    eight = ir.VectorType(_I32, 8)
    bswap8 = ir.Function(module, ir.FunctionType(eight, [eight]), "llvm.bswap.v8i32")
    compress = module.get_global("ni_compress")

    def n(v: int) -> ir.Constant:
        return ir.Constant(_I64, v)

    prefix, bits, middle = _leaf_message(builder, leaf, chunk)
    vectors = builder.inttoptr(state, _V4.as_pointer())
    with _counted(builder, groups) as group:
        first = builder.add(body, builder.mul(builder.mul(group, n(STREAMS)), chunk))
        sources = [builder.add(first, builder.mul(n(s), chunk)) for s in range(STREAMS)]
        staged = [builder.add(scratch, n(128 * s)) for s in range(STREAMS)]
        for source, stage in zip(sources, staged):
            _stage_ends(builder, source, stage, chunk, prefix, bits)
        for i in range(2 * STREAMS):
            builder.store(ir.Constant(_V4, [_word(int(v)) for v in _NI_H0[i % 2]]),
                          builder.gep(vectors, [ir.Constant(_I32, i)]), align=4)
        builder.call(compress, [state, *staged, n(1)])
        builder.call(compress, [state, *[builder.add(source, n(63)) for source in sources], middle])
        builder.call(compress, [state, *[builder.add(stage, n(64)) for stage in staged], n(1)])
        for s in range(STREAMS):
            abef = builder.load(builder.gep(vectors, [ir.Constant(_I32, 2 * s)]), align=4)
            cdgh = builder.load(builder.gep(vectors, [ir.Constant(_I32, 2 * s + 1)]), align=4)
            words = builder.shuffle_vector(abef, cdgh, _indices([3, 2, 7, 6, 1, 0, 5, 4]))   # A to H
            digest = builder.add(out, builder.mul(builder.add(builder.mul(group, n(STREAMS)), n(s)), n(32)))
            builder.store(builder.call(bswap8, [words]), builder.inttoptr(digest, eight.as_pointer()), align=1)
    builder.ret_void()


def _machine_code() -> tuple[Any, Any, Any, Any] | None:
    """``bulk``, ``fold`` and ``chunk_leaves`` compiled by LLVM for this CPU, as ctypes functions, and the engine
    that owns their code (kept alive with them); None where LLVM cannot.  Straight through llvmlite, not numba: it
    takes 0.3 s, and numba spent 4.6 s optimizing the same code again in each of its callers."""
    try:
        from llvmlite import binding
        module = ir.Module(name="cvmvm_sha_lanes")
        _emit_compress(module)
        _emit_digests(module)
        _emit_hash_lanes(module, "hash_leaves", (1, None, 0))      # 0x00 || chunk
        _emit_hash_lanes(module, "hash_pairs", (1, 32, 32))        # 0x01 || left || right
        _emit_hash_lanes(module, "hash_roots", (None, 32, 0))      # tag || type || chunk root
        _emit_bulk(module)
        _emit_fold(module)
        _emit_chunk_leaves(module)
        engine = _engine(binding, module)
        bulk = ctypes.CFUNCTYPE(None, *[ctypes.c_int64] * 17)(engine.get_function_address("bulk"))
        fold = ctypes.CFUNCTYPE(None, *[ctypes.c_int64] * 6)(engine.get_function_address("fold"))
        chunk_leaves = ctypes.CFUNCTYPE(None, *[ctypes.c_int64] * 7)(engine.get_function_address("chunk_leaves"))
    except Exception:   # llvmlite's errors (RuntimeError, its own) have no common base: none here
        return None
    return bulk, fold, chunk_leaves, engine


def _engine(binding: Any, module: ir.Module) -> Any:
    """``module`` compiled by LLVM for this CPU, its code ready to call."""
    binding.initialize_native_target()
    binding.initialize_native_asmprinter()
    machine = binding.Target.from_default_triple().create_target_machine(
        cpu=binding.get_host_cpu_name(), features=binding.get_host_cpu_features().flatten(), opt=2,
        codemodel="jitdefault")
    parsed = binding.parse_assembly(str(module))
    parsed.verify()
    engine = binding.create_mcjit_compiler(parsed, machine)
    engine.finalize_object()
    return engine


class Lanes(NamedTuple):
    """The compiled hasher's work on many items alike, sixteen at a time; each returns how many
    items (a multiple of sixteen) it did, and leaves the rest to libcrypto."""

    commit: Callable[[BulkPlan, np.ndarray, int, int, np.ndarray], int]
    fold: Callable[[np.ndarray], int]
    leaves: Callable[[np.ndarray, int, np.ndarray], int]
    engine: Any             # owns the compiled code: it lives as long as these functions
    prefixes: np.ndarray    # the leaf and inner prefixes the code reads


def compile_lanes(leaf: bytes, inner: bytes) -> Lanes | None:
    """The lanes' functions, compiled by LLVM for this CPU (about 0.4 s); None where it cannot:

    - ``commit(plan, buffer, size, count, out)``: serializer.sha's ``bulk`` (a BulkPlan's
      commitments of items whose bodies lie ``size`` bytes apart in ``buffer``, written to ``out``:
      uint8, contiguous) for the first items, a multiple of sixteen;
    - ``fold(levels)``: serializer.sha's ``tree`` of the first trees of ``levels`` (uint8, shape
      (trees, leaves, 32), C order), a multiple of sixteen, each folded in place to its root;
    - ``leaves(body, size, nodes)``: serializer.sha's ``leaves`` (the chunk leaves of ``body``, cut
      into ``size``-byte chunks, written to ``nodes``: uint8, contiguous) for its first whole
      chunks, a multiple of sixteen; none unless ``size`` is a multiple of 64, at least 128."""
    code = _machine_code()
    if code is None:
        return None
    bulk, fold, chunk_leaves, engine = code
    prefixes = np.frombuffer(leaf + inner, dtype=np.uint8).copy()
    leaf_at, inner_at = prefixes.ctypes.data, prefixes.ctypes.data + len(leaf)

    def commit(plan: BulkPlan, buffer: np.ndarray, size: int, count: int, out: np.ndarray) -> int:
        done = count - count % LANES
        if not done:
            return 0
        chunks, pairs, roots, spans = (np.ascontiguousarray(a, dtype=np.int64)
                                       for a in (plan.chunks, plan.pairs, plan.roots, plan.spans))
        heads = np.ascontiguousarray(plan.prefixes, dtype=np.uint8)
        # Compiled code reads and writes whatever it is given: every extent checked here first.
        leaves = len(chunks)
        if not (buffer.dtype == out.dtype == np.uint8 and buffer.flags.c_contiguous and out.flags.c_contiguous
                and leaves and chunks.shape == (leaves, 2) and pairs.shape == (len(pairs), 2)
                and roots.shape == (len(roots),) and spans.shape == (len(roots) + 1,) and size >= 0
                and 0 <= chunks.min() and (chunks[:, 0] <= chunks[:, 1]).all() and chunks.max() <= size
                and (not len(pairs) or (0 <= pairs.min() and pairs.max() < leaves + len(pairs)))
                and (not len(roots) or (0 <= roots.min() and roots.max() < leaves + len(pairs)))
                and spans[0] == 0 and (np.diff(spans) >= 0).all() and spans[-1] <= heads.size
                and buffer.size >= (done - 1) * size + int(chunks.max()) and out.size >= 32 * len(roots) * done):
            raise InternalError("hash", "a bulk plan's chunks, nodes and prefixes within their buffers")
        longest = max(len(leaf) + int((chunks[:, 1] - chunks[:, 0]).max()), len(inner) + 64,
                      int(np.diff(spans).max()) + 32 if len(roots) else 0)
        # Named, every one: an array the call only has the address of must outlive the call.
        nodes, scratch, state = np.empty(LANES * 32 * (leaves + len(pairs)), dtype=np.uint8), _scratch(longest), \
            np.empty(8 * LANES, dtype=np.uint32)
        bulk(buffer.ctypes.data, size, done // LANES, chunks.ctypes.data, leaves, pairs.ctypes.data, len(pairs),
             roots.ctypes.data, len(roots), heads.ctypes.data, spans.ctypes.data, nodes.ctypes.data, out.ctypes.data,
             leaf_at, inner_at, scratch.ctypes.data, state.ctypes.data)
        return done

    def fold_trees(levels: np.ndarray) -> int:
        trees, leaves, width = levels.shape
        done = trees - trees % LANES
        if not done:
            return 0
        if levels.dtype != np.uint8 or width != 32 or leaves < 1 or not levels.flags.c_contiguous:
            raise InternalError("hash", "trees of 32-byte leaves, at least one each, in one C-ordered uint8 array")
        scratch, state = _scratch(len(inner) + 64), np.empty(8 * LANES, dtype=np.uint32)
        fold(levels.ctypes.data, done // LANES, leaves, inner_at, scratch.ctypes.data, state.ctypes.data)
        return done

    return Lanes(commit, fold_trees, _body_leaves(chunk_leaves, LANES, leaf_at), engine, prefixes)


def _body_leaves(compiled: Callable[..., None], group: int,
                 leaf_at: int) -> Callable[[np.ndarray, int, np.ndarray], int]:
    """``leaves(body, size, nodes)``: the leaves of ``body``'s first whole chunks, a multiple of
    ``group``, through ``compiled`` (``chunk_leaves`` or ``ni_leaves``, ``group`` chunks a call, the
    leaf prefix at ``leaf_at``), written to ``nodes``; how many it did: none unless ``size`` is a
    multiple of 64, at least 128 (each leaf's message then has whole middle blocks)."""

    def leaves(body: np.ndarray, size: int, nodes: np.ndarray) -> int:
        if size < 128 or size % 64:
            return 0
        done = body.size // size // group * group
        if not done:
            return 0
        if not (body.dtype == nodes.dtype == np.uint8 and body.ndim == nodes.ndim == 1 and body.flags.c_contiguous
                and nodes.flags.c_contiguous and nodes.size >= 32 * done):
            raise InternalError("hash", "a body and its leaves, contiguous bytes, room for a leaf a chunk")
        scratch, state = np.empty(2 * 64 * group, dtype=np.uint8), np.empty(8 * group, dtype=np.uint32)
        compiled(body.ctypes.data, size, done // group, leaf_at, nodes.ctypes.data, scratch.ctypes.data,
                 state.ctypes.data)
        return done

    return leaves


class Streams(NamedTuple):
    """A body's chunk leaves four at a time through the CPU's SHA extensions (``ni_leaves``)."""

    leaves: Callable[[np.ndarray, int, np.ndarray], int]
    engine: Any             # owns the compiled code: it lives as long as ``leaves``
    prefix: np.ndarray      # the leaf prefix the code reads


def compile_streams(leaf: bytes) -> Streams | None:
    """``leaves(body, size, nodes)`` as ``Lanes.leaves``, but for the first whole chunks in a
    multiple of four, through the SHA extensions, compiled by LLVM for this CPU; None where it
    cannot (a CPU without them: ``sha_here``)."""
    try:
        from llvmlite import binding
        module = ir.Module(name="cvmvm_sha_streams")
        _emit_ni_compress(module)
        _emit_ni_leaves(module)
        engine = _engine(binding, module)
        ni_leaves = ctypes.CFUNCTYPE(None, *[ctypes.c_int64] * 7)(engine.get_function_address("ni_leaves"))
    except Exception:   # llvmlite's errors (RuntimeError, its own) have no common base: none here
        return None
    prefix = np.frombuffer(leaf, dtype=np.uint8).copy()
    return Streams(_body_leaves(ni_leaves, STREAMS, prefix.ctypes.data), engine, prefix)


def _scratch(longest: int) -> np.ndarray:
    """Room for sixteen padded messages of at most ``longest`` bytes."""
    return np.empty(LANES * 64 * ((longest + 8) // 64 + 1), dtype=np.uint8)


def fast_here() -> bool:
    """Whether this CPU has 512-bit vectors, where sixteen lanes beat libcrypto's SHA-NI (and is
    little-endian, as the words' byte swaps assume; every such CPU is)."""
    return _has("avx512f", "avx512vl")


def sha_here() -> bool:
    """Whether this CPU has the SHA extensions (x86's SHA-NI), which ``compile_streams`` needs (and
    is little-endian, as every such CPU is)."""
    return _has("sha", "ssse3")


def streams_first() -> bool:
    """Whether a body's chunks go faster through the SHA-NI streams than in the lanes on this CPU,
    decided by its kind, never by a timing (which would differ run to run): on AMD's Zen (LLVM's
    ``znver``), whose SHA-NI is fast and whose AVX-512 runs on 256-bit units, a Zen 4 took 0.30 ms
    a MiB so against the lanes' 0.37; Intel Xeons 0.70 against 0.42 and 0.56 against 0.33
    (docs/BENCHMARKS.md, 2026-12-01 and 2026-12-02).  A Zen without AVX-512 has no lanes to
    weigh: its streams were the only fast way already."""
    host = _host_cpu()   # a CPU LLVM cannot name: the lanes, as on every CPU not named here
    return host is not None and host[0].startswith("znver") and sha_here()


def _has(*wanted: str) -> bool:
    """Whether this CPU is little-endian and LLVM names every feature ``wanted`` on it."""
    host = _host_cpu()
    return host is not None and sys.byteorder == "little" and all(host[1].get(name) for name in wanted)


def _host_cpu() -> tuple[str, Any] | None:
    """LLVM's name of this CPU and its features, or None where llvmlite cannot tell (llvmlite
    without the queries, or a CPU it cannot name): such a CPU is not known to have anything."""
    try:
        from llvmlite import binding
        return binding.get_host_cpu_name(), binding.get_host_cpu_features()
    except Exception:   # llvmlite's errors (RuntimeError, its own) have no common base
        return None

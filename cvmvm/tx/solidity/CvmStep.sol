// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

/// @title CvmStep: checks one element proof of cvmvm (docs/FORMAT.md sections 9 and 10).
/// @notice verify() returns only when every byte of the proof is authenticated against the
/// program root, the input commitment and the trace root, and the element the trace commits to
/// differs from the element re-executed here with cvmvm's integer semantics.  Anything else
/// reverts with a reason (section 10.4), "step correct" included.
contract CvmStep {
    uint256 internal constant CHUNK = 4096;        // the chunks of a body longer than this
    uint256 internal constant SMALL_CHUNK = 256;   // the chunks of a body of at most CHUNK bytes
    int256 internal constant INT32_MIN = -2147483648;

    // Op codes: indices in isa/table.py's OPS (the ISA version of the native format).
    uint256 internal constant RELU = 0;
    uint256 internal constant ABS = 1;
    uint256 internal constant NEGATIVE = 2;
    uint256 internal constant CVM_PRECISION = 3;
    uint256 internal constant ELEMWISE_ADD = 4;
    uint256 internal constant ELEMWISE_SUB = 5;
    uint256 internal constant CLIP = 6;
    uint256 internal constant CVM_CLIP = 7;
    uint256 internal constant CVM_RIGHT_SHIFT = 8;
    uint256 internal constant CVM_LEFT_SHIFT = 9;
    uint256 internal constant BROADCAST_ADD = 10;
    uint256 internal constant BROADCAST_SUB = 11;
    uint256 internal constant BROADCAST_MUL = 12;
    uint256 internal constant BROADCAST_DIV = 13;
    uint256 internal constant BROADCAST_MAX = 14;
    uint256 internal constant BROADCAST_GREATER = 15;
    uint256 internal constant SUM = 17;
    uint256 internal constant MAX = 18;
    uint256 internal constant CONV2D = 19;
    uint256 internal constant DENSE = 20;
    uint256 internal constant MAX_POOL2D = 21;
    uint256 internal constant FLATTEN = 25;
    uint256 internal constant EXPAND_DIMS = 27;
    uint256 internal constant RESHAPE = 28;
    uint256 internal constant SQUEEZE = 29;

    /// A tensor's static facts, read from the instruction record.  tensorType and newOperands
    /// write the fields through their memory offsets (a memory struct holds one word per member,
    /// in this order; dims is a pointer to its six words): keep the order.
    struct Tensor {
        uint256 id;
        uint256 dtype;
        uint256 prec;
        uint256 ndim;
        uint256[6] dims;
        uint256 size;
        uint256 lane;
        bool channelLast;
        uint256 body;       // bytes of its committed body
        uint256 chunk;      // its chunk size
        uint256 nchunks;
        uint256 typeAt;     // calldata offset of its `type` bytes in the record
        uint256 typeLen;
        uint256 param;      // a param operand: calldata offset of its commitment in the record; else 0
    }

    /// An operand or result: its type and the chunks the proof carries.
    struct Operand {
        Tensor t;
        uint256[] index;    // chunk indices, ascending
        uint256[] data;     // calldata offset of each chunk's bytes
    }

    /// The first leaf a proof opens in a tree, with its full audit path: every later leaf's path is
    /// shared with it (FORMAT.md section 9).
    struct First {
        bytes32 leaf;
        uint256 index;
        uint256 path;       // calldata offset of its audit path
    }

    /// A read position in calldata and the end of the proof.
    struct Cur {
        uint256 p;
        uint256 end;
    }

    /// Everything verify() authenticates along the way.
    struct Ctx {
        uint256 inputs;     // I, P, N, H, T: the program root's counts
        uint256 params;
        uint256 instrs;
        uint256 heads;
        uint256 tensors;
        uint256 step;
        uint256 element;
        uint256 op;
        uint256 attrs;      // calldata offset of the record's attributes
        uint256 recordEnd;
        uint256 countsAt;   // calldata offset of the counts: u32le I, P, N, H, T, as the root preimages hold them
        uint256 inputList;  // calldata offset of the I input commitments
        uint256 record;     // calldata offset and length of the instruction record
        uint256 recordLen;
        bytes32 programTree;
        bytes32 traceTree;
        bool traceSeen;
        First trace;        // the first trace leaf of the proof, which every later trace path joins
        bool int32s;        // every operand and result 0 is int32 (the contract computes nothing else)
        bool inputOperand;  // an operand is a model input: the proof carries the input commitments
    }

    // -- reading the proof ------------------------------------------------------------------

    function take(Cur memory c, uint256 n) internal pure returns (uint256 off) {
        unchecked {
            off = c.p;
            require(n <= c.end - off, "proof: truncated");
            c.p = off + n;
        }
    }

    function u8(Cur memory c) internal pure returns (uint256 v) {
        uint256 off = take(c, 1);
        assembly { v := byte(0, calldataload(off)) }
    }

    function u32(Cur memory c) internal pure returns (uint256 v) {
        uint256 off = take(c, 4);
        assembly {
            let w := calldataload(off)
            v := or(or(byte(0, w), shl(8, byte(1, w))), or(shl(16, byte(2, w)), shl(24, byte(3, w))))
        }
    }

    /// i64le as a signed integer.
    function i64(Cur memory c) internal pure returns (int256 v) {
        uint256 off = take(c, 8);
        assembly {
            let w := calldataload(off)
            let lo := or(or(byte(0, w), shl(8, byte(1, w))), or(shl(16, byte(2, w)), shl(24, byte(3, w))))
            let hi := or(or(byte(4, w), shl(8, byte(5, w))), or(shl(16, byte(6, w)), shl(24, byte(7, w))))
            v := signextend(7, or(lo, shl(32, hi)))
        }
    }

    /// u8 m || m x bytes32: the hashes' offset and count.
    function hashes(Cur memory c) internal pure returns (uint256 off, uint256 m) {
        unchecked {
            uint256 pos = c.p;
            require(pos < c.end, "proof: truncated");
            assembly { m := byte(0, calldataload(pos)) }
            require(m <= 32, "proof: counts");
            off = take(c, 1 + 32 * m) + 1;
        }
    }

    function word(uint256 off) internal pure returns (bytes32 w) {
        assembly { w := calldataload(off) }
    }

    /// The word's eight u32le lanes (bytes 4k .. 4k+3) each turned big-endian: lane k is then
    /// (v >> (224 - 32k)) & 0xffffffff.  The bytes of each 16-bit half are swapped, then the
    /// halves of each lane.
    function lanes32(uint256 v) internal pure returns (uint256) {
        unchecked {
            uint256 m8 = 0x00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff;
            v = ((v & m8) << 8) | ((v >> 8) & m8);
            uint256 m16 = 0x0000ffff0000ffff0000ffff0000ffff0000ffff0000ffff0000ffff0000ffff;
            return ((v & m16) << 16) | ((v >> 16) & m16);
        }
    }

    /// The u32le at byte i of a word.
    function le4(uint256 w, uint256 i) internal pure returns (uint256 v) {
        assembly {
            v := or(or(byte(i, w), shl(8, byte(add(i, 1), w))), or(shl(16, byte(add(i, 2), w)), shl(24, byte(add(i, 3), w))))
        }
    }

    function le32(uint256 v) internal pure returns (bytes4) {
        return bytes4(uint32(((v & 0xff) << 24) | (((v >> 8) & 0xff) << 16) | (((v >> 16) & 0xff) << 8) | ((v >> 24) & 0xff)));
    }

    // -- hashing ----------------------------------------------------------------------------

    /// SHA-256(0x00 || calldata[off .. off + n)): a leaf.
    function leafAt(uint256 off, uint256 n) internal view returns (bytes32 h) {
        assembly {
            let p := mload(0x40)
            mstore8(p, 0)
            calldatacopy(add(p, 1), off, n)
            if iszero(staticcall(gas(), 2, p, add(n, 1), p, 32)) { revert(0, 0) }
            h := mload(p)
        }
    }

    /// The root an audit path implies (RFC 9162 section 2.1.3.2); the path must have exactly the
    /// length (index, count) needs.
    function climb(bytes32 leaf, uint256 index, uint256 count, uint256 off, uint256 m)
        internal view returns (bytes32 r)
    {
        // Every caller has checked index < count: a path is then exact or refused here.
        bool ok = true;
        assembly {
            let fn := index
            let sn := sub(count, 1)
            r := leaf
            // p: 0x01, then the left and the right node; SHA-256 writes its output over the left
            // one, where the byte 0x01 before it stays.
            let p := mload(0x40)
            mstore8(p, 1)
            let left := add(p, 1)
            let right := add(p, 33)
            for { let end := add(off, shl(5, m)) } lt(off, end) { off := add(off, 32) } {
                if iszero(sn) { ok := 0 break }
                switch or(and(fn, 1), eq(fn, sn))
                case 0 {
                    mstore(left, r)
                    mstore(right, calldataload(off))
                }
                default {
                    mstore(left, calldataload(off))
                    mstore(right, r)
                    if iszero(and(fn, 1)) {
                        for {} and(iszero(and(fn, 1)), gt(fn, 0)) {} { fn := shr(1, fn) sn := shr(1, sn) }
                    }
                }
                if iszero(staticcall(gas(), 2, p, 65, left, 32)) { revert(0, 0) }
                r := mload(left)
                fn := shr(1, fn)
                sn := shr(1, sn)
            }
            if sn { ok := 0 }
        }
        require(ok, "proof: path length");
    }

    /// Leaf ``index``'s ancestor ``levels`` levels up from the path's entries below it (a level
    /// where the node has no sibling takes none); the path must have exactly those entries.
    function climbLevels(bytes32 leaf, uint256 index, uint256 count, uint256 off, uint256 m, uint256 levels)
        internal view returns (bytes32 r)
    {
        bool ok;
        assembly {
            let fn := index
            let sn := sub(count, 1)
            r := leaf
            let p := mload(0x40)
            mstore8(p, 1)
            let left := add(p, 1)
            let end := add(off, shl(5, m))
            for {} levels { levels := sub(levels, 1) } {
                if or(and(fn, 1), lt(fn, sn)) {
                    if iszero(lt(off, end)) { break }
                    switch and(fn, 1)
                    case 0 {
                        mstore(left, r)
                        mstore(add(p, 33), calldataload(off))
                    }
                    default {
                        mstore(left, calldataload(off))
                        mstore(add(p, 33), r)
                    }
                    if iszero(staticcall(gas(), 2, p, 65, left, 32)) { revert(0, 0) }
                    r := mload(left)
                    off := add(off, 32)
                }
                fn := shr(1, fn)
                sn := shr(1, sn)
            }
            ok := and(iszero(levels), eq(off, end))
        }
        require(ok, "proof: path length");
    }

    /// How many of the levels under ``below`` give leaf ``index``'s ancestor a sibling: where the
    /// entry of that level sits in its audit path.
    function siblingLevels(uint256 index, uint256 count, uint256 below) internal pure returns (uint256 k) {
        assembly {
            let sn := sub(count, 1)
            for {} below { below := sub(below, 1) } {
                k := add(k, or(and(index, 1), lt(index, sn)))
                index := shr(1, index)
                sn := shr(1, sn)
            }
        }
    }

    /// Whether leaf ``index`` with its shared path is in the tree that the first leaf and its
    /// full path give: its ancestor below the level where the two meet must be the first path's
    /// entry at that level (the same leaf again: the same value, and no path).
    function joins(First memory f, bytes32 leaf, uint256 index, uint256 count, uint256 off, uint256 m)
        internal view returns (bool)
    {
        unchecked {
            uint256 first = f.index;
            if (index == first) return leaf == f.leaf && m == 0;
            uint256 below = 0;
            for (uint256 v = index ^ first; v > 1; v >>= 1) below++;
            bytes32 node = climbLevels(leaf, index, count, off, m, below);
            return node == word(f.path + 32 * siblingLevels(first, count, below));
        }
    }

    /// SHA-256("cvmvm/tensor/v3" || 0x00 || type || chunk root).
    function commitment(Tensor memory t, bytes32 chunkRoot) internal view returns (bytes32 h) {
        uint256 off = t.typeAt;
        uint256 n = t.typeLen;
        assembly {
            let p := mload(0x40)
            mstore(p, "cvmvm/tensor/v3")           // 15 bytes, then the 0x00 separator
            mstore8(add(p, 15), 0)
            calldatacopy(add(p, 16), off, n)
            mstore(add(add(p, 16), n), chunkRoot)
            if iszero(staticcall(gas(), 2, p, add(48, n), p, 32)) { revert(0, 0) }
            h := mload(p)
        }
    }

    /// SHA-256("cvmvm/program/v3" || 0x00 || u32le I, P, N, H, T || tree): the counts as the proof holds them.
    function programRootOf(Ctx memory x, bytes32 tree) internal view returns (bytes32 h) {
        uint256 pos = x.countsAt;
        assembly {
            let p := mload(0x40)
            mstore(p, "cvmvm/program/v3")          // 16 bytes, then the 0x00 separator
            mstore8(add(p, 16), 0)
            calldatacopy(add(p, 17), pos, 20)
            mstore(add(p, 37), tree)
            if iszero(staticcall(gas(), 2, p, 69, p, 32)) { revert(0, 0) }
            h := mload(p)
        }
    }

    /// SHA-256("cvmvm/trace/v3" || 0x00 || program root || input commitment || u32le T || trace tree).
    function traceRootOf(Ctx memory x, bytes32 programRoot, bytes32 inputCommitment) internal view returns (bytes32 h) {
        uint256 pos = x.countsAt + 16;
        bytes32 tree = x.traceTree;
        assembly {
            let p := mload(0x40)
            mstore(p, "cvmvm/trace/v3")            // 14 bytes, then the 0x00 separator
            mstore8(add(p, 14), 0)
            mstore(add(p, 15), programRoot)
            mstore(add(p, 47), inputCommitment)
            calldatacopy(add(p, 79), pos, 4)
            mstore(add(p, 83), tree)
            if iszero(staticcall(gas(), 2, p, 115, p, 32)) { revert(0, 0) }
            h := mload(p)
        }
    }

    // -- the record ---------------------------------------------------------------------------

    /// u32le tensor || type into ``t``: the tensor id, then u8 dtype, u8 precision, u8 ndim and the
    /// u32le dims (at most 6).
    function tensorType(Cur memory c, uint256 tensors, Tensor memory t) internal pure {
        uint256 off = c.p;
        uint256 ndim;
        assembly { ndim := byte(6, calldataload(off)) }
        unchecked {
            require(ndim - 1 < 6, "proof: record");
            take(c, 7 + 4 * ndim);
        }
        bool ok;
        assembly {
            let w := calldataload(off)
            let id := or(or(byte(0, w), shl(8, byte(1, w))), or(shl(16, byte(2, w)), shl(24, byte(3, w))))
            let dtype := byte(4, w)
            let prec := byte(5, w)
            ok := and(lt(id, tensors), and(lt(sub(dtype, 1), 7), lt(prec, 33)))
            mstore(t, id)
            mstore(add(t, 0x20), dtype)
            mstore(add(t, 0x40), prec)
            mstore(add(t, 0x60), ndim)
            mstore(add(t, 0x160), add(off, 4))              // typeAt
            mstore(add(t, 0x180), add(3, shl(2, ndim)))     // typeLen
            // The dims: every u32le of the word turned big-endian at once (the bytes of each
            // 16-bit half swapped, then the halves of each 32-bit lane), then read from the top.
            let v := calldataload(add(off, 7))
            let m8 := 0x00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff
            v := or(shl(8, and(v, m8)), and(shr(8, v), m8))
            let m16 := 0x0000ffff0000ffff0000ffff0000ffff0000ffff0000ffff0000ffff0000ffff
            v := or(shl(16, and(v, m16)), and(shr(16, v), m16))
            let dims := mload(add(t, 0x80))
            let d := shr(224, v)
            ok := and(ok, lt(sub(d, 1), 0x1000000))         // 1 <= d <= 2^24
            mstore(dims, d)
            let size := d
            if gt(ndim, 1) {
                d := and(shr(192, v), 0xffffffff)
                ok := and(ok, lt(sub(d, 1), 0x1000000))
                mstore(add(dims, 0x20), d)
                size := mul(size, d)
            }
            if gt(ndim, 2) {
                d := and(shr(160, v), 0xffffffff)
                ok := and(ok, lt(sub(d, 1), 0x1000000))
                mstore(add(dims, 0x40), d)
                size := mul(size, d)
            }
            if gt(ndim, 3) {
                d := and(shr(128, v), 0xffffffff)
                ok := and(ok, lt(sub(d, 1), 0x1000000))
                mstore(add(dims, 0x60), d)
                size := mul(size, d)
            }
            if gt(ndim, 4) {
                d := and(shr(96, v), 0xffffffff)
                ok := and(ok, lt(sub(d, 1), 0x1000000))
                mstore(add(dims, 0x80), d)
                size := mul(size, d)
            }
            if gt(ndim, 5) {
                d := and(shr(64, v), 0xffffffff)
                ok := and(ok, lt(sub(d, 1), 0x1000000))
                mstore(add(dims, 0xa0), d)
                size := mul(size, d)
            }
            ok := and(ok, lt(size, 0x40000001))             // at most 2^30 elements
            let lane := 8                                   // int64, float64
            switch dtype
            case 3 {
                lane := 4                                   // raw int32, or precision above 16
                if prec {
                    if lt(prec, 17) { lane := 2 }
                    if lt(prec, 9) { lane := 1 }
                }
            }
            default {
                if eq(dtype, 6) { lane := 4 }
                if eq(dtype, 5) { lane := 2 }
                if lt(dtype, 3) { lane := 1 }
            }
            let body := mul(size, lane)
            let chunk := CHUNK
            if iszero(gt(body, CHUNK)) { chunk := SMALL_CHUNK }
            mstore(add(t, 0xa0), size)
            mstore(add(t, 0xc0), lane)
            mstore(add(t, 0xe0), and(eq(ndim, 4), eq(lane, 1)))      // channelLast
            mstore(add(t, 0x100), body)
            mstore(add(t, 0x120), chunk)
            mstore(add(t, 0x140), div(add(body, sub(chunk, 1)), chunk))  // nchunks
        }
        require(ok, "proof: record");
    }

    /// n operands, each with its Tensor and dims allocated: tensorType writes every field of a
    /// tensor but ``param`` (zeroed here) and the dims past its rank (never read); the chunk lists
    /// start empty.  Solidity's ``new Operand[](n)`` would zero every word first.
    function newOperands(uint256 n) internal pure returns (Operand[] memory ops) {
        assembly {
            ops := mload(0x40)
            mstore(ops, n)
            let p := add(ops, shl(5, add(n, 1)))
            for { let k := 0 } lt(k, n) { k := add(k, 1) } {
                let t := add(p, 0x60)           // an Operand is 3 words: t, index, data
                let dims := add(t, 0x1c0)       // a Tensor is 14 words
                mstore(add(ops, shl(5, add(k, 1))), p)
                mstore(p, t)
                mstore(add(p, 0x20), 0x60)      // the empty array
                mstore(add(p, 0x40), 0x60)
                mstore(add(t, 0x80), dims)
                mstore(add(t, 0x1a0), 0)        // param
                p := add(dims, 0xc0)            // dims are 6 words
            }
            mstore(0x40, p)
        }
    }

    /// Reads the record's header, types and param commitments; leaves the cursor off its attributes.
    function record(Ctx memory x, uint256 off, uint256 len)
        internal pure returns (Operand[] memory ops, Tensor memory out)
    {
        unchecked {
            Cur memory c = Cur(off, off + len);
            uint256 nin;
            uint256 nout;
            {
                uint256 head = take(c, 9);     // u8 kind, u32le K, u16le op, u8 n_in, u8 n_out
                uint256 w;
                uint256 kind;
                uint256 op;
                assembly {
                    w := calldataload(head)
                    kind := byte(0, w)
                    op := or(byte(5, w), shl(8, byte(6, w)))
                    nin := byte(7, w)
                    nout := byte(8, w)
                }
                require(kind == 2 && le4(w, 1) == x.step && nout >= 1, "proof: record");
                x.op = op;
            }
            ops = newOperands(nin);
            uint256 dtypes = 1 << 3;   // every dtype code seen, as bits
            for (uint256 k = 0; k < nin; k++) {
                Tensor memory t = ops[k].t;
                tensorType(c, x.tensors, t);
                dtypes |= 1 << t.dtype;
                if (t.id < x.inputs) x.inputOperand = true;
                else if (t.id < x.inputs + x.params) t.param = take(c, 32);
            }
            tensorType(c, x.tensors, out);
            x.int32s = (dtypes | (1 << out.dtype)) == 1 << 3;
            if (nout > 1) {
                Tensor memory other;
                for (uint256 k = 1; k < nout; k++) {
                    tensorType(c, x.tensors, other);
                }
            }
            x.attrs = c.p;
            x.recordEnd = c.end;
        }
    }

    // -- operands -------------------------------------------------------------------------------

    /// The chunks of one operand or result, ascending: the first chunk's leaf and full path give
    /// the chunk root, every later chunk's shared path must join the first's.
    function chunks(Cur memory c, Operand memory o, uint256 count) internal view returns (bytes32 root) {
        unchecked {
            uint256 nchunks = o.t.nchunks;
            require(count <= nchunks, "proof: chunk");   // before anything is allocated for them
            // The chunk lists, every entry written below (so not zeroed first).
            uint256[] memory index;
            uint256[] memory data;
            assembly {
                index := mload(0x40)
                mstore(index, count)
                data := add(index, shl(5, add(count, 1)))
                mstore(data, count)
                mstore(0x40, add(data, shl(5, add(count, 1))))
            }
            o.index = index;
            o.data = data;
            First memory first;
            uint256 next = 0;
            for (uint256 j = 0; j < count; j++) {
                (uint256 ci, uint256 off, uint256 len, uint256 pat, uint256 pm) = readChunk(c, o.t, next);
                next = ci + 1;
                bytes32 leaf = leafAt(off, len);
                if (j == 0) {
                    first.leaf = leaf;
                    first.index = ci;
                    first.path = pat;
                    root = climb(leaf, ci, nchunks, pat, pm);
                } else {
                    require(joins(first, leaf, ci, nchunks, pat, pm), "operand not included");
                }
                assembly {
                    mstore(add(index, shl(5, add(j, 1))), ci)   // j < count: within both lists
                    mstore(add(data, shl(5, add(j, 1))), off)
                }
            }
        }
    }

    /// u32le index || data || hashes: a chunk's index (at least ``next``, below the tensor's chunk
    /// count), the offset and length of its bytes, and its path's offset and length.
    function readChunk(Cur memory c, Tensor memory t, uint256 next)
        internal pure returns (uint256 ci, uint256 off, uint256 len, uint256 pat, uint256 pm)
    {
        uint256 size = t.chunk;
        uint256 body = t.body;
        uint256 nchunks = t.nchunks;
        uint256 fault;   // 1: the proof ends early, 2: a chunk index out of order or range, 3: a path too long
        assembly {
            let p := mload(c)
            let end := mload(add(c, 0x20))
            for {} 1 {} {
                if gt(add(p, 4), end) { fault := 1 break }
                let w := calldataload(p)
                ci := or(or(byte(0, w), shl(8, byte(1, w))), or(shl(16, byte(2, w)), shl(24, byte(3, w))))
                if or(lt(ci, next), iszero(lt(ci, nchunks))) { fault := 2 break }
                len := sub(body, mul(ci, size))
                if gt(len, size) { len := size }
                off := add(p, 4)
                p := add(off, len)
                if iszero(lt(p, end)) { fault := 1 break }      // the path's count byte, at least
                pm := byte(0, calldataload(p))
                if gt(pm, 32) { fault := 3 break }
                pat := add(p, 1)
                p := add(pat, shl(5, pm))
                if gt(p, end) { fault := 1 break }
                mstore(c, p)
                break
            }
        }
        if (fault != 0) {
            revert(fault == 1 ? "proof: truncated" : fault == 2 ? "proof: chunk" : "proof: counts");
        }
    }

    /// A commitment at its trace leaf (the leaf is the commitment itself), with its full path.
    function traceLeaf(Ctx memory x, bytes32 com, uint256 id, uint256 pat, uint256 pm) internal view {
        unchecked {
            bytes32 tree = climb(com, id, x.tensors, pat, pm);
            if (!x.traceSeen) {
                x.traceTree = tree;
                x.traceSeen = true;
            } else {
                require(tree == x.traceTree, "operand not included");
            }
        }
    }

    /// A commitment at its trace leaf in an element proof: the first one's path is full and gives
    /// the trace tree, every later one's is shared with it.
    function sharedTraceLeaf(Ctx memory x, bytes32 com, uint256 id, uint256 pat, uint256 pm) internal view {
        if (!x.traceSeen) {
            x.traceTree = climb(com, id, x.tensors, pat, pm);
            x.traceSeen = true;
            First memory f = x.trace;
            f.leaf = com;
            f.index = id;
            f.path = pat;
        } else {
            require(joins(x.trace, com, id, x.tensors, pat, pm), "operand not included");
        }
    }

    /// An operand: its path, its chunks, and its commitment where its tensor id says it is (a
    /// param's is in the record, which the program root authenticates: it has no path).
    function operand(Cur memory c, Ctx memory x, Operand memory o) internal view {
        unchecked {
            (uint256 pat, uint256 pm) = hashes(c);
            uint256 count = u32(c);
            if (count == 0) {
                // Its footprint is empty (a window wholly in the padding): nothing is read from it.
                require(pm == 0, "operand not included");
                o.index = new uint256[](0);
                o.data = new uint256[](0);
                return;
            }
            bytes32 com = commitment(o.t, chunks(c, o, count));
            if (o.t.param != 0) {
                require(pm == 0 && com == word(o.t.param), "operand not included");
            } else if (o.t.id < x.inputs) {
                require(pm == 0 && com == word(x.inputList + 32 * o.t.id), "operand not included");
            } else {
                sharedTraceLeaf(x, com, o.t.id, pat, pm);
            }
        }
    }

    /// A head's commitment where its id says it is: a model input (the input commitments), a
    /// param (its param record in the program) or any other tensor (its trace leaf, full path).
    function include(Ctx memory x, bytes32 com, uint256 id, uint256 pat, uint256 pm) internal view {
        unchecked {
            if (id < x.inputs) {
                require(pm == 0 && com == word(x.inputList + 32 * id), "operand not included");
            } else if (id < x.inputs + x.params) {
                bytes32 leaf = sha256(abi.encodePacked(bytes1(0), bytes1(0x01), le32(id), com));
                require(climb(leaf, id, x.inputs + x.params + x.instrs + x.heads, pat, pm) == x.programTree,
                        "operand not included");
            } else {
                traceLeaf(x, com, id, pat, pm);
            }
        }
    }

    // -- outputs ------------------------------------------------------------------------------------

    /// An outputs proof (FORMAT.md section 10.2): returns only when the proof opens every head of
    /// the program in the committed trace and their output hash is not ``outputHash``.
    function verifyOutputs(bytes calldata proof, bytes32 programRoot, bytes32 inputCommitment, bytes32 traceRoot,
                           bytes32 outputHash) external view returns (uint32 heads) {
        return refutesOutputs(proof, programRoot, inputCommitment, traceRoot, outputHash);
    }

    function refutesOutputs(bytes calldata proof, bytes32 programRoot, bytes32 inputCommitment, bytes32 traceRoot,
                            bytes32 outputHash) internal view returns (uint32) {
        uint256 start;
        assembly { start := proof.offset }
        Cur memory c = Cur(start, start + proof.length);
        Ctx memory x;
        counts(c, x);
        require(x.heads >= 1, "proof: counts");
        inputs(c, x, inputCommitment);
        bytes memory preimage = abi.encodePacked("cvmvm/outputs/v3", bytes1(0), le32(x.heads));
        for (uint256 h = 0; h < x.heads; h++) {
            uint256 id = u32(c);
            require(id < x.tensors, "proof: record");
            bytes32 com = word(take(c, 32));
            (uint256 rat, uint256 rm) = hashes(c);
            bytes32 leaf = sha256(abi.encodePacked(bytes1(0), bytes1(0x03), le32(h), le32(id)));
            bytes32 tree = climb(leaf, x.inputs + x.params + x.instrs + h, x.inputs + x.params + x.instrs + x.heads,
                                 rat, rm);
            require(h == 0 || tree == x.programTree, "head not in program");
            x.programTree = tree;
            (uint256 pat, uint256 pm) = hashes(c);
            include(x, com, id, pat, pm);
            preimage = abi.encodePacked(preimage, com);
        }
        require(c.p == c.end, "proof: trailing bytes");
        require(programRootOf(x, x.programTree) == programRoot, "head not in program");
        if (x.traceSeen) {
            require(traceRootOf(x, programRoot, inputCommitment) == traceRoot, "trace root mismatch");
        }
        require(sha256(preimage) != outputHash, "outputs correct");
        return uint32(x.heads);
    }

    // -- verify -----------------------------------------------------------------------------------

    function verify(bytes calldata proof, bytes32 programRoot, bytes32 inputCommitment, bytes32 traceRoot)
        external view returns (uint32 step, uint32 element)
    {
        return refutes(proof, programRoot, inputCommitment, traceRoot);
    }

    /// verify()'s body, for a contract built on this one.
    function refutes(bytes calldata proof, bytes32 programRoot, bytes32 inputCommitment, bytes32 traceRoot)
        internal view returns (uint32 step, uint32 element)
    {
        (Ctx memory x, Operand[] memory ops, Tensor memory outT, int256 committed) =
            load(proof, programRoot, inputCommitment, traceRoot);
        int256 value = evaluate(x, ops, outT);
        // A proof carries exactly the element's footprint (FORMAT.md section 9), as check-step demands:
        // every chunk it carries was read, whatever the verdict.
        require(everyChunkRead(ops), "proof: chunk not read");
        require(value != committed, "step correct");
        return (uint32(x.step), uint32(x.element));
    }

    /// Whether evaluation read every chunk the operands carry (``find`` marks each it reads).
    function everyChunkRead(Operand[] memory ops) internal pure returns (bool all) {
        all = true;
        for (uint256 k = 0; k < ops.length; k++) {
            uint256[] memory data = ops[k].data;
            assembly {
                let n := mload(data)
                for { let j := 0 } lt(j, n) { j := add(j, 1) } {
                    if iszero(shr(255, mload(add(data, shl(5, add(j, 1)))))) { all := 0 }
                }
            }
        }
    }

    /// What this contract computes for other elements of the proof's instruction, from the chunks
    /// the proof carries (each element's footprint must be among them), after authenticating the
    /// proof exactly as verify() does: a dry run for challengers, and the differential tests' probe.
    function values(bytes calldata proof, bytes32 programRoot, bytes32 inputCommitment, bytes32 traceRoot,
                    uint32[] calldata elements) external view returns (int256[] memory out) {
        unchecked {
            (Ctx memory x, Operand[] memory ops, Tensor memory outT,) = load(proof, programRoot, inputCommitment, traceRoot);
            out = new int256[](elements.length);
            for (uint256 k = 0; k < elements.length; k++) {
                require(elements[k] < outT.size, "proof: element");
                x.element = elements[k];
                out[k] = evaluate(x, ops, outT);
            }
        }
    }

    /// Authenticates every byte of the proof; returns what evaluation needs and the committed element.
    function load(bytes calldata proof, bytes32 programRoot, bytes32 inputCommitment, bytes32 traceRoot)
        internal view returns (Ctx memory x, Operand[] memory ops, Tensor memory outT, int256 committed)
    {
        unchecked {
            uint256 start;
            assembly { start := proof.offset }
            Cur memory c = Cur(start, start + proof.length);
            header(c, x, programRoot);
            (ops, outT) = record(x, x.record, x.recordLen);
            if (x.inputOperand) inputs(c, x, inputCommitment);
            require(x.element < outT.size, "proof: element");
            require(supported(x.op) && x.int32s, "op not supported on-chain");
            for (uint256 k = 0; k < ops.length; k++) {
                operand(c, x, ops[k]);
            }
            committed = result(c, x, outT);
            require(c.p == c.end, "proof: trailing bytes");
            require(traceRootOf(x, programRoot, inputCommitment) == traceRoot, "trace root mismatch");
        }
    }

    /// The format version and the program root's counts.
    function counts(Cur memory c, Ctx memory x) internal pure {
        unchecked {
            uint256 off = take(c, 21);
            uint256 w;
            assembly { w := calldataload(off) }
            require(w >> 248 == 3, "proof: version");
            x.countsAt = off + 1;
            assembly { w := calldataload(add(off, 1)) }
            w = lanes32(w);
            x.inputs = w >> 224;
            x.params = (w >> 192) & 0xffffffff;
            x.instrs = (w >> 160) & 0xffffffff;
            x.heads = (w >> 128) & 0xffffffff;
            x.tensors = (w >> 96) & 0xffffffff;
            require(x.inputs + x.params + x.instrs <= x.tensors, "proof: counts");
        }
    }

    /// The I input commitments, which must hash to the committed input commitment:
    /// SHA-256("cvmvm/inputs/v3" || 0x00 || u32le I || the commitments).
    function inputs(Cur memory c, Ctx memory x, bytes32 inputCommitment) internal view {
        unchecked {
            uint256 n = 32 * x.inputs;
            uint256 list = take(c, n);
            x.inputList = list;
            uint256 pos = x.countsAt;
            bytes32 h;
            assembly {
                let p := mload(0x40)
                mstore(p, "cvmvm/inputs/v3")           // 15 bytes, then the 0x00 separator
                mstore8(add(p, 15), 0)
                calldatacopy(add(p, 16), pos, 4)
                calldatacopy(add(p, 20), list, n)
                if iszero(staticcall(gas(), 2, p, add(20, n), p, 32)) { revert(0, 0) }
                h := mload(p)
            }
            require(h == inputCommitment, "inputs not committed");
        }
    }

    /// The counts and the instruction record with its program path.
    function header(Cur memory c, Ctx memory x, bytes32 programRoot) internal view {
        unchecked {
            counts(c, x);
            uint256 off = take(c, 12);
            uint256 w;
            assembly { w := calldataload(off) }
            w = lanes32(w);
            x.step = w >> 224;
            x.element = (w >> 192) & 0xffffffff;
            x.recordLen = (w >> 160) & 0xffffffff;
            require(x.step < x.instrs, "proof: counts");
            x.record = take(c, x.recordLen);
            (uint256 pat, uint256 pm) = hashes(c);
            x.programTree = climb(leafAt(x.record, x.recordLen), x.inputs + x.params + x.step,
                                  x.inputs + x.params + x.instrs + x.heads, pat, pm);
            require(programRootOf(x, x.programTree) == programRoot, "instruction not in program");
        }
    }

    /// The result: its trace path and the chunk holding the element; returns the committed element.
    function result(Cur memory c, Ctx memory x, Tensor memory outT) internal view returns (int256) {
        unchecked {
            // A struct literal: a declared Operand would allocate a Tensor of its own, unused.
            uint256[] memory none;    // empty: chunks() makes the lists
            Operand memory out = Operand(outT, none, none);
            (uint256 pat, uint256 pm) = hashes(c);
            bytes32 com = commitment(outT, chunks(c, out, 1));
            uint256 b = position(outT, x.element) * outT.lane;
            require(out.index[0] == b / outT.chunk, "proof: result chunk");
            sharedTraceLeaf(x, com, outT.id, pat, pm);
            return laneAt(out.data[0] + b % outT.chunk, outT.lane);
        }
    }

    // -- elements -----------------------------------------------------------------------------------

    /// Row-major index -> position in the committed order (channel-last for rank 4 in 1-byte lanes).
    function position(Tensor memory t, uint256 idx) internal pure returns (uint256) {
        unchecked {
            if (!t.channelLast) return idx;
            uint256 w = idx % t.dims[3];
            idx /= t.dims[3];
            uint256 h = idx % t.dims[2];
            idx /= t.dims[2];
            uint256 ch = idx % t.dims[1];
            uint256 n = idx / t.dims[1];
            return ((n * t.dims[2] + h) * t.dims[3] + w) * t.dims[1] + ch;
        }
    }

    /// The calldata offset of chunk ci's bytes.
    function chunkAt(Operand memory o, uint256 ci) internal pure returns (uint256) {
        return find(o.index, o.data, ci);
    }

    /// The calldata offset of chunk ci among chunks ``index`` (ascending) at offsets ``data``;
    /// the proof must carry it (an offset is never 0: the selector is there).  The entry's top bit
    /// is set once read (``everyChunkRead``); an offset is far below it.
    function find(uint256[] memory index, uint256[] memory data, uint256 ci) internal pure returns (uint256 off) {
        assembly {
            let lo := 0
            let hi := mload(index)
            for {} lt(lo, hi) {} {
                let mid := shr(1, add(lo, hi))
                let v := mload(add(index, shl(5, add(mid, 1))))
                if eq(v, ci) {
                    let at := add(data, shl(5, add(mid, 1)))
                    off := mload(at)
                    mstore(at, or(off, shl(255, 1)))
                    off := and(off, 0xffffffffffffffff)
                    break
                }
                switch lt(v, ci)
                case 1 { lo := add(mid, 1) }
                default { hi := mid }
            }
        }
        require(off != 0, "proof: chunk missing");
    }

    /// A signed little-endian lane of 1, 2 or 4 bytes off a calldata offset.
    function laneAt(uint256 off, uint256 lane) internal pure returns (int256 v) {
        assembly {
            let w := calldataload(off)
            switch lane
            case 1 { v := signextend(0, byte(0, w)) }
            case 2 { v := signextend(1, or(byte(0, w), shl(8, byte(1, w)))) }
            default {
                v := signextend(3, or(or(byte(0, w), shl(8, byte(1, w))), or(shl(16, byte(2, w)), shl(24, byte(3, w)))))
            }
        }
    }

    /// Element idx (row-major) of an operand.
    function get(Operand memory o, uint256 idx) internal pure returns (int256) {
        unchecked {
            uint256 b = position(o.t, idx) * o.t.lane;
            return laneAt(chunkAt(o, b / o.t.chunk) + b % o.t.chunk, o.t.lane);
        }
    }

    /// Row-major coordinates of idx in a shape.
    function coords(Tensor memory t, uint256 idx) internal pure returns (uint256[6] memory c) {
        unchecked {
            for (uint256 k = t.ndim; k > 0; k--) {
                c[k - 1] = idx % t.dims[k - 1];
                idx /= t.dims[k - 1];
            }
        }
    }

    /// Sum of a[pa + i] * b[pb + i], i < n, over committed positions in 1-byte lanes.
    function dot(Operand memory a, uint256 pa, Operand memory b, uint256 pb, uint256 n)
        internal pure returns (int256)
    {
        unchecked {
            (uint256 ra, uint256 rb) = runs(2 * n);
            gather(a, pa, n, ra);
            gather(b, pb, n, rb);
            return dotBytes(ra, rb, n);
        }
    }

    /// Memory for two runs of at most ``cap`` bytes each (and the word a dot product reads past a
    /// run's end), above everything allocated.
    function runs(uint256 cap) internal pure returns (uint256 ra, uint256 rb) {
        assembly {
            ra := mload(0x40)
            rb := add(ra, add(cap, 32))
            mstore(0x40, add(rb, add(cap, 32)))
        }
    }

    /// Copies operand o's committed bytes [pos, pos + n) (1-byte lanes), from the chunks the
    /// proof carries, to memory at dst; returns dst + n.
    function gather(Operand memory o, uint256 pos, uint256 n, uint256 dst) internal pure returns (uint256) {
        unchecked {
            uint256 size = o.t.chunk;
            while (n > 0) {
                uint256 off = pos % size;
                uint256 seg = size - off;
                if (seg > n) seg = n;
                uint256 from = chunkAt(o, pos / size) + off;
                assembly { calldatacopy(dst, from, seg) }
                dst += seg;
                pos += seg;
                n -= seg;
            }
            return dst;
        }
    }

    /// int8 dot product of two memory runs, 32 lanes a word in four multiplications.  Each lane
    /// x has its sign bit flipped, u = x + 128 in [0, 255], so that sum(x y) = sum(u v)
    /// - 128 (sum(u) + sum(v)) + 16384 n.  A word's bytes 4j + c (j < 8) form group c, eight
    /// 32-bit lanes in the order of j; with the other word's bytes reversed, its group 3 - c holds
    /// the same bytes in the reverse order, and the top lane of the product of the two groups is
    /// the sum of their eight products (each lane below 2^20: none carries into another).  A run's
    /// last word is masked past its end; a run of under 6 lanes is read lane by lane.
    function dotBytes(uint256 da, uint256 db, uint256 n) internal pure returns (int256 acc) {
        assembly {
            let end := add(da, n)
            switch lt(n, 6)
            case 1 {
                for {} lt(da, end) {} {
                    acc := add(acc, mul(signextend(0, byte(0, mload(da))), signextend(0, byte(0, mload(db)))))
                    da := add(da, 1)
                    db := add(db, 1)
                }
            }
            default {
                let m8 := 0x00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff
                let m16 := 0x0000ffff0000ffff0000ffff0000ffff0000ffff0000ffff0000ffff0000ffff
                let m32 := 0x00000000ffffffff00000000ffffffff00000000ffffffff00000000ffffffff
                let m64 := 0x0000000000000000ffffffffffffffff0000000000000000ffffffffffffffff
                let uv := 0
                let sums := 0      // the u and v lanes summed, eight lanes of 32 bits
                for {} lt(da, end) {} {
                    let wa := xor(mload(da), 0x8080808080808080808080808080808080808080808080808080808080808080)
                    let wb := xor(mload(db), 0x8080808080808080808080808080808080808080808080808080808080808080)
                    let left := sub(end, da)
                    if lt(left, 32) {
                        let keep := not(shr(shl(3, left), not(0)))
                        wa := and(wa, keep)
                        wb := and(wb, keep)
                    }
                    wb := or(shl(8, and(wb, m8)), and(shr(8, wb), m8))
                    wb := or(shl(16, and(wb, m16)), and(shr(16, wb), m16))
                    wb := or(shl(32, and(wb, m32)), and(shr(32, wb), m32))
                    wb := or(shl(64, and(wb, m64)), and(shr(64, wb), m64))
                    wb := or(shl(128, wb), shr(128, wb))
                    let ae := and(wa, m8)               // bytes 2i + 1, in 16-bit lanes
                    let ao := and(shr(8, wa), m8)       // bytes 2i
                    let be := and(wb, m8)
                    let bo := and(shr(8, wb), m8)
                    let a := and(ae, m16)               // group 3
                    let b := and(shr(16, bo), m16)      // reversed, group 0
                    sums := add(sums, add(a, b))
                    uv := add(uv, shr(224, mul(a, b)))
                    a := and(shr(16, ae), m16)          // group 1
                    b := and(bo, m16)                   // reversed, group 2
                    sums := add(sums, add(a, b))
                    uv := add(uv, shr(224, mul(a, b)))
                    a := and(ao, m16)                   // group 2
                    b := and(shr(16, be), m16)          // reversed, group 1
                    sums := add(sums, add(a, b))
                    uv := add(uv, shr(224, mul(a, b)))
                    a := and(shr(16, ao), m16)          // group 0
                    b := and(be, m16)                   // reversed, group 3
                    sums := add(sums, add(a, b))
                    uv := add(uv, shr(224, mul(a, b)))
                    da := add(da, 32)
                    db := add(db, 32)
                }
                // The eight lanes of sums, added in full width.
                sums := add(and(sums, m32), and(shr(32, sums), m32))
                sums := add(and(sums, m64), and(shr(64, sums), m64))
                sums := add(and(sums, 0xffffffffffffffffffffffffffffffff), shr(128, sums))
                acc := sub(add(uv, shl(14, n)), shl(7, sums))
            }
        }
    }

    // -- ops ---------------------------------------------------------------------------------------

    /// The covered op codes, as bits.
    uint256 internal constant SUPPORTED = ((1 << (BROADCAST_GREATER + 1)) - 1) | (1 << SUM) | (1 << MAX)
        | (1 << CONV2D) | (1 << DENSE) | (1 << MAX_POOL2D) | (1 << FLATTEN) | (1 << EXPAND_DIMS) | (1 << RESHAPE)
        | (1 << SQUEEZE);

    function supported(uint256 op) internal pure returns (bool) {
        return op < 256 && (SUPPORTED >> op) & 1 == 1;
    }

    /// Skips n str attributes (u16le length, then the bytes).
    function skipStrs(Cur memory a, uint256 n) internal pure {
        uint256 p = a.p;
        assembly {
            // Lengths are never negative: if the strings run past the end, so does the last.
            for {} n { n := sub(n, 1) } {
                let w := calldataload(p)
                p := add(add(p, 2), or(byte(0, w), shl(8, byte(1, w))))
            }
        }
        require(p <= a.end, "proof: truncated");
        a.p = p;
    }

    function pair(Cur memory a) internal pure returns (int256, int256) {
        require(u8(a) == 2, "proof: record");
        return (i64(a), i64(a));
    }

    function clipTo(int256 v, int256 precision) internal pure returns (int256) {
        unchecked {
            int256 bound = int256((uint256(1) << uint256(precision - 1)) - 1);
            return v > bound ? bound : v < -bound ? -bound : v;
        }
    }

    function unary(uint256 op, Cur memory a, int256 v) internal pure returns (int256) {
        unchecked {
            if (op == RELU) return v < 0 ? int256(0) : v;
            if (op == ABS) return v < 0 ? -v : v;
            if (op == NEGATIVE) return -v;
            if (op == CVM_PRECISION) {
                uint256 m = uint256(v < 0 ? -v : v);
                int256 bits = 0;
                while (m != 0) {
                    bits++;
                    m >>= 1;
                }
                return bits == 0 ? int256(1) : bits;
            }
            if (op == CLIP) {
                int256 lo = i64(a);
                int256 hi = i64(a);
                return v < lo ? lo : v > hi ? hi : v;
            }
            int256 precision = i64(a);
            if (op == CVM_CLIP) return clipTo(v, precision);
            int256 b = i64(a);
            if (op == CVM_RIGHT_SHIFT) return clipTo(((v >> uint256(b - 1)) + 1) >> 1, precision);
            return clipTo(v * int256(uint256(1) << uint256(b)), precision);   // CVM_LEFT_SHIFT
        }
    }

    function binary(uint256 op, int256 l, int256 r) internal pure returns (int256) {
        unchecked {
            if (op == ELEMWISE_ADD || op == BROADCAST_ADD) return l + r;
            if (op == ELEMWISE_SUB || op == BROADCAST_SUB) return l - r;
            if (op == BROADCAST_MUL) return l * r;
            if (op == BROADCAST_DIV) return r == 0 ? int256(0) : l / r;   // Solidity truncates toward zero
            if (op == BROADCAST_MAX) return l > r ? l : r;
            return l > r ? int256(1) : int256(0);                        // BROADCAST_GREATER
        }
    }

    /// The element of a broadcast operand that output element e reads (axes right-aligned).
    function broadcastIndex(Tensor memory t, Tensor memory out, uint256 e) internal pure returns (uint256 idx) {
        unchecked {
            uint256[6] memory c = coords(out, e);
            uint256 shift = out.ndim - t.ndim;
            for (uint256 k = 0; k < t.ndim; k++) {
                idx = idx * t.dims[k] + (t.dims[k] == 1 ? 0 : c[shift + k]);
            }
        }
    }

    /// Which axes sum/max reduce, and the input coordinates output element e keeps.
    function reduction(Cur memory a, Tensor memory t, Tensor memory out, uint256 e)
        internal pure returns (bool[6] memory reduced, uint256[6] memory full, uint256 terms)
    {
        unchecked {
            uint256 count = u8(a);
            for (uint256 i = 0; i < count; i++) {
                int256 ax = i64(a);
                if (ax < 0) ax += int256(t.ndim);
                reduced[uint256(ax)] = true;
            }
            bool keep = u8(a) == 1;
            if (u8(a) == 1 || count == 0) {     // exclude: the complement; no axis given: all of them
                for (uint256 k = 0; k < t.ndim; k++) reduced[k] = count == 0 || !reduced[k];
            }
            uint256[6] memory oc = coords(out, e);
            terms = 1;
            uint256 next = 0;
            for (uint256 k = 0; k < t.ndim; k++) {
                if (reduced[k]) terms *= t.dims[k];
                else full[k] = keep ? oc[k] : oc[next++];
            }
        }
    }

    /// Term j of the reduction, row-major over the reduced axes.
    function term(Tensor memory t, bool[6] memory reduced, uint256[6] memory full, uint256 j)
        internal pure returns (uint256 idx)
    {
        unchecked {
            for (uint256 k = t.ndim; k > 0; k--) {
                if (reduced[k - 1]) {
                    full[k - 1] = j % t.dims[k - 1];
                    j /= t.dims[k - 1];
                }
            }
            for (uint256 k = 0; k < t.ndim; k++) idx = idx * t.dims[k] + full[k];
        }
    }

    function reduce(uint256 op, Cur memory a, Operand memory src, Tensor memory out, uint256 e)
        internal pure returns (int256 acc)
    {
        unchecked {
            (bool[6] memory reduced, uint256[6] memory full, uint256 terms) = reduction(a, src.t, out, e);
            for (uint256 j = 0; j < terms; j++) {
                int256 v = get(src, term(src.t, reduced, full, j));
                if (op == SUM) acc += v;
                else if (j == 0 || v > acc) acc = v;
            }
        }
    }

    /// convAttrs writes the first seven members through their memory offsets: keep the order.
    struct Conv {
        int256 sh;
        int256 sw;
        int256 ph;
        int256 pw;
        int256 dh;
        int256 dw;
        uint256 groups;
        uint256 first;   // the first input channel of the output channel's group
        uint256 n;
        uint256 o;
        int256 y0;       // the window's top-left corner, in input coordinates
        int256 x0;
        uint256 kx0;     // the taps kx0 <= kx < kx1 of a kernel row lie inside the input's width
        uint256 kx1;
        uint256 pixel;   // the current row's first pixel in the input
        uint256 tap;     // the current kernel row's first tap
        uint256 ea;      // where the gathered input and weight runs end, in memory
        uint256 eb;
    }

    function conv2d(Cur memory a, Operand[] memory ops, Tensor memory out, uint256 e) internal pure returns (int256 acc) {
        unchecked {
            Operand memory src = ops[0];
            Operand memory w = ops[1];
            require(src.t.channelLast && w.t.channelLast, "op not supported on-chain");
            Conv memory p = convAttrs(a);
            uint256[6] memory sd = src.t.dims;       // N, C, H, W
            uint256[6] memory wd = w.t.dims;         // O, C / groups, kh, kw
            {
                uint256[6] memory od = out.dims;
                uint256 ox = e % od[3];
                e /= od[3];
                p.y0 = int256(e % od[2]) * p.sh - p.ph;
                e /= od[2];
                p.o = e % od[1];
                p.n = e / od[1];
                p.x0 = int256(ox) * p.sw - p.pw;
            }
            p.first = (p.o / (wd[0] / p.groups)) * wd[1];
            (p.kx0, p.kx1) = taps(p.x0, p.dw, sd[3], wd[3]);
            if (p.kx0 < p.kx1) {
                // The window's taps inside the input and the weights they meet, gathered row by
                // row into two runs, then one dot product.
                (uint256 ra, uint256 rb) = runs(wd[2] * (p.kx1 - p.kx0) * wd[1]);
                p.ea = ra;
                p.eb = rb;
                for (uint256 ky = 0; ky < wd[2]; ky++) {
                    int256 r = p.y0 + int256(ky) * p.dh;
                    if (r < 0 || r >= int256(sd[2])) continue;
                    p.pixel = (p.n * sd[2] + uint256(r)) * sd[3];
                    p.tap = (p.o * wd[2] + ky) * wd[3];
                    convRow(p, src, w);
                }
                acc = dotBytes(ra, rb, p.ea - ra);
            }
            skipStrs(a, 4);                               // layout, kernel_layout, out_layout, out_dtype
            if (u8(a) == 1) acc += get(ops[2], p.o);       // use_bias
        }
    }

    /// channels, then kernel_size (the weight's shape says it), strides, padding and dilation, then
    /// groups: an i64, four ints of two values each (u8 count 2, two i64le), an i64.
    function convAttrs(Cur memory a) internal pure returns (Conv memory p) {
        unchecked {
            uint256 pos = take(a, 84);
            uint256 twos;
            assembly {
                twos := and(and(eq(byte(0, calldataload(add(pos, 8))), 2), eq(byte(0, calldataload(add(pos, 25))), 2)),
                            and(eq(byte(0, calldataload(add(pos, 42))), 2), eq(byte(0, calldataload(add(pos, 59))), 2)))
            }
            require(twos == 1, "proof: record");
            assembly {
                // Two i64le at a time: sixteen bytes byte-reversed within each 64-bit half (the
                // bytes of 16-bit halves, the halves of 32-bit quarters, then the quarters).
                // Conv's first seven members: sh, sw, ph, pw, dh, dw, groups.
                let m8 := 0x00ff00ff00ff00ff00ff00ff00ff00ff
                let m16 := 0x0000ffff0000ffff0000ffff0000ffff
                let m32 := 0x00000000ffffffff00000000ffffffff
                let v := shr(128, calldataload(add(pos, 26)))
                v := or(shl(8, and(v, m8)), and(shr(8, v), m8))
                v := or(shl(16, and(v, m16)), and(shr(16, v), m16))
                v := or(shl(32, and(v, m32)), and(shr(32, v), m32))
                mstore(p, signextend(7, shr(64, v)))
                mstore(add(p, 0x20), signextend(7, and(v, 0xffffffffffffffff)))
                v := shr(128, calldataload(add(pos, 43)))
                v := or(shl(8, and(v, m8)), and(shr(8, v), m8))
                v := or(shl(16, and(v, m16)), and(shr(16, v), m16))
                v := or(shl(32, and(v, m32)), and(shr(32, v), m32))
                mstore(add(p, 0x40), signextend(7, shr(64, v)))
                mstore(add(p, 0x60), signextend(7, and(v, 0xffffffffffffffff)))
                v := shr(128, calldataload(add(pos, 60)))
                v := or(shl(8, and(v, m8)), and(shr(8, v), m8))
                v := or(shl(16, and(v, m16)), and(shr(16, v), m16))
                v := or(shl(32, and(v, m32)), and(shr(32, v), m32))
                mstore(add(p, 0x80), signextend(7, shr(64, v)))
                mstore(add(p, 0xa0), signextend(7, and(v, 0xffffffffffffffff)))
                v := shr(128, calldataload(add(pos, 76)))
                v := or(shl(8, and(v, m8)), and(shr(8, v), m8))
                v := or(shl(16, and(v, m16)), and(shr(16, v), m16))
                v := or(shl(32, and(v, m32)), and(shr(32, v), m32))
                mstore(add(p, 0xc0), signextend(7, shr(64, v)))
            }
        }
    }

    /// The taps kx of a kernel row of width k (x0 + kx * d for a dilation d >= 1) inside [0, width):
    /// kx0 <= kx < kx1.
    function taps(int256 x0, int256 d, uint256 width, uint256 k) internal pure returns (uint256 kx0, uint256 kx1) {
        unchecked {
            kx0 = x0 >= 0 ? 0 : uint256((-x0 + d - 1) / d);
            int256 room = int256(width) - x0;       // x0 + kx * d < width: kx < room / d
            kx1 = room <= 0 ? 0 : uint256((room + d - 1) / d);
            if (kx1 > k) kx1 = k;
            if (kx0 > kx1) kx0 = kx1;
        }
    }

    /// One kernel row: its taps inside the input and the weights they meet, appended to the runs.
    /// With one group and no horizontal dilation the taps' channels are one contiguous run in the
    /// input and in the weights (both channel-last).
    function convRow(Conv memory p, Operand memory src, Operand memory w) internal pure {
        unchecked {
            uint256 c = src.t.dims[1];
            uint256 icg = w.t.dims[1];
            uint256 kx = p.kx0;
            if (icg == c && p.dw == 1) {
                uint256 n = (p.kx1 - kx) * icg;
                p.ea = gather(src, (p.pixel + uint256(p.x0 + int256(kx))) * c, n, p.ea);
                p.eb = gather(w, (p.tap + kx) * icg, n, p.eb);
                return;
            }
            for (; kx < p.kx1; kx++) {
                p.ea = gather(src, (p.pixel + uint256(p.x0 + int256(kx) * p.dw)) * c + p.first, icg, p.ea);
                p.eb = gather(w, (p.tap + kx) * icg, icg, p.eb);
            }
        }
    }

    function dense(Cur memory a, Operand[] memory ops, Tensor memory out, uint256 e) internal pure returns (int256 acc) {
        unchecked {
            Operand memory src = ops[0];
            Operand memory w = ops[1];
            require(src.t.lane == 1 && w.t.lane == 1, "op not supported on-chain");
            uint256 k = src.t.dims[1];
            uint256 m = e / out.dims[1];
            uint256 u = e % out.dims[1];
            acc = dot(src, m * k, w, u * k, k);
            i64(a);                                      // units
            if (u8(a) == 1) acc += get(ops[2], u);        // use_bias
        }
    }

    struct Window {
        int256 r0;       // the window's top-left corner, in input coordinates
        int256 s0;
        int256 kh;
        int256 kw;
        uint256 plane;   // (n * C + c) * H: the channel plane's first row
    }

    function maxPool(Cur memory a, Operand memory src, Tensor memory out, uint256 e) internal pure returns (int256 best) {
        unchecked {
            Window memory w;
            int256 sh;
            int256 sw;
            (w.kh, w.kw) = pair(a);
            (sh, sw) = pair(a);
            uint256 np = u8(a);
            require(np == 1 || np == 2, "proof: record");
            int256 ph = i64(a);
            int256 pw = np == 2 ? i64(a) : ph;
            uint256[6] memory oc = coords(out, e);
            w.r0 = int256(oc[2]) * sh - ph;
            w.s0 = int256(oc[3]) * sw - pw;
            w.plane = (oc[0] * src.t.dims[1] + oc[1]) * src.t.dims[2];
            best = windowMax(src, w);
        }
    }

    /// The largest element of the window's taps inside the input; a tap in the padding is INT32_MIN.
    function windowMax(Operand memory src, Window memory w) internal pure returns (int256 best) {
        unchecked {
            int256 h = int256(src.t.dims[2]);
            int256 width = int256(src.t.dims[3]);
            best = INT32_MIN;
            for (int256 r = w.r0 < 0 ? int256(0) : w.r0; r < w.r0 + w.kh && r < h; r++) {
                for (int256 s = w.s0 < 0 ? int256(0) : w.s0; s < w.s0 + w.kw && s < width; s++) {
                    int256 v = get(src, (w.plane + uint256(r)) * src.t.dims[3] + uint256(s));
                    if (v > best) best = v;
                }
            }
        }
    }

    function evaluate(Ctx memory x, Operand[] memory ops, Tensor memory out) internal pure returns (int256) {
        unchecked {
            uint256 op = x.op;
            Cur memory a = Cur(x.attrs, x.recordEnd);
            uint256 e = x.element;
            if (op == ELEMWISE_ADD || op == ELEMWISE_SUB) return binary(op, get(ops[0], e), get(ops[1], e));
            if (op <= CVM_LEFT_SHIFT) return unary(op, a, get(ops[0], e));
            if (op <= BROADCAST_GREATER) {
                return binary(op, get(ops[0], broadcastIndex(ops[0].t, out, e)), get(ops[1], broadcastIndex(ops[1].t, out, e)));
            }
            if (op == SUM || op == MAX) return reduce(op, a, ops[0], out, e);
            if (op == CONV2D) return conv2d(a, ops, out, e);
            if (op == DENSE) return dense(a, ops, out, e);
            if (op == MAX_POOL2D) return maxPool(a, ops[0], out, e);
            return get(ops[0], e);                           // flatten, reshape, squeeze, expand_dims
        }
    }
}

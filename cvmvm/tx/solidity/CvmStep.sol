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

    /// A tensor's static facts, read from the instruction record.
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
        uint256 inputList;  // calldata offset of the I input commitments
        uint256 record;     // calldata offset and length of the instruction record
        uint256 recordLen;
        bytes32 programTree;
        bytes32 traceTree;
        bool traceSeen;
    }

    // -- reading the proof ------------------------------------------------------------------

    function take(Cur memory c, uint256 n) internal pure returns (uint256 off) {
        unchecked {
            off = c.p;
            require(n <= c.end - off, "proof: truncated");
            c.p = off + n;
        }
    }

    /// Little-endian unsigned integer of n <= 32 bytes off a calldata offset.
    function le(uint256 off, uint256 n) internal pure returns (uint256 v) {
        assembly {
            let w := calldataload(off)
            for { let i := 0 } lt(i, n) { i := add(i, 1) } { v := or(v, shl(mul(8, i), byte(i, w))) }
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

    function hashes(Cur memory c) internal pure returns (uint256 off, uint256 m) {
        m = u8(c);
        require(m <= 32, "proof: counts");
        off = take(c, 32 * m);
    }

    function word(uint256 off) internal pure returns (bytes32 w) {
        assembly { w := calldataload(off) }
    }

    function le32(uint256 v) internal pure returns (bytes4) {
        return bytes4(uint32(((v & 0xff) << 24) | (((v >> 8) & 0xff) << 16) | (((v >> 16) & 0xff) << 8) | ((v >> 24) & 0xff)));
    }

    // -- hashing ----------------------------------------------------------------------------

    function inner(bytes32 l, bytes32 r) internal view returns (bytes32 h) {
        assembly {
            let p := mload(0x40)
            mstore8(p, 1)
            mstore(add(p, 1), l)
            mstore(add(p, 33), r)
            if iszero(staticcall(gas(), 2, p, 65, p, 32)) { revert(0, 0) }
            h := mload(p)
        }
    }

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
        require(index < count, "proof: counts");
        bool ok = true;
        assembly {
            let fn := index
            let sn := sub(count, 1)
            r := leaf
            let p := mload(0x40)
            mstore8(p, 1)
            for { let end := add(off, mul(m, 32)) } lt(off, end) { off := add(off, 32) } {
                if iszero(sn) { ok := 0 break }
                let h := calldataload(off)
                switch or(and(fn, 1), eq(fn, sn))
                case 1 {
                    mstore(add(p, 1), h)
                    mstore(add(p, 33), r)
                    if iszero(and(fn, 1)) {
                        for {} and(iszero(and(fn, 1)), gt(fn, 0)) {} { fn := shr(1, fn) sn := shr(1, sn) }
                    }
                }
                default {
                    mstore(add(p, 1), r)
                    mstore(add(p, 33), h)
                }
                if iszero(staticcall(gas(), 2, p, 65, p, 32)) { revert(0, 0) }
                r := mload(p)
                mstore8(p, 1)
                fn := shr(1, fn)
                sn := shr(1, sn)
            }
            if sn { ok := 0 }
        }
        require(ok, "proof: path length");
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

    // -- the record ---------------------------------------------------------------------------

    function tensorType(Cur memory c, uint256 tensors) internal pure returns (Tensor memory t) {
        unchecked {
            t.id = u32(c);
            require(t.id < tensors, "proof: record");
            t.typeAt = c.p;
            t.dtype = u8(c);
            t.prec = u8(c);
            t.ndim = u8(c);
            require(t.dtype >= 1 && t.dtype <= 7 && t.prec <= 32 && t.ndim >= 1 && t.ndim <= 6, "proof: record");
            t.size = 1;
            for (uint256 k = 0; k < t.ndim; k++) {
                uint256 d = u32(c);
                require(d >= 1 && d <= 1 << 24, "proof: record");
                t.dims[k] = d;
                t.size *= d;
            }
            require(t.size <= 1 << 30, "proof: record");
            t.typeLen = c.p - t.typeAt;
            if (t.dtype == 3) {
                t.lane = t.prec == 0 ? 4 : t.prec <= 8 ? 1 : t.prec <= 16 ? 2 : 4;
            } else {
                t.lane = t.dtype <= 2 ? 1 : t.dtype == 5 ? 2 : t.dtype == 6 ? 4 : 8;
            }
            t.channelLast = t.ndim == 4 && t.lane == 1;
            t.body = t.size * t.lane;
            t.chunk = t.body <= CHUNK ? SMALL_CHUNK : CHUNK;
            t.nchunks = (t.body + t.chunk - 1) / t.chunk;
        }
    }

    /// Reads the record's header, types and param commitments; leaves the cursor off its attributes.
    function record(Ctx memory x, uint256 off, uint256 len)
        internal pure returns (Operand[] memory ops, Tensor memory out)
    {
        unchecked {
            Cur memory c = Cur(off, off + len);
            require(u8(c) == 2 && u32(c) == x.step, "proof: record");
            x.op = le(take(c, 2), 2);
            uint256 nin = u8(c);
            uint256 nout = u8(c);
            require(nout >= 1, "proof: record");
            ops = new Operand[](nin);
            for (uint256 k = 0; k < nin; k++) {
                Tensor memory t = tensorType(c, x.tensors);
                if (t.id >= x.inputs && t.id < x.inputs + x.params) t.param = take(c, 32);
                ops[k].t = t;
            }
            out = tensorType(c, x.tensors);
            for (uint256 k = 1; k < nout; k++) {
                tensorType(c, x.tensors);
            }
            x.attrs = c.p;
            x.recordEnd = c.end;
        }
    }

    // -- operands -------------------------------------------------------------------------------

    /// The chunks of one operand or result: each chunk's leaf and path must give one chunk root.
    function chunks(Cur memory c, Operand memory o, uint256 count) internal view returns (bytes32 root) {
        unchecked {
            require(count <= o.t.nchunks, "proof: chunk");   // before anything is allocated for them
            o.index = new uint256[](count);
            o.data = new uint256[](count);
            uint256 next = 0;
            for (uint256 j = 0; j < count; j++) {
                uint256 ci = u32(c);
                require(ci >= next && ci < o.t.nchunks, "proof: chunk");
                next = ci + 1;
                uint256 len = o.t.body - ci * o.t.chunk;
                if (len > o.t.chunk) len = o.t.chunk;
                uint256 off = take(c, len);
                (uint256 pat, uint256 pm) = hashes(c);
                bytes32 r = climb(leafAt(off, len), ci, o.t.nchunks, pat, pm);
                if (j == 0) root = r;
                else require(r == root, "operand not included");
                o.index[j] = ci;
                o.data[j] = off;
            }
        }
    }

    /// A commitment at its trace leaf (the leaf is the commitment itself).
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
            } else {
                include(x, com, o.t.id, pat, pm);
            }
        }
    }

    /// A tensor's commitment where its id says it is: a model input (the input commitments), a
    /// param (its param record in the program) or any other tensor (its trace leaf).
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
        require(sha256(abi.encodePacked("cvmvm/program/v3", bytes1(0), le32(x.inputs), le32(x.params),
                                        le32(x.instrs), le32(x.heads), le32(x.tensors), x.programTree))
                == programRoot, "head not in program");
        if (x.traceSeen) {
            require(sha256(abi.encodePacked("cvmvm/trace/v3", bytes1(0), programRoot, inputCommitment,
                                            le32(x.tensors), x.traceTree)) == traceRoot, "trace root mismatch");
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
        require(evaluate(x, ops, outT) != committed, "step correct");
        return (uint32(x.step), uint32(x.element));
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
            header(c, x, programRoot, inputCommitment);
            (ops, outT) = record(x, x.record, x.recordLen);
            require(x.element < outT.size, "proof: element");
            bool covered = supported(x.op) && outT.dtype == 3;
            for (uint256 k = 0; k < ops.length; k++) covered = covered && ops[k].t.dtype == 3;
            require(covered, "op not supported on-chain");
            for (uint256 k = 0; k < ops.length; k++) {
                operand(c, x, ops[k]);
            }
            committed = result(c, x, outT);
            require(c.p == c.end, "proof: trailing bytes");
            require(sha256(abi.encodePacked("cvmvm/trace/v3", bytes1(0), programRoot, inputCommitment, le32(x.tensors),
                                            x.traceTree)) == traceRoot, "trace root mismatch");
        }
    }

    /// The format version and the program root's counts.
    function counts(Cur memory c, Ctx memory x) internal pure {
        unchecked {
            require(u8(c) == 3, "proof: version");
            x.inputs = u32(c);
            x.params = u32(c);
            x.instrs = u32(c);
            x.heads = u32(c);
            x.tensors = u32(c);
            require(x.inputs + x.params + x.instrs <= x.tensors, "proof: counts");
        }
    }

    /// The I input commitments, which must hash to the committed input commitment.
    function inputs(Cur memory c, Ctx memory x, bytes32 inputCommitment) internal view {
        unchecked {
            x.inputList = take(c, 32 * x.inputs);
            bytes memory list = new bytes(32 * x.inputs);
            uint256 from = x.inputList;
            uint256 n = 32 * x.inputs;
            assembly { calldatacopy(add(list, 32), from, n) }
            require(sha256(abi.encodePacked("cvmvm/inputs/v3", bytes1(0), le32(x.inputs), list)) == inputCommitment,
                    "inputs not committed");
        }
    }

    /// The counts, the instruction record with its program path, and the input commitments.
    function header(Cur memory c, Ctx memory x, bytes32 programRoot, bytes32 inputCommitment) internal view {
        unchecked {
            counts(c, x);
            x.step = u32(c);
            x.element = u32(c);
            require(x.step < x.instrs, "proof: counts");
            x.recordLen = u32(c);
            x.record = take(c, x.recordLen);
            (uint256 pat, uint256 pm) = hashes(c);
            x.programTree = climb(leafAt(x.record, x.recordLen), x.inputs + x.params + x.step,
                                  x.inputs + x.params + x.instrs + x.heads, pat, pm);
            require(sha256(abi.encodePacked("cvmvm/program/v3", bytes1(0), le32(x.inputs), le32(x.params),
                                            le32(x.instrs), le32(x.heads), le32(x.tensors), x.programTree))
                    == programRoot, "instruction not in program");
            inputs(c, x, inputCommitment);
        }
    }

    /// The result: its trace path and the chunk holding the element; returns the committed element.
    function result(Cur memory c, Ctx memory x, Tensor memory outT) internal view returns (int256) {
        unchecked {
            Operand memory out;
            out.t = outT;
            (uint256 pat, uint256 pm) = hashes(c);
            bytes32 com = commitment(outT, chunks(c, out, 1));
            uint256 b = position(outT, x.element) * outT.lane;
            require(out.index[0] == b / outT.chunk, "proof: result chunk");
            traceLeaf(x, com, outT.id, pat, pm);
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
        unchecked {
            uint256[] memory index = o.index;
            uint256 lo = 0;
            uint256 hi = index.length;
            while (lo < hi) {
                uint256 mid = (lo + hi) >> 1;
                uint256 v = index[mid];
                if (v == ci) return o.data[mid];
                if (v < ci) lo = mid + 1;
                else hi = mid;
            }
            revert("proof: chunk missing");
        }
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
        internal pure returns (int256 acc)
    {
        unchecked {
            uint256 ca = a.t.chunk;
            uint256 cb = b.t.chunk;
            while (n > 0) {
                uint256 oa = pa % ca;
                uint256 ob = pb % cb;
                uint256 seg = n;
                if (ca - oa < seg) seg = ca - oa;
                if (cb - ob < seg) seg = cb - ob;
                acc += dotBytes(chunkAt(a, pa / ca) + oa, chunkAt(b, pb / cb) + ob, seg);
                pa += seg;
                pb += seg;
                n -= seg;
            }
        }
    }

    /// int8 dot product of two calldata runs, 32 lanes a word.
    function dotBytes(uint256 da, uint256 db, uint256 n) internal pure returns (int256 acc) {
        assembly {
            let end := add(da, n)
            for {} iszero(gt(add(da, 32), end)) {} {
                let wa := calldataload(da)
                let wb := calldataload(db)
                    acc := add(acc, mul(signextend(0, byte(0, wa)), signextend(0, byte(0, wb))))
                    acc := add(acc, mul(signextend(0, byte(1, wa)), signextend(0, byte(1, wb))))
                    acc := add(acc, mul(signextend(0, byte(2, wa)), signextend(0, byte(2, wb))))
                    acc := add(acc, mul(signextend(0, byte(3, wa)), signextend(0, byte(3, wb))))
                    acc := add(acc, mul(signextend(0, byte(4, wa)), signextend(0, byte(4, wb))))
                    acc := add(acc, mul(signextend(0, byte(5, wa)), signextend(0, byte(5, wb))))
                    acc := add(acc, mul(signextend(0, byte(6, wa)), signextend(0, byte(6, wb))))
                    acc := add(acc, mul(signextend(0, byte(7, wa)), signextend(0, byte(7, wb))))
                    acc := add(acc, mul(signextend(0, byte(8, wa)), signextend(0, byte(8, wb))))
                    acc := add(acc, mul(signextend(0, byte(9, wa)), signextend(0, byte(9, wb))))
                    acc := add(acc, mul(signextend(0, byte(10, wa)), signextend(0, byte(10, wb))))
                    acc := add(acc, mul(signextend(0, byte(11, wa)), signextend(0, byte(11, wb))))
                    acc := add(acc, mul(signextend(0, byte(12, wa)), signextend(0, byte(12, wb))))
                    acc := add(acc, mul(signextend(0, byte(13, wa)), signextend(0, byte(13, wb))))
                    acc := add(acc, mul(signextend(0, byte(14, wa)), signextend(0, byte(14, wb))))
                    acc := add(acc, mul(signextend(0, byte(15, wa)), signextend(0, byte(15, wb))))
                    acc := add(acc, mul(signextend(0, byte(16, wa)), signextend(0, byte(16, wb))))
                    acc := add(acc, mul(signextend(0, byte(17, wa)), signextend(0, byte(17, wb))))
                    acc := add(acc, mul(signextend(0, byte(18, wa)), signextend(0, byte(18, wb))))
                    acc := add(acc, mul(signextend(0, byte(19, wa)), signextend(0, byte(19, wb))))
                    acc := add(acc, mul(signextend(0, byte(20, wa)), signextend(0, byte(20, wb))))
                    acc := add(acc, mul(signextend(0, byte(21, wa)), signextend(0, byte(21, wb))))
                    acc := add(acc, mul(signextend(0, byte(22, wa)), signextend(0, byte(22, wb))))
                    acc := add(acc, mul(signextend(0, byte(23, wa)), signextend(0, byte(23, wb))))
                    acc := add(acc, mul(signextend(0, byte(24, wa)), signextend(0, byte(24, wb))))
                    acc := add(acc, mul(signextend(0, byte(25, wa)), signextend(0, byte(25, wb))))
                    acc := add(acc, mul(signextend(0, byte(26, wa)), signextend(0, byte(26, wb))))
                    acc := add(acc, mul(signextend(0, byte(27, wa)), signextend(0, byte(27, wb))))
                    acc := add(acc, mul(signextend(0, byte(28, wa)), signextend(0, byte(28, wb))))
                    acc := add(acc, mul(signextend(0, byte(29, wa)), signextend(0, byte(29, wb))))
                    acc := add(acc, mul(signextend(0, byte(30, wa)), signextend(0, byte(30, wb))))
                    acc := add(acc, mul(signextend(0, byte(31, wa)), signextend(0, byte(31, wb))))
                da := add(da, 32)
                db := add(db, 32)
            }
            for {} lt(da, end) {} {
                acc := add(acc, mul(signextend(0, byte(0, calldataload(da))), signextend(0, byte(0, calldataload(db)))))
                da := add(da, 1)
                db := add(db, 1)
            }
        }
    }

    // -- ops ---------------------------------------------------------------------------------------

    function supported(uint256 op) internal pure returns (bool) {
        return op <= BROADCAST_GREATER || op == SUM || op == MAX || op == CONV2D || op == DENSE
            || op == MAX_POOL2D || op == FLATTEN || op == EXPAND_DIMS || op == RESHAPE || op == SQUEEZE;
    }

    function skipStr(Cur memory a) internal pure {
        take(a, le(take(a, 2), 2));
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

    struct Conv {
        int256 sh;
        int256 sw;
        int256 ph;
        int256 pw;
        int256 dh;
        int256 dw;
        uint256 first;   // the first input channel of the output channel's group
        uint256 n;
        uint256 o;
        int256 y0;       // the window's top-left corner, in input coordinates
        int256 x0;
    }

    function conv2d(Cur memory a, Operand[] memory ops, Tensor memory out, uint256 e) internal pure returns (int256 acc) {
        unchecked {
            Operand memory src = ops[0];
            Operand memory w = ops[1];
            require(src.t.channelLast && w.t.channelLast, "op not supported on-chain");
            Conv memory p;
            i64(a);                                  // channels
            pair(a);                                 // kernel_size: the weight's shape says it
            (p.sh, p.sw) = pair(a);
            (p.ph, p.pw) = pair(a);
            (p.dh, p.dw) = pair(a);
            uint256 groups = uint256(i64(a));
            uint256[6] memory oc = coords(out, e);
            p.n = oc[0];
            p.o = oc[1];
            p.first = (p.o / (w.t.dims[0] / groups)) * w.t.dims[1];
            p.y0 = int256(oc[2]) * p.sh - p.ph;
            p.x0 = int256(oc[3]) * p.sw - p.pw;
            for (uint256 ky = 0; ky < w.t.dims[2]; ky++) {
                int256 r = p.y0 + int256(ky) * p.dh;
                if (r < 0 || r >= int256(src.t.dims[2])) continue;
                acc += convRow(p, src, w, uint256(r), ky);
            }
            for (uint256 k = 0; k < 4; k++) skipStr(a);   // layout, kernel_layout, out_layout, out_dtype
            if (u8(a) == 1) acc += get(ops[2], p.o);       // use_bias
        }
    }

    /// One kernel row: the taps of row r inside the input.  With one group and no horizontal
    /// dilation the taps' channels are one contiguous run in the input and in the weights
    /// (both channel-last), so the row is one dot product.
    function convRow(Conv memory p, Operand memory src, Operand memory w, uint256 r, uint256 ky)
        internal pure returns (int256 acc)
    {
        unchecked {
            uint256 c = src.t.dims[1];
            uint256 icg = w.t.dims[1];
            uint256 kw = w.t.dims[3];
            uint256 rowStart = (p.n * src.t.dims[2] + r) * src.t.dims[3];
            uint256 wRow = (p.o * w.t.dims[2] + ky) * kw;
            uint256 kx = 0;
            while (kx < kw && p.x0 + int256(kx) * p.dw < 0) kx++;
            uint256 end = kx;
            while (end < kw && p.x0 + int256(end) * p.dw < int256(src.t.dims[3])) end++;
            if (kx >= end) return 0;
            if (icg == c && p.dw == 1) {
                uint256 s0 = uint256(p.x0 + int256(kx));
                return dot(src, (rowStart + s0) * c, w, (wRow + kx) * icg, (end - kx) * icg);
            }
            for (; kx < end; kx++) {
                uint256 s = uint256(p.x0 + int256(kx) * p.dw);
                acc += dot(src, (rowStart + s) * c + p.first, w, (wRow + kx) * icg, icg);
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

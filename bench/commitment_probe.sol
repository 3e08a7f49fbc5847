// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

import {CvmStep} from "./CvmStep.sol";

/// The verifier's own hashing and dot product, exposed one at a time so that
/// bench/commitment.py --units can price them: a Merkle level, a chunk leaf, a
/// multiply-accumulate.
contract Probe is CvmStep {
    function root(bytes32 leaf, uint256 index, uint256 count, bytes32[] calldata path)
        external view returns (bytes32)
    {
        uint256 off;
        assembly { off := path.offset }
        return climb(leaf, index, count, off, path.length);
    }

    function leafHash(bytes calldata chunk) external view returns (bytes32) {
        uint256 off;
        assembly { off := chunk.offset }
        return leafAt(off, chunk.length);
    }

    function dot8u(bytes calldata a, bytes calldata b) external pure returns (int256) {
        uint256 oa;
        uint256 ob;
        assembly {
            oa := a.offset
            ob := b.offset
        }
        return dotBytes(oa, ob, a.length);
    }
}

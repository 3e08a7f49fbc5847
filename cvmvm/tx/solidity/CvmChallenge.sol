// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

import {CvmStep} from "./CvmStep.sol";

/// @title CvmChallenge: registered cvmvm programs, proposed results, and their refutation
/// by one element proof (docs/FORMAT.md section 10).  It is CvmStep too: one deployment,
/// no external call per challenge.
contract CvmChallenge is CvmStep {
    struct Commitment {
        uint256 modelId;
        address proposer;
        bool refuted;        // beside the proposer: refuting writes a slot that is already nonzero
        bytes32 inputCommitment;
        bytes32 outputHash;
        bytes32 traceRoot;
    }

    bytes32[] public models;
    Commitment[] public commitments;

    event ModelRegistered(uint256 indexed modelId, bytes32 programRoot);
    event Committed(uint256 indexed commitmentId, uint256 indexed modelId, address proposer,
                    bytes32 inputCommitment, bytes32 outputHash, bytes32 traceRoot);
    event Refuted(uint256 indexed commitmentId, address challenger, uint32 step, uint32 element);
    event OutputsRefuted(uint256 indexed commitmentId, address challenger);

    function registerModel(bytes32 programRoot) external returns (uint256 modelId) {
        modelId = models.length;
        models.push(programRoot);
        emit ModelRegistered(modelId, programRoot);
    }

    function commit(uint256 modelId, bytes32 inputCommitment, bytes32 outputHash, bytes32 traceRoot)
        external returns (uint256 commitmentId)
    {
        require(modelId < models.length, "unknown model");
        commitmentId = commitments.length;
        commitments.push(Commitment(modelId, msg.sender, false, inputCommitment, outputHash, traceRoot));
        emit Committed(commitmentId, modelId, msg.sender, inputCommitment, outputHash, traceRoot);
    }

    /// Refutes the commitment when the proof shows one element its trace got wrong; reverts with
    /// the verifier's reason otherwise ("step correct" when the element is right).
    function challenge(uint256 commitmentId, bytes calldata proof) external {
        require(commitmentId < commitments.length, "unknown commitment");
        Commitment storage c = commitments[commitmentId];
        require(!c.refuted, "already refuted");
        (uint32 step, uint32 element) = refutes(proof, models[c.modelId], c.inputCommitment, c.traceRoot);
        c.refuted = true;
        emit Refuted(commitmentId, msg.sender, step, element);
    }

    /// Refutes the commitment when its output hash is not that of its trace's heads; reverts
    /// ("outputs correct") when it is.
    function challengeOutputs(uint256 commitmentId, bytes calldata proof) external {
        require(commitmentId < commitments.length, "unknown commitment");
        Commitment storage c = commitments[commitmentId];
        require(!c.refuted, "already refuted");
        refutesOutputs(proof, models[c.modelId], c.inputCommitment, c.traceRoot, c.outputHash);
        c.refuted = true;
        emit OutputsRefuted(commitmentId, msg.sender);
    }
}

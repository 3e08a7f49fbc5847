"""The whole error hierarchy of cvmvm.

Failure is part of the specification: every rejection carries a stable code
``<family>.<reason>`` that tests and callers match on; messages are for humans
and may change.  One family per phase, as in the WebAssembly reference
interpreter: bytes and structure (malformed), ISA rules (invalid), runtime
inputs (input), budgets (limit), VM bugs (internal), files that cannot be read
or written (io); and one for the
caller's own mistakes before any of those phases (usage: a bad command line or
a bad argument to a Python call).

``CODES`` lists every code with its meaning; docs/ERRORS.md is checked against
it, and tests/test_error_codes.py checks that every code the source raises is
listed there.
"""

from __future__ import annotations


class CvmError(Exception):
    """Base of every error cvmvm raises on purpose."""

    family = "internal"

    def __init__(self, reason: str, message: str) -> None:
        message = one_line(message)
        super().__init__(message)
        self.reason = reason
        self.message = message

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        # Pickled as (reason, message): Exception's own pickling passes args, the message alone.
        return type(self), (self.reason, self.message)

    @property
    def code(self) -> str:
        return f"{self.family}.{self.reason}"

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


# A message quotes what it refuses (names, paths, values through ``shown``): a path of PATH_MAX
# bytes and two names of MAX_NAME fit many times over.  Past this it is cut, so that no input,
# however large, makes a message (a line on stderr, a results file's line) as large as itself.
MAX_MESSAGE = 1 << 14


def one_line(message: str) -> str:
    """``message`` as one printable line of at most MAX_MESSAGE characters: a newline or any other
    character that is not printable (in a name, a path) is written as its escape."""
    if not message.isprintable():
        message = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in message)
    if len(message) > MAX_MESSAGE:
        cut = MAX_MESSAGE - 40
        message = f"{message[:cut]}... ({len(message) - cut:,} characters more)"
    return message


class MalformedError(CvmError):
    """Bytes or structure that do not decode: bad JSON, truncated blobs, non-canonical msgpack."""

    family = "malformed"


class InvalidError(CvmError):
    """Well-formed, but breaks an ISA rule: attribute domain, shape, precision, arity, dtype."""

    family = "invalid"


class InputError(CvmError):
    """A runtime input that does not fit the verified program: name, dtype, shape."""

    family = "input"


class LimitError(CvmError):
    """A budget exceeded: rank, dimension, size, ops, or bytes read."""

    family = "limit"


class InternalError(CvmError):
    """Cannot happen for a verified program; if raised, the VM has a bug."""

    family = "internal"


class UsageError(CvmError):
    """The caller's mistake: a bad command line, options that do not go together, an argument
    of the wrong kind to a Python call.  Nothing was read or run yet."""

    family = "usage"


class IOFailure(CvmError):
    """A file that cannot be read or written: missing, not a regular file, not permitted, or a
    failed read or write.  The message names the path as the user gave it, never a temporary file."""

    family = "io"


FAMILIES: tuple[type[CvmError], ...] = (UsageError, MalformedError, InvalidError, InputError, LimitError,
                                        InternalError, IOFailure)

# Every code cvmvm raises, family by family, with what it means.
CODES: dict[str, str] = {
    "usage.command": "no command, or an unknown one (a missing or unknown `store` or `tx` subcommand is "
                     "`usage.argument`)",
    "usage.argument": "a bad option or argument: unknown, missing, malformed, out of range, or of the wrong type",
    "usage.conflict": "options that do not go together (--sign without --receipt, --params with a native model, ...)",
    "usage.missing_extra": "a command that needs an optional extra that is not installed (import-onnx: cvmvm[onnx], "
                           "replay --ray: cvmvm[ray])",
    "usage.ray_cluster": "replay --ray: no Ray cluster at the address (or RAY_ADDRESS), or Ray could not start one",
    "usage.ray_worker": "replay --ray: a Ray worker that cannot import cvmvm (install it on every node)",
    "malformed.kind": "a file of another kind than the command reads (a receipt given as a model, ...)",
    "malformed.native": "a native model (.cvm) that does not decode",
    "malformed.noncanonical": "a msgpack record that decodes but is not its canonical encoding",
    "malformed.graph_json": "a Cortex graph JSON that does not parse or has the wrong structure",
    "malformed.attr": "a Cortex op_attrs string that does not parse",
    "malformed.params": "a Cortex params binary that does not decode",
    "malformed.npy": "a .npy file that does not decode, holds objects, or gives a multi-byte dtype no byte order (`=i4`)",
    "malformed.receipt": "a receipt that does not decode",
    "malformed.txs": "a transaction file or record that does not decode, or a file whose framing is broken",
    "malformed.txs_version": ("a transaction file of another version (versions 1 to 3: cvmvm tx convert), or "
                              "transactions tx convert cannot carry over (receipts of commitment formats 1 and 2)"),
    "malformed.results": "replay --resume: a results file that is not cvmvm's, or not of this transaction file",
    "malformed.commit_record": ("never shown: a commit record (FORMAT.md section 11) that is not strict JSON is not "
                                "honoured, and is removed"),
    "malformed.step_proof": "a step proof that does not decode",
    "malformed.trace": "a trace file that does not decode, or whose root is not the root of its entries",
    "malformed.key": "a key file that is not an Ed25519 key (PEM or raw 32 bytes), or a public key no signature can be valid under (FORMAT.md section 7)",
    "malformed.store_hash": "a store file that is not a model whose model hash is its name",
    "malformed.onnx": "import-onnx: not an ONNX protobuf, or one that fails onnx.checker or uses external data",
    "invalid.attr": "an attribute outside its domain",
    "invalid.shape": "a shape rule does not hold",
    "invalid.precision": "a precision outside [1, 32], or a precision rule does not hold",
    "invalid.dtype": "an unknown dtype, or one the op does not take",
    "invalid.arity": "an op given the wrong number of inputs or outputs",
    "invalid.graph": "graph structure: topology, names, storage, heads, a variable without a value",
    "invalid.op": "an unknown op",
    "invalid.param": "a param value outside its precision",
    "invalid.scale": "a float scale that is not finite and positive, or on a tensor that is not CVM int32",
    "invalid.onnx_op": "import-onnx: an ONNX op outside the supported subset",
    "invalid.onnx_attr": "import-onnx: an ONNX attribute outside the op's supported set, or no CVM op can express it",
    "invalid.onnx_shape": "import-onnx: a dynamic dimension without --input-shape, or a shape the model contradicts",
    "invalid.onnx_input": "import-onnx: a model input that is not float",
    "invalid.onnx_weight": "import-onnx: NaN or infinity in a constant",
    "input.name": "an input the model does not take, or one it takes missing",
    "input.shape": "an input of the wrong shape",
    "input.dtype": "an input of the wrong dtype (or not an array)",
    "input.value": "run_op: an input value that does not fit int32, or its given precision; replay: a transaction "
                   "input value outside its precision (never clipped)",
    "input.precision": "run_op: a precision list that does not match the inputs",
    "input.step": "prove-step: a step that is not an instruction of the model (or, with --against, not the first wrong one)",
    "input.element": "prove-step: an element that is not in the instruction's output",
    "input.not_included": "check-step: a proof whose paths and commitments do not reach the given trace and program roots",
    "input.not_covered": "an element proof of an op the on-chain verifier does not cover (a whole-instruction proof is)",
    "input.trace": "prove-step/prove-outputs --against: a trace of another program, inputs or tensor count",
    "input.claimed": "prove-step --against: a claimed output that is not the disputed trace's tensor",
    "input.no_dispute": "prove-step --against: a disputed trace that commits to exactly the honest run's tensors",
    "input.unknown_model": "a model hash the store does not hold",
    "input.calibration": "import-onnx: calibration data of the wrong shape, dtype or count, or NaN/infinity in it",
    "input.eval": "import-onnx: evaluation samples or labels that do not fit",
    "limit.rank": "a tensor of rank outside [1, 6]",
    "limit.dim": "a dimension outside [1, 2^24]",
    "limit.size": "a tensor of more than 2^30 elements",
    "limit.ops": "a model's cost over the ISA's limit or the caller's --ops-limit",
    "limit.bytes": "a file or record over its byte budget (a model over the native format's 2^32 bytes included)",
    "limit.items": "more than 2^20 inputs, params, instructions, outputs, instruction inputs or attribute items; "
                   "a transaction of more than 64 inputs (`tx add` of a model with more)",
    "limit.memory": "a run's peak memory over the memory limit (--memory-limit), or more than the host can give",
    "limit.work": "a run's work over the work limit (--work-limit)",
    "internal.precision": "a kernel produced a value outside its inferred precision (a VM bug)",
    "internal.shape": "a kernel produced the wrong shape (a VM bug)",
    "internal.dtype": "a kernel produced the wrong dtype (a VM bug)",
    "internal.arity": "a kernel produced the wrong number of outputs (a VM bug)",
    "internal.attrs": "an instruction whose attribute record is not its op's (a VM bug)",
    "internal.param": "a param whose value does not match its type (a VM bug)",
    "internal.trace": "a traced run that did not commit every tensor (a VM bug)",
    "internal.hash": "the compiled hasher's call of libcrypto's SHA-256 failed, or was given a tree that is not one (a VM bug)",
    "internal.signature": "no Ed25519 library on this machine verifies by FORMAT.md section 7's rule (each failed its self-test)",
    "internal.ray": "replay --ray: a Ray task failed for another reason than cvmvm's own errors",
    "internal.replay": "replay: a transaction left without an outcome (a bug)",
    "internal.worker": "replay: a worker process died (killed by a signal: out of memory, kill -9); the outcomes "
                       "before it are reported and written, `--resume` continues",
    "internal.bug": "any other exception: a VM bug (the command line reports it, never a traceback)",
    "io.not_found": "a file, or an output's directory, that does not exist",
    "io.not_regular": "a directory, device, fifo or socket where a file is read or written (in a store, a link too)",
    "io.permission": "a file or directory the process may not read or write",
    "io.read": "a read that failed (an I/O error)",
    "io.write": "a write that failed (a full disk, a read-only file system, ...); no temporary file is left",
}


class Rejected(Exception):
    """Raised by ISA rules through ``require``; the phase that called the rule
    turns it into the right CvmError family (attribute, shape, precision ...)."""


def require(condition: bool, message: str) -> None:
    """State a static rule: ``require(s >= 1, "strides=(0, 2) must be >= 1")``.

    Not ``assert``: ``python -O`` strips asserts, and acceptance may never depend
    on interpreter flags.
    """
    if not condition:
        raise Rejected(message)


def shown(value: object, limit: int = 80) -> str:
    """``repr(value)`` for a message, at most ``limit`` characters.  An integer past 64 bits is
    described by its size (printing one of more than 4,300 digits raises ValueError, or not, as
    PYTHONINTMAXSTRDIGITS says, and a message may not depend on the environment), and a container
    by its length unless it holds a few plain values (repr recurses into it, as deep as it nests)."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    if isinstance(value, (list, tuple, dict, set, frozenset)):
        items = [*value.keys(), *value.values()] if isinstance(value, dict) else list(value)
        if len(items) > 16 or not all(_plain(v) for v in items):
            return f"a {type(value).__name__} of {len(value)} items"
    try:
        text = repr(value)
    except ValueError:
        return f"a {type(value).__name__}"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _plain(value: object) -> bool:
    return value is None or isinstance(value, (bool, float, str, bytes)) or \
        (isinstance(value, int) and value.bit_length() <= 64)

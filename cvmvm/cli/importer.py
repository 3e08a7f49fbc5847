"""The import command: import-onnx (needs the onnx extra; the rest of the CLI does not)."""

from __future__ import annotations

import argparse

import numpy as np

from isa.errors import MalformedError, UsageError
from isa.types import MAX_DIM
from cvmvm import files
from cvmvm.cli.common import EXIT_OK, Command, Reply, input_specs, int_between, parse_inputs, read_input, read_kind

MISSING_EXTRA = "import-onnx needs the onnx extra: pip install 'cvmvm[onnx]'"


def _calibration(specs: list[str]) -> np.ndarray | dict[str, np.ndarray]:
    """``FILE.npy`` (a one-input model) or ``NAME=FILE.npy`` per input."""
    if len(specs) == 1 and "=" not in specs[0]:
        return read_input(specs[0])
    return parse_inputs(input_specs(specs, "--calibrate"))


def _input_shapes(specs: list[str]) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        name, sep, dims = spec.partition("=")
        try:
            shape = tuple(int(d) for d in dims.split(","))
        except ValueError:
            shape = ()
        if not sep or not name or not shape or name in shapes:
            raise UsageError("argument", f"--input-shape {spec!r}: expected NAME=D0,D1,... once per input")
        shapes[name] = shape
    return shapes


def cmd_import_onnx(args: argparse.Namespace) -> Reply:
    try:
        from cvmvm.importer import Options, import_onnx
    except ImportError:
        raise UsageError("missing_extra", MISSING_EXTRA) from None
    options = Options(bits=args.bits, weight_bits=args.weight_bits, output_bits=args.output_bits)
    # -o is checked before calibrating, not after (cvmvm.files.Outputs).
    calibrate = args.calibrate if len(args.calibrate) == 1 and "=" not in args.calibrate[0] else \
        [path for _, path in input_specs(args.calibrate, "--calibrate")]
    outputs = files.Outputs(reads=[args.model, *calibrate, *(args.eval or ())])
    out = outputs.file(args.out, "-o")
    input_shapes = _input_shapes(args.input_shape)
    calibration = _calibration(args.calibrate)
    eval_data = eval_labels = None
    if args.eval:
        eval_data, eval_labels = read_input(args.eval[0]), read_input(args.eval[1])
    try:
        result = import_onnx(args.model, calibration, eval_data=eval_data, eval_labels=eval_labels, batch=args.batch,
                             input_shapes=input_shapes, options=options, progress=not args.json)
    except MalformedError as e:
        if e.code == "malformed.onnx":  # a cvmvm file given as the ONNX model is named as such
            read_kind(args.model, (), "model", described="an ONNX model")
        raise
    outputs.put(out, result.model.canonical_bytes)
    outputs.commit()
    info = {"out": args.out, **result.report.to_json()}
    return EXIT_OK, info, result.report.text() + f"\nwrote {args.out}"


def add_commands(command: Command) -> None:
    p = command("import-onnx", cmd_import_onnx,
                "quantize a float ONNX model into a verified native model; print the float vs quantized report")
    p.add_argument("model", help="the float ONNX model (.onnx)")
    p.add_argument("--calibrate", action="append", required=True, metavar="[NAME=]FILE.npy",
                   help="calibration samples stacked on axis 0 (NAME= per input for several inputs)")
    p.add_argument("--eval", nargs=2, metavar=("X.npy", "Y.npy"),
                   help="evaluation samples and their integer labels: accuracy and top-1 agreement")
    p.add_argument("-o", "--out", required=True, help="the native model to write (.cvm)")
    p.add_argument("--batch", type=int_between(1, MAX_DIM, "2^24"),
                   help="the batch size a dynamic first dimension becomes, 1..2^24 (default 1)")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,...",
                   help="the full shape of an input with dynamic dimensions (repeatable)")
    p.add_argument("--bits", type=int, default=8, help="activation precision, 2..8 (default 8)")
    p.add_argument("--weight-bits", type=int, default=8, help="weight precision, 2..8 (default 8)")
    p.add_argument("--output-bits", type=int, default=16,
                   help="precision of outputs nothing else reads (the logits), 2..31 (default 16)")

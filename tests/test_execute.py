"""The compiled program (cvmvm/vm/execute.py): made once per program, its input checks equal to the
general path, its confirmation of every kernel output (shape, dtype, and the precision where the
op does not prove it), the outputs the caller's own, and runs from many threads at once."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest

import cvmvm
from cvmvm.vm.api import single_op_model
from cvmvm.vm.execute import compiled, execute, prepare_input, prepare_inputs
from isa.errors import CvmError
from isa.table import OPS
from isa.types import TensorType
from serializer.model import Input
from tests.test_receipt import build, digits_model, instr

def code_of(call) -> str:
    with pytest.raises(CvmError) as e:
        call()
    return e.value.code


def with_kernel(model: cvmvm.Model, step: int, kernel) -> cvmvm.Model:
    """The model with instruction ``step``'s bound kernel replaced (a VM bug, on purpose)."""
    plan = compiled(model.program)
    steps = list(plan.steps)
    steps[step] = steps[step]._replace(run=kernel)
    model.program.runtime["compiled"] = plan.__class__(**{**plan.__dict__, "steps": tuple(steps)})
    return model


@pytest.fixture
def digits():
    return digits_model()


@pytest.fixture(scope="module")
def images():
    from tests.test_api import IMAGES
    return IMAGES


def test_compiled_once_per_program(digits, images):
    digits.run({"data": images[0]})
    first = compiled(digits.program)
    digits.run({"data": images[1]}, trace=True)
    assert compiled(digits.program) is first
    assert len(first.steps) == len(digits.program.steps)


# -- confirmation of kernel outputs -----------------------------------------------------------

@pytest.mark.parametrize("step, wrong, code", [
    (0, lambda y: (y.reshape(-1),), "internal.shape"),          # conv2d: a shape other than verified
    (0, lambda y: (y.astype(np.float64),), "internal.dtype"),   # a dtype other than int32/int64
    (0, lambda y: ([0],), "internal.shape"),                    # not an array
    (0, lambda y: (y, y), "internal.arity"),                    # too many outputs
    (4, lambda y: (np.full_like(y, np.iinfo(np.int32).min),), "internal.precision"),  # broadcast_mul p32: INT32_MIN
    (1, lambda y: (y.astype(np.int64) + (1 << 40),), "internal.precision"),  # relu: an int64 result is always checked
    (12, lambda y: (y.astype(np.int64) << 40,), "internal.precision"),     # dense: likewise
])
def test_a_kernel_that_breaks_its_verified_type_is_an_internal_error(digits, images, step, wrong, code):
    feeds = {"data": images[0]}
    good = digits.program.steps[step].run
    with_kernel(digits, step, lambda *a: wrong(good(*a)[0]))
    assert code_of(lambda: digits.run(feeds)) == code
    assert code_of(lambda: digits.run(feeds, trace=True)) == code


def test_an_instruction_with_another_ops_attribute_record_is_an_internal_error():
    """Every decoder builds an instruction's record from its op's schema: a record of another op
    comes only from code that builds a model itself, a bug verification names, never runs."""
    clip = instr("cvm_clip", (0,), 1, precision=8)
    wrong = dataclasses.replace(instr("relu", (0,), 1), attrs=clip.attrs)
    with pytest.raises(CvmError) as e:
        build([Input("x", TensorType((4,), 8))], [], [wrong], [1])
    assert e.value.code == "internal.attrs" and "instruction 0 (relu)" in e.value.message


def test_checked_ops_are_range_checked_and_in_range_ops_say_why():
    """An op whose kernel computes in int32 without a clip is range-checked on every run; the others
    say in their block why their kernel cannot leave its precision."""
    checked = {op.name for op in OPS if op.in_range is None}
    assert {"elemwise_add", "elemwise_sub", "broadcast_add", "broadcast_mul", "broadcast_div", "sum"} <= checked
    assert {"relu", "conv2d", "dense", "cvm_right_shift", "max_pool2d", "flatten"}.isdisjoint(checked)
    for op in OPS:
        assert op.in_range is None or op.in_range.strip(), op.name


def test_a_checked_op_out_of_range_in_int32():
    x = np.array([[100, -100]], dtype=np.int32)
    model, feeds = single_op_model("elemwise_add", [x, x], precisions=[8, 8])   # precision 9: |y| <= 255
    assert model.run(feeds).outputs[0].tolist() == [[200, -200]]
    for wrong in (256, -256):
        with_kernel(model, 0, lambda a, b, v=wrong: (np.full((1, 2), v, dtype=np.int32),))
        assert code_of(lambda: model.run(feeds)) == "internal.precision"
    with_kernel(model, 0, lambda a, b: (np.full((1, 2), 255, dtype=np.int32),))
    assert model.run(feeds).outputs[0].tolist() == [[255, 255]]


def test_outputs_are_made_contiguous(digits, images):
    want = digits.run({"data": images[0]}).outputs[0]
    good = digits.program.steps[12].run
    with_kernel(digits, 12, lambda *a: (np.asfortranarray(np.tile(good(*a)[0], (2, 1)))[::2],))
    (y,) = digits.run({"data": images[0]}).outputs
    assert y.flags.c_contiguous and np.array_equal(y, want)


def test_a_host_out_of_memory_is_limit_memory_naming_the_instruction(digits, images):
    def exhausted(*a):
        raise MemoryError
    with_kernel(digits, 6, exhausted)
    with pytest.raises(CvmError) as e:
        digits.run({"data": images[0]})
    assert e.value.code == "limit.memory" and "instruction 6 (conv2d)" in e.value.message


# -- inputs --------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [
    np.arange(-5, 5, dtype=np.int32).reshape(2, 5),                  # int32 within the precision: the fast path
    np.arange(-5, 5, dtype=np.int64).reshape(2, 5),                  # other integer dtypes: the general path
    np.arange(-500, 500, 100, dtype=np.int32).reshape(2, 5),         # out of range: clipped and reported
    np.arange(-5, 5, dtype=np.int32).reshape(5, 2).T,                # not contiguous
    np.arange(-5, 5, dtype=">i4").reshape(2, 5),                     # big-endian
    np.arange(10, dtype=np.uint8).reshape(2, 5),
])
def test_the_fast_input_check_equals_the_general_one(value):
    model, _ = single_op_model("relu", [np.zeros((2, 5), dtype=np.int32)], precisions=[8])
    t = TensorType((2, 5), 8)
    fast: list = []
    general: list = []
    (got,) = prepare_inputs(model.program, {"in0": value}, fast)
    want = prepare_input("in0", t, value, None, general)
    assert got.dtype == np.int32 and got.flags.c_contiguous and np.array_equal(got, want) and fast == general
    assert got is not value and not np.shares_memory(got, value)


@pytest.mark.parametrize("feeds, code", [
    ({}, "input.name"),
    ({"in0": np.zeros((2, 5), np.int32), "other": np.zeros(1)}, "input.name"),
    ({"other": np.zeros(1)}, "input.name"),
    ({"in0": np.zeros((5, 2), np.int32)}, "input.shape"),
    ({"in0": np.zeros((2, 5), np.float32)}, "input.dtype"),
    ({"in0": [[0] * 5] * 2}, "input.dtype"),
])
def test_bad_inputs_keep_their_codes(feeds, code):
    model, _ = single_op_model("relu", [np.zeros((2, 5), dtype=np.int32)], precisions=[8])
    assert code_of(lambda: execute(model.program, feeds)) == code


def test_outputs_are_the_callers_own(images):
    """No output shares memory with an input, a param, or a later run's outputs."""
    model, feeds = single_op_model("flatten", [np.arange(8, dtype=np.int32).reshape(2, 4)])
    x = feeds["in0"]
    (y,) = model.run(feeds).outputs
    assert not np.shares_memory(y, x)
    x[:] = 0
    assert y.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    digits = digits_model()
    first = digits.run({"data": images[0]}).outputs[0]
    kept = first.copy()
    for k in range(1, 4):
        digits.run({"data": images[k]})
        digits.run({"data": images[k]}, trace=True)
    assert np.array_equal(first, kept)


def test_threads_share_one_compiled_program(images):
    digits = digits_model()
    want = [digits.run({"data": x}, trace=k % 2 == 1) for k, x in enumerate(images[:40])]
    got: dict[int, cvmvm.Result] = {}

    def work(offset: int) -> None:
        for k in range(offset, 40, 4):
            got[k] = digits.run({"data": images[k]}, trace=k % 2 == 1)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k, w in enumerate(want):
        r = got[k]
        assert np.array_equal(r.outputs[0], w.outputs[0]) and r.output_hash == w.output_hash
        assert (r.trace.root if r.trace else None) == (w.trace.root if w.trace else None)

"""Triton kernels written for the purpose (tests/specimens/triton_kernels.py), checked as kernels under
Triton's interpreter on the CPU: the right ones pass in their native precision, each planted bug fails
with its true cause at its place, the in-place writer's writes are named, and a kernel that refuses
float64 is judged in float32. Small shapes: each kernel program costs milliseconds under the interpreter."""

import os

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported (see the specimens module)
pytest.importorskip("triton")

from gradient_lab.engine.kernels import unseen_writes  # noqa: E402
from gradient_lab.testing import check_gradients  # noqa: E402
from tests.registry import families_kept  # noqa: E402

with families_kept():  # its Functions, not the families it declares for the command line: the gallery's tests see the gallery
    from tests.specimens import triton_kernels as k  # noqa: E402

FAST = dict(kernel=True, conditions="none", training=0)  # the verdict and its diagnosis; conditions are the engine's own tests'


def normal(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


X = normal(3, 5)
W = 1 + 0.1 * normal(5, seed=1)
UPSTREAM = normal(3, 5, seed=2)  # a weighted sum: softmax's rows sum to one, so a plain sum's gradient is zero


def weighted(function):
    return lambda *inputs: function(*inputs) * UPSTREAM


def test_a_right_triton_softmax_passes_in_its_native_precision_under_the_interpreter():
    report = check_gradients(weighted(k.RowSoftmax.apply), (X,), reference=weighted(k.softmax_reference), **FAST)
    assert report.verdict.passed, report.verdict.summary
    assert report.kernel.native is not None and report.kernel.native.dtype == "float32" and report.kernel.interpreted


def test_a_softmax_missing_its_term_fails():
    report = check_gradients(weighted(k.RowSoftmaxMissingTerm.apply), (X,), reference=weighted(k.softmax_reference), **FAST)
    assert not report.verdict.passed and report.verdict.found is not None
    assert "rank-one term" in [f.kind for f in report.diagnosis.findings]  # the −y yᵀ projection, told in float32 too


def test_a_softmax_that_forgets_one_rows_scaling_fails_on_that_row():
    report = check_gradients(weighted(k.RowSoftmaxLastRowUnscaled.apply), (X,), reference=weighted(k.softmax_reference), **FAST)
    found = report.verdict.found
    assert not report.verdict.passed and found.element // X.shape[1] == X.shape[0] - 1  # the last row


def test_rmsnorm_right_passes_and_a_doubled_weight_gradient_is_found_on_the_weight():
    reference = lambda x, w: k.rmsnorm_reference(x, w)  # noqa: E731
    assert check_gradients(k.RMSNorm.apply, (X, W), reference=reference, **FAST).verdict.passed
    report = check_gradients(k.RMSNormWeightGradTwice.apply, (X, W), reference=reference, **FAST)
    assert not report.verdict.passed and report.verdict.found.input == "x2"
    assert "factor" in [f.kind for f in report.diagnosis.findings]


def test_swiglu_writing_into_its_saved_inputs_passes_and_its_writes_are_named():
    a, b = normal(3, 5, seed=3), normal(3, 5, seed=4)
    report = check_gradients(k.SwiGLUInPlace.apply, (a, b), reference=k.swiglu_reference, **FAST)
    assert report.verdict.passed  # its gradient is right; the report names its writes, each with its element
    assert {(w.target, w.name) for w in report.kernel.writes} >= {("saved tensor", "x1"), ("saved tensor", "x2")}
    assert all(w.element.startswith(w.name + "[") for w in report.kernel.writes)
    assert unseen_writes(k.SwiGLU.apply, (a, b), ("a", "b")) == []


def test_a_kernel_that_refuses_float64_is_judged_in_float32_and_says_why():
    report = check_gradients(k.SquareFloat64Refused.apply, (X,), reference=k.square_reference, **FAST)
    assert report.verdict.passed
    native = report.kernel.native
    assert (native.dtype, native.stage, native.kind) == ("float32", "backward", "KeyError")


def test_a_function_that_launches_triton_kernels_is_detected_as_a_kernel_unless_declared_otherwise():
    from gradient_lab.engine.kernels import launches_triton

    assert launches_triton(k.Square.apply, (X,)) and not launches_triton(k.square_reference, (X,))
    detected = check_gradients(k.Square.apply, (X,), reference=k.square_reference, conditions="none", training=0)
    assert detected.verdict.passed and detected.kernel.detected and detected.kernel.native.dtype == "float32"
    assert detected.second_order.outcome == "not checked"  # first order, unless order=2
    assert not check_gradients(k.square_reference, (X,), conditions="none", training=0).kernel  # plain torch: no kernel
    plain = check_gradients(k.Square.apply, (X,), reference=k.square_reference, conditions="none", training=0, kernel=False)
    assert plain.kernel is None  # said not to be one: run as any formula

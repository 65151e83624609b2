"""Kernels (engine.kernels): a graph of its own per backward call, the native precision and why, and
the writes autograd cannot see, named with their element. A kernel's bug is still found."""

import math

import pytest
import torch

from gradient_lab.engine.kernels import fresh_graphs, native_precision, unseen_writes
from gradient_lab.testing import check_gradients
from tests.specimens.kernels import (SquareHalfGradient, SquareInFloat32, SquareRefusingFloat64, SquareWritingIntoGradOutput,
                                     SquareWritingIntoInput, SquareWritingIntoSaved, square)

X = torch.randn(6, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("kernel", [SquareInFloat32, SquareRefusingFloat64, SquareWritingIntoSaved, SquareWritingIntoGradOutput,
                                    SquareWritingIntoInput])
def test_a_right_kernel_passes_as_a_kernel(kernel):
    report = check_gradients(kernel.apply, (X,), reference=square, kernel=True)
    assert report.verdict.passed, report.verdict.summary
    assert report.kernel is not None and report.second_order.outcome == "not checked"  # first order only, unless asked


@pytest.mark.parametrize("kernel", [SquareRefusingFloat64, SquareWritingIntoSaved])
def test_the_same_kernels_fail_when_checked_as_plain_functions(kernel):
    assert not check_gradients(kernel.apply, (X,), reference=square, order=1, conditions="none").verdict.passed


def test_a_kernels_bug_is_found_with_its_cause_in_its_native_precision():
    report = check_gradients(SquareHalfGradient.apply, (X,), reference=square, kernel=True)
    assert not report.verdict.passed
    assert report.kernel.native is not None and report.kernel.native.dtype == "float32"
    assert [f.kind for f in report.diagnosis.findings][:1] == ["factor"]


def test_the_native_precision_says_why():
    refusing = native_precision(SquareRefusingFloat64.apply, square, (X,))
    assert (refusing.dtype, refusing.stage, refusing.kind) == ("float32", "backward", "KeyError")
    rounding = native_precision(SquareInFloat32.apply, square, (X,))
    assert rounding.stage == "" and 1e-10 < rounding.error < 1e-6  # float32's rounding, said in numbers
    assert native_precision(square, square, (X,)) is None  # float64 all the way: judged as given
    report = check_gradients(SquareRefusingFloat64.apply, (X,), reference=square, kernel=True)
    assert report.tolerances.rtol == 1e-4 and report.tolerances.step == 1e-3  # float32's


def test_a_fresh_graph_serves_every_backward_call_and_leaves_the_callers_tensors_alone():
    x = X.clone().requires_grad_()
    y = fresh_graphs(SquareWritingIntoSaved.apply)(x)
    u = torch.randn_like(y)
    first = torch.autograd.grad(y, x, u, retain_graph=True)[0]
    second = torch.autograd.grad(y, x, u)[0]
    assert torch.equal(first, second) and torch.allclose(first, 2 * X * u) and torch.equal(x.detach(), X)


@pytest.mark.parametrize("kernel, target, stage", [
    (SquareWritingIntoSaved, "saved tensor", "backward"),
    (SquareWritingIntoGradOutput, "grad_output", "backward"),
    (SquareWritingIntoInput, "input", "forward"),
], ids=["saved input", "grad_output", "input in forward"])
def test_each_write_autograd_cannot_see_is_named_with_its_element(kernel, target, stage):
    writes = unseen_writes(kernel.apply, (X,), ("x",))
    first = writes[0]
    assert (first.target, first.stage) == (target, stage)
    assert first.element.startswith(("x[", "grad_output[")) and not math.isclose(first.before, first.after)
    if kernel is SquareWritingIntoSaved:  # and a second backward on the same graph reads what the first wrote
        assert "a second backward" in [w.target for w in writes]


def test_a_kernel_that_writes_nothing_has_no_writes():
    assert unseen_writes(SquareInFloat32.apply, (X,), ("x",)) == []


def test_bfloat16_is_refused_for_a_kernel_under_the_interpreter_with_the_reason(monkeypatch):
    from gradient_lab.errors import LabError

    from gradient_lab.triton import interpreting

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    if not interpreting():  # triton imported in this process without it: then its knob, not the variable, says
        pytest.skip("triton imported in this process without the interpreter")
    with pytest.raises(LabError, match="bfloat16 is not checked under Triton's interpreter"):
        check_gradients(SquareInFloat32.apply, (X,), reference=square, kernel=True, dtype=torch.bfloat16)
    report = check_gradients(SquareInFloat32.apply, (X,), reference=square, kernel=True)
    assert report.kernel.interpreted  # said beside the verdict: interpreter semantics


def test_a_nan_in_the_inputs_is_no_write():
    x = X.clone()
    x[0, 0] = float("nan")
    assert unseen_writes(SquareInFloat32.apply, (x,), ("x",)) == []

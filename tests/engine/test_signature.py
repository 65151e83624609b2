"""gradient_lab.engine.signature and the pipeline on Functions as people ship them: several outputs, integer
and boolean inputs, declared constants, a forward that raises with no reference to fall back on."""

import sys
from pathlib import Path

import pytest
import torch

from gradient_lab.app.family import declare, get_family
from gradient_lab.engine.pipeline import check, compare_gradients, problem
from gradient_lab.engine.report import Failure
from gradient_lab.engine.signature import name_element, read_signature
from gradient_lab.testing import assert_gradients_match, check_gradients

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import my_functions as shipped  # noqa: E402 - the example module, importable by its file name

X = torch.randn(4, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
LABELS = torch.tensor([0, 7, 3, 3])


def cross_entropy(logits, label):
    return torch.nn.functional.cross_entropy(logits, label, reduction="none")


def test_element_names_are_written_one_way():
    assert name_element("x1", (3, 4), 7) == "x1[1, 3]"
    assert name_element("loss", (), 0) == "loss"


def test_a_tuple_output_keeps_its_differentiable_outputs_and_names_them():
    signature = read_signature((shipped.RowMax.apply,), (X,), ("x",), ("values", "indices"))
    assert [(s.name, s.differentiable) for s in signature.outputs] == [("values", True), ("indices", False)]
    assert signature.kept == (0,) and signature.packed_shape == (4,)
    assert signature.output_element(2) == "values[2]"


def test_several_float_outputs_are_packed_in_order_and_unpacked_back():
    signature = read_signature((lambda x: (x.sum(-1), x * 2),), (X,), ("x",))
    assert signature.kept == (0, 1) and signature.packed_shape == (4 + 32,)
    assert [s.name for s in signature.outputs] == ["out0", "out1"]
    assert signature.output_element(4) == "out1[0, 0]" and signature.output_element(35) == "out1[3, 7]"
    packed = signature.canonical(lambda x: (x.sum(-1), x * 2), (X,))(X)
    total, doubled = signature.unpack(packed)
    assert torch.equal(total, X.sum(-1)) and torch.equal(doubled, X * 2)


def test_an_output_marked_non_differentiable_is_not_checked_even_when_it_is_float():
    class Detached(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            rank = x.argsort(-1).to(x.dtype)
            ctx.mark_non_differentiable(rank)
            return x * 3, rank

        @staticmethod
        def backward(ctx, g, _):
            return 3 * g

    signature = read_signature((Detached.apply,), (X,), ("x",))
    assert [s.differentiable for s in signature.outputs] == [True, False]
    report = check_gradients(Detached, (X,))
    assert report.verdict.passed and report.jacobian.coverage.entries == 32 * 32


def test_integer_boolean_and_constant_inputs_are_held_and_never_differentiated():
    mask = torch.rand(4, 8, generator=torch.Generator().manual_seed(1)) > 0.5
    signature = read_signature((lambda x, m, w, t: (x * m * w).sum(-1) + t,), (X, mask, X.abs(), LABELS), ("x", "m", "w", "t"),
                               constants=("w",))
    assert signature.wrt == (0,) and signature.names == ("x",) and signature.constants == ("m", "w", "t")
    assert [s.dtype for s in signature.inputs] == ["float64", "bool", "float64", "int64"]


def test_a_correct_two_output_function_passes_and_a_wrong_one_is_caught_naming_the_output():
    family = declare("row max (test)", {"right": shipped.RowMax, "wrong": shipped.RowMaxToFirst}, reference=lambda x: x.max(-1),
                     outputs=("values", "indices"), correct=("right",))
    right, wrong = compare_gradients(family, "right", (X,)), compare_gradients(family, "wrong", (X,))
    assert right.verdict.outcome == "pass" and right.jacobian.coverage.entries == 4 * 32
    assert wrong.verdict.outcome == "fail" and "∂values[" in wrong.verdict.finding
    assert [c.name for c in right.inputs] == ["x"]


def test_an_integer_target_is_passed_through_and_only_the_logits_are_checked():
    family = declare("ce (test)", {"right": shipped.CrossEntropy, "wrong": shipped.CrossEntropyForgotTarget}, reference=cross_entropy,
                     inputs=("logits", "label"), correct=("right",))
    right, wrong = compare_gradients(family, "right", (X, LABELS)), compare_gradients(family, "wrong", (X, LABELS))
    assert right.verdict.passed and [c.name for c in right.inputs] == ["logits"]
    assert right.second_order is not None and right.second_order.outcome == "pass"
    assert not wrong.verdict.passed and wrong.jacobian.coverage.entries == 4 * 32
    assert assert_gradients_match(shipped.CrossEntropy, (X, LABELS), reference=cross_entropy, order=2).verdict.passed
    with pytest.raises(AssertionError, match=r"∂x1\[") as caught:
        assert_gradients_match(shipped.CrossEntropyForgotTarget, (X, LABELS))
    assert "x2[" not in str(caught.value)  # the labels are never given a gradient


def test_every_verdict_agrees_with_gradcheck_slow_mode_on_the_shipped_shapes():
    cases = [(shipped.RowMax, shipped.RowMaxToFirst, (X,)), (shipped.CrossEntropy, shipped.CrossEntropyForgotTarget, (X, LABELS))]
    for right, wrong, inputs in cases:
        for function in (right, wrong):
            xs = tuple(x.clone().requires_grad_() if x.is_floating_point() else x for x in inputs)
            truth = torch.autograd.gradcheck(function.apply, xs, fast_mode=False, raise_exception=False)
            assert check_gradients(function, inputs).verdict.passed == truth, function.__name__


def test_a_forward_that_raises_without_a_reference_is_a_failed_verdict_named_as_the_formulas():
    def broken(x):
        raise ValueError("forward is not written yet")

    report = compare_gradients(declare("broken (test)", {"broken": broken}), "broken", (X,))
    assert report.failure == Failure("forward", "ValueError", "forward is not written yet")
    assert report.verdict.outcome == "fail" and report.verdict.failure == report.failure and report.inputs == ()
    with pytest.raises(AssertionError, match="forward is not written yet"):
        assert_gradients_match(broken, (X,))


def test_a_reference_that_raises_is_named_as_the_references():
    def bad_reference(x):
        raise RuntimeError("reference blew up")

    report = check(problem("f", lambda x: x * 2, bad_reference, (X,), ("x",), lambda y: y.sum()))
    assert report.failure.stage == "reference" and report.verdict.outcome == "fail"
    assert report.verdict.text.startswith("the reference raised")


def test_the_builtin_gallery_keeps_its_one_output_shape():
    family = get_family("cosine")
    inputs = family.build_inputs((4, 8))
    p = family.problem("corrected", inputs)
    assert p.signature.packed_shape == (4,) and p.names == ("x1", "x2") and p.function(*inputs).shape == (4,)


def test_the_command_line_gives_a_failed_row_not_a_traceback_for_a_forward_that_raises(capsys):
    from gradient_lab import cli

    fixture = str(Path(__file__).resolve().parents[1] / "specimens" / "modules" / "raising_without_reference.py")
    results = cli.check_module(fixture)
    assert [(r.status, r.outcome) for r in results] == [("FAILED", "fail")]
    assert results[0].report.failure.kind == "NotImplementedError"
    assert cli.main(["check", fixture, "--format", "json"]) == 1
    assert "NotImplementedError" in capsys.readouterr().out


def test_the_command_line_checks_the_shipped_shapes():
    from gradient_lab import cli

    results = cli.check_module(str(Path(shipped.__file__)), family="cross entropy")
    assert {r.formula: r.status for r in results} == {"cross entropy": "ok", "forgot the target": "caught"}


def test_the_pages_views_say_a_raising_forward_is_the_formulas_not_a_bug_in_gradient_lab():
    from gradient_lab.app import plugins, views
    from gradient_lab.app.case import Case
    from gradient_lab.errors import FormulaError

    fixture = str(Path(__file__).resolve().parents[1] / "specimens" / "modules" / "raising_without_reference.py")
    assert plugins.load(fixture).error is None
    case = Case(family="unfinished", formulas=("unfinished",), shape=(3, 4))
    for view, arguments in ((views.surface, (views.PlaneSpec(), 11, 1.0)), (views.training, (views.PlaneSpec(), "SGD", 0.1, 3))):
        with pytest.raises(FormulaError) as raised:
            view(case, *arguments)
        assert isinstance(raised.value.error, NotImplementedError) and "'unfinished'" in str(raised.value)
    assert views.gradient_report(case, "unfinished").failure.kind == "NotImplementedError"


def test_a_classmethod_or_setup_context_function_gets_its_params_by_position_from_forwards_signature():
    from gradient_lab.engine.signature import forward_parameters, function_class, positional_apply

    class Scaled(torch.autograd.Function):  # forward(ctx, X, dim, scale): a package's classmethod style
        @classmethod
        def forward(cls, ctx, X, dim, scale=2.0):
            ctx.scale = scale
            return scale * X.sum(dim)

        @classmethod
        def backward(cls, ctx, g):
            return None, None, None

    class Summed(torch.autograd.Function):  # the setup_context style: forward has no ctx
        @staticmethod
        def forward(X, dim):
            return X.sum(dim)

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, g):
            return None, None

    x = torch.ones(2, 3)
    assert forward_parameters(Scaled) == ["X", "dim", "scale"] and forward_parameters(Summed) == ["X", "dim"]
    assert torch.equal(positional_apply(Scaled)(x, dim=1), torch.full((2,), 6.0))  # scale's default, dim by position
    assert torch.equal(positional_apply(Scaled)(x, scale=1.0, dim=0), torch.full((3,), 2.0))
    assert torch.equal(positional_apply(Summed)(x, dim=0), torch.full((3,), 2.0))
    with pytest.raises(TypeError, match="takes no param 'axis'"):
        positional_apply(Summed)(x, axis=0)
    assert function_class(positional_apply(Scaled)) is Scaled and function_class(Scaled.apply) is Scaled and function_class(len) is None


def test_three_or_more_differentiable_outputs_are_packed_and_judged():
    # torch.split, unbind, tensor_split, broadcast_tensors give several outputs (PyTorch's OpInfo samples)
    from gradient_lab.testing import check_gradients

    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    report = check_gradients(lambda x: torch.split(x * x, 2), x, reference=lambda x: torch.split(x * x, 2), conditions="none")
    assert report.failure is None and report.verdict.passed
    assert [s.shape for s in report.signature.outputs] == [(2, 4)] * 3


def test_a_complex_output_is_judged_as_its_real_and_imaginary_parts():
    from gradient_lab.testing import check_gradients

    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    report = check_gradients(torch.fft.rfft, x, conditions="none", training=0)
    assert report.verdict.passed and report.jacobian.output_shape == (3, 3, 2)

    class RfftConjugated(torch.autograd.Function):  # the gradient of the imaginary part's sign flipped
        @staticmethod
        def forward(ctx, x):
            return torch.fft.rfft(x)

        @staticmethod
        def backward(ctx, g):
            return torch.fft.irfft(g.conj(), n=4) * 0 + torch.fft.irfft(g, n=4) * 2

    assert not check_gradients(RfftConjugated, x, conditions="none", training=0).verdict.passed

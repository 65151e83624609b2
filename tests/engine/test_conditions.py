"""The conditions (``lib.engine.conditions``): every Function of the conditions zoo is right in
plain use (gradcheck's slow mode says so), and the verdict fails each broken one under the
condition it breaks under, and no other, while its plain verdict alone would pass; every control
and every correct formula of the gallery passes every condition. Then the pieces: the layouts,
the subsets, the words that say what was covered, ``conditions="none"``."""

from __future__ import annotations

import pytest
import torch

from gradient_lab.app.case import Case
from gradient_lab.app.family import families
from gradient_lab.engine import conditions as C
from gradient_lab.engine.pipeline import check
from gradient_lab.engine.report import ConditionResult, Conditions
from gradient_lab.engine.tolerances import default_tolerances
from gradient_lab.testing import as_family, check_gradients
from tests.specimens import conditions as zoo
from tests.specimens.contracts import Good
from tests.specimens.zoo import RowMax
from tests.app.functions.test_gallery import GALLERY

F64 = torch.float64


def _param(specimen: zoo.Specimen, *, missed: bool = True):
    marks = [pytest.mark.xfail(strict=True, reason=specimen.missed)] if missed and specimen.missed else []
    return pytest.param(specimen, id=specimen.name, marks=marks)


def _problem(function, inputs, reference=None):
    family = as_family(function, inputs, reference)
    return family.problem(family.name, inputs)


def _report(specimen: zoo.Specimen):
    return check_gradients(specimen.function, specimen.inputs(), reference=specimen.reference, order=1)


# ---- the zoo -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("specimen", [_param(s, missed=False) for s in zoo.SPECIMENS])
def test_every_zoo_function_is_right_in_plain_use_by_gradcheck(specimen):
    inputs = tuple(x.requires_grad_() for x in specimen.inputs())
    assert torch.autograd.gradcheck(specimen.function, inputs, fast_mode=False)


@pytest.mark.parametrize("specimen", [_param(s) for s in zoo.BROKEN])
def test_a_broken_backward_fails_under_its_condition_alone(specimen):
    report = _report(specimen)
    assert report.jacobian is not None and report.jacobian.passed  # the plain verdict alone would pass
    assert report.failure is None
    failed = report.conditions.failed
    assert report.verdict.outcome == "fail", [r.name for r in report.conditions.results]
    assert report.verdict.condition == specimen.condition
    assert tuple(r.name for r in failed) == specimen.failing
    assert {r.group for r in failed} == {specimen.group}
    if specimen.raises is None:
        assert report.verdict.failure is None and all(r.failure is None for r in failed)
    else:
        failure = report.verdict.failure
        assert (failure.stage, failure.kind, failure.when) == ("backward", specimen.raises, specimen.condition)


@pytest.mark.parametrize("specimen", [_param(s) for s in zoo.CONTROLS])
def test_a_control_passes_every_condition(specimen):
    report = _report(specimen)
    assert report.verdict.outcome == "pass" and report.verdict.condition == "" and report.verdict.failure is None
    outcomes = {r.name: r.outcome for r in report.conditions.results}
    assert set(outcomes.values()) <= {"pass", "not applicable"}, outcomes
    assert report.conditions.ran and report.verdict.conditions == report.conditions.describe()


def test_the_stride_zero_bug_is_real():
    (x,) = zoo.MATRIX()
    x.requires_grad_()
    (wrong,) = torch.autograd.grad(zoo.SquareStrideZeroMeansOnes.apply(x).sum() * 3, x)  # sum's backward expands the 3
    (right,) = torch.autograd.grad(zoo.SquareStrideZeroMeansOnes.apply(x).sum(), x)
    assert torch.allclose(right, 2 * x) and torch.allclose(wrong, 2 * x) and not torch.allclose(wrong, 6 * x)


def test_the_aliasing_bug_is_real():
    (x,) = zoo.MATRIX()
    x.requires_grad_()
    (grad,) = torch.autograd.grad(zoo.ProductNegatesInPlace.apply(x, x).sum(), x)
    assert torch.equal(grad, torch.zeros_like(x))  # 2x is due
    assert torch.equal(x, zoo.MATRIX()[0])  # and the input is put back


def test_the_zoo_covers_every_condition_group_and_the_plain_inputs_never_tie():
    assert {s.group for s in zoo.BROKEN} == set(C.GROUPS)
    named = {s.condition for s in zoo.BROKEN}
    assert {zoo.ONLY_X1, zoo.ONLY_X2, zoo.SHARED, zoo.EXPANDED, zoo.GRAD_TRANSPOSED, zoo.GRAD_SLICED, zoo.INPUTS_TRANSPOSED,
            zoo.INPUTS_SLICED, zoo.ALIASED, zoo.EMPTY, zoo.ONE_ROW, zoo.TIES} <= named
    for build in (zoo.MATRIX, zoo.TIED, zoo.PAIR):
        for x in build():
            assert x.unique().numel() == x.numel()


def test_the_ties_condition_ties_the_maximum_and_the_minimum_of_every_row():
    for build in (zoo.TIED, zoo.MATRIX):  # inputs that tie by themselves, and random ones that never do
        (t,) = C._tied((build()[0][: C.VALUE_ROWS],), [0])
        assert all(n >= 2 for n in (t == t.amax(-1, keepdim=True)).sum(-1).tolist())
        assert all(n >= 2 for n in (t == t.amin(-1, keepdim=True)).sum(-1).tolist())


def test_a_max_that_gives_every_tie_the_gradient_passes_entry_by_entry_and_fails_the_joint_rule():
    (x,) = zoo.TIED()
    (tied,) = C._tied((x[: C.VALUE_ROWS],), [0])
    tolerances = default_tolerances(F64)
    for function, wrong in ((zoo.RowMaxGivesEveryTie.apply, True), (zoo.RowMaxSplitsTies.apply, False),
                            (RowMax.apply, False)):
        problem = _problem(function, (tied,), zoo.row_max)
        assert check(problem, order=1, conditions="none").verdict.passed  # each entry is a valid one-sided derivative
        assert bool(C._tied_directions(problem, tolerances, 0)) is wrong


def test_the_aliasing_condition_passes_the_very_same_tensor_twice():
    seen = []

    def recording(a, b):
        seen.append(a is b)
        return a * b

    report = check_gradients(recording, zoo.PAIR(), reference=zoo.product, order=1)
    assert report.verdict.passed and zoo.ALIASED in {r.name for r in report.conditions.ran}
    assert True in seen and False in seen


class _Recorder(torch.autograd.Function):
    """The identity, recording the layouts its forward and backward are handed."""

    inputs: list = []
    grads: list = []

    @staticmethod
    def forward(ctx, x):
        _Recorder.inputs.append((tuple(x.stride()), x.storage_offset()))
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        _Recorder.grads.append((tuple(g.stride()), g.storage_offset()))
        return g


def test_the_conditions_hand_the_layouts_they_name():
    _Recorder.inputs.clear(), _Recorder.grads.clear()
    report = check_gradients(_Recorder.apply, zoo.MATRIX(), reference=zoo.identity, order=1)
    assert report.verdict.passed
    grads, inputs = set(_Recorder.grads), set(_Recorder.inputs)
    assert {((5, 1), 0), ((0, 0), 0), ((1, 6), 0), ((11, 2), 1)} <= grads  # dense, expanded, transposed, sliced
    assert {((5, 1), 0), ((1, 6), 0), ((10, 2), 1)} <= inputs  # contiguous, transposed, sliced


def test_a_plain_failure_is_the_verdict_and_no_condition_takes_its_place():
    broken = next(s for s in zoo.BROKEN if s.name == "x1's gradient needs x2's")

    class Wrong(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a * b

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            return g * b, 2 * g * a  # b's gradient twice too large

    report = check_gradients(Wrong.apply, broken.inputs(), reference=zoo.product, order=1)
    assert report.verdict.outcome == "fail" and not report.jacobian.passed
    assert report.verdict.condition == "" and report.conditions is not None


# ---- layouts -----------------------------------------------------------------------------------------------


def test_laid_out_keeps_the_values_in_the_strides_it_names():
    t = torch.arange(12, dtype=F64).reshape(3, 4)
    dense = C.laid_out(t, "dense")
    assert dense.is_contiguous() and dense.data_ptr() != t.data_ptr() and torch.equal(dense, t)
    transposed = C.laid_out(t, "transposed")
    assert transposed.stride() == (1, 3) and transposed.storage_offset() == 0 and torch.equal(transposed, t)
    sliced = C.laid_out(t, "sliced")
    assert sliced.stride() == (9, 2) and sliced.storage_offset() == 1 and torch.equal(sliced, t)
    assert not sliced.is_contiguous() and sliced._base is not None and sliced._base.shape == (3, 9)
    constant = torch.full((3, 4), 2.5, dtype=F64)
    expanded = C.laid_out(constant, "expanded")
    assert expanded.stride() == (0, 0) and expanded.untyped_storage().nbytes() == 8 and torch.equal(expanded, constant)
    assert C.laid_out(torch.arange(3, dtype=F64), "sliced").stride() == (2,)


def test_laid_out_says_where_a_layout_cannot_be():
    assert C.laid_out(torch.zeros(0, 4), "expanded") is None
    assert C.laid_out(torch.zeros(4), "transposed") is None
    assert C.laid_out(torch.zeros(1, 4), "transposed") is None
    assert C.laid_out(torch.zeros(4, 1), "transposed") is None
    assert C.laid_out(torch.tensor(1.0), "sliced") is None
    with pytest.raises(ValueError):
        C.laid_out(torch.zeros(2, 2), "diagonal")


def test_laid_out_input_keeps_the_values_and_the_gradient_flows_back():
    x = torch.randn(3, 4, dtype=F64, requires_grad=True)
    for layout, strides, offset in (("transposed", (1, 3), 0), ("sliced", (8, 2), 1)):
        y = C.laid_out_input(x, layout)
        assert y.stride() == strides and y.storage_offset() == offset and torch.equal(y, x)
        (grad,) = torch.autograd.grad((y * y).sum(), x)
        assert torch.allclose(grad, 2 * x)
    v = torch.randn(4, dtype=F64)
    assert C.laid_out_input(v, "transposed") is v


# ---- subsets, names, words ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "every", "count"), [(1, False, 0), (2, False, 2), (3, False, 6), (4, False, 14), (5, False, 10),
                                                   (5, True, 30)])
def test_subsets_are_every_proper_one_up_to_four_inputs_and_a_sample_beyond(n, every, count):
    subsets = C._subsets(n, every)
    assert len(subsets) == count == len(set(subsets))
    assert all(0 < len(s) < n for s in subsets)
    if n == 5 and not every:
        assert {s for s in subsets if len(s) == 1} == {(i,) for i in range(5)}
        assert {s for s in subsets if len(s) == 4} == {tuple(j for j in range(5) if j != i) for i in range(5)}


def test_subset_names():
    names = ("x1", "x2", "x3")
    assert C._subset_name((0,), names) == "only x1 requires a gradient"
    assert C._subset_name((0, 1), names) == "x3 does not require a gradient"
    assert C._subset_name((1,), ("a", "b", "c")) == "only b requires a gradient"


def test_five_inputs_sample_their_subsets_and_all_tries_every_one():
    inputs = zoo.normal(*[(3, 2)] * 5)()

    def five(a, b, c, d, e):
        return a * b + c * d * e

    counts = {}
    for which in ("default", "all"):
        report = check(_problem(five, inputs, five), order=1, conditions=which)
        assert report.verdict.passed
        groups = [r.group for r in report.conditions.results]
        counts[which] = groups.count("requires_grad"), groups.count("aliasing")
        labels = {r.label for r in report.conditions.results if r.group == "requires_grad"}
        assert labels == {"sample" if which == "default" else "every"}
    assert counts == {"default": (10, 1), "all": (30, 10)}


def test_describe_counts_what_ran_by_group():
    def r(name, group, label, outcome="pass"):
        return ConditionResult(name, group, label, outcome)

    conditions = Conditions((
        r(zoo.ONLY_X1, "requires_grad", "every"), r(zoo.ONLY_X2, "requires_grad", "every", "fail"),
        r(zoo.EXPANDED, "grad_output", "expanded"), r(zoo.GRAD_TRANSPOSED, "grad_output", "transposed", "not applicable"),
        r(zoo.GRAD_SLICED, "grad_output", "sliced"), r(zoo.INPUTS_TRANSPOSED, "inputs", "transposed"),
        r(zoo.ALIASED, "aliasing", "x1 passed as x2 too"), r(zoo.EMPTY, "size", "an empty batch", "as plain"),
    ))
    assert len(conditions.ran) == 7 and [c.name for c in conditions.failed] == [zoo.ONLY_X2]
    assert conditions.describe() == ("7 conditions: every subset of requires_grad (2), grad_output expanded and sliced, "
                                     "inputs transposed, x1 passed as x2 too, an empty batch")
    sample = Conditions(tuple(r(f"s{i}", "requires_grad", "sample") for i in range(10)) + (r(zoo.TIES, "ties", "ties and kinks"),))
    assert sample.describe() == "11 conditions: 10 subsets of requires_grad, ties and kinks"
    assert Conditions((r(zoo.ONE_ROW, "size", "a batch of one"),)).describe() == "1 condition: a batch of one"
    assert Conditions(()).describe() == "no condition"
    assert Conditions((r(zoo.ONE_ROW, "size", "a batch of one", "not applicable"),)).describe() == "no condition"


def test_conditions_none_runs_none_and_an_unknown_set_is_refused():
    problem = _problem(Good.apply, zoo.PAIR(), zoo.product)
    report = check(problem, order=1, conditions="none")
    assert report.conditions is None and report.verdict.passed and report.verdict.conditions == ""
    with pytest.raises(ValueError):
        check(problem, order=1, conditions="some")


# ---- the gallery: no false alarm ----------------------------------------------------------------------------


@pytest.mark.filterwarnings(r"ignore:var\(\). degrees of freedom:UserWarning")  # layernorm's var on the empty batch
@pytest.mark.parametrize("name", ("cosine", *GALLERY))
def test_every_correct_formula_of_the_gallery_passes_every_condition(name):
    family = families()[name]
    case = Case(family=name, formulas=tuple(family.formulas))
    inputs = case.inputs()
    for formula, declared in family.formulas.items():
        if not declared.correct:
            continue
        report = check(family.problem(formula, inputs, case.param_values()), order=1)
        outcomes = {r.name: r.outcome for r in report.conditions.results}
        assert report.verdict.passed and report.verdict.condition == "", (formula, report.verdict.summary)
        assert set(outcomes.values()) <= {"pass", "not applicable"}, (formula, outcomes)
        assert len(report.conditions.ran) >= 5



@pytest.mark.parametrize("name, convention", [("max splits ties", "split evenly"), ("max picks the first", "to the first index"),
                                              ("relu 1 at 0", "")])
def test_a_valid_gradient_at_ties_is_named_by_the_convention_it_follows(name, convention):
    specimen = next(s for s in zoo.SPECIMENS if s.name == name)
    inputs = specimen.inputs()
    family = as_family(specimen.function, inputs, specimen.reference)
    tied = family.problem(family.name, C._tied(inputs, [0]))
    assert C.convention(tied) == convention  # "" for a function that selects nothing (elementwise)
    report = check_gradients(specimen.function, inputs, reference=specimen.reference, order=1)
    (ties,) = [r for r in report.conditions.results if r.group == "ties"]
    assert ties.outcome == "pass" and (convention in ties.finding if convention else not ties.finding)


def test_other_values_beyond_the_default_size_are_said_not_applicable_and_run_with_all(monkeypatch):
    from gradient_lab.app.family import get_family

    monkeypatch.setattr(C, "VALUE_ELEMENTS", 40)  # 4 rows of 16 features, two inputs: 128 elements
    family = get_family("cosine")
    case = Case()
    problem = family.problem("corrected", case.inputs(), case.param_values())
    default = {r.group: r.outcome for r in check(problem, order=1).conditions.results}
    assert default["aliasing"] == default["ties"] == "not applicable" and default["size"] in ("pass", "not applicable")
    every = {r.group: r.outcome for r in check(problem, order=1, conditions="all").conditions.results}
    assert every["aliasing"] == every["ties"] == "pass"


@pytest.mark.parametrize("dim, batch", [(0, False), (-1, True)])
def test_only_a_leading_dim_that_is_a_batch_is_emptied_or_cut_to_one_row(dim, batch):
    # a softmax over dim 0 mixes the leading rows: emptied, it is another function (and its backward may rightly raise)
    x = torch.randn(4, 6, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    report = check_gradients(lambda x: torch.softmax(x, dim), x, reference=lambda x: torch.softmax(x, dim), training=0)
    size = {r.name: r.outcome for r in report.conditions.results if r.group == "size"}
    assert {"the batch is empty", "the batch has one row"} <= set(size)  # and, for a batch, a row fewer and a row more
    assert all((outcome == "pass") is batch for outcome in size.values())
    assert all((outcome == "not applicable") is not batch for outcome in size.values())


def test_a_condition_outside_the_functions_domain_does_not_apply():
    from tests.specimens.corpus.functions import LogDetCholesky

    b = torch.randn(5, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    a = b @ b.T + 5 * torch.eye(5, dtype=torch.float64)
    report = check_gradients(LogDetCholesky, a, reference=torch.logdet, training=0)
    outcomes = {r.name: (r.outcome, r.finding) for r in report.conditions.results}
    assert report.verdict.passed, report.verdict.summary
    for name in ("the batch has one row", "the batch is empty"):  # A[:1] is not square: torch.logdet raises there too
        assert outcomes[name][0] == "not applicable" and "reference" in outcomes[name][1], outcomes[name]
    assert not report.conditions.failed, outcomes  # the tied, rounded matrix is singular: outside the domain, not a failure


def test_changed_inputs_where_the_truth_raises_or_is_nowhere_finite_are_outside_the_domain():
    from types import SimpleNamespace

    outside = lambda *given: C._outside_domain(SimpleNamespace(given_truth=torch.logdet, given=given))  # noqa: E731
    assert "raises there too" in outside(torch.zeros(1, 3, dtype=torch.float64))  # not square
    assert "not finite there" in outside(torch.zeros(3, 3, dtype=torch.float64))  # singular: −inf
    assert outside(torch.eye(3, dtype=torch.float64)) == ""
    assert C._outside_domain(SimpleNamespace(given_truth=None, given=())) == ""


def test_an_input_layout_that_only_moves_rounding_at_an_ill_conditioned_point_is_no_failure():
    # rows of norm eps: normalising them amplifies rounding, and a transposed layout rounds otherwise, the reference too
    from gradient_lab.app import views
    from gradient_lab.explore.perturb import Perturbation

    case = Case(family="normalize", formulas=("corrected",), perturbation=Perturbation(near_zero_rows=2, near_zero_factor=1.0))
    report = views.gradient_report(case, "corrected")
    layouts = {r.name: r.outcome for r in report.conditions.results if r.group == "inputs"}
    assert report.verdict.passed and layouts and set(layouts.values()) == {"pass"}


def _fused_bias_leaky_relu(x, bias):
    return torch.nn.functional.leaky_relu(x + bias.view(1, -1, 1, 1), 0.2) * 2**0.5


def test_a_parameter_as_long_as_the_batch_is_kept_whole_when_the_batch_is_cut():
    # N == C: the bias's leading size is the batch's, yet every output row reads all of it
    from tests.specimens.corpus.functions import FusedBiasLeakyReLU

    generator = torch.Generator().manual_seed(0)
    x, bias = torch.randn(3, 3, 2, 2, generator=generator, dtype=torch.float64), torch.randn(3, generator=generator, dtype=torch.float64)
    report = check_gradients(FusedBiasLeakyReLU, (x, bias), reference=_fused_bias_leaky_relu, training=0)
    size = {r.name: r.outcome for r in report.conditions.results if r.group == "size"}
    assert {"the batch is empty", "the batch has one row"} <= set(size) and set(size.values()) == {"pass"}, report.conditions.results


@pytest.mark.parametrize("dims, emptied", [((0, None), ((0, 3, 2, 2), (3,))), ((1, 0), ((4, 0, 2, 2), (0,)))],
                         ids=["batch first, bias whole", "channels as the batch"])
def test_declared_batch_dims_say_what_the_size_conditions_cut(dims, emptied):
    seen = []

    class AddBias(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, bias):
            seen.append((tuple(x.shape), tuple(bias.shape)))
            return x + bias.view(1, -1, 1, 1)

        @staticmethod
        def backward(ctx, grad):
            return grad, grad.sum((0, 2, 3))

    generator = torch.Generator().manual_seed(0)
    x, bias = torch.randn(4, 3, 2, 2, generator=generator, dtype=torch.float64), torch.randn(3, generator=generator, dtype=torch.float64)
    report = check_gradients(AddBias, (x, bias), reference=lambda x, bias: x + bias.view(1, -1, 1, 1), training=0, batch_dims=dims)
    size = {r.name: r.outcome for r in report.conditions.results if r.group == "size"}
    assert {"the batch is empty", "the batch has one row"} <= set(size) and set(size.values()) == {"pass"}, report.conditions.results
    assert emptied in seen


def test_batch_dims_that_do_not_fit_the_inputs_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="one int or None per input"):
        check_gradients(lambda x: x * 2, torch.ones(2, 3, dtype=torch.float64), batch_dims=(0, None))
    with pytest.raises(ValueError, match="at least one batched input"):
        check_gradients(lambda x: x * 2, torch.ones(2, 3, dtype=torch.float64), batch_dims=(None,))


def test_a_backward_wrong_when_only_one_output_is_used_fails_that_condition_as_gradcheck_fails_it():
    from tests.specimens.conditions import SinCosNeedsTheFirst

    x = torch.randn(6, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    report = check_gradients(SinCosNeedsTheFirst, x, reference=lambda x: (x.sin(), x.cos()), training=0)
    outcomes = {r.name: r.outcome for r in report.conditions.results if r.name.endswith("is used")}
    assert outcomes == {"only out0 is used": "pass", "only out1 is used": "fail"}
    assert report.verdict.condition == "only out1 is used" and report.jacobian.passed  # both outputs used: right
    assert not torch.autograd.gradcheck(SinCosNeedsTheFirst.apply, (x.clone().requires_grad_(),), raise_exception=False)


def test_each_output_alone_is_judged_even_without_conditions_as_gradcheck_judges_it():
    from tests.specimens.conditions import SinCosNeedsTheFirst

    x = torch.randn(6, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    report = check_gradients(SinCosNeedsTheFirst, x, conditions="none", training=0)
    assert report.verdict.condition == "only out1 is used"
    assert [r.name for r in report.conditions.results] == ["only out0 is used", "only out1 is used"]
    single = check_gradients(lambda x: x.sin(), x, conditions="none", training=0)
    assert single.conditions is None  # one output: nothing more to judge


# ---- sizes: a row fewer, a row more ---------------------------------------------------------------------------


def test_a_backward_wrong_past_a_tile_fails_at_the_sizes_next_to_the_case_and_names_them():
    x = torch.randn(8, 5, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    assert torch.autograd.gradcheck(zoo.SquareTiledByFour.apply, (x.clone().requires_grad_(),), fast_mode=False)  # right at 8 rows
    report = check_gradients(zoo.SquareTiledByFour.apply, (x,), reference=lambda x: x * x, order=1)
    sizes = {r.name: r.outcome for r in report.conditions.results if r.group == "size"}
    assert sizes["the batch has 7 rows"] == "fail" and sizes["the batch has 9 rows"] == "fail"
    assert not report.verdict.passed and report.verdict.condition  # the verdict names a size it fails at
    right = check_gradients(lambda x: x * x * 1.0, (x,), reference=lambda x: x * x, order=1)
    assert {r.name: r.outcome for r in right.conditions.results if r.group == "size"} == {
        "the batch is empty": "pass", "the batch has one row": "pass", "the batch has 7 rows": "pass", "the batch has 9 rows": "pass"}


class _MeanSquareEmptyRaises(torch.autograd.Function):
    """mean(x²) whose backward takes a max over the input (as Liger-Kernel's cross entropy's does),
    which raises on an empty batch."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x * x).mean()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        x.abs().max()  # raises on an empty x
        return 2 * x * g / x.numel()


def test_a_backward_that_raises_on_an_empty_batch_fails_unless_the_truth_is_undefined_there():
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    empty = lambda report: next(r for r in report.conditions.results if r.name == "the batch is empty")  # noqa: E731
    mean = empty(check_gradients(_MeanSquareEmptyRaises.apply, (x,), reference=lambda x: (x * x).mean(), training=0))
    assert mean.outcome == "not applicable" and "not finite there" in mean.finding  # a mean over no rows is NaN: nothing asked
    total = empty(check_gradients(lambda x: _MeanSquareEmptyRaises.apply(x) * x.numel(), (x,), reference=lambda x: (x * x).sum(),
                                  training=0))
    assert total.outcome == "fail" and total.failure.kind == "RuntimeError"  # a sum over no rows is 0: its gradient is asked

"""Finite differences: colouring is valid and compact, compressed and dense agree, chunks agree."""

import numpy as np
import pytest
import torch

from gradient_lab.app.functions.cosine import FORMULAS, cosine_reference
from gradient_lab.engine.planning import CHECK_DIRECTIONS, color_columns, is_valid_coloring, jacobian_patterns, plan_differences
from gradient_lab.engine.evaluate import numerical_gradient, numerical_jacobian
from tests.specimens.toys import ScaledBySum

F64 = torch.float64


def inputs(*shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(s, generator=g, dtype=F64) for s in shapes)


def corrected(a, b):
    return FORMULAS["corrected"].apply(a, b, 1, 1e-8)


def tutorial(a, b):
    return FORMULAS["tutorial"].apply(a, b, 1, 1e-8)


def assert_valid_coloring(rows, cols, colors):
    seen = {}
    for r, c in zip(rows.tolist(), cols.tolist()):
        assert seen.setdefault((r, colors[c]), c) == c, f"columns share row {r} and colour {colors[c]}"


def test_row_wise_pattern_takes_as_many_colours_as_the_longest_row():
    rows, cols = jacobian_patterns(cosine_reference, inputs((6, 9), (6, 9)), 2**20)[0]
    assert rows.size == 6 * 9  # each row of x1 meets only its own output
    colors = color_columns(rows, cols, 54)
    assert colors.max() + 1 == 9
    assert_valid_coloring(rows, cols, colors)


def test_banded_pattern_gets_a_valid_greedy_colouring():
    n = 40  # tridiagonal: column j meets rows j-1, j, j+1
    rows = np.array([r for j in range(n) for r in (j - 1, j, j + 1) if 0 <= r < n])
    cols = np.array([j for j in range(n) for r in (j - 1, j, j + 1) if 0 <= r < n])
    colors = color_columns(rows, cols, n)
    assert_valid_coloring(rows, cols, colors)
    assert colors.max() + 1 == 3


def test_compressed_differences_equal_the_true_gradient_with_few_evaluations():
    xs = inputs((16, 32), (16, 32))
    upstream = torch.randn(16, dtype=F64)
    plans = plan_differences(corrected, cosine_reference, xs, 1e-6)
    a, b = (x.clone().requires_grad_() for x in xs)
    truth = torch.autograd.grad(torch.nn.functional.cosine_similarity(a, b), (a, b), upstream)
    for plan, want in zip(plans, truth):
        assert plan.colors is not None and plan.n_groups == 32
        assert plan.evaluations == 2 * 32 + 2 * CHECK_DIRECTIONS  # not 2 per element (1024)
        got = numerical_gradient(corrected, xs, plan, upstream, 1e-6)
        np.testing.assert_allclose(got, want.numpy(), atol=1e-9)


def test_function_without_vmap_rule_and_small_budget_give_the_same_gradient():
    xs = inputs((8, 6), (8, 6))
    upstream = torch.ones(8, dtype=F64)
    plans = plan_differences(tutorial, cosine_reference, xs, 1e-6)  # legacy Function: looped
    tight = plan_differences(tutorial, cosine_reference, xs, 1e-6, budget_bytes=1)  # one direction per chunk
    for plan, small in zip(plans, tight):
        np.testing.assert_allclose(
            numerical_gradient(tutorial, xs, plan, upstream, 1e-6),
            numerical_gradient(tutorial, xs, small, upstream, 1e-6, budget_bytes=1),
            atol=1e-12,
        )


def test_dense_jacobian_falls_back_to_one_perturbation_per_element():
    (x,) = inputs((3, 4))
    f = lambda x: ScaledBySum.apply(x)  # noqa: E731
    (plan,) = plan_differences(f, lambda x: x * x.sum(), (x,), 1e-6)
    assert plan.n_groups == 12 and "dense" in plan.source
    assert plan.evaluations == 2 * 12 + 2 * CHECK_DIRECTIONS
    jac = numerical_jacobian(f, (x,), plan, 1e-6)
    want = torch.autograd.functional.jacobian(lambda x: x * x.sum(), x).reshape(12, 12).numpy()
    np.testing.assert_allclose(jac, want, atol=1e-8)
    upstream = torch.randn(3, 4, dtype=F64)
    np.testing.assert_allclose(numerical_gradient(f, (x,), plan, upstream, 1e-6), (want.T @ upstream.reshape(-1).numpy()).reshape(3, 4), atol=1e-8)


def test_a_reference_that_misses_dependencies_is_caught_by_the_random_direction():
    (x,) = inputs((4, 6))
    reaching = lambda x: x * x + 0.5 * torch.roll(x, 1, dims=-1)  # noqa: E731
    (plan,) = plan_differences(reaching, lambda x: x * x, (x,), 1e-6)
    assert plan.colors is None and "did not reproduce differences along random directions" in plan.source
    jac = numerical_jacobian(reaching, (x,), plan, 1e-6)
    want = torch.autograd.functional.jacobian(reaching, x).reshape(24, 24).numpy()
    np.testing.assert_allclose(jac, want, atol=1e-8)


def test_no_reference_means_dense():
    xs = inputs((2, 3), (2, 3))
    plans = plan_differences(corrected, None, xs, 1e-6)
    assert all(p.colors is None and "no reference" in p.source for p in plans)


@pytest.mark.parametrize("shape, dim", [((3, 4, 5), 1), ((3, 4, 5), -1), ((7,), 0)])
def test_compressed_jacobian_matches_autograd_for_any_dim(shape, dim):
    xs = inputs(shape, shape)
    f = lambda a, b: FORMULAS["corrected"].apply(a, b, dim, 1e-8)  # noqa: E731
    ref = lambda a, b: torch.nn.functional.cosine_similarity(a, b, dim=dim)  # noqa: E731
    for plan in plan_differences(f, ref, xs, 1e-6):
        want = torch.autograd.functional.jacobian(ref, xs)[plan.input_index].reshape(plan.n_outputs, -1).numpy()
        np.testing.assert_allclose(numerical_jacobian(f, xs, plan, 1e-6), want, atol=1e-8)


def test_structure_is_found_once_per_key_and_shape(monkeypatch):
    import gradient_lab.engine.planning as numerical

    calls = []
    real = numerical.jacobian_patterns
    monkeypatch.setattr(numerical, "jacobian_patterns", lambda *a: calls.append(1) or real(*a))
    numerical.forget_patterns()
    key = ("cosine-test", 1)
    first = plan_differences(corrected, cosine_reference, inputs((5, 6), (5, 6), seed=1), 1e-6, structure_key=key)
    again = plan_differences(corrected, cosine_reference, inputs((5, 6), (5, 6), seed=2), 1e-6, structure_key=key)
    assert len(calls) == 1
    np.testing.assert_array_equal(first[0].colors, again[0].colors)
    plan_differences(corrected, cosine_reference, inputs((5, 7), (5, 7)), 1e-6, structure_key=key)  # new shape
    plan_differences(corrected, cosine_reference, inputs((5, 6), (5, 6)), 1e-6)  # no key: never cached
    assert len(calls) == 3


def test_a_row_holding_half_the_columns_is_coloured_validly_and_in_few_colours():
    n = 1000
    rows = np.concatenate([np.zeros(n // 2, dtype=np.int64), np.arange(1, n + 1)])
    cols = np.concatenate([np.arange(n // 2), np.arange(n)])
    colors = color_columns(rows, cols, n)
    assert is_valid_coloring(rows, cols, colors) and colors.max() + 1 == n // 2


def test_structure_is_not_read_when_it_would_take_too_long():
    xs = inputs((6, 8), (6, 8))
    plans = plan_differences(corrected, cosine_reference, xs, 1e-6, work_limit=10)
    assert all(p.colors is None and "would take too long" in p.source for p in plans)


# ---- regressions: the engine faults of issue 12 -----------------------------------------------------


def test_every_output_not_finite_gives_nan_gradients_not_an_error():
    (x,) = inputs((3, 4))
    x[:] = float("nan")  # was: ValueError: cannot convert float NaN to integer (an empty bincount is integer)
    for reference in (lambda x: x * x, None):
        (plan,) = plan_differences(lambda x: x * x, reference, (x,), 1e-6)
        assert np.isnan(numerical_gradient(lambda x: x * x, (x,), plan, torch.ones(3, 4, dtype=F64), 1e-6)).all()


def test_a_nan_output_gives_nan_on_both_difference_paths():
    """Compressed (a pattern) and per-element (none) both call an element that feeds an output
    that is not finite undefined; they once gave NaN on one path and 0 on the other."""
    xs = inputs((4, 6), (4, 6))
    xs[0][2, 3] = float("nan")
    upstream = torch.ones(4, dtype=F64)
    structured = plan_differences(corrected, cosine_reference, xs, 1e-6)
    unstructured = plan_differences(corrected, None, xs, 1e-6)
    for a, b in zip(structured, unstructured):
        ga = numerical_gradient(corrected, xs, a, upstream, 1e-6)
        gb = numerical_gradient(corrected, xs, b, upstream, 1e-6)
        assert np.isnan(ga[2]).all() and np.isnan(gb[2]).all()  # the row feeding the NaN output
        assert np.isfinite(ga[[0, 1, 3]]).all()  # the pattern knows the other rows are untouched


def test_a_missed_coupling_above_the_verdicts_tolerance_is_caught():
    """A pattern that misses a coupling of 3e-4 once passed a check of 1e-4 × scale; the check is
    now as strict as the verdict (atol 1e-5), so the plan falls back and the truth is right."""
    (x,) = inputs((4, 6))
    reaching = lambda x: x * x + 3e-4 * torch.roll(x, 1, dims=-1)  # noqa: E731
    (plan,) = plan_differences(reaching, lambda x: x * x, (x,), 1e-6)
    assert plan.colors is None
    want = torch.autograd.functional.jacobian(reaching, x).reshape(24, 24).numpy()
    np.testing.assert_allclose(numerical_jacobian(reaching, (x,), plan, 1e-6), want, atol=1e-9)


def test_a_kept_pattern_is_verified_at_each_new_point():
    """ReLU's structure depends on the signs: a pattern kept from one point misses couplings at
    another, and is found afresh there instead of being trusted."""
    import gradient_lab.engine.planning as numerical

    numerical.forget_patterns()
    coupled = lambda x: torch.relu(x) * x.sum(-1, keepdim=True).relu()  # noqa: E731 - a row's outputs all meet when its sum > 0
    key = ("relu-test",)
    x_negative_sums = -inputs((3, 4))[0].abs() - 0.1  # every row sum negative: a row's outputs are all 0
    plan_differences(coupled, coupled, (x_negative_sums,), 1e-6, structure_key=key)
    x = inputs((3, 4), seed=5)[0].abs() + 0.1  # all positive: every output depends on its whole row
    (plan,) = plan_differences(coupled, coupled, (x,), 1e-6, structure_key=key)
    want = torch.autograd.functional.jacobian(coupled, x).reshape(12, 12).numpy()
    np.testing.assert_allclose(numerical_jacobian(coupled, (x,), plan, 1e-6), want, atol=1e-8)


def test_block_patterns_are_coloured_by_position_within_the_block():
    """Softmax rows are dense blocks: 8 × 256 once fell back to one perturbation per element."""
    x = inputs((8, 256))[0]
    (plan,) = plan_differences(lambda x: torch.softmax(x, -1), lambda x: torch.softmax(x, -1), (x,), 1e-6)
    assert plan.structured and plan.n_groups == 256
    assert is_valid_coloring(plan.rows, plan.cols, plan.colors)


class DoubledByItsVmapRule(torch.autograd.Function):
    """y = x², right forward and backward, but a vmap rule that doubles the output."""

    @staticmethod
    def forward(x):
        return x * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g

    @staticmethod
    def vmap(info, in_dims, x):
        return 2 * x.movedim(in_dims[0], 0) ** 2, 0


@pytest.mark.parametrize("with_reference", [True, False])
def test_a_wrong_vmap_rule_does_not_corrupt_the_truth(with_reference):
    (x,) = inputs((3, 4))
    f = DoubledByItsVmapRule.apply
    assert torch.allclose(torch.func.vmap(f)(x[None])[0], 2 * x * x)  # the rule is wrong indeed
    (plan,) = plan_differences(f, (lambda x: x * x) if with_reference else None, (x,), 1e-6)
    got = numerical_gradient(f, (x,), plan, torch.ones(3, 4, dtype=F64), 1e-6)
    np.testing.assert_allclose(got, 2 * x.numpy(), atol=1e-8)


def test_kept_patterns_are_bounded_in_bytes_oldest_dropped_first(monkeypatch):
    from gradient_lab.engine import planning as numerical
    from gradient_lab.sizes import array_bytes

    softmax = lambda t: t.softmax(-1)  # noqa: E731
    x = torch.randn(8, 16, dtype=torch.float64)
    numerical.forget_patterns()
    assert numerical.kept_patterns_bytes() == 0
    (plan,) = plan_differences(softmax, softmax, (x,), 1e-6, structure_key="a")
    one = array_bytes((plan.rows, plan.cols, plan.colors))  # what is kept: the plan's own pattern, whole buffers
    assert plan.structured and numerical.kept_patterns_bytes() == one
    # the limit is a constant with no setter: lowered here to room for one such pattern, not two
    monkeypatch.setattr(numerical, "_STRUCTURES_BYTES", int(1.5 * one))
    assert numerical.kept_patterns_limit() == int(1.5 * one)
    plan_differences(softmax, softmax, (x,), 1e-6, structure_key="b")
    assert numerical.kept_patterns_bytes() == one <= numerical.kept_patterns_limit()  # one of the two kept
    calls = []
    real = numerical.jacobian_patterns
    monkeypatch.setattr(numerical, "jacobian_patterns", lambda *a, **k: calls.append(1) or real(*a, **k))
    plan_differences(softmax, softmax, (x,), 1e-6, structure_key="b")
    assert calls == []  # the newest, "b", is the one kept ...
    plan_differences(softmax, softmax, (x,), 1e-6, structure_key="a")
    assert calls == [1]  # ... the oldest, "a", was dropped

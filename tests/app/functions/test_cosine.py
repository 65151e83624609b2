"""The cosine formulas: the corrected Function against PyTorch, the tutorial's bugs made visible."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.autograd import gradcheck, gradgradcheck
from torch.func import grad, hessian, jacfwd, jacrev, vmap

from gradient_lab.app.functions.cosine import (
    FAMILY,
    FORMULAS,
    CosineSimilarityFormulaLoss,
    CosineSimilarityFunction,
    CosineSimilarityLoss,
    CosineSimilarityLossFunction,
    TutorialFunction,
    build_inputs,
    cosine_similarity,
)

F64 = torch.float64


def pair(shape1, shape2=None, *, scale1=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    x1 = torch.randn(shape1, generator=g, dtype=F64) * scale1
    x2 = torch.randn(shape2 or shape1, generator=g, dtype=F64)
    return x1.requires_grad_(), x2.requires_grad_()


def unit_rows(x, dim=-1):
    return (x / x.norm(dim=dim, keepdim=True)).detach().requires_grad_()


def gradients(fn, x1, x2, grad_output=None):
    y = fn(x1, x2)
    if grad_output is None:
        grad_output = torch.randn(y.shape, generator=torch.Generator().manual_seed(1), dtype=y.dtype)
    return y, torch.autograd.grad(y, (x1, x2), grad_output)


# ---- corrected: equal to PyTorch, and every autograd check passes ---------------------------------

# (x1 shape, x2 shape, dim, eps, scale of x1): a spread of shapes PyTorch accepts
CASES = {
    "1-D": ((6,), (6,), 0, 1e-8, 1.0),
    "1-D dim=-1": ((6,), (6,), -1, 1e-8, 1.0),
    "2-D dim=1": ((4, 5), (4, 5), 1, 1e-8, 1.0),
    "2-D dim=0": ((4, 5), (4, 5), 0, 1e-8, 1.0),
    "3-D dim=0": ((3, 4, 2), (3, 4, 2), 0, 1e-8, 1.0),
    "3-D dim=1": ((3, 4, 2), (3, 4, 2), 1, 1e-8, 1.0),
    "3-D dim=2": ((3, 4, 2), (3, 4, 2), 2, 1e-8, 1.0),
    "3-D dim=-2": ((3, 4, 2), (3, 4, 2), -2, 1e-8, 1.0),
    "broadcast row": ((4, 5), (1, 5), 1, 1e-8, 1.0),
    "broadcast 3-D": ((3, 4, 2), (1, 4, 1), 1, 1e-8, 1.0),
    "broadcast ranks": ((5,), (3, 5), -1, 1e-8, 1.0),
    # norms at 2-3x eps, above the clamp, with a finite-difference step far below the kink
    "norms near eps": ((4, 5), (4, 5), 1, 1e-3, 1e-3),
    # eps large, every norm above it: the clamp must not touch unclamped rows
    "large eps": ((4, 5), (4, 5), 1, 0.5, 3.0),
}


def corrected(dim, eps):
    return lambda a, b: CosineSimilarityFunction.apply(a, b, dim, eps)


@pytest.mark.parametrize("name", CASES)
def test_corrected_matches_pytorch_values_and_gradients(name):
    shape1, shape2, dim, eps, scale = CASES[name]
    x1, x2 = pair(shape1, shape2, scale1=scale)
    y, grads = gradients(corrected(dim, eps), x1, x2)
    y_ref, grads_ref = gradients(lambda a, b: F.cosine_similarity(a, b, dim=dim, eps=eps), x1, x2)
    assert y.shape == y_ref.shape
    torch.testing.assert_close(y, y_ref, rtol=1e-14, atol=1e-15)
    for got, want in zip(grads, grads_ref):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12 * want.abs().max().item())


@pytest.mark.parametrize("name", CASES)
def test_corrected_passes_every_autograd_check(name):
    shape1, shape2, dim, eps, scale = CASES[name]
    x1, x2 = pair(shape1, shape2, scale1=scale)
    fn = corrected(dim, eps)
    step = 1e-6 * scale
    assert gradcheck(fn, (x1, x2), eps=step, check_forward_ad=True, check_batched_grad=True)
    assert gradgradcheck(fn, (x1, x2), eps=step, check_fwd_over_rev=True, check_batched_grad=True)


def test_corrected_with_a_row_of_zeros_passes_gradcheck():
    # with the finite-difference step below eps, the zero row stays in the clamped, linear region
    x1, x2 = pair((4, 5))
    with torch.no_grad():
        x1[2] = 0
    fn = corrected(1, 1e-3)
    assert gradcheck(fn, (x1, x2), eps=1e-6, check_forward_ad=True, check_batched_grad=True)
    assert gradgradcheck(fn, (x1, x2), eps=1e-6)
    _, (g1, _) = gradients(fn, x1, x2)
    _, (g1_ref, _) = gradients(lambda a, b: F.cosine_similarity(a, b, eps=1e-3), x1, x2)
    torch.testing.assert_close(g1, g1_ref, rtol=1e-12, atol=1e-12)
    assert torch.isfinite(g1).all()


def test_clamped_norms_follow_pytorch_not_the_derivative_of_the_forward():
    """Where a norm is clamped, PyTorch's autograd still differentiates the unclamped norm
    (its clamp runs under no_grad). The corrected Function matches PyTorch there, and both differ
    from the true derivative x2/(c1 c2) by exactly the term y·x1/(c1‖x1‖)."""
    eps = 1e-3
    x1, x2 = pair((4, 5), scale1=1e-5)  # ‖x1‖ ~ 2e-5 < eps: every row of x1 clamped
    fn = corrected(1, eps)
    y, (g1, _) = gradients(fn, x1, x2, grad_output=torch.ones(4, dtype=F64))
    _, (g1_ref, _) = gradients(lambda a, b: F.cosine_similarity(a, b, eps=eps), x1, x2, torch.ones(4, dtype=F64))
    torch.testing.assert_close(g1, g1_ref, rtol=1e-12, atol=0)
    c2 = x2.norm(dim=1, keepdim=True).clamp_min(eps)
    derivative = (x2 / (eps * c2)).detach()
    ghost = (y[:, None] * x1 / (eps * x1.norm(dim=1, keepdim=True))).detach()
    torch.testing.assert_close(g1, derivative - ghost, rtol=1e-12, atol=0)
    assert not gradcheck(fn, (x1, x2), eps=1e-7, raise_exception=False)
    assert not gradcheck(lambda a, b: F.cosine_similarity(a, b, eps=eps), (x1, x2), eps=1e-7, raise_exception=False)


def test_corrected_works_under_torch_func():
    x1, x2 = (t.detach() for t in pair((3, 4)))
    fn = corrected(1, 1e-8)
    loss = lambda a, b: (1 - fn(a, b)).mean()  # noqa: E731
    ref = lambda a, b: (1 - F.cosine_similarity(a, b)).mean()  # noqa: E731
    torch.testing.assert_close(grad(loss)(x1, x2), grad(ref)(x1, x2))
    torch.testing.assert_close(jacrev(fn, argnums=(0, 1))(x1, x2), jacrev(F.cosine_similarity, argnums=(0, 1))(x1, x2))
    torch.testing.assert_close(jacfwd(fn, argnums=(0, 1))(x1, x2), jacrev(F.cosine_similarity, argnums=(0, 1))(x1, x2))
    torch.testing.assert_close(hessian(loss)(x1, x2), hessian(ref)(x1, x2))
    per_row = vmap(lambda a, b: CosineSimilarityFunction.apply(a, b, 0, 1e-8))(x1, x2)
    torch.testing.assert_close(per_row, F.cosine_similarity(x1, x2))


def test_corrected_rejects_what_pytorch_rejects():
    x1, x2 = pair((4, 5))
    with pytest.raises(IndexError):
        F.cosine_similarity(x1, x2, dim=2)
    with pytest.raises(IndexError, match="Dimension out of range"):
        CosineSimilarityFunction.apply(x1, x2, 2, 1e-8)
    with pytest.raises(RuntimeError):
        CosineSimilarityFunction.apply(x1, torch.randn(3, 5, dtype=F64), 1, 1e-8)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_corrected_equals_pytorch_over_random_shapes(data):
    ndim = data.draw(st.integers(1, 4), label="ndim")
    shape = data.draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim), label="shape")
    dim = data.draw(st.integers(-ndim, ndim - 1), label="dim")
    # broadcast: either input may have size 1 where the other has more, and fewer leading dims
    ones1 = data.draw(st.lists(st.booleans(), min_size=ndim, max_size=ndim), label="x1 size-1 dims")
    ones2 = [False if o else data.draw(st.booleans()) for o in ones1]
    shape1 = [1 if o else n for o, n in zip(ones1, shape)]
    shape2 = [1 if o else n for o, n in zip(ones2, shape)]
    if data.draw(st.booleans(), label="drop leading dim of x2") and ndim > 1 and dim not in (0, -ndim):
        shape2 = shape2[1:]
    eps = data.draw(st.sampled_from([1e-8, 1e-3, 1.0]), label="eps")
    seed = data.draw(st.integers(0, 2**16), label="seed")
    x1, x2 = pair(tuple(shape1), tuple(shape2), seed=seed)
    y, grads = gradients(corrected(dim, eps), x1, x2)
    y_ref, grads_ref = gradients(lambda a, b: F.cosine_similarity(a, b, dim=dim, eps=eps), x1, x2)
    torch.testing.assert_close(y, y_ref, rtol=1e-13, atol=1e-14)
    for got, want in zip(grads, grads_ref):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-11, atol=1e-11 * (1 + want.abs().max().item()))


# ---- the tutorial and its variants ---------------------------------------------------------------


def true_gradient(x1, x2, grad_output=None):
    return gradients(F.cosine_similarity, x1, x2, grad_output)[1]


def test_tutorial_numbers_on_a_hand_computed_example():
    # x1 = (3, 4), x2 = (1, 0): y = 3/5; the tutorial returns -(x2 - (x1·x2) x1) = (8, 12);
    # the true gradient is x2/(‖x1‖‖x2‖) - y x1/‖x1‖² = (0.128, -0.096)
    x1 = torch.tensor([[3.0, 4.0]], dtype=F64, requires_grad=True)
    x2 = torch.tensor([[1.0, 0.0]], dtype=F64, requires_grad=True)
    y = CosineSimilarityLossFunction.apply(x1, x2)
    torch.testing.assert_close(y, torch.tensor([0.6], dtype=F64))
    (g1,) = torch.autograd.grad(y, x1)
    torch.testing.assert_close(g1, torch.tensor([[8.0, 12.0]], dtype=F64))
    torch.testing.assert_close(true_gradient(x1, x2, torch.ones(1, dtype=F64))[0], torch.tensor([[0.128, -0.096]], dtype=F64))


def test_tutorial_formula_is_the_specimen_at_its_defaults():
    x1, x2 = pair((5, 7))
    y, grads = gradients(CosineSimilarityLossFunction.apply, x1, x2)
    y_t, grads_t = gradients(lambda a, b: cosine_similarity(a, b, formula="tutorial"), x1, x2)
    assert torch.equal(y, y_t)
    for a, b in zip(grads, grads_t):
        assert torch.equal(a, b)


def test_tutorial_on_unit_norm_inputs_is_exactly_minus_the_true_gradient():
    x1, x2 = (unit_rows(t) for t in pair((6, 8)))
    _, tutorial = gradients(CosineSimilarityLossFunction.apply, x1, x2)
    for got, want in zip(tutorial, true_gradient(x1, x2)):
        torch.testing.assert_close(got, -want, rtol=1e-12, atol=1e-14)


def test_tutorial_fails_gradcheck_on_random_inputs():
    x1, x2 = pair((4, 5))
    assert not gradcheck(CosineSimilarityLossFunction.apply, (x1, x2), raise_exception=False)
    assert gradcheck(corrected(1, 1e-8), (x1, x2))


def test_tutorial_dim_mismatch_on_3d_inputs():
    """Forward reduces over dim=1, backward over dim=-1. For (B, C, L) with C != L the backward
    cannot broadcast grad_output (B, L, 1) against (B, C, L) and raises; with C == L it runs and
    returns a gradient along the wrong axis, wrong even with both of its other bugs fixed."""
    x1, x2 = pair((2, 3, 4))
    y = CosineSimilarityLossFunction.apply(x1, x2)
    assert y.shape == (2, 4)
    with pytest.raises(RuntimeError, match="size of tensor"):
        y.sum().backward()

    x1, x2 = (unit_rows(t, dim=1) for t in pair((2, 3, 3)))
    both_fixed = lambda a, b: cosine_similarity(a, b, formula="sign+norm-fixed")  # noqa: E731
    _, (g1, _) = gradients(both_fixed, x1, x2)
    true_g1 = true_gradient(x1, x2)[0]
    assert g1.shape == true_g1.shape
    assert (g1 - true_g1).abs().max() > 0.1
    # on 2-D inputs the same formula is right
    x1, x2 = pair((4, 5))
    for got, want in zip(gradients(both_fixed, x1, x2)[1], true_gradient(x1, x2)):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_sign_fixed_is_right_only_at_unit_norm():
    sign_fixed = lambda a, b: cosine_similarity(a, b, formula="sign-fixed")  # noqa: E731
    x1, x2 = (unit_rows(t) for t in pair((6, 8)))
    for got, want in zip(gradients(sign_fixed, x1, x2)[1], true_gradient(x1, x2)):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)
    x1, x2 = pair((6, 8))
    x1 = (3 * x1).detach().requires_grad_()  # ‖x1‖ ~ 8: its gradient is far too large
    got, want = gradients(sign_fixed, x1, x2)[1][0], true_gradient(x1, x2)[0]
    assert got.norm() > 10 * want.norm()


def test_norm_fixed_is_exactly_minus_the_true_gradient_everywhere():
    x1, x2 = pair((6, 8), scale1=5.0)
    norm_fixed = lambda a, b: cosine_similarity(a, b, formula="norm-fixed")  # noqa: E731
    for got, want in zip(gradients(norm_fixed, x1, x2)[1], true_gradient(x1, x2)):
        torch.testing.assert_close(got, -want, rtol=1e-12, atol=1e-14)


# ---- entry points, module, family ---------------------------------------------------------------


def test_formulas_and_functional_entry_point():
    assert {"tutorial", "sign-fixed", "corrected"} <= set(FORMULAS)
    assert FORMULAS["corrected"] is CosineSimilarityFunction
    assert FORMULAS["tutorial"] is TutorialFunction
    x1, x2 = pair((4, 5))
    for name in FORMULAS:
        torch.testing.assert_close(cosine_similarity(x1, x2, formula=name), F.cosine_similarity(x1, x2))
    with pytest.raises(ValueError, match="unknown formula 'nope'.*corrected"):
        cosine_similarity(x1, x2, formula="nope")


def test_loss_module_takes_a_formula():
    x1, x2 = pair((4, 5))
    for name in FORMULAS:
        loss = CosineSimilarityFormulaLoss(formula=name)(x1, x2)
        torch.testing.assert_close(loss, (1 - F.cosine_similarity(x1, x2)).mean())
    (g_tutorial,) = torch.autograd.grad(CosineSimilarityFormulaLoss("tutorial")(x1, x2), x1)
    (g_specimen,) = torch.autograd.grad(CosineSimilarityLoss()(x1, x2), x1)
    assert torch.equal(g_tutorial, g_specimen)
    with pytest.raises(ValueError):
        CosineSimilarityFormulaLoss(formula="nope")


def test_the_tutorial_usage_example_runs_verbatim():
    input1 = torch.randn(10, 20, requires_grad=True)
    input2 = torch.randn(10, 20, requires_grad=True)
    loss_fn = CosineSimilarityLoss()
    loss = loss_fn(input1, input2)
    loss.backward()
    assert input1.grad.shape == (10, 20) and input2.grad.shape == (10, 20)
    assert torch.isfinite(input1.grad).all()


def test_family_runs_every_formula_and_the_reference():
    x1, x2 = FAMILY.build_inputs((3, 4), seed=7)
    assert x1.dtype == F64 and x1.shape == x2.shape == (3, 4)
    reference = FAMILY.run(None, (x1, x2))
    for name, formula in FAMILY.formulas.items():
        assert formula.name == name and formula.latex and formula.summary
        torch.testing.assert_close(FAMILY.run(name, (x1, x2)), reference)
    assert [n for n, f in FAMILY.formulas.items() if f.correct] == ["corrected"]
    torch.testing.assert_close(FAMILY.loss(reference), (1 - reference).mean())


def test_build_inputs_is_seeded_and_broadcasts():
    a = build_inputs((3, 4, 5), seed=1, dim=1)
    b = build_inputs((3, 4, 5), seed=1, dim=1, dtype=torch.float32)
    assert torch.equal(a[0].float(), b[0]) and b[0].dtype == torch.float32
    assert not torch.equal(a[0], build_inputs((3, 4, 5), seed=2)[0])
    _, x2 = build_inputs((3, 4, 5), seed=1, dim=1, broadcast=True)
    assert x2.shape == (1, 4, 1)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_corrected_matches_pytorch_on_its_own_opinfo_samples(dtype):
    """PyTorch's own samples for F.cosine_similarity (broadcast shapes, 0-d, eps, default dim):
    value, gradient and double backward equal PyTorch's."""
    from torch.testing._internal.common_methods_invocations import op_db

    (info,) = [o for o in op_db if o.name == "nn.functional.cosine_similarity"]
    samples = list(info.sample_inputs("cpu", dtype, requires_grad=True))
    assert any(s.input.dim() == 0 for s in samples)  # the 0-d case is among them
    tol = {"rtol": 1e-10, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 1e-4, "atol": 1e-5}
    for sample in samples:
        dim, eps = sample.kwargs.get("dim", 1), sample.kwargs.get("eps", 1e-8)
        x1, x2 = sample.input.detach(), sample.args[0].detach()
        derivatives = []
        for function in (lambda a, b: CosineSimilarityFunction.apply(a, b, dim, eps),  # noqa: B023 - called in this iteration
                         lambda a, b: torch.nn.functional.cosine_similarity(a, b, dim=dim, eps=eps)):  # noqa: B023 - called in this iteration
            a, b = x1.clone().requires_grad_(), x2.clone().requires_grad_()
            y = function(a, b)
            v = torch.linspace(-1, 1, y.numel(), dtype=dtype).reshape(y.shape)
            grads = torch.autograd.grad((y * v).sum(), (a, b), create_graph=True)
            second = torch.autograd.grad(sum((g * g).sum() for g in grads), (a, b))
            derivatives.append((y, *grads, *second))
        for ours, theirs in zip(*derivatives):
            torch.testing.assert_close(ours, theirs, **tol, msg=lambda m: f"{sample.input.shape}, {sample.kwargs}: {m}")  # noqa: B023 - called at once

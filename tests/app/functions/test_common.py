"""The gallery's shared pieces: seeded inputs, the fixed-weight loss, the specimen's source."""

import torch

from gradient_lab.app.functions.common import loss_weights, single_input, specimen, standard_normal, weighted_sum
from gradient_lab.app.functions.softplus import OverflowingSoftplusFunction


def test_inputs_are_drawn_in_float64_then_cast():
    (a,) = single_input((3, 4), seed=1)
    (b,) = single_input((3, 4), seed=1, dtype=torch.float32, broadcast=True, dim=0)
    assert a.dtype == torch.float64 and b.dtype == torch.float32 and b.shape == (3, 4)
    assert torch.equal(a.float(), b)
    assert not torch.equal(a, single_input((3, 4), seed=2)[0])
    assert torch.equal(standard_normal((5,), seed=3), standard_normal((5,), seed=3))


def test_weights_are_fixed_per_shape_and_weigh_every_element():
    w = loss_weights((4, 6))
    assert torch.equal(w, loss_weights((4, 6))) and w.dtype == torch.float64
    assert (w != 0).all() and (w > 0).any() and (w < 0).any()
    assert loss_weights((4, 6), torch.float32).dtype == torch.float32
    y = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(weighted_sum(y), y)
    assert torch.equal(g, w)
    # a plain sum has zero gradient along each row of a softmax; the weighted one does not
    assert weighted_sum(torch.softmax(y, -1)).item() != torch.softmax(y, -1).sum().item()


def test_weighted_sum_works_under_vmap():
    # torch's random functions are refused under vmap; the weights must not come from them
    ys = torch.randn(3, 4, 6, dtype=torch.float64)
    got = torch.func.vmap(weighted_sum)(ys)
    torch.testing.assert_close(got, torch.stack([weighted_sum(y) for y in ys]))


def test_specimen_keeps_the_code_and_its_bug_marks_without_the_docstring():
    source = specimen(OverflowingSoftplusFunction)
    # the base holding its forward first, then the Function with its backward
    assert source.startswith("class _SoftplusForward") and "def forward" in source
    assert source.index("class OverflowingSoftplusFunction(_SoftplusForward)") > source.index("def forward")
    assert "# BUG" in source and '"""' not in source and "def backward" in source

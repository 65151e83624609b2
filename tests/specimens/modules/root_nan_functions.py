"""Functions whose gradient makes an inf at a root of 0 that a later op turns into a NaN: the first
non-finite value is the inf, and the op and line that made it are what a user needs. The line that
makes the inf is marked ``# inf:``, the one that makes the NaN ``# NaN:``; the tests find them by
the marks. Plain PyTorch."""

from __future__ import annotations

import torch

Tensor = torch.Tensor


class AbsTimesX(torch.autograd.Function):
    """y = x·|x|, with the backward 2|x| written as 2·sqrt(x·x): right at first order, and
    differentiable; its double backward takes sqrt's derivative at 0 (an inf) and then the
    derivative of x·x multiplies it by x = 0 (a NaN)."""

    @staticmethod
    def forward(x):
        return x * x.abs()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        square = x * x  # NaN: the derivative of x·x, in double backward, is inf · 0
        return g * 2 * torch.sqrt(square)  # inf: the derivative of sqrt at 0, in double backward


class RootPowerBackward(torch.autograd.Function):
    """y = x^1.5 (x ≥ 0), with the backward written as x · 0.5/sqrt(x) + sqrt(x): 0.5/sqrt(0) is an
    inf, and x = 0 times it a NaN, at first order."""

    @staticmethod
    def forward(x):
        return x * torch.sqrt(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        half = 0.5 / torch.sqrt(x)  # inf: 0.5 / sqrt(0) (a reciprocal, then a product)
        return g * (x * half + torch.sqrt(x))  # NaN: 0 · inf


class InPlaceReciprocal(torch.autograd.Function):
    """The backward of RootPowerBackward with its reciprocal taken in place: the inf is made by an op
    whose own operand then holds it."""

    @staticmethod
    def forward(x):
        return x * torch.sqrt(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        half = 2 * torch.sqrt(x)
        half.reciprocal_()  # inf: 1 / (2 sqrt(0)), in place
        return g * (x * half + torch.sqrt(x))  # NaN: 0 · inf


def inputs() -> Tensor:
    """A 4×5 float64 input, positive but for a 0 at x[1, 2]."""
    x = torch.rand(4, 5, generator=torch.Generator().manual_seed(3), dtype=torch.float64) + 0.5
    x[1, 2] = 0.0
    return x

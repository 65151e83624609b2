"""Backwards that are right for the loss's own upstream gradient (all ones, under a sum) and wrong
for any other: the bugs a card must not show beside numbers that say "right". A row softmax whose
backward ignores, averages or rolls grad_output (the kinds of bug filed against fused softmax
kernels), and a clamp whose straight-through backward is wrong off the clamp's pattern (as
quantization code writes it, where it is not declared a surrogate); our own, written for #36."""

import torch


class Softmax(torch.autograd.Function):
    """A row softmax; its backward is the one argument that changes per specimen."""

    @staticmethod
    def forward(ctx, x):
        y = torch.softmax(x, -1)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return y * (g - (g * y).sum(-1, keepdim=True))


class SoftmaxIgnoresGradOutput(Softmax):
    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        ones = torch.ones_like(g)
        return y * (ones - (ones * y).sum(-1, keepdim=True))  # grad_output ignored: right for the loss's ones


class SoftmaxAveragesGradOutput(Softmax):
    @staticmethod
    def backward(ctx, g):
        return Softmax.backward(ctx, g.mean().expand_as(g))


class SoftmaxRollsRows(Softmax):
    @staticmethod
    def backward(ctx, g):
        return Softmax.backward(ctx, g.roll(1, 0))  # reads the previous row's grad_output


class StraightThroughClamp(torch.autograd.Function):
    """clamp(x, -0.5, 0.5) whose backward passes every gradient through: wrong off the clamp's pattern."""

    @staticmethod
    def forward(ctx, x):
        return x.clamp(-0.5, 0.5)

    @staticmethod
    def backward(ctx, g):
        return g

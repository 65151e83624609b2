"""Small Functions written the way real ones ship, each re-created from a pattern seen in public
code, for the tests of issue #24 (a corpus with gradcheck's oracle is in tests/corpus)."""

import torch


class StraightThroughRound(torch.autograd.Function):
    """Quantizers' straight-through rounding: forward rounds, backward passes grad_output through."""

    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, g):
        return g


def straight_through_surrogate(x):  # the intended gradient in plain ops: identity, with round's values
    return x + (torch.round(x) - x).detach()


class GradientReversal(torch.autograd.Function):
    """Domain-adversarial training's gradient reversal layer: identity forward, −λ·g backward."""

    @staticmethod
    def forward(ctx, x, lam=0.5):
        ctx.lam = lam
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return -ctx.lam * g, None


def reversal_surrogate(x, lam=0.5):
    return -lam * x + (1 + lam) * x.detach()


class SumIgnoresDim(torch.autograd.Function):
    """A forward that ignores its dim (always sums over dim 0), with a backward right for it."""

    @staticmethod
    def forward(ctx, x, dim):
        ctx.shape = x.shape
        return x.sum(0)

    @staticmethod
    def backward(ctx, g):
        return g.unsqueeze(0).expand(ctx.shape), None


class ProductNeedsBoth(torch.autograd.Function):
    """A wavelet package's bug: one gradient variable is bound only when the other input needs one."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        if ctx.needs_input_grad[0]:
            ga = g * b
        gb = g * a if ctx.needs_input_grad[1] else None
        return ga, gb  # noqa: F821 - unbound when only b needs a gradient: the bug


class ExpEditsSaved(torch.autograd.Function):
    """exp whose backward multiplies its saved output in place: right once, wrong (raising) when
    backward is called again on the same graph (retain_graph=True)."""

    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return y.mul_(g)


class SoftplusOnce(torch.autograd.Function):
    """A correct softplus whose backward is marked @once_differentiable (as fused kernels are)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.nn.functional.softplus(x)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.sigmoid(x)


class SquareSummedShape(torch.autograd.Function):
    """x² whose backward returns its gradient broadcast to (B, B, D): PyTorch sums it to (B, D),
    so the gradient is B times too large."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return (2 * g * x).unsqueeze(0).expand(x.shape[0], *x.shape).clone()


class PaddedDifferences(torch.autograd.Function):
    """y[i] = x[i+1] − x[i−1] with zero padding (a padded filter, as wavelet transforms use),
    whose backward forgets the padding at the two boundary columns."""

    @staticmethod
    def forward(ctx, x):
        padded = torch.nn.functional.pad(x, (1, 1))
        return padded[:, 2:] - padded[:, :-2]

    @staticmethod
    def backward(ctx, g):
        grad = torch.zeros_like(g)
        grad[:, 1:-1] = g[:, :-2] - g[:, 2:]
        return grad  # the boundary columns 0 and n−1 get nothing: wrong only there

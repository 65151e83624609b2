"""Small Functions written the way real ones ship, each re-created from a pattern seen in public
code, for the tests of issue #24: a forward that ignores its dim, a gradient summed to its input's
shape, a padded filter wrong at its boundary. The others those tests use are the corpus's
(``corpus.functions``: straight-through rounding, gradient reversal, @once_differentiable softplus,
an exp that edits its saved output) and the conditions zoo's (``conditions.ProductUnboundWhenAlone``)."""

import torch


class SumIgnoresDim(torch.autograd.Function):
    """A forward that ignores its dim (always sums over dim 0), with a backward right for it."""

    @staticmethod
    def forward(ctx, x, dim):
        ctx.shape = x.shape
        return x.sum(0)

    @staticmethod
    def backward(ctx, g):
        return g.unsqueeze(0).expand(ctx.shape), None


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

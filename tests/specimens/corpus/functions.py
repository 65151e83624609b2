"""A corpus of custom autograd Functions of the kinds people really write, re-created in our own
words (no code copied). Each carries a one-line comment saying where the idea came from. Buggy
versions sit next to their fixes; the docstring of each bug says what is wrong. Nothing here knows
about Gradient Lab: these are plain PyTorch, for ``cases.py`` to pair with inputs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.autograd import Function
from torch.autograd.function import once_differentiable
from torch.utils.checkpoint import checkpoint

from tests.specimens.zoo import Square

Tensor = torch.Tensor


# ==== PyTorch's "Extending PyTorch" documentation ==================================================


class LinearFunction(Function):
    """y = x Wᵀ + b, the docs' LinearFunction, with ``needs_input_grad`` branches done right."""

    # PyTorch "Extending PyTorch" docs' LinearFunction (grads initialised to None before the branches)
    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return x.mm(weight.t()) + bias

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = grad.mm(weight)
        if ctx.needs_input_grad[1]:
            grad_weight = grad.t().mm(x)
        if ctx.needs_input_grad[2]:
            grad_bias = grad.sum(0)
        return grad_x, grad_weight, grad_bias


class LinearTransposedWeightGrad(Function):
    """Bug: the weight's gradient is xᵀ·g where it must be gᵀ·x; with a square weight the shapes
    agree, so nothing raises and the gradient is the transpose of the right one."""

    # a real bug: the docs' LinearFunction with grad_weight transposed (silent for a square weight)
    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return x.mm(weight.t()) + bias

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        return grad.mm(weight), x.t().mm(grad), grad.sum(0)


class MulConstant(Function):
    """y = c·x for a Python float c, which gets no gradient (None)."""

    # PyTorch "Extending PyTorch" docs' MulConstant (a non-tensor argument to apply)
    @staticmethod
    def forward(ctx, x, constant):
        ctx.constant = constant
        return x * constant

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.constant, None


class ExpSetupContext(Function):
    """exp(x) in the setup_context style: forward takes no ctx; the output is saved."""

    # PyTorch "Extending PyTorch" docs' Exp, written with a separate setup_context (torch.func style)
    @staticmethod
    def forward(x):
        return x.exp()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y


# ==== several outputs, integer inputs and outputs, non-differentiable outputs ======================


class RowMaxWithIndices(Function):
    """(values, indices) of each row's maximum, as torch.max(x, dim=1); the indices are marked
    non-differentiable and the gradient goes to each row's winner."""

    # as torch.max(dim)'s (values, indices) with ctx.mark_non_differentiable on the indices
    @staticmethod
    def forward(ctx, x):
        values, indices = x.max(dim=1)
        ctx.mark_non_differentiable(indices)
        ctx.save_for_backward(indices)
        ctx.shape = x.shape
        return values, indices

    @staticmethod
    def backward(ctx, grad_values, _grad_indices):
        (indices,) = ctx.saved_tensors
        return grad_values.new_zeros(ctx.shape).scatter(1, indices.unsqueeze(1), grad_values.unsqueeze(1))


class TopK3(Function):
    """The three largest entries of each row and their int64 positions (not marked: an integer
    output cannot carry a gradient anyway)."""

    # as torch.topk's backward (a scatter of the values' gradient), integer indices left unmarked
    @staticmethod
    def forward(ctx, x):
        values, indices = x.topk(3, dim=1)
        ctx.save_for_backward(indices)
        ctx.shape = x.shape
        return values, indices

    @staticmethod
    def backward(ctx, grad_values, _grad_indices):
        (indices,) = ctx.saved_tensors
        return grad_values.new_zeros(ctx.shape).scatter(1, indices, grad_values)


class SortSetupContext(Function):
    """Rows sorted ascending and the permutation, setup_context style: the permutation is marked
    non-differentiable in setup_context."""

    # as torch.sort's (values, indices), forward without ctx + setup_context(ctx, inputs, output)
    @staticmethod
    def forward(x):
        return x.sort(dim=1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        _values, indices = output
        ctx.mark_non_differentiable(indices)
        ctx.save_for_backward(indices)
        ctx.shape = x.shape

    @staticmethod
    def backward(ctx, grad_values, _grad_indices):
        (indices,) = ctx.saved_tensors
        return grad_values.new_zeros(ctx.shape).scatter(1, indices, grad_values)


class CrossEntropyIntTargets(Function):
    """Mean cross entropy of logits against int64 class labels (labels get no gradient)."""

    # as F.cross_entropy's fused softmax-minus-one-hot backward, integer targets as an input
    @staticmethod
    def forward(ctx, logits, target):
        log_z = logits.logsumexp(dim=1)
        picked = logits.gather(1, target.unsqueeze(1)).squeeze(1)
        ctx.save_for_backward(logits, target)
        return (log_z - picked).mean()

    @staticmethod
    def backward(ctx, grad):
        logits, target = ctx.saved_tensors
        p = torch.softmax(logits, dim=1)
        one_hot = torch.zeros_like(p).scatter(1, target.unsqueeze(1), 1.0)
        return grad * (p - one_hot) / logits.shape[0], None


class EmbeddingLookup(Function):
    """Rows of a table picked by int64 indices; repeated indices accumulate (index_add_)."""

    # as F.embedding's backward (an index_add into the table), indices repeated on purpose
    @staticmethod
    def forward(ctx, weight, indices):
        ctx.save_for_backward(indices)
        ctx.rows = weight.shape[0]
        return weight[indices]

    @staticmethod
    def backward(ctx, grad):
        (indices,) = ctx.saved_tensors
        table = grad.new_zeros(ctx.rows, grad.shape[-1])
        return table.index_add_(0, indices, grad), None


class EmbeddingLookupOverwrites(Function):
    """Bug: ``table[indices] = grad`` keeps one of the repeated indices' gradients and drops the
    others, where they must add up."""

    # a real bug: an embedding backward written with index assignment instead of index_add (repeats lost)
    @staticmethod
    def forward(ctx, weight, indices):
        ctx.save_for_backward(indices)
        ctx.rows = weight.shape[0]
        return weight[indices]

    @staticmethod
    def backward(ctx, grad):
        (indices,) = ctx.saved_tensors
        table = grad.new_zeros(ctx.rows, grad.shape[-1])
        table[indices] = grad
        return table, None


class DropoutWithMask(Function):
    """Inverted dropout with a given boolean keep-mask: returns (output, mask as float), the mask
    output marked non-differentiable; the bool input and the float p get no gradient."""

    # as torch's native_dropout returning (output, mask): a float output marked non-differentiable
    @staticmethod
    def forward(ctx, x, keep, p):
        scale = 1.0 / (1.0 - p)
        mask = keep.to(x.dtype)
        ctx.mark_non_differentiable(mask)
        ctx.save_for_backward(mask)
        ctx.scale = scale
        return x * mask * scale, mask

    @staticmethod
    def backward(ctx, grad, _grad_mask):
        (mask,) = ctx.saved_tensors
        return grad * mask * ctx.scale, None, None


class SinCos(Function):
    """(sin x, cos x): two differentiable outputs whose gradients both flow back."""

    # as a rotary-embedding style (sin, cos) pair of outputs, both differentiable
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin(), x.cos()

    @staticmethod
    def backward(ctx, grad_sin, grad_cos):
        (x,) = ctx.saved_tensors
        return grad_sin * x.cos() - grad_cos * x.sin()


class SinCosFirstGradOnly(Function):
    """Bug: the backward uses the first output's gradient and ignores the second's."""

    # a real bug: a two-output Function whose backward forgets the second grad_output
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin(), x.cos()

    @staticmethod
    def backward(ctx, grad_sin, _grad_cos):
        (x,) = ctx.saved_tensors
        return grad_sin * x.cos()


# ==== @classmethod forward/backward with a positional parameter after the tensor ==================


class LogSumExpDim(Function):
    """log Σ exp along ``dim`` (classmethod style, ``apply(x, dim)``). The output is saved, so
    autograd can differentiate the backward again."""

    # as the entmax package's classmethod Functions forward(cls, ctx, X, dim), applied positionally
    @classmethod
    def forward(cls, ctx, X, dim):
        out = X.logsumexp(dim=dim)
        ctx.dim = dim
        ctx.save_for_backward(X, out)
        return out

    @classmethod
    def backward(cls, ctx, grad):
        X, out = ctx.saved_tensors
        return grad.unsqueeze(ctx.dim) * (X - out.unsqueeze(ctx.dim)).exp(), None


class LogSumExpDimSavesIntermediate(Function):
    """Bug (second order only): it saves an intermediate (the shifted max and log-normaliser,
    computed inside forward) instead of the output, so double backward treats it as a constant."""

    # a real bug: saving an intermediate for backward, which the docs warn breaks double backward
    @classmethod
    def forward(cls, ctx, X, dim):
        m = X.amax(dim=dim, keepdim=True)
        log_z = (X - m).exp().sum(dim=dim, keepdim=True).log() + m  # an intermediate, not an output
        ctx.dim = dim
        ctx.save_for_backward(X, log_z)
        return log_z.squeeze(dim)

    @classmethod
    def backward(cls, ctx, grad):
        X, log_z = ctx.saved_tensors
        return grad.unsqueeze(ctx.dim) * (X - log_z).exp(), None


class SoftmaxDim(Function):
    """softmax along ``dim`` (classmethod style, ``apply(x, dim)``)."""

    # as the entmax package's classmethod style, forward(cls, ctx, X, dim) with dim honoured
    @classmethod
    def forward(cls, ctx, X, dim):
        Y = torch.softmax(X, dim=dim)
        ctx.dim = dim
        ctx.save_for_backward(Y)
        return Y

    @classmethod
    def backward(cls, ctx, grad):
        (Y,) = ctx.saved_tensors
        return Y * (grad - (grad * Y).sum(ctx.dim, keepdim=True)), None


class SoftmaxDimIgnored(Function):
    """Bug: forward ignores ``dim`` (always the last one) while backward honours it."""

    # a real bug: a classmethod forward(ctx, X, dim) that hard-codes dim=-1 in forward
    @classmethod
    def forward(cls, ctx, X, dim):
        Y = torch.softmax(X, dim=-1)
        ctx.dim = dim
        ctx.save_for_backward(Y)
        return Y

    @classmethod
    def backward(cls, ctx, grad):
        (Y,) = ctx.saved_tensors
        return Y * (grad - (grad * Y).sum(ctx.dim, keepdim=True)), None


# ==== @once_differentiable ========================================================================


class SoftplusOnce(Function):
    """softplus with a backward decorated @once_differentiable: right to first order, and double
    backward raises by design."""

    # as torchvision's C++-backed ops (roi_align, deform_conv) that wrap backward in @once_differentiable
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return F.softplus(x)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.sigmoid(x)


# ==== surrogate gradients: the backward is meant to differ from the forward's derivative ==========


class StraightThroughRound(Function):
    """round(x) forward, identity backward."""

    # straight-through rounding in quantizers (Bengio et al. 2013; QAT fake-quant)
    @staticmethod
    def forward(ctx, x):
        return x.round()

    @staticmethod
    def backward(ctx, grad):
        return grad


class SignHardtanhSTE(Function):
    """sign(x) forward; the gradient passes where |x| ≤ 1 and is cut elsewhere."""

    # BinaryNet's sign with the hardtanh straight-through estimator (Courbariaux, Hubara et al.)
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sign()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x.abs() <= 1).to(grad.dtype)


class SignSTEUnclipped(Function):
    """Bug: the hardtanh estimator without its clip: the gradient passes everywhere."""

    # a real bug: BinaryNet's STE missing the |x| <= 1 cancellation, so saturated weights keep moving
    @staticmethod
    def forward(ctx, x):
        return x.sign()

    @staticmethod
    def backward(ctx, grad):
        return grad


class GradientReversal(Function):
    """Identity forward; backward multiplies by −λ."""

    # gradient reversal layer (Ganin & Lempitsky, DANN): forward x, backward −λ·g
    @staticmethod
    def forward(ctx, x, lambd):
        ctx.lambd = lambd
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return -ctx.lambd * grad, None


class GradientReversalNoLambda(Function):
    """Bug: reverses the gradient but forgets to scale it by λ."""

    # a real bug: a DANN gradient reversal layer returning −g, the λ schedule silently ignored
    @staticmethod
    def forward(ctx, x, lambd):
        ctx.lambd = lambd
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return -grad, None


class SpikeFastSigmoid(Function):
    """Heaviside spike forward; the fast-sigmoid surrogate 1/(1 + k|x|)² backward."""

    # SuperSpike's fast-sigmoid surrogate gradient (Zenke & Ganguli), as snntorch's surrogate.fast_sigmoid
    slope = 5.0

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x > 0).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / (1 + SpikeFastSigmoid.slope * x.abs()) ** 2


# ==== nested .apply inside forward, and checkpointing =============================================


class GaussianNested(Function):
    """exp(−x²), whose forward calls another Function's apply (recorded nowhere: forward runs with
    grad mode off) and whose backward is written for the whole."""

    # nested .apply inside forward, the way composite ops reuse a primitive Function (PyTorch forums pattern)
    @staticmethod
    def forward(ctx, x):
        y = torch.exp(-Square.apply(x))  # the zoo's Square
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return grad * (-2 * x * y)


def block(x: Tensor, w: Tensor) -> Tensor:
    """A small residual block, the thing a checkpoint recomputes."""
    return x + torch.tanh(x @ w) * 0.5


class CheckpointBlock(Function):
    """Forward without a graph, backward recomputes the block under enable_grad and differentiates
    it with autograd.grad (both inputs)."""

    # torch.utils.checkpoint reentrant (CheckpointFunction): recompute in backward, re-enter autograd
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        with torch.no_grad():
            return block(x, w)

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        with torch.enable_grad():
            xd, wd = x.detach().requires_grad_(), w.detach().requires_grad_()
            out = block(xd, wd)
        return torch.autograd.grad(out, (xd, wd), grad)


class CheckpointBlockDropsWeight(Function):
    """Bug: the recomputation differentiates the activation only; the weight gets None."""

    # a real bug: a hand-rolled checkpoint returning None for the parameter, so the weight never trains
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        with torch.no_grad():
            return block(x, w)

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        with torch.enable_grad():
            xd = x.detach().requires_grad_()
            out = block(xd, w.detach())
        (grad_x,) = torch.autograd.grad(out, (xd,), grad)
        return grad_x, None


def checkpoint_non_reentrant(x: Tensor, w: Tensor) -> Tensor:
    # torch.utils.checkpoint.checkpoint(use_reentrant=False), PyTorch's own (saved-tensor hooks)
    return checkpoint(block, x, w, use_reentrant=False)


# ==== sparsemax and 1.5-entmax ====================================================================


def _sparsemax_threshold(X: Tensor, dim: int) -> Tensor:
    """τ such that Σ max(X − τ, 0) = 1 along ``dim`` (sort, cumulative sum, support size)."""
    ordered, _ = X.sort(dim=dim, descending=True)
    cumulative = ordered.cumsum(dim) - 1
    shape = [1] * X.dim()
    shape[dim] = -1
    rank = torch.arange(1, X.shape[dim] + 1, dtype=X.dtype, device=X.device).view(shape)
    support = (rank * ordered > cumulative).sum(dim=dim, keepdim=True)
    return cumulative.gather(dim, support - 1) / support.to(X.dtype)


class Sparsemax(Function):
    """sparsemax (Martins & Astudillo) along ``dim``: the Euclidean projection onto the simplex."""

    # as the entmax package's SparsemaxFunction, classmethod forward(cls, ctx, X, dim)
    @classmethod
    def forward(cls, ctx, X, dim):
        Y = (X - _sparsemax_threshold(X, dim)).clamp(min=0)
        ctx.dim = dim
        ctx.save_for_backward(Y)
        return Y

    @classmethod
    def backward(cls, ctx, grad):
        (Y,) = ctx.saved_tensors
        support = (Y > 0).to(grad.dtype)
        mean_on_support = (grad * support).sum(ctx.dim, keepdim=True) / support.sum(ctx.dim, keepdim=True)
        return support * (grad - mean_on_support), None


class SparsemaxNoMeanTerm(Function):
    """Bug: the backward masks the gradient to the support but forgets to subtract its mean there."""

    # a real bug: sparsemax's Jacobian without the −(1/|S|)·1·1ᵀ term
    @classmethod
    def forward(cls, ctx, X, dim):
        Y = (X - _sparsemax_threshold(X, dim)).clamp(min=0)
        ctx.dim = dim
        ctx.save_for_backward(Y)
        return Y

    @classmethod
    def backward(cls, ctx, grad):
        (Y,) = ctx.saved_tensors
        return grad * (Y > 0).to(grad.dtype), None


class Entmax15(Function):
    """1.5-entmax (Peters, Niculae & Martins) along ``dim`` by the exact sort-based threshold."""

    # as the entmax package's Entmax15Function (sort-based exact threshold), classmethod with dim
    @classmethod
    def forward(cls, ctx, X, dim):
        Z = X / 2
        Z = Z - Z.amax(dim=dim, keepdim=True)
        ordered, _ = Z.sort(dim=dim, descending=True)
        shape = [1] * Z.dim()
        shape[dim] = -1
        rank = torch.arange(1, Z.shape[dim] + 1, dtype=Z.dtype, device=Z.device).view(shape)
        mean = ordered.cumsum(dim) / rank
        mean_sq = (ordered**2).cumsum(dim) / rank
        spread = rank * (mean_sq - mean**2)
        delta = ((1 - spread) / rank).clamp(min=0)
        tau = mean - delta.sqrt()
        support = (tau <= ordered).sum(dim=dim, keepdim=True)
        tau_star = tau.gather(dim, support - 1)
        Y = (Z - tau_star).clamp(min=0) ** 2
        ctx.dim = dim
        ctx.save_for_backward(Y)
        return Y

    @classmethod
    def backward(cls, ctx, grad):
        (Y,) = ctx.saved_tensors
        root = Y.sqrt()
        weighted = grad * root
        shift = weighted.sum(ctx.dim, keepdim=True) / root.sum(ctx.dim, keepdim=True)
        return weighted - shift * root, None


# ==== a wavelet-ish padded transform ==============================================================

# Daubechies-2 analysis filters (low and high pass), as published in any wavelet table.
_DB2_LO = (-0.12940952255126037, 0.2241438680420134, 0.8365163037378079, 0.48296291314453416)
_DB2_HI = (-0.48296291314453416, 0.8365163037378079, -0.2241438680420134, -0.12940952255126037)


def _db2_filters(like: Tensor) -> Tensor:
    return torch.tensor([_DB2_LO, _DB2_HI], dtype=like.dtype, device=like.device).unsqueeze(1)  # (2, 1, 4)


def _wrap(x: Tensor) -> Tensor:
    """Periodic padding by one sample on each side of the last dim."""
    return torch.cat([x[..., -1:], x, x[..., :1]], dim=-1)


class DWT1DPeriodic(Function):
    """One level of a db2 wavelet transform along rows, periodic padding, stride 2: returns
    (low, high). Backward is the transposed convolution with the padding folded back."""

    # pytorch_wavelets' DWT with padding (afb1d-style analysis filter bank), periodic mode
    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        y = F.conv1d(_wrap(x).unsqueeze(1), _db2_filters(x), stride=2)
        return y[:, 0], y[:, 1]

    @staticmethod
    def backward(ctx, grad_lo, grad_hi):
        g = torch.stack([grad_lo, grad_hi], dim=1)
        padded = F.conv_transpose1d(g, _db2_filters(g), stride=2).squeeze(1)
        inner = padded[..., 1:-1]
        fold = torch.zeros_like(inner)
        fold[..., -1] = padded[..., 0]
        fold[..., 0] = padded[..., -1]
        return inner + fold


class DWT1DCropsPadding(Function):
    """Bug: the backward crops the padded gradient instead of folding the wrapped samples back,
    so the first and last samples of each row lose part of their gradient."""

    # a real bug: a padded transform whose backward crops the padding away instead of adding it back
    @staticmethod
    def forward(ctx, x):
        y = F.conv1d(_wrap(x).unsqueeze(1), _db2_filters(x), stride=2)
        return y[:, 0], y[:, 1]

    @staticmethod
    def backward(ctx, grad_lo, grad_hi):
        g = torch.stack([grad_lo, grad_hi], dim=1)
        return F.conv_transpose1d(g, _db2_filters(g), stride=2).squeeze(1)[..., 1:-1]


# ==== local response normalisation across channels ================================================


def _channel_window_sum(t: Tensor, size: int) -> Tensor:
    """Σ of t over a window of ``size`` channels centred on each channel (zeros beyond the ends)."""
    half = size // 2
    padded = F.pad(t, (0, 0, 0, 0, half, half))
    channels = t.shape[1]
    return sum(padded[:, i : i + channels] for i in range(size))


class CrossMapLRN(Function):
    """y = x·(k + α/n·Σ_window x²)^−β over channels of an (N, C, H, W) input."""

    # torch.nn._functions CrossMapLRN2d (legacy hand-written LRN forward and backward)
    size, alpha, beta, k = 3, 0.5, 0.75, 1.0

    @staticmethod
    def forward(ctx, x):
        c = CrossMapLRN
        scale = c.k + c.alpha / c.size * _channel_window_sum(x * x, c.size)
        y = x * scale.pow(-c.beta)
        ctx.save_for_backward(x, scale, y)
        return y

    @staticmethod
    def backward(ctx, grad):
        c = CrossMapLRN
        x, scale, y = ctx.saved_tensors
        cross = _channel_window_sum(grad * y / scale, c.size)
        return grad * scale.pow(-c.beta) - (2 * c.alpha * c.beta / c.size) * x * cross


class CrossMapLRNNoCrossTerm(Function):
    """Bug: treats the scale as a constant: only g·scale^−β, the neighbours' term is missing."""

    # a real bug: LRN's backward without the term through the normaliser (a missing term)
    @staticmethod
    def forward(ctx, x):
        c = CrossMapLRN
        scale = c.k + c.alpha / c.size * _channel_window_sum(x * x, c.size)
        ctx.save_for_backward(scale)
        return x * scale.pow(-c.beta)

    @staticmethod
    def backward(ctx, grad):
        (scale,) = ctx.saved_tensors
        return grad * scale.pow(-CrossMapLRN.beta)


# ==== softmax, log-softmax, logsumexp and layer norm written by hand ==============================


class Softmax(Function):
    """softmax over rows; the output is saved, so the backward is differentiable again."""

    # hand-written softmax, as in every "write your own softmax backward" tutorial
    @staticmethod
    def forward(ctx, x):
        e = (x - x.amax(dim=1, keepdim=True)).exp()
        y = e / e.sum(dim=1, keepdim=True)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return y * (grad - (grad * y).sum(dim=1, keepdim=True))


class SoftmaxBatchSum(Function):
    """Bug: the ⟨g, y⟩ term is summed over the batch (dim 0) instead of the row."""

    # a real bug: softmax backward reducing over the wrong axis (dim=0, the batch)
    @staticmethod
    def forward(ctx, x):
        e = (x - x.amax(dim=1, keepdim=True)).exp()
        y = e / e.sum(dim=1, keepdim=True)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return y * (grad - (grad * y).sum(dim=0, keepdim=True))


class LogSumExp(Function):
    """log Σ exp over rows, saving the input and the output."""

    # hand-written logsumexp with the max shift (the stable form)
    @staticmethod
    def forward(ctx, x):
        m = x.amax(dim=1, keepdim=True)
        out = ((x - m).exp().sum(dim=1, keepdim=True).log() + m).squeeze(1)
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, out = ctx.saved_tensors
        return grad.unsqueeze(1) * (x - out.unsqueeze(1)).exp()


class LogSumExpNoGradOutput(Function):
    """Bug: returns softmax(x) without multiplying by grad_output."""

    # a real bug: a backward that never multiplies by grad_output (right only for an upstream of ones)
    @staticmethod
    def forward(ctx, x):
        out = x.logsumexp(dim=1)
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, out = ctx.saved_tensors
        return (x - out.unsqueeze(1)).exp()


def _normalise_rows(x: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    mean = x.mean(dim=-1, keepdim=True)
    rstd = ((x - mean).pow(2).mean(dim=-1, keepdim=True) + eps).rsqrt()
    return (x - mean) * rstd, rstd


class LayerNorm(Function):
    """Layer norm over the last dim with weight and bias. The backward recomputes x̂ and 1/σ from
    the saved input, so it can be differentiated again."""

    # hand-written layer norm (as Apex/Triton tutorials' fused layer norm backward, in torch ops)
    eps = 1e-5

    @staticmethod
    def forward(ctx, x, weight, bias):
        xhat, _rstd = _normalise_rows(x, LayerNorm.eps)
        ctx.save_for_backward(x, weight)
        return xhat * weight + bias

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        xhat, rstd = _normalise_rows(x, LayerNorm.eps)
        g = grad * weight
        grad_x = rstd * (g - g.mean(dim=-1, keepdim=True) - xhat * (g * xhat).mean(dim=-1, keepdim=True))
        return grad_x, (grad * xhat).sum(0), grad.sum(0)


class LayerNormNoVarianceTerm(Function):
    """Bug: the term through the variance, −x̂·mean(g·x̂), is missing."""

    # a real bug: layer norm backward that treats σ as a constant (a missing term)
    eps = 1e-5

    @staticmethod
    def forward(ctx, x, weight, bias):
        xhat, _rstd = _normalise_rows(x, LayerNorm.eps)
        ctx.save_for_backward(x, weight)
        return xhat * weight + bias

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        xhat, rstd = _normalise_rows(x, LayerNorm.eps)
        g = grad * weight
        return rstd * (g - g.mean(dim=-1, keepdim=True)), (grad * xhat).sum(0), grad.sum(0)


# ==== real bugs, each before and after its fix ====================================================


class Tanh(Function):
    """tanh, setup_context style, saving the output."""

    # hand-written tanh saving its output (setup_context style)
    @staticmethod
    def forward(x):
        return x.tanh()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * (1 - y * y)


class TanhNoGradOutput(Function):
    """Bug: returns 1 − y² and never multiplies by grad_output."""

    # a real bug: tanh backward missing the grad_output multiply (setup_context style)
    @staticmethod
    def forward(x):
        return x.tanh()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return 1 - y * y


class Swish(Function):
    """x·σ(x), saving only x and recomputing σ in backward."""

    # EfficientNet-PyTorch's MemoryEfficientSwish (SwishImplementation), re-created
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad * (s * (1 + x * (1 - s)))


class SwishMissingTerm(Function):
    """Bug: the product rule's σ(x) term is missing: g·x·σ(x)(1 − σ(x)) only."""

    # a real bug: a memory-efficient swish whose product rule drops one term
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad * (x * s * (1 - s))


class SquaredDistances(Function):
    """D[i, j] = ‖x_i − c_j‖² between rows of x and prototypes c."""

    # as prototypical networks' squared Euclidean distances to class prototypes (Snell et al.)
    @staticmethod
    def forward(ctx, x, c):
        ctx.save_for_backward(x, c)
        return (x * x).sum(1, keepdim=True) - 2 * x @ c.t() + (c * c).sum(1)

    @staticmethod
    def backward(ctx, grad):
        x, c = ctx.saved_tensors
        grad_x = 2 * (grad.sum(1, keepdim=True) * x - grad @ c)
        grad_c = 2 * (grad.sum(0).unsqueeze(1) * c - grad.t() @ x)
        return grad_x, grad_c


class SquaredDistancesHalf(Function):
    """Bug: both gradients lack the factor of 2 of d‖u‖²/du = 2u."""

    # a real bug: squared distances whose backward forgets the factor of 2
    @staticmethod
    def forward(ctx, x, c):
        ctx.save_for_backward(x, c)
        return (x * x).sum(1, keepdim=True) - 2 * x @ c.t() + (c * c).sum(1)

    @staticmethod
    def backward(ctx, grad):
        x, c = ctx.saved_tensors
        return grad.sum(1, keepdim=True) * x - grad @ c, grad.sum(0).unsqueeze(1) * c - grad.t() @ x


class RowVariance(Function):
    """Population variance of each row."""

    # as torch.var(dim=1, unbiased=False) written by hand (a per-sample statistic)
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x - x.mean(dim=1, keepdim=True)).pow(2).mean(dim=1)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        centred = x - x.mean(dim=1, keepdim=True)
        return grad.unsqueeze(1) * 2 * centred / x.shape[1]


class RowVarianceWrongMeanDim(Function):
    """Bug: the backward centres by the column mean (dim 0) where forward used the row mean."""

    # a real bug: a reduction over the wrong dim in backward (mean(0) where forward had mean(1))
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x - x.mean(dim=1, keepdim=True)).pow(2).mean(dim=1)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        centred = x - x.mean(dim=0, keepdim=True)
        return grad.unsqueeze(1) * 2 * centred / x.shape[1]


class MulAdd(Function):
    """a·b + a, with ``needs_input_grad`` branches and both grads initialised to None."""

    # the ctx.needs_input_grad pattern of the "Extending PyTorch" docs, done right
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b + a

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        grad_a = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_a = grad * (b + 1)
        if ctx.needs_input_grad[1]:
            grad_b = grad * a
        return grad_a, grad_b


class MulAddUnbound(Function):
    """Bug: each grad is bound only inside its branch, so when one input needs no gradient the
    return names an unbound local (UnboundLocalError)."""

    # a real bug: needs_input_grad branches without a None default (fails when only one input needs a gradient)
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b + a

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        if ctx.needs_input_grad[0]:
            grad_a = grad * (b + 1)
        if ctx.needs_input_grad[1]:
            grad_b = grad * a
        return grad_a, grad_b  # noqa: F821 - the bug itself: unbound when a branch was skipped


class AddBias(Function):
    """x + b for a bias broadcast over rows; the bias's gradient sums over the batch."""

    # as nn.Linear's bias gradient (a sum over the batch axis)
    @staticmethod
    def forward(ctx, x, bias):
        return x + bias

    @staticmethod
    def backward(ctx, grad):
        return grad, grad.sum(0)


class AddBiasWrongAxis(Function):
    """Bug: the bias's gradient sums over the features (axis 1) instead of the batch: it has the
    batch's length, and autograd refuses it."""

    # a real bug: the bias gradient summed over the wrong axis (a shape autograd rejects)
    @staticmethod
    def forward(ctx, x, bias):
        return x + bias

    @staticmethod
    def backward(ctx, grad):
        return grad, grad.sum(1)


class ExpSaved(Function):
    """exp(x), saving the output and using it out of place."""

    # hand-written exp that saves its output (the docs' Exp)
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return y * grad


class ExpSavedEditedInPlace(Function):
    """Bug: backward multiplies the saved output in place (``y.mul_(grad)``), so the graph's saved
    tensor is changed and a second backward through the same graph fails."""

    # a real bug: an in-place edit of a saved tensor inside backward (memory "optimisation")
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return y.mul_(grad)


class ExpGradOutputInPlace(Function):
    """Bug: backward scales grad_output in place (``grad.mul_(y)``): it overwrites the caller's
    tensor, and raises when grad_output is expanded (as ``y.sum().backward()`` hands it)."""

    # a real bug: an in-place edit of grad_output in backward
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad.mul_(y)


class LogSigmoid(Function):
    """log σ(x); its derivative is σ(−x)."""

    # hand-written log-sigmoid (as in a softplus-based GAN or contrastive loss)
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return F.logsigmoid(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.sigmoid(-x)


class LogSigmoidFlipped(Function):
    """Bug: uses σ(x) where the derivative is σ(−x) (a sign flipped inside the sigmoid)."""

    # a real bug: log-sigmoid backward with the sign inside the sigmoid flipped
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return F.logsigmoid(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.sigmoid(x)


class MemoryEfficientHardSigmoid(Function):
    """relu6(x + 3) / 6; its derivative is [−3 ≤ x ≤ 3] / 6, and its backward is differentiable
    (zero curvature off the kinks), while F.hardsigmoid, its reference, has no double backward."""

    # timm's memory-efficient hard sigmoid (timm/layers/activations_me.py), re-created
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return F.relu6(x + 3.0) / 6.0

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * ((x >= -3.0) & (x <= 3.0)) / 6.0


class LogDetCholesky(Function):
    """log det A of a symmetric positive-definite A, through its Cholesky factor; its gradient is A⁻¹
    (A⁻ᵀ in general, the same for a symmetric A). Outside its domain (a singular or non-square A)
    its forward raises, as torch.logdet, its reference, does or gives −inf."""

    # GPyTorch's InvQuadLogDet / a log-determinant through Cholesky, as fixed after its issue tracker's reports, re-created
    @staticmethod
    def forward(ctx, a):
        factor = torch.linalg.cholesky((a + a.mT) / 2)  # of its symmetric part: Cholesky reads one triangle
        ctx.save_for_backward(a)
        return 2 * factor.diagonal().log().sum()

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved_tensors
        return grad * torch.linalg.inv((a + a.mT) / 2)


class FusedBiasLeakyReLU(Function):
    """leaky_relu(x + bias over channels, 0.2)·√2 on (N, C, H, W) with a (C,) bias; the bias's
    gradient sums over the batch and the map. An empty batch is a valid call: the bias is kept
    whole, and its gradient is zero."""

    # StyleGAN2 ports' fused_bias_leaky_relu (the reference implementation that runs without CUDA), re-created
    @staticmethod
    def forward(ctx, x, bias):
        out = F.leaky_relu(x + bias.view(1, -1, 1, 1), 0.2) * 2**0.5
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        grad_x = grad * torch.where(out > 0, 1.0, 0.2) * 2**0.5
        return grad_x, grad_x.sum((0, 2, 3))

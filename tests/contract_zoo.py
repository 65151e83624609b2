"""Custom Functions that each break one rule of the autograd.Function contract (and one that
breaks none), for tests/test_anatomy.py and the Anatomy page's tests."""

import torch


class Good(torch.autograd.Function):
    """Keeps every rule; the Functions below that take its forward each break one in their backward."""

    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return (g * y if ctx.needs_input_grad[0] else None), (g * x if ctx.needs_input_grad[1] else None)


class TensorOnCtx(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.y = y  # kept as an attribute, not saved
        ctx.save_for_backward(x)
        return x * y

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * ctx.y, g * x


class ChangedAfterSaving(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        product = x * y
        ctx.save_for_backward(product, x, y)
        product.add_(1.0)  # changed in place after it was saved
        return product.clone()

    @staticmethod
    def backward(ctx, g):
        _, x, y = ctx.saved_tensors
        return g * y, g * x


class TooFewGradients(Good):
    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return (g * y,)


class ExtraGradient(Good):
    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * y, g * x, g


class NoneForY(Good):
    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * y, None


class SummedToSize(Good):
    """Returns y's gradient with an extra leading dim of 2 (halved): PyTorch sums it to size."""

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * y, (g * x / 2).expand(2, *x.shape)


class Transposed(Good):
    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * y, (g * x).T


class LowerPrecision(Good):
    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return (g * y).float(), g * x


class Detached(Good):
    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return (g * y).detach(), (g * x).detach()


class Wasteful(Good):
    """Computes y's gradient even when y does not need one."""

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * y, g * x


class NotStatic(Good):
    def backward(ctx, g):  # noqa: N805 - the mistake under test: no @staticmethod
        x, y = ctx.saved_tensors
        return g * y, g * x


class MixedStyles(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        return x * y

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * y, g * x


class TensorsInAList(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.kept = [x, y]  # a list of tensors on ctx: not saved either
        return x * y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.kept
        return g * y, g * x


class GradientForAScale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y, scale):
        ctx.save_for_backward(x, y)
        ctx.scale = scale
        return scale * x * y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return ctx.scale * g * y, ctx.scale * g * x, (g * x * y).sum()  # a gradient for the float scale


def scaled_product(x, y):
    return GradientForAScale.apply(x, y, 2.0)


def formula(entry):
    """The callable of a BROKEN entry: a Function's apply, or the function itself."""
    return entry.apply if isinstance(entry, type) else entry


# name -> (Function or formula, the rule its message must name, a word the message must contain)
BROKEN = {
    "tensor on ctx": (TensorOnCtx, "tensors are saved with save_for_backward", "ctx.y"),
    "changed after saving": (ChangedAfterSaving, "saved tensors are not changed in place", "saved tensor #1"),
    "too few gradients": (TooFewGradients, "one gradient per input", "1 gradient(s) for 2 inputs"),
    "extra gradient": (ExtraGradient, "one gradient per input", "3 values for 2 inputs"),
    "None for an input": (NoneForY, "a gradient for every input that needs one", "None for y"),
    "summed to size": (SummedToSize, "a gradient shaped like its input", "silently sums"),
    "transposed gradient": (Transposed, "a gradient shaped like its input", "rejects"),
    "lower precision": (LowerPrecision, "a gradient in its input's precision", "float32"),
    "not differentiable": (Detached, "a differentiable backward", "not differentiable"),
    "gradient not needed": (Wasteful, "no gradient where none is needed", "for y"),
    "not a staticmethod": (NotStatic, "backward is a staticmethod", "NotStatic.backward"),
    "two styles": (MixedStyles, "one style of forward", "setup_context"),
    "tensors in a list on ctx": (TensorsInAList, "tensors are saved with save_for_backward", "ctx.kept holds 2 tensor(s) in a list"),
    "gradient for a float": (scaled_product, "one gradient per input", "for scale, which is not a tensor input"),
}

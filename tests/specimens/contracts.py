"""Custom Functions that each break one rule of the autograd.Function contract (and one that
breaks none), for tests/contract/test_anatomy.py and the Anatomy page's tests; and Functions written as
people ship them, which break none (KEPT)."""

from typing import NamedTuple

import torch
from torch.utils.checkpoint import checkpoint


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


class InstanceMethod(Good):
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


class ClassmethodScale(torch.autograd.Function):
    """GradientForAScale in the new style, written with classmethods: its forward's names come after cls."""

    @classmethod
    def forward(cls, x, y, scale):
        return scale * x * y

    @classmethod
    def setup_context(cls, ctx, inputs, output):
        x, y, ctx.scale = inputs
        ctx.save_for_backward(x, y)

    @classmethod
    def backward(cls, ctx, g):
        x, y = ctx.saved_tensors
        return ctx.scale * g * y, ctx.scale * g * x, (g * x * y).sum()


def classmethod_scaled_product(x, y):
    return ClassmethodScale.apply(x, y, 2.0)


class InputViewOnCtx(Good):
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x)
        ctx.yt = y.t()  # a view of an input, made inside forward: it does not require grad, its base does
        return x * y

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * ctx.yt.t(), g * x


class Doubled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)  # x unchanged so far: nothing to flag for this ctx
        return 2 * x

    @staticmethod
    def backward(ctx, g):
        return 2 * g


class ChangedAfterItsOwnSave(torch.autograd.Function):
    """Applies another Function first, then changes what it saved itself after saving it."""

    @staticmethod
    def forward(ctx, x, y):
        doubled = Doubled.apply(x)
        ctx.save_for_backward(doubled, y)
        doubled.mul_(0.5)  # after its own save: backward reads x, not 2x
        return doubled * y

    @staticmethod
    def backward(ctx, g):
        doubled, y = ctx.saved_tensors
        return g * y, g * doubled


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
    "instance method": (InstanceMethod, "backward is a staticmethod or classmethod", "InstanceMethod.backward"),
    "two styles": (MixedStyles, "one style of forward", "setup_context"),
    "tensors in a list on ctx": (TensorsInAList, "tensors are saved with save_for_backward", "ctx.kept holds 2 tensor(s) in a list"),
    "gradient for a float": (scaled_product, "one gradient per input", "for scale, which is not a tensor input"),
    "gradient for a float (classmethods)": (classmethod_scaled_product, "one gradient per input", "for scale, which is not a tensor input"),
    "view of an input on ctx": (InputViewOnCtx, "tensors are saved with save_for_backward", "ctx.yt"),
    "changed after its own save": (ChangedAfterItsOwnSave, "saved tensors are not changed in place", "saved for ChangedAfterItsOwnSaveBackward"),
}


# ---- Functions as people ship them: each keeps the contract -------------------------------------------


class Classmethods(torch.autograd.Function):
    """Good, written with classmethods: apply, gradcheck and double backward accept them."""

    @classmethod
    def forward(cls, ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @classmethod
    def backward(cls, ctx, g):
        x, y = ctx.saved_tensors
        return (g * y if ctx.needs_input_grad[0] else None), (g * x if ctx.needs_input_grad[1] else None)


class EditsAfterANestedApply(torch.autograd.Function):
    """Applies another Function (which saves its own input), then edits that input in place
    before saving it itself: each save_for_backward is its own ctx's, and this one's comes last."""

    @staticmethod
    def forward(ctx, x, y):
        shifted = x * 1.0
        doubled = Doubled.apply(shifted)  # grad mode is off inside forward: this node is never kept
        shifted.add_(1.0)
        ctx.save_for_backward(shifted, y)
        return doubled * y

    @staticmethod
    def backward(ctx, g):
        shifted, y = ctx.saved_tensors
        return (2 * g * y if ctx.needs_input_grad[0] else None), (2 * g * (shifted - 1.0) if ctx.needs_input_grad[1] else None)


class OutParameters(Good):
    """A backward that writes into buffers with out=, as torch's CrossMapLRN2d does: autograd calls
    first-order backward with grad mode off, where out= is allowed."""

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        gx, gy = torch.empty_like(g), torch.empty_like(g)
        torch.mul(g, y, out=gx)
        torch.mul(g, x, out=gy)
        return (gx if ctx.needs_input_grad[0] else None), (gy if ctx.needs_input_grad[1] else None)


class KeepsStateOnCtx(torch.autograd.Function):
    """Keeps what carries no gradient on ctx: the RNG state, as torch.utils.checkpoint's
    CheckpointFunction keeps it (ctx.fwd_cpu_state), an index tensor and a bool mask."""

    @staticmethod
    def forward(ctx, x, y):
        ctx.rng_state = torch.get_rng_state()
        ctx.order = torch.argsort(x.flatten())
        ctx.positive = x > 0
        ctx.save_for_backward(x, y)
        return torch.where(ctx.positive, x * y, 0.0)

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        g = torch.where(ctx.positive, g, 0.0)
        return (g * y if ctx.needs_input_grad[0] else None), (g * x if ctx.needs_input_grad[1] else None)


def checkpointed(x, y):
    """torch.utils.checkpoint's reentrant CheckpointFunction, on a product."""
    return checkpoint(lambda a, b: a * b, x, y, use_reentrant=True)


KEPT = {"classmethods": Classmethods, "edits after a nested apply": EditsAfterANestedApply, "out= in backward": OutParameters,
        "state on ctx": KeepsStateOnCtx}


# ---- tensors kept on ctx inside containers (issue #37): each named by its path and line; our own ------------------


class CachesInADict(Good):
    # a dict cache of what forward computed, as hand-written attention Functions keep their softmax weights
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        weights = torch.softmax(x * y, dim=-1)
        ctx.cache = {"weights": weights, "dim": -1}
        return weights.clone()

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        w = ctx.cache["weights"]
        gs = w * (g - (g * w).sum(ctx.cache["dim"], keepdim=True))
        return (gs * y if ctx.needs_input_grad[0] else None), (gs * x if ctx.needs_input_grad[1] else None)


class InputsInATuple(Good):
    # the inputs stashed in a tuple rather than saved, as older custom layers keep their arguments
    @staticmethod
    def forward(ctx, x, y):
        ctx.items = (x, y)
        return x * y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.items
        return (g * y if ctx.needs_input_grad[0] else None), (g * x if ctx.needs_input_grad[1] else None)


class StatesAppended(Good):
    # each step's hidden state appended to a list on ctx, as hand-rolled RNN cells keep them for backward through time
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        ctx.states = []
        h = x
        for _ in range(2):
            h = torch.tanh(h * y)
            ctx.states.append(h)
        return h.clone()

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        h1, h2 = ctx.states
        d2 = g * (1 - h2**2)
        d1 = d2 * y * (1 - h1**2)
        return (d1 * y if ctx.needs_input_grad[0] else None), (d2 * h1 + d1 * x if ctx.needs_input_grad[1] else None)


class PerLayerCaches(Good):
    # a list of per-layer dicts (an activation beside its bool mask), as fused MLP Functions cache each layer
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        hidden = x * y
        ctx.layers = [
            {"act": torch.relu(hidden),
             "mask": hidden > 0},
        ]
        return torch.relu(hidden)

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        g = torch.where(ctx.layers[0]["mask"], g, 0.0)
        return (g * y if ctx.needs_input_grad[0] else None), (g * x if ctx.needs_input_grad[1] else None)


class FilledKeyByKey(Good):
    # a dict made empty and filled key by key, as memory-efficient attention Functions keep probabilities and log-sum-exp
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        ctx.cache = {}
        scores = x * y
        ctx.cache["lse"] = torch.logsumexp(scores, dim=-1)  # one per row: not an input's shape
        ctx.cache["probs"] = torch.softmax(scores, dim=-1)
        return ctx.cache["probs"].clone()

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        p = ctx.cache["probs"]
        gs = p * (g - (g * p).sum(-1, keepdim=True))
        return (gs * y if ctx.needs_input_grad[0] else None), (gs * x if ctx.needs_input_grad[1] else None)


class CellState(NamedTuple):
    """(h, c) by name, as an LSTM cell keeps its state."""

    h: torch.Tensor
    c: torch.Tensor


class StateAsANamedtuple(Good):
    # an LSTM-like cell's (h, c) kept as a namedtuple on ctx
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        ctx.state = CellState(torch.tanh(x * y), x * y)
        return ctx.state.c.clone()


class PairInSetupContext(Good):
    # new-style setup_context keeping its inputs in a list, as Functions ported from the old style do
    @staticmethod
    def forward(x, y):
        return x * y

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, y = inputs
        ctx.pair = [x, y]

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.pair
        return (g * y if ctx.needs_input_grad[0] else None), (g * x if ctx.needs_input_grad[1] else None)


class MetadataInContainers(Good):
    # the control: only what carries no tensor in containers on ctx (sizes, dtypes, options, flags), as shape-generic Functions keep
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        ctx.sizes = [x.shape, y.shape]
        ctx.options = {"dtype": x.dtype, "dims": (0, 1), "scale": 2.0, "name": "product"}
        ctx.flags = (True, None, [x.dim(), {"device": x.device}])
        return x * y

"""An example of your own Functions in Gradient Lab: a hand-written swish, y = x·sigmoid(x).

Start the app with it:

    make run ARGS="-- --functions examples/my_functions.py"
    # or: GRADIENT_LAB_FUNCTIONS=examples/my_functions.py make run

Then pick the family "swish" in the sidebar. Every page works on it as on cosine. The family
"clamp" shows kinks: its inputs are rounded to steps of 0.5, so some sit exactly on the clamp's
bounds, where no single derivative is right; the maps outline them in orange. "row max" returns
two outputs, the values (checked) and their indices (integers, marked non-differentiable), and
"cross entropy" takes an integer target beside its logits (passed through, never differentiated).
"""

import torch

from gradient_lab import declare


class Swish(torch.autograd.Function):
    """Correct: dy/dx = s + x·s·(1 − s), with s = sigmoid(x)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad_output * (s + x * s * (1 - s))


class SwishForgotChainRule(torch.autograd.Function):
    """A real mistake: differentiates x·s as if s were constant, dy/dx = s."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * torch.sigmoid(x)


declare(
    "swish",
    formulas={"swish": Swish, "forgot chain rule": SwishForgotChainRule},
    correct=("swish",),
    reference=lambda x: x * torch.sigmoid(x),  # plain torch ops: autograd through them is the truth
    title="Swish (an example module)",
    latex={
        "forward": r"y = x\,\sigma(x)",
        "gradient": r"\frac{dy}{dx} = \sigma(x) + x\,\sigma(x)\,(1 - \sigma(x))",
        "swish": r"g\,\big(\sigma + x\,\sigma\,(1-\sigma)\big)",
        "forgot chain rule": r"g\,\sigma(x)",
    },
)


class Clamp(torch.autograd.Function):
    """Correct: 1 inside [−1, 1], 0 outside. At ±1 any value in [0, 1] is a valid subgradient."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(-1.0, 1.0)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * ((x >= -1) & (x <= 1)).to(grad_output)


class ClampOpenInterval(torch.autograd.Function):
    """A real mistake: the gradient leaks outside the bounds (|x| ≤ 2 instead of ≤ 1)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(-1.0, 1.0)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * (x.abs() <= 2).to(grad_output)


def on_half_steps(shape, *, seed=0, dtype=torch.float64, device="cpu", **_params):
    """Normals rounded to steps of 0.5: about a fifth of the elements land exactly on ±1."""
    x = torch.randn(tuple(shape), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return ((x * 2).round() / 2).to(dtype=dtype, device=device),


declare(
    "clamp",
    formulas={"clamp": Clamp, "leaks outside": ClampOpenInterval},
    correct=("clamp",),
    reference=lambda x: x.clamp(-1.0, 1.0),
    build_inputs=on_half_steps,
    title="Clamp to [−1, 1] (an example with kinks)",
    latex={"forward": r"y = \min(\max(x, -1), 1)", "gradient": r"\frac{dy}{dx} = [\,|x| \le 1\,]"},
)


class RowMax(torch.autograd.Function):
    """Correct: the gradient of each row's maximum goes to the element that holds it."""

    @staticmethod
    def forward(ctx, x):
        values, indices = x.max(dim=-1)
        ctx.mark_non_differentiable(indices)
        ctx.save_for_backward(indices)
        ctx.shape = x.shape
        return values, indices

    @staticmethod
    def backward(ctx, grad_values, grad_indices):
        (indices,) = ctx.saved_tensors
        grad = grad_values.new_zeros(ctx.shape)
        return grad.scatter(-1, indices.unsqueeze(-1), grad_values.unsqueeze(-1))


class RowMaxToFirst(RowMax):
    """A real mistake: every row's gradient written to its first element, not to its maximum."""

    @staticmethod
    def backward(ctx, grad_values, grad_indices):
        grad = grad_values.new_zeros(ctx.shape)
        grad[..., 0] = grad_values
        return grad


declare(
    "row max",
    formulas={"row max": RowMax, "to first element": RowMaxToFirst},
    correct=("row max",),
    reference=lambda x: x.max(dim=-1),
    outputs=("values", "indices"),
    title="Row maximum with its indices (two outputs)",
    latex={"forward": r"(v_i, k_i) = (\max_j x_{ij},\ \arg\max_j x_{ij})", "gradient": r"\frac{\partial v_i}{\partial x_{ij}} = [\,j = k_i\,]"},
)


class CrossEntropy(torch.autograd.Function):
    """Correct: d loss_i / d logits_ij = softmax(logits_i)_j − [j = target_i]."""

    @staticmethod
    def forward(ctx, logits, target):
        ctx.save_for_backward(logits, target)
        return torch.nn.functional.cross_entropy(logits, target, reduction="none")

    @staticmethod
    def backward(ctx, grad_output):
        logits, target = ctx.saved_tensors
        one_hot = torch.nn.functional.one_hot(target, logits.shape[-1]).to(logits)
        return grad_output.unsqueeze(-1) * (logits.softmax(-1) - one_hot), None


class CrossEntropyForgotTarget(CrossEntropy):
    """A real mistake: the softmax without the one-hot target subtracted."""

    @staticmethod
    def backward(ctx, grad_output):
        logits, _ = ctx.saved_tensors
        return grad_output.unsqueeze(-1) * logits.softmax(-1), None


def logits_and_targets(shape, *, seed=0, dtype=torch.float64, device="cpu", **_params):
    """Normal logits of the sidebar's shape (rows × classes) and one integer class per row."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(tuple(shape), generator=generator, dtype=torch.float64)
    target = torch.randint(0, shape[-1], tuple(shape[:-1]), generator=generator)
    return logits.to(dtype=dtype, device=device), target.to(device)


declare(
    "cross entropy",
    formulas={"cross entropy": CrossEntropy, "forgot the target": CrossEntropyForgotTarget},
    correct=("cross entropy",),
    reference=lambda logits, label: torch.nn.functional.cross_entropy(logits, label, reduction="none"),
    inputs=("logits", "label"),
    build_inputs=logits_and_targets,
    title="Cross entropy with integer targets",
    latex={"forward": r"\ell_i = -\log \operatorname{softmax}(z_i)_{t_i}", "gradient": r"\frac{\partial \ell_i}{\partial z_{ij}} = p_{ij} - [\,j = t_i\,]"},
)

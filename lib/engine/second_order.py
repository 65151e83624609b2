"""The second-order verdict: Hessian-vector products of the loss, from three sources.

- **double backward**: autograd through the formula's own backward (what ``create_graph=True``
  training, gradient penalties and ``gradgradcheck`` use);
- **reference**: autograd twice through the family's reference (the truth, where there is one);
- **finite differences of the formula's gradient**: (g(x + h·w) − g(x − h·w)) / 2h, where g is the
  formula's first-order backward.

``gradgradcheck`` compares the first and the third, so a backward that is consistent with itself
but wrong (the tutorial's) passes it. Here the first is judged against the truth: the reference;
without one, the differences of the formula's gradient, but only once the first-order verdict has
shown that gradient to be right. Two products are taken: the family's loss along a random
direction, and a random linear functional uᵀy along another, so that a double backward that
mishandles ``grad_output`` shows too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from .judge import compare_entries
from .signature import name_element
from .tolerances import Tolerances

Tensor = torch.Tensor
OUTCOMES = ("pass", "fail", "not differentiable", "not checked")
LEADS = {"pass": "passes", "fail": "fails", "not checked": "not checked"}


@dataclass(frozen=True)
class SecondOrderVerdict:
    outcome: str  # one of OUTCOMES
    text: str  # what was compared and what came out, without the leading outcome word
    products: dict[str, tuple[np.ndarray, ...]]  # source -> each product, all inputs flattened together

    @property
    def passed(self) -> bool:
        return self.outcome == "pass"

    @property
    def summary(self) -> str:
        """One sentence: the outcome, then what was compared ("backward is not differentiable" says both)."""
        return self.text if self.outcome == "not differentiable" else f"{LEADS[self.outcome]}: {self.text}"


class NotDifferentiable(Exception):
    """The formula's backward cannot be differentiated (raised, or its gradient has no graph)."""


def _gradient(function, inputs: Sequence[Tensor], functional: Callable[[Tensor], Tensor], create_graph: bool) -> list[Tensor]:
    xs = [x.detach().requires_grad_() for x in inputs]
    with torch.enable_grad():
        y = function(*xs)
        grads = torch.autograd.grad(functional(y), xs, create_graph=create_graph, allow_unused=True)
    return xs, [torch.zeros_like(x) if g is None else g for g, x in zip(grads, xs)]


def double_backward(function, inputs, functional, direction: Sequence[Tensor]) -> tuple[np.ndarray, bool]:
    """H·w through ``function``'s own backward, all inputs flattened together, and whether its
    gradient was recorded by autograd at all (False: H·w is taken as 0)."""
    try:
        xs, grads = _gradient(function, inputs, functional, create_graph=True)
        recorded = [g for g in grads if g.requires_grad]
        if not recorded:
            return np.zeros(sum(x.numel() for x in xs)), False
        with torch.enable_grad():
            inner = sum((g * w.to(g)).sum() for g, w in zip(grads, direction) if g.requires_grad)
            second = torch.autograd.grad(inner, xs, allow_unused=True)
    except RuntimeError as error:
        raise NotDifferentiable(f"{type(error).__name__}: {str(error).splitlines()[0]}") from None
    values = np.concatenate([(torch.zeros_like(x) if s is None else s).detach().double().cpu().reshape(-1).numpy(force=True)
                             for s, x in zip(second, xs)])
    return values, True


def gradient_differences(function, inputs, functional, direction: Sequence[Tensor], step: float) -> np.ndarray:
    """(g(x + h·w) − g(x − h·w)) / 2h of the formula's first-order gradient g."""
    plus = [x + step * w.to(x) for x, w in zip(inputs, direction)]
    minus = [x - step * w.to(x) for x, w in zip(inputs, direction)]
    _, g_plus = _gradient(function, plus, functional, create_graph=False)
    _, g_minus = _gradient(function, minus, functional, create_graph=False)
    return np.concatenate([((a - b) / (2 * step)).detach().double().cpu().reshape(-1).numpy(force=True) for a, b in zip(g_plus, g_minus)])


def check_second_order(
    function: Callable[..., Tensor],
    reference: Callable[..., Tensor] | None,
    inputs: Sequence[Tensor],
    loss: Callable[[Tensor], Tensor],
    tolerances: Tolerances,
    *,
    first_order_passed: bool,
    seed: int = 0,
    names: Sequence[str] | None = None,
) -> SecondOrderVerdict:
    """The formula's double backward against the truth, by two Hessian-vector products."""
    generator = torch.Generator().manual_seed(seed + 104729)
    with torch.no_grad():
        output = (reference or function)(*inputs)
    u = torch.randn(tuple(output.shape), generator=generator, dtype=torch.float64).to(output)
    functionals = (loss, lambda y: (y * u.to(y)).nansum())
    directions = [[torch.randn(tuple(x.shape), generator=generator, dtype=torch.float64) for x in inputs] for _ in functionals]

    products: dict[str, list[np.ndarray]] = {"double backward": [], "differences of its gradient": []}
    if reference is not None:
        products["reference"] = []
    unrecorded = False
    try:
        for functional, direction in zip(functionals, directions):
            values, recorded = double_backward(function, inputs, functional, direction)
            products["double backward"].append(values)
            unrecorded |= not recorded
            products["differences of its gradient"].append(gradient_differences(function, inputs, functional, direction, tolerances.step))
            if reference is not None:
                products["reference"].append(double_backward(reference, inputs, functional, direction)[0])
    except NotDifferentiable as error:
        return SecondOrderVerdict("not differentiable", f"backward is not differentiable: double backward raised {error}", {})
    kept = {source: tuple(values) for source, values in products.items()}

    where = _Where(names or [f"input {i + 1}" for i in range(len(inputs))], [tuple(x.shape) for x in inputs])
    what = "2 Hessian-vector products (the loss's and a random uᵀy's, along random directions)"
    mine = kept["double backward"]
    consistent = _agree(mine, kept["differences of its gradient"], tolerances, where)
    if reference is not None:
        truth, truth_name = kept["reference"], "autograd through the reference"
    elif first_order_passed:
        truth, truth_name = kept["differences of its gradient"], "finite differences of its gradient (first order passed)"
    else:
        return SecondOrderVerdict("not checked", "there is no reference, and the first-order gradient that finite "
                                  "differences would start from is wrong", kept)
    finding = _agree(mine, truth, tolerances, where)
    if finding is not None and unrecorded:
        return SecondOrderVerdict("not differentiable", "backward is not differentiable: its gradient carries no autograd graph "
                                  f"(it detaches, or leaves torch), so double backward gives 0 where the truth does not ({finding})", kept)
    if finding is None:
        return SecondOrderVerdict("pass", f"double backward agrees with {truth_name} on {what}", kept)
    self_consistency = ("it is consistent with its own first-order backward, so gradgradcheck would pass it"
                        if consistent is None else "nor does it agree with differences of its own gradient")
    return SecondOrderVerdict("fail", f"double backward differs from {truth_name}: {finding}; {self_consistency}", kept)


@dataclass(frozen=True)
class _Where:
    """Names an element of all inputs flattened together."""

    names: Sequence[str]
    shapes: Sequence[tuple[int, ...]]

    def __call__(self, flat: int) -> str:
        for name, shape in zip(self.names, self.shapes):
            size = int(np.prod(shape))
            if flat < size:
                return name_element(name, shape, flat)
            flat -= size
        return f"element {flat}"


def _agree(mine: Sequence[np.ndarray], truth: Sequence[np.ndarray], tolerances: Tolerances, where: _Where) -> str | None:
    """None when every product agrees within tolerance; else the worst element in words."""
    labels = ("the loss's", "the random uᵀy's")
    for label, a, b in zip(labels, mine, truth):
        excess = compare_entries(a, {"truth": b}, tolerances, scale=1.0).excess  # a Hessian may be 0 up to rounding: plain atol
        if excess.size and excess.max() > 0:
            k = int(np.argmax(excess))
            return f"in {label} Hessian-vector product at {where(k)}, {a[k]:.6g} against {b[k]:.6g}"
    return None

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

Products are judged element by element. Element k of H·w is ∂(g·w)/∂x_k, which (H being symmetric
wherever it exists) is the derivative of g_k along w: so where it differs from the truth, one-sided
differences of the truth's gradient along w (at h and 2h, as the first-order look takes them along
an element) tell whether g_k has a kink or a jump there. Such an element is left out, counted and
named: its second derivative is not defined, and the one-sided values do not bound every branch a
correct double backward may take (several kinks can pass through one point; at a jump they grow as
1/h). A kink whose surface moves with x_k bends g_k too, so elements it reaches only through
coupling (a row's sum at 0, no element at 0) are seen as well. Kinks are looked for in the truth's
gradient, never in the double backward under test, so a wrong one cannot leave out elements of its
own making.

A backward marked ``@once_differentiable`` is not differentiable twice by design: "by design",
which is not a failure (``failed``), though it does not pass either.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from .evaluate import ElementLook
from .finding import TRUTH_WORDS
from .judge import compare_entries
from .signature import name_element
from .tolerances import Tolerances

Tensor = torch.Tensor
OUTCOMES = ("pass", "fail", "not differentiable", "first order only", "by design", "not checked")
FAILING = ("fail", "not differentiable")  # the outcomes that fail a formula: the others do not
LEADS = {"pass": "passes", "fail": "fails", "by design": "not differentiable twice by design", "not checked": "not checked",
         "first order only": "first order only"}
# where nobody asked for order 2, a backward that cannot be differentiated again is said so, with what to declare
FIRST_ORDER_ONLY = ("its backward cannot be differentiated again ({why}); that is fine for most Functions: declare order=1 or mark "
                    "the backward @once_differentiable to say so, or ask for order=2 to make it a failure")
LABELS = ("the loss's", "the random uᵀy's")  # the two products, in order
ONCE = "once_differentiable"  # in the error a backward marked with it raises when differentiated


@dataclass(frozen=True)
class SecondOrderVerdict:
    outcome: str  # one of OUTCOMES
    text: str  # what was compared and what came out, without the leading outcome word
    products: dict[str, tuple[np.ndarray, ...]]  # source -> each product, all inputs flattened together
    left_out: tuple[int, ...] = ()  # elements (all inputs flattened) not judged: the gradient has a kink or jump there

    @property
    def passed(self) -> bool:
        return self.outcome == "pass"

    @property
    def failed(self) -> bool:
        """Wrong or missing where it was asked for: "by design" and "not checked" are neither pass nor failure."""
        return self.outcome in FAILING

    @property
    def summary(self) -> str:
        """One sentence: the outcome, then what was compared ("backward is not differentiable" says both)."""
        return self.text if self.outcome == "not differentiable" else f"{LEADS[self.outcome]}: {self.text}"


class NotDifferentiable(Exception):
    """The formula's backward cannot be differentiated (raised, or its gradient has no graph)."""


def _gradient(function, inputs: Sequence[Tensor], functional: Callable[[Tensor], Tensor],
              create_graph: bool) -> tuple[list[Tensor], list[Tensor]]:
    xs = [x.detach().requires_grad_() for x in inputs]
    with torch.enable_grad():
        y = function(*xs)
        grads = torch.autograd.grad(functional(y), xs, create_graph=create_graph, allow_unused=True)
    return xs, [torch.zeros_like(x) if g is None else g for g, x in zip(grads, xs)]


def _flat(tensors: Sequence[Tensor]) -> np.ndarray:
    """Tensors flattened together, in float64."""
    return np.concatenate([t.detach().double().cpu().reshape(-1).numpy(force=True) for t in tensors])


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
            assert isinstance(inner, torch.Tensor)  # recorded is not empty
            second = torch.autograd.grad(inner, xs, allow_unused=True)
    except RuntimeError as error:
        raise NotDifferentiable(f"{type(error).__name__}: {str(error).splitlines()[0]}") from None
    return _flat([torch.zeros_like(x) if s is None else s for s, x in zip(second, xs)]), True


def _along(function, inputs, functional, direction: Sequence[Tensor], step: float) -> np.ndarray:
    """g(x + h·w), the formula's first-order gradient, flattened."""
    return _flat(_gradient(function, [x + step * w.to(x) for x, w in zip(inputs, direction)], functional, create_graph=False)[1])


def gradient_differences(function, inputs, functional, direction: Sequence[Tensor], step: float) -> np.ndarray:
    """(g(x + h·w) − g(x − h·w)) / 2h of the formula's first-order gradient g."""
    return (_along(function, inputs, functional, direction, step) - _along(function, inputs, functional, direction, -step)) / (2 * step)


def gradient_look(function, inputs, functional, direction: Sequence[Tensor], step: float) -> ElementLook:
    """One-sided differences of the gradient g along w at h and 2h, every element of g at once
    (``ElementLook.kink``: where they disagree and stay apart as h halves)."""
    base, plus, minus, plus2, minus2 = (_along(function, inputs, functional, direction, t * step) for t in (0, 1, -1, 2, -2))
    eps = max((torch.finfo(x.dtype).eps for x in inputs if x.is_floating_point()), default=0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        return ElementLook(forward=(plus - base) / step, backward=(base - minus) / step,
                           forward_wide=(plus2 - base) / (2 * step), backward_wide=(base - minus2) / (2 * step),
                           rounding=eps * (np.abs(base) + np.maximum(np.abs(plus), np.abs(minus))) / step)


def marked_once(function, inputs: Sequence[Tensor]) -> bool:
    """Whether a backward on the way is marked @once_differentiable. It records its gradient only
    for a grad_output that requires grad, behind a node that raises when run; that node hangs off
    a leaf of its own, which autograd.grad to the inputs never reaches, so every leaf is asked for."""
    xs = [x.detach().requires_grad_() for x in inputs]
    try:
        with torch.enable_grad():
            y = function(*xs)
            upstream = torch.ones_like(y).requires_grad_()
            grads = [g for g in torch.autograd.grad(y, xs, upstream, create_graph=True, allow_unused=True) if g is not None and g.requires_grad]
            if grads:
                total = sum(g.sum() for g in grads)
                assert isinstance(total, torch.Tensor)  # grads is not empty
                torch.autograd.grad(total, _leaves(grads), allow_unused=True)
    except RuntimeError as error:
        return ONCE in str(error)
    return False


def _leaves(tensors: Sequence[Tensor]) -> list[Tensor]:
    """Every leaf that the tensors' graph reaches: autograd.grad to them runs each of its nodes."""
    nodes, seen, leaves = [t.grad_fn for t in tensors], set(), []
    while nodes:
        node = nodes.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if hasattr(node, "variable"):  # AccumulateGrad
            leaves.append(node.variable)
        nodes.extend(n for n, _ in node.next_functions)
    return leaves


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
    declared_order: int | None = 2,
    role: str = "reference",
) -> SecondOrderVerdict:
    """The formula's double backward against the truth, by two Hessian-vector products; with
    ``declared_order`` 1 (differentiable once, as its author says), nothing is run; None (not
    declared): a backward that cannot be differentiated again is "first order only", not a
    failure. ``role``: what the reference is (``judge.ROLES``), for the words."""
    if declared_order is not None and declared_order < 1:
        raise ValueError(f"declared_order must be 1 or more, not {declared_order!r}")
    lenient = declared_order is None

    def cannot(why: str, text: str) -> SecondOrderVerdict:
        return (SecondOrderVerdict("first order only", FIRST_ORDER_ONLY.format(why=why), {}) if lenient else
                SecondOrderVerdict("not differentiable", text, {}))

    if declared_order == 1:
        return SecondOrderVerdict("not checked", f"declared differentiable once (order={declared_order})", {})
    if marked_once(function, inputs):
        return SecondOrderVerdict("by design", f"its backward is marked @{ONCE}", {})
    generator = torch.Generator().manual_seed(seed + 104729)
    with torch.no_grad():
        output = (reference or function)(*inputs)
    u = torch.randn(tuple(output.shape), generator=generator, dtype=torch.float64).to(output)
    functionals = (loss, lambda y: (y * u.to(y)).nansum())
    directions = [[torch.randn(tuple(x.shape), generator=generator, dtype=torch.float64) for x in inputs] for _ in functionals]

    products: dict[str, list[np.ndarray]] = {"double backward": [], "differences of its gradient": []}
    unrecorded = False
    try:
        for functional, direction in zip(functionals, directions):
            values, recorded = double_backward(function, inputs, functional, direction)
            products["double backward"].append(values)
            unrecorded |= not recorded
            products["differences of its gradient"].append(gradient_differences(function, inputs, functional, direction, tolerances.step))
    except NotDifferentiable as error:
        return cannot(f"double backward raised {error}", f"backward is not differentiable: double backward raised {error}")
    lacking = ""  # the reference's own double backward raised: its failure, never the formula's
    if reference is not None:
        try:
            products["reference"] = [double_backward(reference, inputs, f, d)[0] for f, d in zip(functionals, directions)]
        except NotDifferentiable as error:
            reference, lacking = None, f"the {role} has no double backward ({error})"
    kept = {source: tuple(values) for source, values in products.items()}

    def looks(of) -> Callable[[int], ElementLook]:  # each product's look at the gradient of ``of``, taken when first asked for
        return functools.cache(lambda p: gradient_look(of, inputs, functionals[p], directions[p], tolerances.step))

    where = _Where(names or [f"input {i + 1}" for i in range(len(inputs))], [tuple(x.shape) for x in inputs])
    what = "2 Hessian-vector products (the loss's and a random uᵀy's, along random directions)"
    mine, own = kept["double backward"], looks(function)
    if reference is not None:
        truth, truth_name, look = kept["reference"], TRUTH_WORDS[role], looks(reference)
    elif first_order_passed:
        truth, truth_name, look = kept["differences of its gradient"], "finite differences of its gradient (first order passed)", own
        truth_name = f"{truth_name[:-1]}; {lacking})" if lacking else truth_name
    else:
        return SecondOrderVerdict("not checked", f"{lacking or 'there is no reference'}, and the first-order gradient that finite "
                                  "differences would start from is wrong", kept)
    agreement = _agree(mine, truth, tolerances, look)
    finding = agreement.finding(where)
    if finding is not None and unrecorded:
        return cannot("its gradient carries no autograd graph: it detaches, or leaves torch",
                      "backward is not differentiable: its gradient carries no autograd graph "
                      f"(it detaches, or leaves torch), so double backward gives 0 where the truth does not ({finding})")
    left_out = agreement.left_out_text(where)
    if finding is None:
        return SecondOrderVerdict("pass", f"double backward agrees with {truth_name} on {what}{left_out}", kept, agreement.left_out)
    consistent = _agree(mine, kept["differences of its gradient"], tolerances, own).worst is None
    self_consistency = ("it is consistent with its own first-order backward, so gradgradcheck would pass it"
                        if consistent else "nor does it agree with differences of its own gradient")
    return SecondOrderVerdict("fail", f"double backward differs from {truth_name}: {finding}; {self_consistency}{left_out}", kept,
                              agreement.left_out)


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


@dataclass(frozen=True)
class _Agreement:
    """Products against a truth, element by element."""

    worst: tuple[str, int, float, float] | None  # the first failing product's worst element: label, element, mine, truth
    left_out: tuple[int, ...]  # elements (all inputs flattened) where they differ and the gradient has a kink or jump along w

    def finding(self, where: _Where) -> str | None:
        """None when every product agrees within tolerance; else the worst element in words."""
        if self.worst is None:
            return None
        label, k, a, b = self.worst
        return f"in {label} Hessian-vector product at {where(k)}, {a:.6g} against {b:.6g}"

    def left_out_text(self, where: _Where) -> str:
        n = len(self.left_out)
        if not n:
            return ""
        shown = ", ".join(where(k) for k in self.left_out[:3]) + ("…" if n > 3 else "")
        return (f"; {n:,} element{'s' * (n != 1)} left out where the products differ and the gradient has a kink or jump along "
                f"the direction ({shown}): its second derivative is not defined there")


def _agree(mine: Sequence[np.ndarray], truth: Sequence[np.ndarray], tolerances: Tolerances,
           look: Callable[[int], ElementLook]) -> _Agreement:
    """Each product against the truth; where an element fails, the look along that product's
    direction (taken then) leaves it out if the truth's gradient has a kink there."""
    worst, left_out = None, set()
    for p, (label, a, b) in enumerate(zip(LABELS, mine, truth)):
        excess = compare_entries(a, {"truth": b}, tolerances, scale=1.0).excess  # a Hessian may be 0 up to rounding: plain atol
        failing = np.flatnonzero(excess > 0)
        if failing.size:
            kinked = failing[look(p).kink[failing]]
            left_out.update(kinked.tolist())
            excess = excess.copy()
            excess[kinked] = -np.inf
        if worst is None and excess.size and excess.max() > 0:
            k = int(np.argmax(excess))
            worst = (label, k, float(a[k]), float(b[k]))
    return _Agreement(worst, tuple(sorted(left_out)))

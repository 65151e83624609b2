"""Evaluate: the formula's forward, its analytic products (backward calls) and finite differences,
each computed once and kept on the plan.

Central differences of the forward along batches of directions (colour groups, single elements or
random ±1 directions), under ``vmap`` where the Function supports it; values computed under vmap
(whose rule a Function may get wrong) must reproduce plain calls, or are computed again one copy at
a time. Backward calls give uᵀJ for batches of upstream vectors u.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Iterator, Sequence, TypedDict, overload

import numpy as np
import torch

if TYPE_CHECKING:
    from .planning import DifferencePlan

Tensor = torch.Tensor
DEFAULT_BUDGET_BYTES = 256 * 2**20


# ---- the one primitive: differences along a batch of directions ----------------------------------


def chunk_size(input_elements: int, output_elements: int, itemsize: int, budget_bytes: int) -> int:
    # the plus and minus copies, their outputs, with slack for the function's temporaries
    per_direction = (6 * input_elements + 2 * output_elements) * itemsize
    return max(1, budget_bytes // max(per_direction, 1))


def _evaluate_batch(function: Callable[..., Tensor], inputs: Sequence[Tensor], index: int, batch: Tensor, batched: bool = True) -> Tensor:
    """``function`` on each perturbed copy of input ``index`` in ``batch``: under vmap where the
    Function supports it and ``batched``, else one plain call per copy. A Function's own vmap rule
    may be wrong, so plans check vmapped results against plain calls (``_checked_plan``)."""

    def at(x: Tensor) -> Tensor:
        return function(*inputs[:index], x, *inputs[index + 1 :])

    if batched:
        try:
            return torch.func.vmap(at)(batch)
        except Exception:  # noqa: BLE001 - a Function without a vmap rule: one call per direction
            pass
    return torch.stack([at(x.clone()) for x in batch])  # a copy of its own: a row of the batch is a view at an offset


def _difference(function, inputs, index: int, both: Tensor, step: float, batched: bool = True, base: Tensor | None = None) -> Tensor:
    """(f(x + h·d) − f(x − h·d)) / 2h for a batch holding the k plus copies, then the k minus
    copies (one evaluation call for both), flattened to (k, outputs). With ``base`` = f(x): that
    and, from the same evaluations, the gap between the one-sided slopes,
    |f(x + h·d) + f(x − h·d) − 2 f(x)| / h, stacked as (2, k, outputs)."""
    k = both.shape[0] // 2
    with torch.no_grad():
        values = _evaluate_batch(function, inputs, index, both, batched)
    central = ((values[:k] - values[k:]) / (2 * step)).reshape(k, -1)
    if base is not None:  # the same evaluations give the gaps too: (2, k, outputs)
        return torch.stack([central, ((values[:k] + values[k:] - 2 * base) / step).abs().reshape(k, -1)])
    return central


def along_direction(function, inputs, index: int, direction: Tensor, step: float) -> Tensor:
    """The central difference along one direction of input ``index``, by two plain calls (never
    vmap: this is what vmapped results are checked against): (outputs,)."""
    x = inputs[index]
    d = step * direction.to(x)
    with torch.no_grad():
        plus = function(*inputs[:index], x + d, *inputs[index + 1 :])
        minus = function(*inputs[:index], x - d, *inputs[index + 1 :])
    return ((plus - minus) / (2 * step)).reshape(-1)


def group_differences(function, inputs, plan: DifferencePlan, step: float, chunk: int, base: Tensor | None = None) -> Iterator[tuple[int, Tensor]]:
    """For each chunk of perturbation groups (colours, or single elements): the first group and
    (f(x + h·e_g) − f(x − h·e_g)) / 2h per group g, as (k, outputs) (with ``base``: the gaps
    between one-sided slopes, see ``_difference``)."""
    x = inputs[plan.input_index]
    n = plan.n_inputs
    group = torch.from_numpy(plan.colors) if plan.colors is not None else torch.arange(n)
    order = torch.argsort(group, stable=True)  # elements sorted by group: a chunk is a slice
    bounds = torch.searchsorted(group[order], torch.arange(0, plan.n_groups + chunk, chunk).clamp(max=plan.n_groups))
    flat = x.reshape(1, n)
    for i, start in enumerate(range(0, plan.n_groups, chunk)):
        k = min(chunk, plan.n_groups - start)
        elements = order[bounds[i] : bounds[i + 1]].to(x.device)
        rows = (group[order[bounds[i] : bounds[i + 1]]] - start).to(x.device)
        # a copy per group and sign, then ±h written at that group's elements: one pass over the batch
        both = flat.repeat(2 * k, 1)
        both[rows, elements] += step
        both[rows + k, elements] -= step
        yield start, _difference(function, inputs, plan.input_index, both.reshape(2 * k, *x.shape), step, plan.batched, base)


# ---- reading the Jacobian by backward calls ----------------------------------------------------------


def as_float64(t: Tensor | None, like: Tensor) -> np.ndarray:
    """``t`` as a float64 numpy array on the CPU; zeros shaped like ``like`` where autograd gave None
    (the input does not affect the output)."""
    if t is None:
        return np.zeros(tuple(like.shape))
    return t.detach().to(device="cpu", dtype=torch.float64).numpy(force=True)


def cosine_of(a: np.ndarray, b: np.ndarray) -> float:
    """The cosine between two vectors where both are finite: 1 the same direction, −1 flipped; NaN where either is 0."""
    finite = np.isfinite(a) & np.isfinite(b)
    if not finite.all():  # else the values as they are: no copies of millions of them
        a, b = a[finite], b[finite]
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return float(a @ b / (na * nb)) if na > 0 and nb > 0 else float("nan")


@overload
def backward_products(function, inputs: Sequence[Tensor], needs: None, upstream: Tensor | None) -> list[np.ndarray]: ...
@overload
def backward_products(function, inputs: Sequence[Tensor], needs: Sequence[bool], upstream: Tensor | None) -> list[np.ndarray | None]: ...
def backward_products(function, inputs: Sequence[Tensor], needs: Sequence[bool] | None,
                      upstream: Tensor | None) -> list[np.ndarray] | list[np.ndarray | None]:
    """Per input, uᵀJ by the function's backward, in float64 on the CPU, with only the inputs that
    ``needs`` marks requiring a gradient (None: every one): zeros where backward gave none, None
    where the input did not require one. ``upstream`` None: ones. A copy of it is handed to
    backward, which may write into grad_output."""
    needs = tuple(needs) if needs is not None else (True,) * len(inputs)
    xs = [x.detach().requires_grad_(need) for x, need in zip(inputs, needs)]
    with torch.enable_grad():
        y = function(*xs)
        u = torch.ones_like(y) if upstream is None else upstream.to(dtype=y.dtype).clone()
        grads = iter(torch.autograd.grad(y, [x for x in xs if x.requires_grad], u, allow_unused=True))
    found: list[np.ndarray | None] = []
    for x, need in zip(xs, needs):
        g = next(grads) if need else None
        found.append(None if not need else np.zeros(tuple(x.shape)) if g is None else
                     g.detach().to(device="cpu", dtype=torch.float64).numpy(force=True).copy())
    return found


def forward_graph(function, inputs: Sequence[Tensor]) -> tuple[list[Tensor], Tensor]:
    """The inputs as fresh leaves that require grad, and ``function``'s output on them: one forward
    call whose graph several backward calls can share (``vector_jacobian_products``'s ``graph``)."""
    xs = [x.detach().requires_grad_() for x in inputs]
    with torch.enable_grad():
        return xs, function(*xs)


def vector_jacobian_products(function, inputs: Sequence[Tensor], upstreams: Tensor, batched: bool,
                             graph: tuple[list[Tensor], Tensor] | None = None) -> list[Tensor]:
    """uᵀJ for each u in ``upstreams`` (k, *output shape): per input, (k, elements). On ``graph``
    (``forward_graph`` of the same function and inputs) where given, else on a forward call of its own."""
    xs, y = graph if graph is not None else forward_graph(function, inputs)
    with torch.enable_grad():
        upstreams = upstreams.to(dtype=y.dtype, device=y.device)
        grads = None
        if batched and upstreams.shape[0] > 1:
            try:
                # copies: a backward may write into grad_output, which would change the next vectors
                grads = torch.autograd.grad(y, xs, upstreams.clone(), retain_graph=True, is_grads_batched=True, allow_unused=True)
            except Exception:  # noqa: BLE001 - a backward that vmap cannot run: one call per vector
                grads = None
        if grads is None:
            per = [torch.autograd.grad(y, xs, u.clone(), retain_graph=True, allow_unused=True) for u in upstreams]
    k = upstreams.shape[0]
    if grads is None:  # per input, the plain calls' gradients stacked: a copy of their own
        return [torch.zeros(k, x.numel(), dtype=torch.float64) if all(g[i] is None for g in per) else
                torch.stack([torch.zeros_like(x) if g[i] is None else g[i].detach() for g in per]).reshape(k, -1)
                .to(dtype=torch.float64, device="cpu").resolve_conj().resolve_neg()
                for i, x in enumerate(xs)]
    return [torch.zeros(k, x.numel(), dtype=torch.float64) if g is None else torch.from_numpy(g.detach().reshape(k, -1).double().cpu().numpy(force=True).copy())
            for g, x in zip(grads, xs)]


def compressed_entries(function, inputs, patterns, colors: np.ndarray, skip: np.ndarray, output_shape, budget_bytes: int,
                       batched: bool = True, graph: tuple[list[Tensor], Tensor] | None = None) -> list[np.ndarray]:
    """Each input's Jacobian entries on its pattern, from one backward call per row colour (on
    ``graph``, ``forward_graph`` of the same function and inputs, where given)."""
    m, groups = colors.size, int(colors.max()) + 1 if colors.size else 0
    n = sum(x.numel() for x in inputs)
    chunk = max(1, budget_bytes // max(8 * 4 * (m + 2 * n), 1))  # the basis, the products, the backward's temporaries
    values = [np.zeros(r.size) for r, _ in patterns]
    live = np.ones(m, dtype=bool)
    live[skip] = False
    for first in range(0, groups, chunk):
        k = min(chunk, groups - first)
        basis = torch.zeros(k, m, dtype=torch.float64)
        rows = np.nonzero(live & (colors >= first) & (colors < first + k))[0]
        basis[torch.from_numpy(colors[rows] - first), torch.from_numpy(rows)] = 1.0
        products = vector_jacobian_products(function, inputs, basis.reshape(k, *output_shape), batched, graph)
        for (r, c), out, product in zip(patterns, values, products):
            if k == groups:  # one chunk holds every colour (the common case): no masks
                if groups > 1:
                    out[:] = product.numpy()[colors[r], c]
                else:  # one colour: the product is the entries' column by column
                    out[:] = product.numpy()[0] if in_order(c, product.shape[1]) else product.numpy()[0, c]
                continue
            hit = (colors[r] >= first) & (colors[r] < first + k)
            out[hit] = product.numpy()[colors[r[hit]] - first, c[hit]]
    return values


def in_order(cols: np.ndarray, n: int) -> bool:
    """Whether a pattern's columns are 0, 1, …, n − 1 in this order (every input element in one
    output, read row by row: reductions along the last dim, elementwise functions), so that
    indexing by them is the identity."""
    return cols.size == n and (n < 2 or bool((cols[1:] > cols[:-1]).all()))


def _row_max(rows: np.ndarray, values: np.ndarray, m: int) -> np.ndarray:
    """The largest value of each row (0 for an empty one); linear when rows are sorted, as
    patterns read row by row are."""
    largest = np.zeros(m)
    if rows.size and bool(np.all(rows[1:] >= rows[:-1])):
        starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
        largest[rows[starts]] = np.maximum.reduceat(values, starts)
    elif rows.size:
        np.maximum.at(largest, rows, values)
    return largest


def reproduces(plan: DifferencePlan, rows: np.ndarray, cols: np.ndarray, values: np.ndarray) -> bool:
    """Whether the Jacobian entries (rows, cols, values) give J·d equal to the plan's plain
    differences along each of its directions d, row by row, within atol + rtol·(largest term of
    that row): as strict as the verdict, which compares entries at atol + rtol·|truth|."""
    atol, rtol = plan.tolerance
    m = plan.n_outputs
    rows = rows.astype(np.intp, copy=False)  # cast once, not in every count below
    ordered = in_order(cols, plan.n_inputs)
    magnitudes = np.abs(values)
    finite = np.isfinite(magnitudes)
    if not finite.all():  # NaN and inf count as 0 here
        magnitudes = np.where(finite, magnitudes, 0.0)
    largest = _row_max(rows, magnitudes, m)  # |d| = 1: the largest term
    for direction, observed in zip(plan.directions, plan.along):
        with np.errstate(invalid="ignore"):
            terms = values * (direction if ordered else direction[cols])
        predicted = np.bincount(rows, weights=terms, minlength=m).astype(np.float64)  # float even when empty
        finite = np.isfinite(observed) & np.isfinite(predicted)
        if np.any(finite != np.isfinite(observed)):
            return False
        if np.any(np.abs(observed - predicted)[finite] > atol + rtol * largest[finite]):
            return False
    return True


def directional_gap(plan: DifferencePlan, rows: np.ndarray, cols: np.ndarray, values: np.ndarray) -> float:
    """How far the Jacobian entries' J·d is from the plan's plain differences along its directions
    d, relative to the larger of the two in norm (the largest over the directions): about 0 for a
    Jacobian of the same function, 1 or more for the gradient of another one (a straight-through
    identity against a step function's 0, a reversed sign)."""
    gaps = [0.0]
    for direction, observed in zip(plan.directions, plan.along):
        with np.errstate(invalid="ignore"):
            predicted = np.bincount(rows.astype(np.intp, copy=False), weights=values * direction[cols], minlength=plan.n_outputs)
        finite = np.isfinite(observed) & np.isfinite(predicted)
        size = max(float(np.linalg.norm(observed[finite])), float(np.linalg.norm(predicted[finite])))
        if size > 0:
            gaps.append(float(np.linalg.norm((observed - predicted)[finite])) / size)
    return max(gaps)


# ---- what the plan gives ---------------------------------------------------------------------------


def _blocks(function, inputs, plan: DifferencePlan, step: float, budget_bytes: int, base: Tensor | None = None) -> Iterator[tuple[int, np.ndarray]]:
    x = inputs[plan.input_index]
    chunk = chunk_size(plan.n_inputs, plan.n_outputs, x.element_size(), budget_bytes)
    for first, block in group_differences(function, inputs, plan, step, chunk, base):
        yield first, block.double().cpu().numpy()  # (k, outputs), or (2, k, outputs) with base


def _compressed_values(function, inputs, plan: DifferencePlan, step: float, budget_bytes: int, base: Tensor | None = None) -> np.ndarray:
    """Entry (r, c) of the pattern is row r of its colour's difference; with ``base``, (2, entries):
    the differences and the gaps between one-sided slopes, from the same evaluations."""
    assert plan.colors is not None and plan.rows is not None and plan.cols is not None  # a structured plan's
    color_of_entry = plan.colors[plan.cols]
    values = np.zeros((2, plan.rows.size)) if base is not None else np.zeros(plan.rows.size)
    for first, block in _blocks(function, inputs, plan, step, budget_bytes, base):
        k = block.shape[-2]
        entries = np.nonzero((color_of_entry >= first) & (color_of_entry < first + k))[0]
        values[..., entries] = block[..., color_of_entry[entries] - first, plan.rows[entries]]
    return values


def _dense_jacobian(function, inputs, plan: DifferencePlan, step: float, budget_bytes: int, base: Tensor | None = None) -> np.ndarray:
    """The whole numerical Jacobian (outputs, inputs); with ``base``, (2, outputs, inputs): and its gaps."""
    jacobian = np.zeros((2, plan.n_outputs, plan.n_inputs) if base is not None else (plan.n_outputs, plan.n_inputs))
    for first, block in _blocks(function, inputs, plan, step, budget_bytes, base):
        k = block.shape[-2]
        jacobian[..., first : first + k] = np.swapaxes(block, -1, -2)
    return jacobian


def _all_entries(m: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rows, cols = np.divmod(np.arange(m * n), n)
    return rows, cols


def with_values(function, inputs, plan: DifferencePlan, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> DifferencePlan:
    """The plan with its numerical Jacobian at its own step computed (once): on the pattern
    (compressed plans) or whole (flat, row-major). Values computed under vmap that do not
    reproduce the plan's plain differences are computed again one copy at a time; if those do,
    they are kept, and the plan says so (else the differences' own noise was the cause)."""
    if plan.values is not None:
        return plan
    rows, cols = plan.pattern if plan.structured else _all_entries(plan.n_outputs, plan.n_inputs)
    found = _values_and_gaps(function, inputs, plan, rows, budget_bytes)
    if plan.batched and plan.directions and not reproduces(plan, rows, cols, found["values"]):
        plain = replace(plan, batched=False)
        plain_found = _values_and_gaps(function, inputs, plain, rows, budget_bytes)
        if reproduces(plan, rows, cols, plain_found["values"]):  # vmap was the culprit, not the differences' own noise
            return replace(plain, **plain_found, source=plan.source + "; evaluated one copy at a time (vmap disagreed with plain calls)")
    return replace(plan, **found)


class _Differenced(TypedDict):
    """A plan's fields that ``_values_and_gaps`` fills."""

    values: np.ndarray
    gaps: np.ndarray
    gap_rounding: np.ndarray


def _values_and_gaps(function, inputs, plan: DifferencePlan, rows: np.ndarray, budget_bytes: int) -> _Differenced:
    """The numerical Jacobian's values (on the pattern, or whole and flat), the gaps between
    their one-sided slopes, and the rounding those gaps carry, from one set of evaluations (and
    f(x) once)."""
    with torch.no_grad():
        base = function(*inputs)
    x = inputs[plan.input_index]
    eps = torch.finfo(x.dtype).eps if x.is_floating_point() else 0.0
    both = (_compressed_values(function, inputs, plan, plan.step, budget_bytes, base.reshape(1, *base.shape)) if plan.structured
            else _dense_jacobian(function, inputs, plan, plan.step, budget_bytes, base.reshape(1, *base.shape)).reshape(2, -1))
    flat_base = base.detach().double().cpu().reshape(-1).numpy()
    return {"values": both[0], "gaps": both[1], "gap_rounding": eps * np.abs(flat_base[rows]) / plan.step}


def _compute_values(function, inputs, plan: DifferencePlan, step: float, budget_bytes: int) -> np.ndarray:
    if plan.structured:
        return _compressed_values(function, inputs, plan, step, budget_bytes)
    return _dense_jacobian(function, inputs, plan, step, budget_bytes).reshape(-1)


def jacobian_values(function, inputs, plan: DifferencePlan, step: float | None = None, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> np.ndarray:
    """The numerical Jacobian's values (on the pattern, or whole and flat) at ``step`` (None: the plan's)."""
    if step is None or step == plan.step:
        values = with_values(function, inputs, plan, budget_bytes).values
        assert values is not None  # with_values computes them
        return values
    return _compute_values(function, inputs, plan, step, budget_bytes)


def numerical_jacobian(function, inputs, plan: DifferencePlan, step: float | None = None, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> np.ndarray:
    """The full numerical Jacobian, (output elements, input elements), for small inputs."""
    values = jacobian_values(function, inputs, plan, step, budget_bytes)
    if not plan.structured:
        return values.reshape(plan.n_outputs, plan.n_inputs)
    jacobian = np.zeros((plan.n_outputs, plan.n_inputs))
    jacobian[plan.rows, plan.cols] = values
    return jacobian


def numerical_entries(function, inputs, plan: DifferencePlan, step: float | None = None,
                      budget_bytes: int = DEFAULT_BUDGET_BYTES) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The numerical Jacobian as (rows, cols, values): on the plan's pattern when it has one;
    else every entry that is not exactly 0, and every entry of an output that is not finite
    (their structure is unknown)."""
    values = jacobian_values(function, inputs, plan, step, budget_bytes)
    if plan.structured:
        return *plan.pattern, values
    jacobian = values.reshape(plan.n_outputs, plan.n_inputs)
    keep = (jacobian != 0) | ~np.isfinite(jacobian)
    keep[plan.skip_rows, :] = True
    rows, cols = np.nonzero(keep)
    return rows, cols, jacobian[rows, cols]


def entry_noise(plan: DifferencePlan, x: Tensor, rows: np.ndarray, cols: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each numerical entry's own error estimate from rounding: f's rounding over the step
    (eps·|f(x)|/h, carried by the evaluations), and the step's own rounding at x (x ± h is exact
    only to eps·|x|, a relative error eps·|x|/h of the slope). Entries as ``numerical_entries`` gives them."""
    if plan.gap_rounding is None:
        return np.zeros(values.shape)
    eps = torch.finfo(x.dtype).eps if x.is_floating_point() else 0.0
    rounding = plan.gap_rounding if plan.structured else plan.gap_rounding.reshape(plan.n_outputs, plan.n_inputs)[rows, cols]
    magnitude = np.abs(x.detach().double().cpu().reshape(-1).numpy())[cols]
    with np.errstate(invalid="ignore"):
        return rounding + eps * magnitude * np.abs(values) / plan.step


def product_noise(plan: DifferencePlan, x: Tensor, entries: tuple[np.ndarray, np.ndarray, np.ndarray], upstream: np.ndarray) -> np.ndarray:
    """The own error of a numerical uᵀJ: Σ |u|·(each entry's rounding, ``entry_noise``), flat.
    ``entries``: (rows, cols, values) as ``numerical_entries`` gives them."""
    rows, cols, values = entries
    return gradient_from_entries(rows, cols, entry_noise(plan, x, rows, cols, values), np.abs(upstream), plan.skip_rows, plan.n_inputs)


def gradient_from_entries(rows, cols, values, upstream: np.ndarray, skip_rows: np.ndarray, n: int) -> np.ndarray:
    """Jᵀ·upstream from Jacobian entries, outputs that are not finite left out; an element that
    feeds one of them is NaN (its gradient is undefined)."""
    # float64 even when no entry is used (numpy gives integers for an empty bincount)
    if not skip_rows.size:
        return np.bincount(cols, weights=values * upstream[rows], minlength=n).astype(np.float64)
    used = np.isin(rows, skip_rows, invert=True)
    gradient = np.bincount(cols[used], weights=values[used] * upstream[rows[used]], minlength=n).astype(np.float64)
    gradient[cols[~used]] = np.nan
    return gradient


def numerical_gradient(
    function, inputs, plan: DifferencePlan, upstream: Tensor, step: float | None = None, budget_bytes: int = DEFAULT_BUDGET_BYTES
) -> np.ndarray:
    """Jᵀ·upstream for input ``plan.input_index``, in float64, shaped like the input.

    Outputs that are not finite at the point are left out: their derivative is undefined, and
    they would otherwise make every element that shares a block with them NaN. Elements that
    feed such an output are NaN: where the pattern says so, or every element when no pattern
    is known (any of them may feed it). Both paths follow one rule, so a verdict does not change
    with the plan."""
    if plan.sampled:  # at scale nothing is differenced by groups: no numerical gradient (NaN: no truth there)
        return np.full(tuple(inputs[plan.input_index].shape), np.nan)
    v = upstream.detach().double().cpu().reshape(-1).numpy()
    values = jacobian_values(function, inputs, plan, step, budget_bytes)
    # without a pattern, every element may feed an undefined output
    rows, cols = (plan.rows, plan.cols) if plan.structured else _all_entries(plan.n_outputs, plan.n_inputs)
    gradient = gradient_from_entries(rows, cols, values, v, plan.skip_rows, plan.n_inputs)
    return gradient.reshape(tuple(inputs[plan.input_index].shape))


# ---- a second look at single elements: one-sided differences at two steps -------------------------

MAX_SECOND_LOOK = 256  # elements re-examined one by one when their entries fail against differences


@dataclass(frozen=True)
class ElementLook:
    """Plain central and one-sided differences along one element, at step h and 2h, over every
    output, and the rounding they carry: what tells a kink from a smooth point, and the
    differences' own error from a real disagreement."""

    forward: np.ndarray  # (f(x + h e) − f(x)) / h
    backward: np.ndarray  # (f(x) − f(x − h e)) / h
    forward_wide: np.ndarray  # the same at 2h
    backward_wide: np.ndarray
    rounding: np.ndarray  # eps·(|f(x)| + |f(x ± h e)|) / h: the rounding in a difference at h
    nearby: np.ndarray | None = None  # at a kink: central differences at points near x where ties are broken (rows: points)

    @property
    def slopes(self) -> np.ndarray:
        """The derivatives along the element that a valid gradient may take: the one-sided ones
        and, at a kink, those at nearby points where the function is smooth. A column of the
        Jacobian at a kink is valid within their convex hull (Clarke's generalized gradient, found
        by sampling): at a tie of three, an element may take the middle place's gradient, which
        neither one-sided slope along it gives."""
        rows = [self.forward, self.backward]
        return np.stack(rows if self.nearby is None else [*rows, *self.nearby])

    def bounds(self, upstream: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The smallest and largest valid derivative, per output (or of uᵀf for an upstream u)."""
        slopes = self.slopes if upstream is None else np.nansum(self.slopes * upstream, axis=1)
        with np.errstate(invalid="ignore"):
            return np.nanmin(slopes, axis=0), np.nanmax(slopes, axis=0)

    @property
    def central(self) -> np.ndarray:
        return (self.forward + self.backward) / 2

    @property
    def truncation(self) -> np.ndarray:
        """Richardson: a central difference's error is ≈ (D(h) − D(2h)) / 3."""
        return np.abs(self.central - (self.forward_wide + self.backward_wide) / 2) / 3

    @property
    def kink(self) -> np.ndarray:
        """Where the one-sided slopes disagree by more than the rounding and do not come
        together as h halves (at a smooth point their gap is h·f'', halving with h)."""
        gap, wide_gap = np.abs(self.forward - self.backward), np.abs(self.forward_wide - self.backward_wide)
        return (gap > 16 * self.rounding) & (wide_gap < 1.5 * gap)


NEARBY_POINTS = 6  # tie-broken points near a kink at which its slopes are sampled
NEARBY_RADIUS = 100  # their distance from the point, in steps: far beyond the step, within the function's smooth scale


def look_at_elements(function, inputs: Sequence[Tensor], index: int, elements: Sequence[int], step: float, batched: bool = False,
                     budget_bytes: int = DEFAULT_BUDGET_BYTES) -> dict[int, ElementLook]:
    """Each element's ``ElementLook``: by plain calls, or with ``batched`` (a plan whose vmapped
    values reproduced plain calls) the point and its four moves per element in batches under vmap.
    At a kink, the central differences along the element at ``NEARBY_POINTS`` points moved at
    random by about ``NEARBY_RADIUS`` steps (every tie broken one way or another, each point's
    slope a limit of gradients) are kept as well, by plain calls."""
    x = inputs[index]
    flat = x.detach().reshape(-1)
    eps = torch.finfo(x.dtype).eps if x.is_floating_point() else 0.0

    def at(shift: Tensor, around: Tensor = flat) -> np.ndarray:
        moved = (around + shift).reshape(x.shape)
        with torch.no_grad():
            out = function(*inputs[:index], moved, *inputs[index + 1 :])
        return out.detach().double().cpu().reshape(-1).numpy()

    base = at(torch.zeros_like(flat))
    moves = (step, -step, 2 * step, -2 * step)
    if batched and elements:  # every move of every element, a chunk of copies per call
        chunk = chunk_size(flat.numel(), base.size, flat.element_size(), budget_bytes)
        # the point itself first: its value and its moves' are computed the same way, so their differences hold no vmap rounding
        shifts = torch.tensor((0.0, *moves * len(elements)), dtype=flat.dtype, device=flat.device)
        where = torch.tensor([elements[0], *elements], device=flat.device).repeat_interleave(torch.tensor([1, *[len(moves)] * len(elements)]))
        chunks = []
        for start in range(0, shifts.numel(), chunk):
            copies = flat.repeat(min(chunk, shifts.numel() - start), 1)
            copies[torch.arange(copies.shape[0]), where[start : start + chunk]] += shifts[start : start + chunk]
            with torch.no_grad():
                out = _evaluate_batch(function, inputs, index, copies.reshape(-1, *x.shape))
            chunks.append(out.detach().double().cpu().reshape(copies.shape[0], -1).numpy())
        values = np.concatenate(chunks)
        base, moved = values[0], values[1:].reshape(len(elements), len(moves), -1)
    looks = {}
    for number, element in enumerate(elements):
        e = torch.zeros_like(flat)
        e[element] = 1.0
        plus, minus, plus2, minus2 = moved[number] if batched else (at(h * e) for h in moves)
        with np.errstate(invalid="ignore", over="ignore"):
            look = ElementLook(
                forward=(plus - base) / step, backward=(base - minus) / step,
                forward_wide=(plus2 - base) / (2 * step), backward_wide=(base - minus2) / (2 * step),
                rounding=eps * (np.abs(base) + np.maximum(np.abs(plus), np.abs(minus))) / step,
            )
        if look.kink.any():
            generator = torch.Generator().manual_seed(element)
            nearby = []
            for _ in range(NEARBY_POINTS):
                around = flat + NEARBY_RADIUS * step * torch.rand(flat.shape, generator=generator, dtype=flat.dtype).sub_(0.5).mul_(2)
                with np.errstate(invalid="ignore", over="ignore"):
                    nearby.append((at(step * e, around) - at(-step * e, around)) / (2 * step))
            look = replace(look, nearby=np.stack(nearby))
        looks[element] = look
    return looks


def one_sided_gaps(function, inputs, plan: DifferencePlan, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> tuple[np.ndarray, np.ndarray]:
    """For every entry the plan gives (on its pattern, or all of them, flat): the gap between its
    one-sided slopes, |f(x + h) + f(x − h) − 2 f(x)| / h, and the rounding that gap carries,
    eps·|f(x)|/h: at a smooth point the gap is h·f'', at a kink the jump of the slope."""
    plan = with_values(function, inputs, plan, budget_bytes)
    assert plan.gaps is not None and plan.gap_rounding is not None  # computed with its values
    return plan.gaps, plan.gap_rounding


def summed_gradients(function, inputs: Sequence[Tensor]) -> list[tuple[int, tuple[int, ...]]]:
    """Where a custom Function's backward returns, for one of the inputs, a gradient of another
    shape than the input's that PyTorch then sums (or expands) to the input's shape without a word:
    (input index, the shape it returned), from the custom nodes fed by the inputs directly, their
    backward called as autograd calls it (grad off, a grad_output of ones per output)."""
    xs = [x.detach().requires_grad_() for x in inputs]
    with torch.enable_grad():
        y = function(*xs)
    found, seen, stack = [], set(), [y.grad_fn] if y.grad_fn is not None else []
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        stack.extend(edge for edge, _ in node.next_functions)
        if not isinstance(node, torch.autograd.function.BackwardCFunction):
            continue
        try:
            metadata = node._input_metadata  # type: ignore[attr-defined]  # one per output of the Function's forward: set by torch's C++ node, not in its stubs
            upstreams = [torch.ones(m.shape, dtype=m.dtype) if m.dtype.is_floating_point else torch.zeros(m.shape) for m in metadata]
            with torch.no_grad():
                raw = node.apply(*upstreams)
        except Exception:  # noqa: BLE001 - a backward that raises here is the verdict's to report, not this clue's
            continue
        raw = raw if isinstance(raw, tuple) else (raw,)
        live = [position for position, needs in enumerate(node.needs_input_grad) if needs]
        edges = [edge for edge, _ in node.next_functions if edge is not None]
        for position, edge in zip(live, edges):
            leaf = getattr(edge, "variable", None)
            g = raw[position] if position < len(raw) else None
            index = next((i for i, x in enumerate(xs) if x is leaf), None)
            if index is not None and isinstance(g, Tensor) and tuple(g.shape) != tuple(xs[index].shape):
                found.append((index, tuple(g.shape)))
    return found

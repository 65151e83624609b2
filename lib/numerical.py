"""Numerical differentiation: central finite differences, batched and compressed by colouring.

One perturbation per input element costs a forward call per element, O(n²) in all. Most
Functions have a sparse Jacobian (an output row depends on a few input elements), so this module
discovers the pattern without knowing the Function (from the Jacobian of its reference, at the
given point and at a jittered one), colours the columns so that elements which never meet in an
output share a colour (Curtis–Powell–Reid), and perturbs a whole colour at once. A random
directional derivative checks the compressed result; when it disagrees, or when there is no
reference, every element gets its own perturbation. Perturbed copies are evaluated with
``torch.func.vmap`` where the Function supports it, in chunks that fit a memory budget.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Callable, Hashable, Iterator, Sequence

import numpy as np
import torch

Tensor = torch.Tensor
DEFAULT_BUDGET_BYTES = 256 * 2**20
GREEDY_WORK_LIMIT = 2e7  # pairs of columns the greedy colouring may look at (a few seconds of Python)
CHECK_DIRECTIONS = 2  # random directions a compressed plan must reproduce at the point


@dataclass(frozen=True)
class DifferencePlan:
    """How one input is perturbed: by colour groups (``colors`` per element) or one by one."""

    input_index: int
    n_inputs: int  # elements of this input (columns of its Jacobian)
    n_outputs: int  # elements of the output (rows)
    colors: np.ndarray | None  # colour of each element; None: one perturbation per element
    rows: np.ndarray | None  # the Jacobian's sparsity pattern (row, col), when colouring
    cols: np.ndarray | None
    source: str  # in words: where the structure came from, or why there is none
    skip_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # outputs not finite at the point: left out of Jᵀv
    step: float = 0.0
    values: np.ndarray | None = None  # the Jacobian on the pattern at ``step``, found while checking
    batched: bool = True  # evaluate perturbed copies under vmap; False once vmap was caught disagreeing

    @property
    def structured(self) -> bool:
        return self.colors is not None

    @property
    def n_groups(self) -> int:
        return int(self.colors.max()) + 1 if self.colors is not None and self.colors.size else self.n_inputs

    @property
    def evaluations(self) -> int:
        """Forward evaluations of the function: two per group (central differences), and two for
        the random-direction check of a compressed plan."""
        return 2 * self.n_groups + (2 * CHECK_DIRECTIONS if self.colors is not None else 0)


# ---- the one primitive: differences along a batch of directions ----------------------------------


def _chunk_size(input_elements: int, output_elements: int, itemsize: int, budget_bytes: int) -> int:
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
    return torch.stack([at(x) for x in batch])


def _difference(function, inputs, index: int, both: Tensor, step: float, batched: bool = True) -> Tensor:
    """(f(x + h·d) − f(x − h·d)) / 2h for a batch holding the k plus copies, then the k minus
    copies (one evaluation call for both), flattened to (k, outputs)."""
    k = both.shape[0] // 2
    with torch.no_grad():
        values = _evaluate_batch(function, inputs, index, both, batched)
    return ((values[:k] - values[k:]) / (2 * step)).reshape(k, -1)


def along_direction(function, inputs, index: int, direction: Tensor, step: float) -> Tensor:
    """The central difference along one direction of input ``index``, by two plain calls (never
    vmap: this is what vmapped results are checked against): (outputs,)."""
    x = inputs[index]
    d = step * direction.to(x)
    return _difference(function, inputs, index, torch.stack([x + d, x - d]), step, batched=False)[0]


def group_differences(function, inputs, plan: DifferencePlan, step: float, chunk: int) -> Iterator[tuple[int, Tensor]]:
    """For each chunk of perturbation groups (colours, or single elements): the first group and
    (f(x + h·e_g) − f(x − h·e_g)) / 2h per group g, as (k, outputs)."""
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
        yield start, _difference(function, inputs, plan.input_index, both.reshape(2 * k, *x.shape), step, plan.batched)


# ---- discovering structure -------------------------------------------------------------------------


def jacobian_rows(function: Callable[..., Tensor], inputs: Sequence[Tensor], budget_bytes: int) -> Iterator[tuple[int, list[Tensor]]]:
    """Rows of d output / d input, for every input at once, by autograd in chunks:
    (first row, [(k, elements of input i) for each input])."""
    xs = [x.detach().requires_grad_() for x in inputs]
    with torch.enable_grad():
        y = function(*xs)
    m, n = y.numel(), sum(x.numel() for x in xs)
    chunk = _chunk_size(n, m, 8, budget_bytes)
    for start in range(0, m, chunk):
        k = min(chunk, m - start)
        basis = torch.zeros(k, m, dtype=y.dtype, device=y.device)
        basis[torch.arange(k), torch.arange(start, start + k)] = 1.0
        basis = basis.reshape(k, *y.shape)
        try:
            rows = torch.autograd.grad(y, xs, basis, retain_graph=True, is_grads_batched=True, allow_unused=True)
        except Exception:  # noqa: BLE001 - a backward without a vmap rule: one row at a time
            per_row = [torch.autograd.grad(y, xs, e, retain_graph=True, allow_unused=True) for e in basis]
            rows = [None if r[0] is None else torch.stack(r) for r in zip(*per_row)]
        # None: the output does not depend on that input at all
        yield start, [
            torch.zeros(k, x.numel(), dtype=y.dtype, device=y.device) if r is None else r.reshape(k, x.numel())
            for r, x in zip(rows, xs)
        ]


def jacobian_patterns(reference: Callable[..., Tensor], inputs: Sequence[Tensor], budget_bytes: int, jitter: float = 1e-3) -> list[tuple[np.ndarray, np.ndarray]]:
    """For each input, (row, col) of every entry of the reference's Jacobian that is not 0.

    Read at a jittered point with NaN and Inf replaced, so that neither a zero holding only at this
    point (a zero row, say) nor a NaN spreading through 0·NaN is taken for structure."""
    generator = torch.Generator().manual_seed(0)
    finite = [x.detach().nan_to_num(0.0, posinf=1.0, neginf=-1.0) for x in inputs]
    jittered = [
        x + jitter * (x.abs().mean() + 1) * torch.randn(x.shape, generator=generator, dtype=torch.float64).to(x)
        for x in finite
    ]
    found: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in inputs]
    for start, per_input in jacobian_rows(reference, jittered, budget_bytes):
        for entries, rows in zip(found, per_input):
            r, c = torch.nonzero(rows != 0, as_tuple=True)
            entries.append(((r + start).cpu().numpy(), c.cpu().numpy()))
    return [(np.concatenate([r for r, _ in e]), np.concatenate([c for _, c in e])) for e in found]


def _rank_within(keys: np.ndarray, n: int) -> np.ndarray:
    """For each of ``n`` items, its position among the items of equal key (in index order)."""
    order = np.lexsort((np.arange(n), keys))
    sorted_keys = keys[order]
    ranks = np.empty(n, dtype=np.int64)
    ranks[order] = np.arange(n) - np.searchsorted(sorted_keys, sorted_keys, side="left")
    return ranks


def is_valid_coloring(rows: np.ndarray, cols: np.ndarray, colors: np.ndarray) -> bool:
    """No two columns that share a row share a colour: every (row, colour) pair is unique."""
    if rows.size == 0:
        return True
    pairs = rows.astype(np.int64) * (int(colors.max()) + 1) + colors[cols]
    return np.unique(pairs).size == rows.size


def color_columns(rows: np.ndarray, cols: np.ndarray, n_cols: int) -> np.ndarray:
    """A colour per column such that no two columns sharing a row share a colour.

    Vectorised first: a column takes its position among the columns whose first row is its own.
    That is optimal for row-wise reductions (a column in one row) and for blocks of rows that
    share their columns (softmax, layernorm: one colour per position within the block), and is
    kept whenever it is valid. Otherwise greedy first-fit over the column intersection graph,
    unless that would look at too many pairs: then one colour per column.
    """
    if rows.size == 0:
        return np.zeros(n_cols, dtype=np.int64)
    first_row = np.full(n_cols, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first_row, cols, rows.astype(np.int64))
    untouched = first_row == np.iinfo(np.int64).max
    first_row[untouched] = -1  # columns no output depends on: colour 0 and up, among themselves
    colors = _rank_within(first_row, n_cols)
    colors[untouched] = 0
    if is_valid_coloring(rows, cols, colors):
        return colors
    row_lengths = np.bincount(rows)
    if float((row_lengths.astype(np.float64) ** 2).sum()) > GREEDY_WORK_LIMIT:
        return np.arange(n_cols, dtype=np.int64)
    cols_of_row: dict[int, list[int]] = {}
    rows_of_col: dict[int, list[int]] = {}
    for r, c in zip(rows.tolist(), cols.tolist()):
        cols_of_row.setdefault(r, []).append(c)
        rows_of_col.setdefault(c, []).append(r)
    colors = np.full(n_cols, -1, dtype=np.int64)
    for c in range(n_cols):
        taken = {colors[o] for r in rows_of_col.get(c, ()) for o in cols_of_row[r] if colors[o] >= 0}
        color = 0
        while color in taken:
            color += 1
        colors[c] = color
    return colors


def plan_differences(
    function: Callable[..., Tensor],
    reference: Callable[..., Tensor] | None,
    inputs: Sequence[Tensor],
    step: float,
    *,
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
    structure_key: Hashable | None = None,
    work_limit: float = math.inf,
    atol: float = 1e-5,
    rtol: float = 1e-3,
) -> list[DifferencePlan]:
    """Choose, for each input, how to perturb it: colour groups from the reference's Jacobian
    pattern, or one element at a time when no pattern can be trusted.

    A pattern is trusted only once it reproduces central differences of ``function`` along
    random directions at this very point, within the verdict's own tolerances (``atol``,
    ``rtol``): structure can depend on values (ReLU, max, clamp). ``structure_key`` names the
    reference and its settings; with it, a pattern found for these input shapes is kept and
    tried first, and found afresh at this point when it fails. Reading the structure costs a
    backward pass per output; above ``work_limit`` element evaluations it is not tried."""
    with torch.no_grad():
        output = function(*inputs)
    m = output.numel()
    skip = np.nonzero(~torch.isfinite(output).reshape(-1).cpu().numpy())[0]
    def dense(i: int, why: str) -> DifferencePlan:
        batched = _vmap_agrees(function, inputs, i, step)
        how = "" if batched else "; evaluated one copy at a time (vmap disagreed with plain calls)"
        return DifferencePlan(i, inputs[i].numel(), m, None, None, None, why + how, skip_rows=skip, batched=batched)

    if reference is None:
        return [dense(i, "one perturbation per element: no reference to read the Jacobian's structure from") for i in range(len(inputs))]
    if m * sum(x.numel() for x in inputs) > work_limit:
        why = f"one perturbation per element: reading the Jacobian's structure ({m:,} outputs) would take too long"
        return [dense(i, why) for i in range(len(inputs))]
    check = lambda i, structure: _checked_plan(function, inputs, i, *structure, m, step, budget_bytes, atol, rtol)  # noqa: E731
    try:
        structures, cached = _structures(reference, inputs, budget_bytes, structure_key)
        plans = [check(i, structure) for i, structure in enumerate(structures)]
        if cached and any(plan is None for plan, _ in plans):  # a kept pattern that does not hold here
            structures = _fresh_structures(reference, inputs, budget_bytes, structure_key, at_point=True)
            plans = [check(i, structure) for i, structure in enumerate(structures)]
    except Exception as error:  # noqa: BLE001
        why = f"one perturbation per element: the reference's Jacobian failed ({type(error).__name__}: {error})"
        return [dense(i, why) for i in range(len(inputs))]
    return [replace(plan, skip_rows=skip) if plan else dense(i, f"one perturbation per element: {why}") for i, (plan, why) in enumerate(plans)]


_STRUCTURES: OrderedDict[Hashable, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = OrderedDict()
_STRUCTURES_KEPT = 32


def _full_key(key: Hashable | None, inputs) -> Hashable | None:
    return None if key is None else (key, tuple((tuple(x.shape), x.dtype, str(x.device)) for x in inputs))


def _structures(reference, inputs, budget_bytes: int, key: Hashable | None) -> tuple[list[tuple[np.ndarray, np.ndarray, np.ndarray]], bool]:
    """(rows, cols, colours) per input, and whether they came from the cache (``key`` seen for
    these shapes) rather than from this point."""
    full_key = _full_key(key, inputs)
    if full_key is not None and full_key in _STRUCTURES:
        _STRUCTURES.move_to_end(full_key)
        return _STRUCTURES[full_key], True
    return _fresh_structures(reference, inputs, budget_bytes, key), False


def _fresh_structures(reference, inputs, budget_bytes: int, key: Hashable | None, at_point: bool = False) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    patterns = jacobian_patterns(reference, inputs, budget_bytes)
    if at_point:  # the union with the pattern at the point itself: value-dependent structure
        here = jacobian_patterns(reference, inputs, budget_bytes, jitter=0.0)
        patterns = [_union(a, b, x.numel()) for a, b, x in zip(patterns, here, inputs)]
    found = [(rows, cols, color_columns(rows, cols, x.numel())) for (rows, cols), x in zip(patterns, inputs)]
    full_key = _full_key(key, inputs)
    if full_key is not None:
        _STRUCTURES[full_key] = found
        while len(_STRUCTURES) > _STRUCTURES_KEPT:
            _STRUCTURES.popitem(last=False)
    return found


def _union(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray], n_cols: int) -> tuple[np.ndarray, np.ndarray]:
    flat = np.unique(np.concatenate([a[0] * n_cols + a[1], b[0] * n_cols + b[1]]))
    return flat // n_cols, flat % n_cols


def _vmap_agrees(function, inputs, index: int, step: float) -> bool:
    """Whether perturbed copies evaluated under vmap equal plain calls (a Function's own vmap
    rule may be wrong, and finite differences are the truth)."""
    x = inputs[index]
    copies = torch.stack([x + step * d.to(x) for d in _directions(x.shape, CHECK_DIRECTIONS)] + [x])
    with torch.no_grad():
        batched = _evaluate_batch(function, inputs, index, copies, batched=True)
        plain = _evaluate_batch(function, inputs, index, copies, batched=False)
    tolerance = 64 * torch.finfo(plain.dtype).eps if plain.is_floating_point() else 0.0
    return bool(batched.shape == plain.shape and torch.allclose(batched, plain, rtol=tolerance, atol=tolerance * float(plain.abs().nan_to_num(0, 0, 0).max()), equal_nan=True))


def _directions(shape, count: int) -> list[Tensor]:
    """Seeded random ±1 directions: every element moves by a full step, so a missed coupling
    shows at its own size."""
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(0, 2, tuple(shape), generator=generator, dtype=torch.float64) * 2 - 1 for _ in range(count)]


def _reproduces(along: list[np.ndarray], directions: list[Tensor], plan: DifferencePlan, values: np.ndarray, atol: float, rtol: float) -> bool:
    """Whether J·d from the plan's entries matches the plain differences along each direction
    d, row by row, within atol + rtol·(largest term of that row): as strict as the verdict."""
    m = plan.n_outputs
    for observed, direction in zip(along, directions):
        terms = values * direction.reshape(-1).numpy()[plan.cols]
        predicted = np.bincount(plan.rows, weights=terms, minlength=m).astype(np.float64)
        largest = np.zeros(m)
        np.maximum.at(largest, plan.rows, np.nan_to_num(np.abs(terms), nan=0.0, posinf=0.0))
        finite = np.isfinite(observed) & np.isfinite(predicted)
        if np.any(finite != np.isfinite(observed)):
            return False
        if np.any(np.abs(observed - predicted)[finite] > atol + rtol * largest[finite]):
            return False
    return True


def _checked_plan(function, inputs, index, rows, cols, colors, m, step, budget_bytes, atol, rtol) -> tuple[DifferencePlan | None, str]:
    """A colouring plan whose Jacobian reproduces plain differences along random directions at
    this point, or (None, why not). Vmapped evaluation is tried first and kept only if it
    passes; a Function whose vmap rule disagrees is evaluated one copy at a time."""
    n = inputs[index].numel()
    directions = _directions(inputs[index].shape, CHECK_DIRECTIONS)
    along = [along_direction(function, inputs, index, d, step).double().cpu().numpy() for d in directions]
    for batched in (True, False):
        plan = DifferencePlan(index, n, m, colors, rows, cols, "", step=step, batched=batched)
        values = jacobian_values(function, inputs, plan, step, budget_bytes)
        if _reproduces(along, directions, plan, values, atol, rtol):
            how = "" if batched else "; evaluated one copy at a time (vmap disagreed with plain calls)"
            source = (f"{plan.n_groups} colour groups for {n} elements, from the reference's Jacobian pattern{how}"
                      if plan.n_groups < n else f"one perturbation per element (the Jacobian's pattern is dense){how}")
            return replace(plan, source=source, values=values), ""
    return None, "the Jacobian's pattern did not reproduce differences along random directions at this point"


# ---- what the plan gives ---------------------------------------------------------------------------


def _blocks(function, inputs, plan: DifferencePlan, step: float, budget_bytes: int) -> Iterator[tuple[int, np.ndarray]]:
    x = inputs[plan.input_index]
    chunk = _chunk_size(plan.n_inputs, plan.n_outputs, x.element_size(), budget_bytes)
    for first, block in group_differences(function, inputs, plan, step, chunk):
        yield first, block.double().cpu().numpy()


def jacobian_values(function, inputs, plan: DifferencePlan, step: float, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> np.ndarray:
    """The numerical Jacobian's entries on the plan's pattern (compressed plans only): entry
    (r, c) is row r of its colour's difference."""
    if plan.values is not None and step == plan.step:
        return plan.values
    values = np.zeros(plan.rows.size)
    color_of_entry = plan.colors[plan.cols]
    for first, block in _blocks(function, inputs, plan, step, budget_bytes):
        entries = np.nonzero((color_of_entry >= first) & (color_of_entry < first + block.shape[0]))[0]
        values[entries] = block[color_of_entry[entries] - first, plan.rows[entries]]
    return values


def numerical_jacobian(function, inputs, plan: DifferencePlan, step: float, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> np.ndarray:
    """The full numerical Jacobian, (output elements, input elements), for small inputs."""
    jacobian = np.zeros((plan.n_outputs, plan.n_inputs))
    if plan.colors is not None:
        jacobian[plan.rows, plan.cols] = jacobian_values(function, inputs, plan, step, budget_bytes)
        return jacobian
    for first, block in _blocks(function, inputs, plan, step, budget_bytes):
        jacobian[:, first : first + block.shape[0]] = block.T
    return jacobian


def numerical_gradient(
    function, inputs, plan: DifferencePlan, upstream: Tensor, step: float, budget_bytes: int = DEFAULT_BUDGET_BYTES
) -> np.ndarray:
    """Jᵀ·upstream for input ``plan.input_index``, in float64, shaped like the input.

    Outputs that are not finite at the point are left out: their derivative is undefined, and
    they would otherwise make every element that shares a block with them NaN. Elements that
    feed such an output are NaN: where the pattern says so, or every element when no pattern
    is known (any of them may feed it). Both paths follow the same rule, so a verdict does not
    change with the plan."""
    v = upstream.detach().double().cpu().reshape(-1).numpy().copy()
    v[plan.skip_rows] = 0.0
    if plan.colors is not None:
        values = jacobian_values(function, inputs, plan, step, budget_bytes)
        used = np.isin(plan.rows, plan.skip_rows, invert=True)
        # float64 even when no entry is used (numpy gives integers for an empty bincount)
        gradient = np.bincount(plan.cols[used], weights=values[used] * v[plan.rows[used]], minlength=plan.n_inputs).astype(np.float64)
        gradient[plan.cols[~used]] = np.nan  # elements feeding an undefined output: undefined too
    else:  # one group per element, in order: each block's rows are Jacobian columns
        blocks = (block for _, block in _blocks(function, inputs, plan, step, budget_bytes))
        gradient = np.concatenate([np.delete(block, plan.skip_rows, axis=1) @ np.delete(v, plan.skip_rows) for block in blocks])
        if plan.skip_rows.size:
            gradient[:] = np.nan
    return gradient.reshape(tuple(inputs[plan.input_index].shape))


def numerical_entries(function, inputs, plan: DifferencePlan, step: float, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The numerical Jacobian as (rows, cols, values): on the plan's pattern when it has one;
    else every entry that is not exactly 0, and every entry of an output that is not finite
    (their structure is unknown)."""
    if plan.structured:
        return plan.rows, plan.cols, jacobian_values(function, inputs, plan, step, budget_bytes)
    jacobian = numerical_jacobian(function, inputs, plan, step, budget_bytes)
    keep = (jacobian != 0) | ~np.isfinite(jacobian)
    keep[plan.skip_rows, :] = True
    rows, cols = np.nonzero(keep)
    return rows, cols, jacobian[rows, cols]

"""Numerical differentiation: central finite differences, batched and compressed by colouring,
and the Jacobian's structure that makes them cheap.

One perturbation per input element costs a forward call per element, O(n²) in all. Most
Functions have a sparse Jacobian (an output depends on a few input elements), so this module
discovers the pattern without knowing the Function (from the Jacobian of its reference, at a
jittered point), colours the columns so that elements which never meet in an output share a
colour (Curtis–Powell–Reid), and perturbs a whole colour at once. The rows are coloured the
same way, so that one backward call reads many outputs' Jacobian rows.

Nothing is trusted without a check at the point itself: a pattern (kept or found) must reproduce
central differences of the Function along random directions, taken with plain calls, within the
verdict's own tolerances; and values computed under ``vmap`` (whose rule a Function may get
wrong) must reproduce them too, or are computed again one copy at a time.
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
INDEX = np.int32  # pattern indices: elements are limited far below 2**31, and patterns can be large


@dataclass(frozen=True)
class DifferencePlan:
    """How one input is perturbed: by colour groups (``colors`` per element) or one by one, and
    the plain differences along random directions that whatever it gives must reproduce."""

    input_index: int
    n_inputs: int  # elements of this input (columns of its Jacobian)
    n_outputs: int  # elements of the output (rows)
    colors: np.ndarray | None  # colour of each element; None: one perturbation per element
    rows: np.ndarray | None  # the Jacobian's sparsity pattern (row, col), when colouring
    cols: np.ndarray | None
    source: str  # in words: where the structure came from, or why there is none
    skip_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # outputs not finite at the point: left out of Jᵀv
    step: float = 0.0
    values: np.ndarray | None = None  # the numerical Jacobian on the pattern at ``step``, once computed
    gaps: np.ndarray | None = None  # with it: each entry's gap between its one-sided slopes (a kink's mark)
    gap_rounding: np.ndarray | None = None  # and the rounding each gap carries, eps·|f(x)|/h
    reference_values: np.ndarray | None = None  # the reference's Jacobian on the pattern, when it passed the check
    batched: bool = True  # evaluate perturbed copies under vmap; False once vmap was caught disagreeing
    directions: tuple[np.ndarray, ...] = ()  # random ±1 directions (flat) ...
    along: tuple[np.ndarray, ...] = ()  # ... and the plain central differences along them (outputs)
    tolerance: tuple[float, float] = (1e-5, 1e-3)  # (atol, rtol) of those checks: the verdict's

    @property
    def structured(self) -> bool:
        return self.colors is not None

    @property
    def n_groups(self) -> int:
        return int(self.colors.max()) + 1 if self.colors is not None and self.colors.size else self.n_inputs

    @property
    def evaluations(self) -> int:
        """Forward evaluations of the function for the numerical Jacobian: two per group
        (central differences), and two per random direction of the check."""
        return 2 * self.n_groups + 2 * len(self.directions)


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
    return _difference(function, inputs, index, torch.stack([x + d, x - d]), step, batched=False)[0]


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


def jittered_point(inputs: Sequence[Tensor], jitter: float = 1e-3) -> list[Tensor]:
    """Where a Jacobian's pattern is read: the inputs with NaN and Inf replaced and a seeded jitter
    added, the same every time for the same inputs."""
    generator = torch.Generator().manual_seed(0)
    finite = [x.detach().nan_to_num(0.0, posinf=1.0, neginf=-1.0) for x in inputs]
    return [x + jitter * (x.abs().mean() + 1) * torch.randn(x.shape, generator=generator, dtype=torch.float64).to(x) for x in finite]


def jacobian_patterns(reference: Callable[..., Tensor], inputs: Sequence[Tensor], budget_bytes: int, jitter: float = 1e-3) -> list[tuple[np.ndarray, np.ndarray]]:
    """For each input, (row, col) of every entry of the reference's Jacobian that is not 0.

    Read at a jittered point with NaN and Inf replaced, so that neither a zero holding only at this
    point (a zero row, say) nor a NaN spreading through 0·NaN is taken for structure."""
    found: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in inputs]
    for start, per_input in jacobian_rows(reference, jittered_point(inputs, jitter), budget_bytes):
        for entries, rows in zip(found, per_input):
            r, c = torch.nonzero(rows != 0, as_tuple=True)
            entries.append(((r + start).cpu().numpy().astype(INDEX), c.cpu().numpy().astype(INDEX)))
    return [(np.concatenate([r for r, _ in e]), np.concatenate([c for _, c in e])) for e in found]


# ---- reading the Jacobian by backward calls ----------------------------------------------------------


def vector_jacobian_products(function, inputs: Sequence[Tensor], upstreams: Tensor, batched: bool) -> list[Tensor]:
    """uᵀJ for each u in ``upstreams`` (k, *output shape): per input, (k, elements)."""
    xs = [x.detach().requires_grad_() for x in inputs]
    with torch.enable_grad():
        y = function(*xs)
        upstreams = upstreams.to(dtype=y.dtype, device=y.device)
        grads = None
        if batched and upstreams.shape[0] > 1:
            try:
                grads = torch.autograd.grad(y, xs, upstreams, retain_graph=True, is_grads_batched=True, allow_unused=True)
            except Exception:  # noqa: BLE001 - a backward that vmap cannot run: one call per vector
                grads = None
        if grads is None:
            per = [torch.autograd.grad(y, xs, u, retain_graph=True, allow_unused=True) for u in upstreams]
            grads = [None if all(g[i] is None for g in per) else
                     torch.stack([g[i] if g[i] is not None else torch.zeros_like(x) for g in per]) for i, x in enumerate(xs)]
    k = upstreams.shape[0]
    return [torch.zeros(k, x.numel(), dtype=torch.float64) if g is None else torch.from_numpy(g.detach().reshape(k, -1).double().cpu().numpy(force=True).copy())
            for g, x in zip(grads, xs)]


def row_colors(patterns: Sequence[tuple[np.ndarray, np.ndarray]], sizes: Sequence[int], n_outputs: int) -> np.ndarray:
    """A colour per output such that outputs of one colour share no input element, in any input."""
    offsets = np.cumsum([0, *sizes[:-1]])
    rows = np.concatenate([r for r, _ in patterns]) if patterns else np.zeros(0, dtype=np.int64)
    cols = np.concatenate([c + o for (_, c), o in zip(patterns, offsets)]) if patterns else np.zeros(0, dtype=np.int64)
    return color_columns(cols, rows, n_outputs)  # the transposed pattern: rows become columns


def compressed_entries(function, inputs, patterns, colors: np.ndarray, skip: np.ndarray, output_shape, budget_bytes: int,
                       batched: bool = True) -> list[np.ndarray]:
    """Each input's Jacobian entries on its pattern, from one backward call per row colour."""
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
        products = vector_jacobian_products(function, inputs, basis.reshape(k, *output_shape), batched)
        for (r, c), out, product in zip(patterns, values, products):
            if k == groups:  # one chunk holds every colour (the common case): no masks
                out[:] = product.numpy()[colors[r], c]
                continue
            hit = (colors[r] >= first) & (colors[r] < first + k)
            out[hit] = product.numpy()[colors[r[hit]] - first, c[hit]]
    return values


# ---- colouring --------------------------------------------------------------------------------------


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
    span = int(pairs.max()) + 1
    if span <= 8 * rows.size + 2**16:  # a count per pair: linear, no sort
        return int(np.bincount(pairs, minlength=span).max()) <= 1
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


# ---- planning ---------------------------------------------------------------------------------------


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

    Every plan carries plain central differences of ``function`` along random directions at
    this point. A pattern is used only once the reference's Jacobian on it (one backward call
    per row colour) or, failing that, the compressed differences reproduce them within the
    verdict's tolerances (``atol``, ``rtol``): structure can depend on values (ReLU, max, clamp).
    ``structure_key`` names the reference and its settings; with it, a pattern found for these
    input shapes is kept and tried first, and found afresh at this point when it fails. Reading
    the structure costs a backward pass per output; above ``work_limit`` element evaluations it
    is not tried."""
    with torch.no_grad():
        output = function(*inputs)
    m = output.numel()
    skip = np.nonzero(~torch.isfinite(output).reshape(-1).cpu().numpy())[0]
    checks = [_checks(function, inputs, i, step) for i in range(len(inputs))]
    base = [DifferencePlan(i, x.numel(), m, None, None, None, "", skip_rows=skip, step=step, directions=d, along=a, tolerance=(atol, rtol))
            for i, (x, (d, a)) in enumerate(zip(inputs, checks))]
    dense = lambda i, why: replace(base[i], source=f"one perturbation per element: {why}")  # noqa: E731
    if reference is None:
        return [dense(i, "no reference to read the Jacobian's structure from") for i in range(len(inputs))]
    if m * sum(x.numel() for x in inputs) > work_limit:
        return [dense(i, f"reading the Jacobian's structure ({m:,} outputs) would take too long") for i in range(len(inputs))]
    try:
        structures, cached = _structures(reference, inputs, budget_bytes, structure_key)
        plans = _checked_plans(function, reference, inputs, base, structures, budget_bytes)
        if cached and any(plan is None for plan in plans):  # a kept pattern that does not hold here
            structures = _fresh_structures(reference, inputs, budget_bytes, structure_key, at_point=True)
            plans = _checked_plans(function, reference, inputs, base, structures, budget_bytes)
    except Exception as error:  # noqa: BLE001
        return [dense(i, f"the reference's Jacobian failed ({type(error).__name__}: {error})") for i in range(len(inputs))]
    why = "the Jacobian's pattern did not reproduce differences along random directions at this point"
    return [plan or dense(i, why) for i, plan in enumerate(plans)]


def _checks(function, inputs, index: int, step: float) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
    """Random ±1 directions of input ``index`` and the plain central differences along them."""
    directions = _directions(inputs[index].shape, CHECK_DIRECTIONS)
    along = tuple(along_direction(function, inputs, index, d, step).double().cpu().numpy() for d in directions)
    return tuple(d.reshape(-1).numpy() for d in directions), along


_STRUCTURES: OrderedDict[Hashable, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = OrderedDict()
_STRUCTURES_KEPT = 32
_STRUCTURES_BYTES = 64 * 2**20  # and no more than this in all (int32 rows, cols, colours: 12 B an entry)


def _structures_bytes() -> int:
    return sum(a.nbytes for found in _STRUCTURES.values() for arrays in found for a in arrays)


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
        while _STRUCTURES and (len(_STRUCTURES) > _STRUCTURES_KEPT or _structures_bytes() > _STRUCTURES_BYTES):
            _STRUCTURES.popitem(last=False)  # the oldest first; one pattern larger than the bound is not kept
    return found


def _union(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray], n_cols: int) -> tuple[np.ndarray, np.ndarray]:
    flat = np.unique(np.concatenate([a[0] * n_cols + a[1], b[0] * n_cols + b[1]]))
    return flat // n_cols, flat % n_cols


def _directions(shape, count: int) -> list[Tensor]:
    """Seeded random ±1 directions: every element moves by a full step, so a missed coupling
    shows at its own size."""
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(0, 2, tuple(shape), generator=generator, dtype=torch.float64) * 2 - 1 for _ in range(count)]


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
    largest = _row_max(rows, np.nan_to_num(np.abs(values), nan=0.0, posinf=0.0), m)  # |d| = 1: the largest term
    for direction, observed in zip(plan.directions, plan.along):
        with np.errstate(invalid="ignore"):
            terms = values * direction[cols]
        predicted = np.bincount(rows, weights=terms, minlength=m).astype(np.float64)  # float even when empty
        finite = np.isfinite(observed) & np.isfinite(predicted)
        if np.any(finite != np.isfinite(observed)):
            return False
        if np.any(np.abs(observed - predicted)[finite] > atol + rtol * largest[finite]):
            return False
    return True


def _checked_plans(function, reference, inputs, base: Sequence[DifferencePlan], structures, budget_bytes: int) -> list[DifferencePlan | None]:
    """Each input's plan on its pattern, if the pattern passes the check at this point: first by
    the reference's Jacobian on it (cheap: a backward call per row colour), else by the
    compressed differences themselves (a forward evaluation per colour)."""
    patterns = [(rows, cols) for rows, cols, _ in structures]
    with torch.no_grad():
        output = reference(*inputs)
    colors = row_colors(patterns, [x.numel() for x in inputs], output.numel())
    by_reference = compressed_entries(reference, inputs, patterns, colors, np.zeros(0, dtype=np.int64), tuple(output.shape), budget_bytes)
    plans: list[DifferencePlan | None] = []
    for plan, (rows, cols, column_colors), values in zip(base, structures, by_reference):
        n = plan.n_inputs
        plan = replace(plan, colors=column_colors, rows=rows, cols=cols)
        what = (f"{plan.n_groups} colour groups for {n} elements, from the reference's Jacobian pattern" if plan.n_groups < n
                else "one perturbation per element (the Jacobian's pattern is dense)")
        if reproduces(plan, rows, cols, values):
            plans.append(replace(plan, source=what, reference_values=values))
            continue
        plan = with_values(function, inputs, plan, budget_bytes)
        plans.append(replace(plan, source=what + " (checked by its own differences: the reference's Jacobian did not reproduce them)")
                     if plan.values is not None and reproduces(plan, rows, cols, plan.values) else None)
    return plans


# ---- what the plan gives ---------------------------------------------------------------------------


def _blocks(function, inputs, plan: DifferencePlan, step: float, budget_bytes: int, base: Tensor | None = None) -> Iterator[tuple[int, np.ndarray]]:
    x = inputs[plan.input_index]
    chunk = _chunk_size(plan.n_inputs, plan.n_outputs, x.element_size(), budget_bytes)
    for first, block in group_differences(function, inputs, plan, step, chunk, base):
        yield first, block.double().cpu().numpy()  # (k, outputs), or (2, k, outputs) with base


def _compressed_values(function, inputs, plan: DifferencePlan, step: float, budget_bytes: int, base: Tensor | None = None) -> np.ndarray:
    """Entry (r, c) of the pattern is row r of its colour's difference; with ``base``, (2, entries):
    the differences and the gaps between one-sided slopes, from the same evaluations."""
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
    rows, cols = (plan.rows, plan.cols) if plan.structured else _all_entries(plan.n_outputs, plan.n_inputs)
    found = _values_and_gaps(function, inputs, plan, rows, budget_bytes)
    if plan.batched and plan.directions and not reproduces(plan, rows, cols, found["values"]):
        plain = replace(plan, batched=False)
        plain_found = _values_and_gaps(function, inputs, plain, rows, budget_bytes)
        if reproduces(plan, rows, cols, plain_found["values"]):  # vmap was the culprit, not the differences' own noise
            return replace(plain, **plain_found, source=plan.source + "; evaluated one copy at a time (vmap disagreed with plain calls)")
    return replace(plan, **found)


def _values_and_gaps(function, inputs, plan: DifferencePlan, rows: np.ndarray, budget_bytes: int) -> dict[str, np.ndarray]:
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
        return with_values(function, inputs, plan, budget_bytes).values
    return _compute_values(function, inputs, plan, step, budget_bytes)


def numerical_jacobian(function, inputs, plan: DifferencePlan, step: float | None = None, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> np.ndarray:
    """The full numerical Jacobian, (output elements, input elements), for small inputs."""
    values = jacobian_values(function, inputs, plan, step, budget_bytes)
    if not plan.structured:
        return values.reshape(plan.n_outputs, plan.n_inputs)
    jacobian = np.zeros((plan.n_outputs, plan.n_inputs))
    jacobian[plan.rows, plan.cols] = values
    return jacobian


def numerical_entries(function, inputs, plan: DifferencePlan, step: float | None = None, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The numerical Jacobian as (rows, cols, values): on the plan's pattern when it has one;
    else every entry that is not exactly 0, and every entry of an output that is not finite
    (their structure is unknown)."""
    values = jacobian_values(function, inputs, plan, step, budget_bytes)
    if plan.structured:
        return plan.rows, plan.cols, values
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


def look_at_elements(function, inputs: Sequence[Tensor], index: int, elements: Sequence[int], step: float) -> dict[int, ElementLook]:
    """Each element's ``ElementLook``, by plain calls (never vmap)."""
    x = inputs[index]
    flat = x.detach().reshape(-1)
    eps = torch.finfo(x.dtype).eps if x.is_floating_point() else 0.0

    def at(shift: Tensor) -> np.ndarray:
        moved = (flat + shift).reshape(x.shape)
        with torch.no_grad():
            out = function(*inputs[:index], moved, *inputs[index + 1 :])
        return out.detach().double().cpu().reshape(-1).numpy()

    base = at(torch.zeros_like(flat))
    looks = {}
    for element in elements:
        e = torch.zeros_like(flat)
        e[element] = 1.0
        plus, minus = at(step * e), at(-step * e)
        plus2, minus2 = at(2 * step * e), at(-2 * step * e)
        with np.errstate(invalid="ignore", over="ignore"):
            looks[element] = ElementLook(
                forward=(plus - base) / step, backward=(base - minus) / step,
                forward_wide=(plus2 - base) / (2 * step), backward_wide=(base - minus2) / (2 * step),
                rounding=eps * (np.abs(base) + np.maximum(np.abs(plus), np.abs(minus))) / step,
            )
    return looks


def one_sided_gaps(function, inputs, plan: DifferencePlan, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> tuple[np.ndarray, np.ndarray]:
    """For every entry the plan gives (on its pattern, or all of them, flat): the gap between its
    one-sided slopes, |f(x + h) + f(x − h) − 2 f(x)| / h, and the rounding that gap carries,
    eps·|f(x)|/h: at a smooth point the gap is h·f'', at a kink the jump of the slope."""
    plan = with_values(function, inputs, plan, budget_bytes)
    return plan.gaps, plan.gap_rounding

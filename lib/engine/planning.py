"""Plan: how each input is perturbed, decided before anything is evaluated.

The Jacobian's pattern is read without knowing the Function (from the Jacobian of its reference, at
a jittered point); the columns are coloured so that elements which never meet in an output share a
colour (Curtis–Powell–Reid), and a whole colour is perturbed at once; the rows are coloured the same
way, so that one backward call reads many outputs' Jacobian rows. A plan carries its own cost
(``DifferencePlan.evaluations``) for the guards to read before the engine runs it.

Nothing is trusted without a check at the point itself: a pattern (kept or found) must reproduce
central differences of the Function along random directions, taken with plain calls, within the
verdict's own tolerances.
"""

from __future__ import annotations

import functools
import math
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Callable, Hashable, Iterator, Sequence

import numpy as np
import torch

from .evaluate import (DEFAULT_BUDGET_BYTES, chunk_size, along_direction, compressed_entries, forward_graph, reproduces,
                                 with_values)

Tensor = torch.Tensor


GREEDY_WORK_LIMIT = 2e7  # pairs of columns the greedy colouring may look at (a few seconds of Python)


CHECK_DIRECTIONS = 2  # random directions a compressed plan must reproduce at the point
DIFFERENCE_NOISE = 8  # ulps of |f| a forward in the judged dtype may be off by (its reductions), twice over a central difference


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
    sampled: bool = False  # at scale (``at_scale``): no pattern read and nothing differenced by groups; the verdict samples

    @property
    def structured(self) -> bool:
        return self.colors is not None

    @property
    def pattern(self) -> tuple[np.ndarray, np.ndarray]:
        """(rows, cols) of a structured plan's pattern: set with its colours."""
        assert self.rows is not None and self.cols is not None, "only a structured plan has a pattern"
        return self.rows, self.cols

    @property
    def n_groups(self) -> int:
        return int(self.colors.max()) + 1 if self.colors is not None and self.colors.size else self.n_inputs

    @property
    def evaluations(self) -> int:
        """Forward evaluations of the function for the numerical Jacobian: two per group
        (central differences), and two per random direction of the check; none at scale (the
        sampled verdict counts its own)."""
        return 0 if self.sampled else 2 * self.n_groups + 2 * len(self.directions)


def jacobian_rows(function: Callable[..., Tensor], inputs: Sequence[Tensor], budget_bytes: int) -> Iterator[tuple[int, list[Tensor]]]:
    """Rows of d output / d input, for every input at once, by autograd in chunks:
    (first row, [(k, elements of input i) for each input])."""
    xs = [x.detach().requires_grad_() for x in inputs]
    with torch.enable_grad():
        y = function(*xs)
    m, n = y.numel(), sum(x.numel() for x in xs)
    chunk = chunk_size(n, m, 8, budget_bytes)
    for start in range(0, m, chunk):
        k = min(chunk, m - start)
        basis = torch.zeros(k, m, dtype=y.dtype, device=y.device)
        basis[torch.arange(k), torch.arange(start, start + k)] = 1.0
        basis = basis.reshape(k, *y.shape)
        rows: Sequence[Tensor | None]  # per input; None where unused (allow_unused)
        try:
            rows = torch.autograd.grad(y, xs, basis.clone(), retain_graph=True, is_grads_batched=True, allow_unused=True)  # a backward may write into it
        except Exception:  # noqa: BLE001 - a backward without a vmap rule: one row at a time
            per_row = [torch.autograd.grad(y, xs, e.clone(), retain_graph=True, allow_unused=True) for e in basis]
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
    # drawn in float32 on the CPU (a jitter needs no more, and is drawn four times faster so), then cast
    return [x + jitter * (x.abs().mean() + 1) * torch.randn(x.shape, generator=generator, dtype=torch.float32).to(x) for x in finite]


def jacobian_patterns(reference: Callable[..., Tensor], inputs: Sequence[Tensor], budget_bytes: int, jitter: float = 1e-3,
                      by_rows: bool = False) -> list[tuple[np.ndarray, np.ndarray]]:
    """For each input, (row, col) of every entry of the reference's Jacobian that is not 0.

    Read at a jittered point with NaN and Inf replaced, so that neither a zero holding only at this
    point (a zero row, say) nor a NaN spreading through 0·NaN is taken for structure. Where every
    input element feeds one output at most (reductions along a dim, elementwise functions), a few
    backward calls read the whole pattern (``_one_row_patterns``, unless ``by_rows``); else one row
    per output."""
    point = jittered_point(inputs, jitter)
    compressed = None if by_rows else _one_row_patterns(reference, point, budget_bytes)
    if compressed is not None:
        return compressed
    found: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in inputs]
    for start, per_input in jacobian_rows(reference, point, budget_bytes):
        for entries, rows in zip(found, per_input):
            r, c = torch.nonzero(rows != 0, as_tuple=True)
            entries.append(((r + start).cpu().numpy().astype(INDEX), c.cpu().numpy().astype(INDEX)))
    return [(np.concatenate([r for r, _ in e]), np.concatenate([c for _, c in e])) for e in found]


SPREAD_UPSTREAMS = 22  # at most this many backward calls read a pattern by ``_one_row_patterns`` (2**22 codes scanned)


@functools.lru_cache(maxsize=8)
def _row_codes(m: int) -> tuple[int, np.ndarray, np.ndarray | None] | None:
    """For ``m`` outputs: the fewest upstreams k such that m outputs get distinct sets of k // 2 of
    them (C(k, k // 2) >= m, Sperner), those sets as bit masks, ascending, and (for k <= 16) the
    output of each mask (-1: no output's); None past SPREAD_UPSTREAMS."""
    k = 1
    while math.comb(k, k // 2) < m:
        k += 1
    if k > SPREAD_UPSTREAMS:
        return None
    every = np.arange(2**k, dtype=np.int64)
    masks = every[np.bitwise_count(every) == k // 2][:m]
    lookup = None
    if k <= 16:
        lookup = np.full(2**k, -1, dtype=np.int64)
        lookup[masks] = np.arange(m)
    return k, masks, lookup


def _one_row_patterns(reference: Callable[..., Tensor], point: Sequence[Tensor], budget_bytes: int = DEFAULT_BUDGET_BYTES
                      ) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """The pattern of each input's Jacobian at ``point`` from k products uᵀJ (backward calls under
    vmap, ``_products``), C(k, k // 2) >= m (8 for 64 outputs, where reading row by row takes
    64), where every input element feeds one output at most; None where one feeds several (or the
    calls fail).

    Each output gets its own set of k // 2 of the k upstreams (``_row_codes``), which hold a
    weight on the outputs whose set they are in and 0 elsewhere: a power of two, random per output,
    which floating point scales by exactly, so an element feeding one output is in each product
    exactly its weight times what reading that output's row gives, 0 exactly where that is. So it
    is not 0 in exactly that output's upstreams (or in none, an entry that is 0), which spell the
    output. An element feeding two or more outputs is not 0 in the union of their sets, which is
    larger than k // 2 since no set holds another (each upstream where one of its terms stands
    alone is not 0), and sends the reading row by row, as do results that are not finite. Only
    zeros are read, never values, so no entry can be lost below another's rounding; the one way
    to mislead it, terms cancelling exactly in an upstream (entries opposite in sign whose ratio
    is the inverse of their weights'), gives a pattern that fails the check at the point, which
    then reads the pattern row by row (``plan_differences``)."""
    xs = [x.detach().requires_grad_() for x in point]
    try:
        with torch.enable_grad():
            y = reference(*xs)
        m = y.numel()
        codes = _row_codes(m) if y.requires_grad else None
        if codes is None or codes[0] >= m:  # a row per output is as cheap (or nothing to read here)
            return None
        k, masks, lookup = codes
        spread = min(48, int(math.log2(torch.finfo(y.dtype).max)) // 4)  # room above the entries for 2**(spread - 1)
        weight = 2.0 ** torch.randint(0, spread, (m,), generator=torch.Generator().manual_seed(2), dtype=torch.float64)
        member = torch.from_numpy((masks[None, :] >> np.arange(k)[:, None]) & 1)  # (k, m): output in upstream t
        upstreams = (member * weight).to(dtype=y.dtype, device=y.device)
        per_input = _nonzero_products(y, xs, upstreams.reshape(k, *y.shape), budget_bytes)
    except Exception:  # noqa: BLE001 - read row by row instead, where the failure is told
        return None
    place = (1 << np.arange(k, dtype=np.int32))[:, None]
    found = []
    for nonzero in per_input:
        if nonzero is None:  # the output does not depend on this input at all
            found.append((np.zeros(0, dtype=INDEX), np.zeros(0, dtype=INDEX)))
            continue
        spelled = (nonzero * place).sum(0, dtype=np.int32)  # per element, the mask of the upstreams where it is not 0
        cols = np.flatnonzero(spelled)
        spelled = spelled[cols]
        if lookup is not None:
            rows = lookup[spelled]
            if bool((rows < 0).any()):  # an element feeding several outputs
                return None
        else:
            rows = np.searchsorted(masks, spelled)
            if rows.size and not bool((masks[np.minimum(rows, m - 1)] == spelled).all()):  # an element feeding several outputs
                return None
        if rows.size and not bool(np.all(rows[1:] >= rows[:-1])):  # row by row, as the rows are read
            order = np.argsort(rows.astype(np.uint16) if m <= 2**16 else rows, kind="stable")
            rows, cols = rows[order], cols[order]
        found.append((rows.astype(INDEX), cols.astype(INDEX)))
    return found


SERIAL_ELEMENTS = 32767  # torch runs an operation on fewer elements than its grain size (32768) on one thread


def _nonzero_products(y: Tensor, xs: Sequence[Tensor], upstreams: Tensor, budget_bytes: int) -> list[np.ndarray | None]:
    """Per input, where the gradients of ``y`` for each of ``upstreams`` (k, *y.shape) are not 0:
    (k, elements), as plain calls give them, or None where ``y`` does not depend on the input.
    Under vmap in batches within the memory budget, else (a backward without a vmap rule) one
    call each. Where torch has several threads, a batch is also kept small enough for its
    operations to run on one: on a busy machine, an operation split across threads waits for a
    core, milliseconds at a time (a batch of 8 for a 64×128 cosine took 125 ms so, 1 ms alone)."""
    k = upstreams.shape[0]
    batch = chunk_size(sum(x.numel() for x in xs), y.numel(), y.element_size(), budget_bytes)
    if torch.get_num_threads() > 1:
        batch = min(batch, max(1, SERIAL_ELEMENTS // max(y.numel(), *(x.numel() for x in xs), 1)))
    chunks: list[tuple[int, list[np.ndarray | None]]] = []  # per chunk of upstreams: its size, and per input
    try:
        if batch <= 1 or k <= 1:
            raise NotImplementedError
        for first in range(0, k, batch):
            chunk = upstreams[first : first + batch]
            grads = torch.autograd.grad(y, xs, chunk.clone(), retain_graph=True, is_grads_batched=True, allow_unused=True)
            chunks.append((chunk.shape[0], [None if g is None else (g.detach() != 0).reshape(chunk.shape[0], -1).cpu().numpy() for g in grads]))
    except Exception:  # noqa: BLE001 - a backward that vmap cannot run (or nothing to batch): one call per upstream
        chunks = []
        for u in upstreams:
            grads = torch.autograd.grad(y, xs, u.clone(), retain_graph=True, allow_unused=True)
            chunks.append((1, [None if g is None else (g.detach() != 0).reshape(1, -1).cpu().numpy() for g in grads]))
    found: list[np.ndarray | None] = []
    for i, x in enumerate(xs):
        parts = [(size, per[i]) for size, per in chunks]
        if all(part is None for _, part in parts):
            found.append(None)
            continue
        found.append(np.concatenate([np.zeros((size, x.numel()), dtype=bool) if part is None else part for size, part in parts]))
    return found


def row_colors(patterns: Sequence[tuple[np.ndarray, np.ndarray]], sizes: Sequence[int], n_outputs: int) -> np.ndarray:
    """A colour per output such that outputs of one colour share no input element, in any input."""
    offsets = np.cumsum([0, *sizes[:-1]])
    rows = np.concatenate([r for r, _ in patterns]) if patterns else np.zeros(0, dtype=np.int64)
    cols = np.concatenate([c + o for (_, c), o in zip(patterns, offsets)]) if patterns else np.zeros(0, dtype=np.int64)
    return color_columns(cols, rows, n_outputs)  # the transposed pattern: rows become columns


def _rank_within(keys: np.ndarray, n: int) -> np.ndarray:
    """For each of ``n`` items, its position among the items of equal key (in index order)."""
    index = np.arange(n)
    if n < 2 or bool(np.all(keys[1:] >= keys[:-1])):  # already in order (patterns read row by row): no sort
        order, sorted_keys = None, keys
    else:
        low = int(keys.min())
        # a stable sort keeps index order among equal keys; small keys sort by radix
        order = np.argsort((keys - low).astype(np.uint16) if int(keys.max()) - low < 2**16 else keys, kind="stable")
        sorted_keys = keys[order]
    starts = np.r_[True, sorted_keys[1:] != sorted_keys[:-1]] if n else np.zeros(0, dtype=bool)
    within = index - np.maximum.accumulate(np.where(starts, index, 0))
    if order is None:
        return within
    ranks = np.empty(n, dtype=np.int64)
    ranks[order] = within
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


def _each_once(indices: np.ndarray, n: int | None = None) -> bool:
    """Whether no index occurs twice: at a glance where they increase (patterns read row by row)."""
    if indices.size < 2 or bool((indices[1:] > indices[:-1]).all()):
        return True
    return int(np.bincount(indices, minlength=n or 0).max()) <= 1


def color_columns(rows: np.ndarray, cols: np.ndarray, n_cols: int) -> np.ndarray:
    """A colour per column such that no two columns sharing a row share a colour.

    Vectorised first: a column takes its position among the columns whose first row is its own.
    That is optimal for row-wise reductions (a column in one row) and for blocks of rows that
    share their columns (softmax, layernorm: one colour per position within the block), and is
    kept whenever it is valid. Otherwise greedy first-fit over the column intersection graph,
    unless that would look at too many pairs: then one colour per column.
    """
    if rows.size == 0 or _each_once(rows):  # no two columns share a row: one colour
        return np.zeros(n_cols, dtype=np.int64)
    first_row = np.full(n_cols, np.iinfo(np.int64).max, dtype=np.int64)
    once = _each_once(cols, n_cols)  # every column in one row (row-wise reductions, elementwise)
    if once:
        first_row[cols] = rows
    else:
        np.minimum.at(first_row, cols, rows.astype(np.int64))
    untouched = first_row == np.iinfo(np.int64).max
    first_row[untouched] = -1  # columns no output depends on: colour 0 and up, among themselves
    colors = _rank_within(first_row, n_cols)
    colors[untouched] = 0
    if once or is_valid_coloring(rows, cols, colors):  # in one row each, columns of a row have distinct ranks: valid as made
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
    rounding: float = 0.0,
) -> list[DifferencePlan]:
    """Choose, for each input, how to perturb it: colour groups from the reference's Jacobian
    pattern, or one element at a time when no pattern can be trusted.

    Every plan carries plain central differences of ``function`` along random directions at
    this point. A pattern is used only once the reference's Jacobian on it (one backward call
    per row colour) or, failing that, the compressed differences reproduce them within the
    verdict's tolerances (``atol``, ``rtol``) and the differences' own rounding (``rounding``, the
    judged dtype's eps: a kernel's float32 differences carry eps·|f|/h): structure can depend on
    values (ReLU, max, clamp). A pattern too lenient here is no risk to the verdict, whose random
    probes judge the whole Jacobian.
    ``structure_key`` names the reference and its settings; with it, a pattern found for these
    input shapes is kept and tried first, and found afresh at this point when it fails. Reading
    the structure costs a backward pass per output; above ``work_limit`` element evaluations it
    is not tried."""
    with torch.no_grad():
        output = function(*inputs)
    m = output.numel()
    finite = torch.isfinite(output)
    skip = np.nonzero(~finite.reshape(-1).cpu().numpy())[0]
    largest = float(output[finite].abs().max()) if bool(finite.any()) else 0.0
    noise = DIFFERENCE_NOISE * rounding * largest / step  # each evaluation's rounding, over the step
    checks = [_checks(function, inputs, i, step) for i in range(len(inputs))]
    base = [DifferencePlan(i, x.numel(), m, None, None, None, "", skip_rows=skip, step=step, directions=d, along=a,
                           tolerance=(atol + noise, rtol))
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
        if any(plan is None for plan in plans) and _one_row_each(structures):  # it may have been read in a few products
            structures = _fresh_structures(reference, inputs, budget_bytes, structure_key, at_point=cached, by_rows=True)
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


def _fresh_structures(reference, inputs, budget_bytes: int, key: Hashable | None, at_point: bool = False,
                      by_rows: bool = False) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    patterns = jacobian_patterns(reference, inputs, budget_bytes, 1e-3, by_rows) if by_rows else jacobian_patterns(reference, inputs, budget_bytes)
    if at_point:  # the union with the pattern at the point itself: value-dependent structure
        here = jacobian_patterns(reference, inputs, budget_bytes, jitter=0.0, by_rows=by_rows)
        patterns = [_union(a, b, x.numel()) for a, b, x in zip(patterns, here, inputs)]
    found = [(rows, cols, color_columns(rows, cols, x.numel())) for (rows, cols), x in zip(patterns, inputs)]
    full_key = _full_key(key, inputs)
    if full_key is not None:
        _STRUCTURES[full_key] = found
        while _STRUCTURES and (len(_STRUCTURES) > _STRUCTURES_KEPT or _structures_bytes() > _STRUCTURES_BYTES):
            _STRUCTURES.popitem(last=False)  # the oldest first; one pattern larger than the bound is not kept
    return found


def _one_row_each(structures) -> bool:
    """Whether every input element feeds one output at most in these patterns: the only patterns
    ``_one_row_patterns`` gives."""
    return all(_each_once(cols) for _, cols, _ in structures)


def forget_patterns() -> None:
    """Drop every kept pattern: the next plan for any key reads its pattern afresh."""
    _STRUCTURES.clear()


def kept_patterns_bytes() -> int:
    """The bytes the kept patterns take now (rows, cols and colours): at most ``kept_patterns_limit()``."""
    return _structures_bytes()


def kept_patterns_limit() -> int:
    """The most bytes the kept patterns may take together; the oldest are dropped to stay within it."""
    return _STRUCTURES_BYTES


def _union(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray], n_cols: int) -> tuple[np.ndarray, np.ndarray]:
    flat = np.unique(np.concatenate([a[0] * n_cols + a[1], b[0] * n_cols + b[1]]))
    return flat // n_cols, flat % n_cols


def _directions(shape, count: int) -> list[Tensor]:
    """Seeded random ±1 directions: every element moves by a full step, so a missed coupling
    shows at its own size."""
    generator = torch.Generator().manual_seed(1)
    n = math.prod(shape)
    # one random byte per 8 elements, its bits the signs: 8 times fewer draws than one per element
    drawn = torch.randint(0, 256, (count, (n + 7) // 8), generator=generator, dtype=torch.uint8).numpy()
    signs = np.unpackbits(drawn, axis=1, count=n).astype(np.float64) * 2 - 1
    return [torch.from_numpy(d).reshape(tuple(shape)) for d in signs]


def _checked_plans(function, reference, inputs, base: Sequence[DifferencePlan], structures, budget_bytes: int) -> list[DifferencePlan | None]:
    """Each input's plan on its pattern, if the pattern passes the check at this point: first by
    the reference's Jacobian on it (cheap: a backward call per row colour), else by the
    compressed differences themselves (a forward evaluation per colour)."""
    patterns = [(rows, cols) for rows, cols, _ in structures]
    graph = forward_graph(reference, inputs)  # one forward call: the output's shape, and the backward calls' graph
    shape, m = tuple(graph[1].shape), graph[1].numel()
    colors = row_colors(patterns, [x.numel() for x in inputs], m)
    by_reference = compressed_entries(reference, inputs, patterns, colors, np.zeros(0, dtype=np.int64), shape, budget_bytes, graph=graph)
    del graph
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



def pattern_entries(reference: Callable[..., Tensor], inputs: Sequence[Tensor], budget_bytes: int, cap: int) -> list[int] | None:
    """The plan's size before it is made: how many entries of each input's Jacobian the pattern
    holds (the reference's entries that are not 0 at the jittered point where ``jacobian_patterns``
    reads them), counted chunk by chunk and never kept; None once more than ``cap``."""
    counts = [0] * len(inputs)
    for _, rows in jacobian_rows(reference, jittered_point(inputs), budget_bytes):
        counts = [count + int(torch.count_nonzero(r)) for count, r in zip(counts, rows)]
        if sum(counts) > cap:
            return None
    return counts


def plan(problem, tolerances, *, budget_bytes: int = DEFAULT_BUDGET_BYTES, work_limit: float = math.inf) -> list[DifferencePlan]:
    """The plan stage for a ``pipeline.Problem``: how each differentiable input is perturbed (its
    pattern, colours and cost), for the guards to read before anything is evaluated and for
    ``check`` to run as it is."""
    return plan_differences(problem.function, problem.reference, problem.inputs, tolerances.step, budget_bytes=budget_bytes,
                            structure_key=problem.structure_key, work_limit=work_limit, atol=tolerances.atol, rtol=tolerances.rtol,
                            rounding=tolerances.rounding)

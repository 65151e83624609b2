"""The report guard: refuse, in words, a gradient report that would not fit the memory budget,
before it allocates anything large, and hand the engine the plan it read on the way.

What a report costs depends on how many Jacobian entries it compares, which depends on the
Jacobian's pattern, known only once read; so the guard goes only as far as it must, each step
guarded by the one before, and the plan it makes at the last step is the one the engine runs.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from typing import Sequence

import torch

from . import budget
from ..engine.at_scale import at_scale, sampled_bytes
from ..engine.diagnosis import MAX_ENTRIES_BY_HAND
from ..engine.evaluate import DEFAULT_BUDGET_BYTES, MAX_SECOND_LOOK
from ..engine.pipeline import DEFAULT_JACOBIAN_LIMIT, Problem, plan
from ..engine.planning import CHECK_DIRECTIONS, DifferencePlan, pattern_entries
from ..engine.tolerances import Tolerances


def chunk_bytes() -> int:
    """The engine's working chunk: its default, or an eighth of the budget where that is less, so
    that a lower budget lowers what every chunked loop holds (at the default budget: the default)."""
    return min(DEFAULT_BUDGET_BYTES, budget.memory_budget() // 8)


def report_estimate(sizes, outputs: int, entries) -> budget.Estimate:
    return budget.report_bytes(sizes, outputs, entries, chunk_bytes(), looked=MAX_SECOND_LOOK,
                               drawn_jacobian=DEFAULT_JACOBIAN_LIMIT, by_hand=MAX_ENTRIES_BY_HAND)


def _output_elements(function, inputs) -> int | None:
    try:
        with torch.no_grad():
            return int(function(*inputs).numel())
    except Exception:  # noqa: BLE001 - the engine reports the failure as the formula's
        return None


_PATTERN_COUNTS: OrderedDict[tuple, list[int]] = OrderedDict()  # the last few counts, as the engine keeps its last patterns
_PATTERN_COUNTS_KEPT = 32
_PATTERN_COUNTS_LOCK = threading.Lock()


def _counted_pattern(problem: Problem, cap: int) -> list[int] | None:
    """``planning.pattern_entries`` once per family, params and input shapes: that generic pattern
    is the same at every point but where kinks sit, and the plans read at the point decide in the end."""
    key = (problem.structure_key, tuple((tuple(x.shape), x.dtype, str(x.device)) for x in problem.inputs))
    with _PATTERN_COUNTS_LOCK:  # sessions run in threads
        counts = _PATTERN_COUNTS.get(key)
        if counts is not None:
            _PATTERN_COUNTS.move_to_end(key)
            return counts if sum(counts) <= cap else None
    assert problem.reference is not None  # the pattern is the reference's: without one the engine goes whole
    counts = pattern_entries(problem.reference, problem.inputs, chunk_bytes(), cap)
    if counts is None:
        return None
    with _PATTERN_COUNTS_LOCK:
        _PATTERN_COUNTS[key] = counts
        while len(_PATTERN_COUNTS) > _PATTERN_COUNTS_KEPT:
            _PATTERN_COUNTS.popitem(last=False)
    return counts


def require_report_memory(problem: Problem, tolerances: Tolerances, what: str, held: float = 0,
                          work_first: bool = True) -> Sequence[DifferencePlan] | None:
    """Refuse a report whose peak (``budget.report_bytes``), with the ``held`` bytes the caller
    keeps already, exceeds the budget; return the plan when it had to read one (hand it to the
    engine's ``check``), else None. The steps:

    1. every input's Jacobian compared whole (outputs × elements): an upper bound, enough for small cases;
    2. where the engine must go whole (no reference, or reading the pattern is beyond the work
       limit), that, unless the work limit refuses it before any value is computed (``work_first``:
       the engine checks its work before computing values, as the report does);
    3. else the pattern's size, counted where the engine reads it, chunk by chunk, keeping nothing;
       the pattern at the point itself, which the engine unites with it where a pattern kept from an
       earlier point fails here, adds entries only at kinks (a Jacobian's nonzero entries stay
       nonzero nearby);
    4. then the engine's own plan at this point, which inputs' patterns hold here and which fall
       back to the whole Jacobian (at a zero row, say), so that such a case is refused, not run.
    """
    if problem.function is None:
        return None  # the forward raised: the engine reports it, and builds no Jacobian
    total = budget.memory_budget()
    inputs, reference = problem.inputs, problem.reference
    sizes, limit = [x.numel() for x in inputs], budget.work_limit()
    elements = sum(sizes)
    outputs = _output_elements(reference or problem.function, inputs)
    if outputs is None or (reference is not None and _output_elements(problem.function, inputs) is None):
        return None  # the formula or the reference raises: the engine says so, and builds no Jacobian

    if at_scale(inputs, outputs):  # the verdict samples: no plan, no Jacobian; its products grow with the elements
        budget.require(held + sampled_bytes(sizes, outputs, inputs[0].element_size() if inputs else 8),
                       f"{what} (sampled at scale)", "Choose a smaller shape.")
        return None

    def need(entries) -> float:
        return held + report_estimate(sizes, outputs, entries).peak

    def require(entries, why: str) -> None:
        budget.require(need(entries), f"{what} ({why})", "Choose a smaller shape.")

    whole = [outputs * size for size in sizes]
    if need(whole) <= total:
        return None
    in_full = f"every entry of its Jacobian compared, {outputs:,} outputs by {elements:,} input elements"
    if reference is None or outputs * elements > limit:
        if not work_first or sum(2 * size + 2 * CHECK_DIRECTIONS for size in sizes) * elements <= limit:  # else the work limit refuses first
            require(whole, in_full)
        return None
    cap = math.ceil(max(total - held, 0) / (budget.ENTRY_KEPT + budget.ENTRY_WORK))  # beyond this, the entries alone are too much
    counts = _counted_pattern(problem, cap)
    if counts is None:
        require([cap + 1] + [0] * (len(sizes) - 1), f"its Jacobian has more than {cap:,} entries that are not 0")
    assert counts is not None  # refused just above
    require(counts, f"its Jacobian has {sum(counts):,} entries that are not 0")
    try:
        plans = plan(problem, tolerances, budget_bytes=chunk_bytes(), work_limit=limit)
    except Exception:  # noqa: BLE001 - the engine will meet the same failure and say so; until then, the whole Jacobian
        require(whole, in_full)
        return None
    entries = [p.pattern[0].size if p.structured else outputs * p.n_inputs for p in plans]
    whole_inputs = [p.input_index for p in plans if not p.structured]
    if work_first and sum(p.evaluations for p in plans) * elements > limit:
        return plans  # the work limit refuses it before any value is computed
    if whole_inputs:
        names = ", ".join(problem.names[i] for i in whole_inputs)
        require(entries, f"the Jacobian's pattern does not hold at this point for {names}, so every one of its "
                         f"{sum(outputs * sizes[i] for i in whole_inputs):,} entries is compared")
    require(entries, f"its Jacobian has {sum(entries):,} entries that are not 0")
    return plans

"""One options object for a check: built once by each front end (the sidebar's Case, the command
line, the assertion), carried as it is, keyed by caches, and read by every stage. The defaults
live here and nowhere else."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

from .evaluate import DEFAULT_BUDGET_BYTES, MAX_SECOND_LOOK
from .precision import DRAWS, RATIO

DEFAULT_JACOBIAN_LIMIT = 64 * 64  # entries of one input's Jacobian worth drawing as a heatmap
PROVENANCE = ("auto", "always", "never")
TRAINING_STEPS = 20  # the "does it train" stage's optimizer steps


@dataclass(frozen=True)
class CheckOptions:
    """Everything a check can be asked, with its default. Frozen and hashable: a cache's key."""

    # 2: the double backward is checked too (as gradgradcheck); 1, as gradcheck, leaves it; None: checked where it can be, a
    # backward that cannot be differentiated again being "first order only" (neutral), as nobody asked for order 2
    order: int | None = 1
    conditions: str = "default"  # which conditions the verdict also runs under (``conditions.CONDITION_SETS``); "none"
    parity: str | tuple[str, ...] | None = None  # ways of running it (``parity.PARITY_SETS`` or path keys); None: not run (it compiles)
    determinism: int = 0  # runs of the backward, bitwise; 0: not run
    batch_invariant: bool = True  # False: a row's gradient depends on its batch by design
    provenance: str = "auto"  # one of PROVENANCE: where a non-finite value was born, where the truth is finite / at all / never
    training: int = TRAINING_STEPS  # optimizer steps of "does it train"; 0: not run
    seed: int = 0
    upstream: str = "loss"  # the upstream gradient the maps draw (``pipeline.UPSTREAMS``)
    step: float | None = None  # finite-difference step; None: the dtype's
    atol: float | None = None
    rtol: float | None = None
    ratio: float = RATIO  # below float64: the formula's error at most this many times the baseline's (plus a floor)
    draws: int = DRAWS  # below float64: fresh draws the suggested tolerances are fitted to
    jacobian_limit: int = DEFAULT_JACOBIAN_LIMIT  # entries of one input's Jacobian drawn as a heatmap
    budget_bytes: int = DEFAULT_BUDGET_BYTES  # memory of one chunk of batched evaluations
    work_limit: float = math.inf  # element evaluations of finite differences allowed
    unit: float = 0.0  # a floor under atol's unit (``Tolerances.unit``): a condition's changed case, judged in the plain one's
    diagnose: bool = True  # False: no diagnosis (a condition's check where the plain verdict has one already)
    looks: int = MAX_SECOND_LOOK  # elements per input whose failing entries are looked at again one by one (kinks, the differences'
    # noise); 0: none (a condition's check beside a failing plain verdict: it passes outright, or fails as the plain one does)

    @property
    def differentiations(self) -> int:
        """How many times the formula is differentiated: 2 unless order is 1."""
        return 1 if self.order == 1 else 2

    def __post_init__(self) -> None:
        if self.order not in (1, 2, None):
            raise ValueError(f"order must be 1, 2 or None, not {self.order!r}")
        if self.provenance not in PROVENANCE:
            raise ValueError(f"provenance must be one of {', '.join(PROVENANCE)}, not {self.provenance!r}")
        if isinstance(self.parity, list):  # a list is not hashable: the same paths as a tuple
            object.__setattr__(self, "parity", tuple(self.parity))
        if self.determinism is None:
            object.__setattr__(self, "determinism", 0)

    @classmethod
    def of(cls, options: CheckOptions | None = None, **overrides: Any) -> CheckOptions:
        """``options`` (the defaults where None) with ``overrides``; an unknown name is refused."""
        unknown = set(overrides) - {f.name for f in fields(cls)}
        if unknown:
            raise TypeError(f"unknown check option{'s' * (len(unknown) > 1)}: {', '.join(sorted(unknown))}")
        return replace(options or cls(), **overrides)

    @property
    def inner(self) -> CheckOptions:
        """For a changed problem judged inside another check (a condition): the first order alone."""
        return replace(self, order=1, conditions="none", parity=None, determinism=0, training=0, jacobian_limit=0)

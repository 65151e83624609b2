"""The checks after the first-order verdict, each a stage of one interface, listed once (``STAGES``).

A stage has a ``name`` (its key in ``GradientReport.stages`` and in the JSON), ``applies(first,
options, earlier)`` and ``run(first, options, earlier) -> result | None``; ``first`` is the
first-order verdict with the truth it was judged by (``FirstOrder``), ``earlier`` the results of
the stages before it. A stage whose failure is the verdict's (conditions, precision) also has
``fold(verdict, result, first) -> Verdict``. Its result is facts with an ``outcome`` and a
``describe()``; the front ends loop over the stages that ran.

Adding a check: its module, with its result type and a ``STAGE``, and one line in ``STAGES``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np
import torch

from . import training
from .conditions import check_conditions
from .determinism import check_batch_invariance, check_determinism
from .parity import check_parity
from .precision import check_precision
from .provenance import trace_non_finite
from .report import Verdict
from .second_order import SecondOrderVerdict, check_second_order

if TYPE_CHECKING:
    from .finding import Finding
    from .judge import JacobianVerdict
    from .options import CheckOptions
    from .pipeline import Evaluation, Problem
    from .report import Failure, GradientReport, InputComparison
    from .tolerances import Tolerances

Tensor = torch.Tensor


@dataclass(frozen=True)
class FirstOrder:
    """The first-order verdict and the truth it was judged by: what every stage reads."""

    problem: Problem  # as given, in its dtype
    exact: Problem  # the same in float64: itself, or below float64 its values upcast
    checked: Problem  # what the verdict ran on: ``exact``, without its reference where the forwards differ
    tolerances: Tolerances
    outputs: tuple  # (the reference's output, the formula's, a failure of either's forward); () where none ran
    forward: str  # the formula's forward differs from the truth's, in words ("" where they agree)
    forward_found: Finding | None  # and where their values differ, as a finding
    forward_error: float
    upstream: Tensor | None  # the drawn upstream as given, in the problem's dtype (None: chosen by the evaluation)
    judge: Callable[..., GradientReport]  # the whole check, for a changed problem (a condition's): (problem, options)
    evaluation: Evaluation | None  # None: the forward raised before anything ran (``raised``)
    jacobian: JacobianVerdict | None
    comparisons: tuple[InputComparison, ...]  # the maps: three gradients per input for the drawn upstream
    drawn: Finding | None  # the drawn gradient out of tolerance, where the Jacobian's check did not find it
    raised: Failure | None = None  # the forward raised before anything ran
    redrawn: bool = False  # the maps draw the upstream that exposed the failure, not the one asked for
    seconds: float = 0.0  # what the first order took

    @property
    def failure(self) -> Failure | None:
        return self.evaluation.failure if self.evaluation is not None else self.raised

    @property
    def judged(self) -> bool:
        """The first-order verdict ran: nothing raised before the Jacobian was compared."""
        return self.failure is None and self.jacobian is not None

    @property
    def low(self) -> bool:
        return self.exact is not self.problem

    @property
    def plans(self):
        return self.evaluation.plans

    @property
    def trusted(self) -> list[bool]:
        """Per input, whether the verdict judged it by the reference."""
        return [self.jacobian is not None and self.jacobian.coverage.judged_by_reference(n) for n in self.checked.names]

    @property
    def by_reference(self) -> list[bool]:
        """Per input, whether the reference (of the problem as given) is a truth there."""
        if self.jacobian is not None and not self.forward:
            return [self.problem.reference is not None and self.jacobian.coverage.judged_by_reference(n) for n in self.problem.names]
        return [self.problem.reference is not None and not self.forward] * len(self.problem.inputs)


Earlier = Mapping[str, Any]


class SecondOrder:
    name = "second_order"

    def applies(self, first: FirstOrder, options: CheckOptions, earlier: Earlier) -> bool:
        return first.judged

    def run(self, first: FirstOrder, options: CheckOptions, earlier: Earlier):
        p, j = first.checked, first.jacobian  # the reference is the second order's truth only where it is the first order's
        assert j is not None and p.function is not None  # it applies only where the first order was judged
        if options.order is None and p.kernel:  # a kernel's backward is a kernel too: once differentiable unless order=2 is asked
            return SecondOrderVerdict("not checked", "a kernel: its backward is a kernel too, checked to first order unless order=2", {})
        return check_second_order(p.function, None if j.coverage.unreproduced else p.reference, p.inputs, p.loss, first.tolerances,
                                  first_order_passed=j.passed, seed=options.seed, names=p.names, declared_order=options.order, role=p.role)


class Conditions:
    name = "conditions"

    def applies(self, first: FirstOrder, options: CheckOptions, earlier: Earlier) -> bool:
        several = first.checked.signature is not None and len(first.checked.signature.kept) > 1  # each alone, whatever the set
        return first.judged and (options.conditions != "none" or several)

    def run(self, first: FirstOrder, options: CheckOptions, earlier: Earlier):
        assert first.jacobian is not None  # it applies only where the first order was judged
        unit = max((s for s in first.jacobian.scales if s is not None), default=0.0)  # the plain case's, where a changed one vanishes
        # a failing plain verdict has its diagnosis already, and beside it a condition only passes outright or fails as plain:
        # its failing entries are not looked at again
        passed = first.jacobian.passed
        inner = replace(options.inner, unit=unit, diagnose=passed, looks=options.looks if passed else 0)
        return check_conditions(first.checked, first.tolerances, first.jacobian, first.plans, lambda changed: first.judge(changed, inner),
                                which=options.conditions, seed=options.seed, budget_bytes=options.budget_bytes)

    @staticmethod
    def fold(verdict: Verdict, result, first: FirstOrder) -> Verdict:
        """A verdict that passes fails under a condition (a crash first: the one a user meets
        first), else says the conditions it also passed under."""
        if not verdict.passed:
            return verdict
        if result.failed:
            failed = next((r for r in result.failed if r.failure is not None), result.failed[0])
            return Verdict("fail", verdict.coverage, failed.finding, failure=failed.failure, condition=failed.name, found=failed.found)
        return replace(verdict, conditions=result.describe())


class Parity:
    name = "parity"

    def applies(self, first: FirstOrder, options: CheckOptions, earlier: Earlier) -> bool:
        return first.judged and options.parity is not None

    def run(self, first: FirstOrder, options: CheckOptions, earlier: Earlier):
        assert options.parity is not None  # it applies only where paths are asked for
        return check_parity(first.checked, first.tolerances, first.jacobian, first.plans, which=options.parity, seed=options.seed,
                            budget_bytes=options.budget_bytes, order=options.differentiations)


class Precision:
    """Below float64: the formula in its dtype against float64 from the same values, beside the
    reference in that dtype (``lib.engine.precision``)."""

    name = "precision"

    def applies(self, first: FirstOrder, options: CheckOptions, earlier: Earlier) -> bool:
        if not first.low:
            return False
        float64_failed = _float64_failed(first)
        return not (float64_failed and not all(first.by_reference))  # else there is no float64 truth to judge the dtype's by

    def run(self, first: FirstOrder, options: CheckOptions, earlier: Earlier):
        kinks = first.jacobian.kinks if first.jacobian is not None else ()
        return check_precision(first.problem, first.exact, by_reference=first.by_reference, kinks=kinks, upstream=first.upstream,
                               seed=options.seed, draws=options.draws, k=options.ratio, role=first.problem.role)

    @staticmethod
    def fold(verdict: Verdict, result, first: FirstOrder) -> Verdict:
        line = result.describe()
        if _float64_failed(first) and not result.failure:
            # the formula runs in the dtype but not in float64 (a dtype-only kernel): the precision verdict alone
            coverage = f"the formula does not run in float64 ({first.failure}), so it is judged in {result.dtype} alone"
            return Verdict("pass", coverage, precision=line) if result.passed else Verdict("fail", coverage, result.finding())
        if verdict.passed and not result.passed:
            return Verdict("fail", f"in float64 on the same values, {verdict.coverage}", result.finding(), conditions=verdict.conditions)
        return replace(verdict, precision=line)


def _float64_failed(first: FirstOrder) -> bool:
    """The formula's forward did not run in float64 (a failed remake is the report's forward failure)."""
    failure = first.failure
    return failure is not None and (first.exact.failure is not None or failure.stage == "forward")


class Provenance:
    """Where a value the truth has finite was born non-finite: only then is it traced."""

    name = "provenance"

    def applies(self, first: FirstOrder, options: CheckOptions, earlier: Earlier) -> bool:
        if options.provenance == "never":
            return False
        precision = earlier.get("precision")
        if precision is not None and any(r.first_non_finite >= 0 for r in precision.judged):
            return True  # not finite in the dtype where the baseline is
        return first.failure is None and non_finite_where_truth_is_finite(first.comparisons, first.outputs, earlier.get("second_order"),
                                                                          anywhere=options.provenance == "always")

    def run(self, first: FirstOrder, options: CheckOptions, earlier: Earlier):
        precision = earlier.get("precision")
        if precision is not None and any(r.first_non_finite >= 0 for r in precision.judged):
            assert first.problem.function is not None  # below float64, it ran in its dtype
            return trace_non_finite(first.problem.function, first.problem.inputs, first.upstream, order=options.differentiations,
                                    seed=options.seed)
        assert first.evaluation is not None and first.checked.function is not None  # nothing raised: it was evaluated
        return trace_non_finite(first.checked.function, first.checked.inputs, first.evaluation.upstream, order=options.differentiations,
                                seed=options.seed)


class Determinism:
    """The backward again and again, bitwise, and a row alone and among other rows."""

    name = "determinism"

    def applies(self, first: FirstOrder, options: CheckOptions, earlier: Earlier) -> bool:
        precision = earlier.get("precision")
        if first.low:
            return bool(options.determinism) and precision is not None and not precision.failure
        return bool(options.determinism) and first.failure is None

    def run(self, first: FirstOrder, options: CheckOptions, earlier: Earlier):
        found = check_determinism(first.problem, first.exact if first.low else None, runs=options.determinism, seed=options.seed)
        noise = max((s.max_spread for s in found.spreads), default=0.0)
        return replace(found, batch=check_batch_invariance(first.problem, seed=options.seed, declared=options.batch_invariant, noise=noise))


STAGES = (
    SecondOrder(),
    Conditions(),
    Parity(),
    Precision(),
    Provenance(),
    Determinism(),
    training.STAGE,
)


def non_finite_where_truth_is_finite(comparisons: Sequence[InputComparison], outputs, second=None, anywhere: bool = False) -> bool:
    """Whether the formula's output, drawn gradient or double backward is not finite somewhere its
    truth is (``anywhere``: somewhere at all)."""
    def broken(mine: np.ndarray, truth: np.ndarray | None) -> bool:
        bad = ~np.isfinite(mine)
        return bool(bad.any() if anywhere or truth is None or truth.shape != mine.shape else (bad & np.isfinite(truth)).any())

    if any(broken(c.gradients["analytic"], c.gradients["reference"]) for c in comparisons):
        return True
    if second is not None and second.products.get("double backward"):
        truths = second.products.get("reference") or second.products.get("differences of its gradient") or []
        for k, mine in enumerate(second.products["double backward"]):
            if broken(np.asarray(mine), np.asarray(truths[k]) if k < len(truths) else None):
                return True
    if outputs and outputs[1] is not None:
        mine = outputs[1].detach().double().cpu().numpy()
        truth = outputs[0].detach().double().cpu().numpy() if outputs[0] is not None else None
        return broken(mine, truth)
    return False

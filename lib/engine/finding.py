"""A failing verdict's finding, as facts: what failed, the upstream gradient that showed it, the
values the judge compared there (the evidence every front end draws and counts) and the worst
entry with its values. ``Finding.describe`` is the one place that writes its sentence.

A backward that ignores ``grad_output`` is right for the loss's upstream (ones) and wrong for a
random one: a card or a map that showed the loss's upstream beside that verdict would contradict
it. So the evidence is the comparison that failed, whatever it was, and nothing else is drawn
beside a failing verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from .evaluate import cosine_of
from .signature import name_element
from .tolerances import Tolerances

# what showed the failure: an entry of the Jacobian compared one by one; the backward for a zero
# upstream (not 0); an entry where the true Jacobian is zero (found from a probe); a backward that
# is not linear in grad_output; a random probe uᵀJ; the drawn gradient (the loss's upstream)
# under a condition: a random probe; the grad_output the backward was handed, written into; the
# directional derivative along tied values moved together, against the one-sided differences
KINDS = ("entry", "zero upstream", "off pattern", "not linear", "probe", "drawn", "condition", "wrote grad_output", "tied directions",
         "forward")  # forward: the formula's output against its reference's
TRUTH_WORDS = {"reference": "autograd through the reference", "surrogate": "autograd through the declared surrogate",
               "numerical": "finite differences"}
NOISE_FACTOR = 4  # an entry fails against finite differences only beyond this many times their own error estimate


@dataclass(frozen=True)
class Evidence:
    """One input's values as the verdict compared them: the formula's against the truth's, and
    which of them the verdict found out of tolerance."""

    name: str
    shape: tuple[int, ...]  # the input's
    cols: np.ndarray  # the input element of each value (flat): a product has one per element, entries several
    formula: np.ndarray
    truth: np.ndarray
    wrong: np.ndarray  # bool, per value: out of tolerance as the verdict judged it
    scale: float  # the unit of atol: the truth's largest |entry|

    @classmethod
    def of_product(cls, name: str, shape: tuple[int, ...], formula: ArrayLike, truth: ArrayLike, wrong: ArrayLike,
                   scale: float) -> Evidence:
        formula, truth = np.asarray(formula, dtype=float).reshape(-1), np.asarray(truth, dtype=float).reshape(-1)
        return cls(name, shape, np.arange(formula.size), formula, truth, np.asarray(wrong, dtype=bool).reshape(-1), scale)

    @property
    def element_error(self) -> np.ndarray:
        """Per input element (flat), the largest |formula − truth| of its values, where the
        verdict found one wrong (0 where all are right, NaN where nothing finite was compared)."""
        n = math.prod(self.shape)
        gap = np.where(self.wrong, np.abs(self.formula - self.truth), 0.0)
        gap = np.where(np.isfinite(gap), gap, np.where(self.wrong, np.inf, 0.0))
        out = np.zeros(n)
        np.maximum.at(out, self.cols, gap)
        return out


@dataclass(frozen=True)
class Finding:
    """Why a first-order verdict failed, as facts (see the module's docstring)."""

    kind: str  # one of KINDS
    input: str  # the input whose gradient showed it
    shape: tuple[int, ...]
    element: int  # that input's element (flat)
    formula: float  # the formula's value there (its entry, its uᵀJ element, its backward for 0)
    truth: float  # the truth's (0 for a zero upstream and outside the pattern; NaN where none is compared)
    against: str = ""  # the truth it was judged by: "reference" or "numerical" ("" where the rule itself was broken)
    role: str = "reference"  # what the reference is (``judge.ROLES``)
    output: str = ""  # the output element of an entry, named (``out[3]``)
    probe: int = 0  # the random upstream gradient that showed it (1, 2, …); 0: none
    upstream: np.ndarray | None = None  # that upstream gradient (flat; zeros for "zero upstream"); None: entries one by one
    tolerances: Tolerances | None = None
    scale: float = 1.0  # the unit of atol
    amount: float = math.nan  # off the pattern, or not linear: how much more than the entries account for
    allowed: float = math.nan  # and what was allowed there
    plain: float = math.nan  # under a condition: the formula's value without it
    evidence: tuple[Evidence, ...] = ()

    @property
    def at(self) -> str:
        return name_element(self.input, self.shape, self.element)

    @property
    def worst_error(self) -> float:
        """The largest |formula − truth| the verdict found wrong, in units of the truth's scale."""
        worst = 0.0
        for e in self.evidence:
            gap = np.abs(e.formula - e.truth)[e.wrong]
            if gap.size:
                worst = max(worst, float(np.nan_to_num(gap, nan=np.inf).max()) / (e.scale or 1.0))
        return worst

    @property
    def cosine(self) -> float:
        """Between the formula's compared values and the truth's: 1 points the right way, −1 is flipped."""
        if not self.evidence:
            return math.nan
        return cosine_of(*(np.concatenate([getattr(e, side) for e in self.evidence]) for side in ("formula", "truth")))

    @property
    def wrong(self) -> int:
        return sum(int(e.wrong.sum()) for e in self.evidence)

    @property
    def compared(self) -> int:
        return sum(int((np.isfinite(e.truth) | e.wrong).sum()) for e in self.evidence)

    @property
    def shown_by(self) -> str:
        """The upstream gradient that showed it, in words."""
        if self.kind == "drawn":
            return "the drawn upstream gradient"
        if self.kind == "forward":
            return "the forward's output"
        if self.kind == "wrote grad_output":
            return "the grad_output handed to backward, before and after"
        if self.kind == "tied directions":
            return "a direction moving tied values together"
        if self.kind == "zero upstream":
            return "a zero upstream gradient"
        if self.probe:
            return f"random upstream gradient {self.probe}"
        return "the Jacobian's entries, one by one"

    def describe(self) -> str:
        """The finding's sentence: where, the values there, and what was allowed."""
        truth = truth_label(self.against, self.role)
        if self.kind == "entry":
            return (f"the Jacobian entry ∂{self.output} / ∂{self.at} is {_value(self.formula)} by the formula's backward, "
                    f"{self.truth:.6g} by the {truth} truth (allowed {self._allowed()})")
        if self.kind == "zero upstream":
            return (f"for a zero upstream gradient the formula's backward returns {self.formula:.6g} at {self.at} instead of 0: it is "
                    "not multiplied by grad_output (an added term, or a gradient computed without it)")
        if self.kind == "not linear":
            return (f"for random upstream gradients u₁ and u₂ the formula's backward b gives b(u₁ + u₂) ≠ b(u₁) + b(u₂), which no "
                    f"vector-Jacobian product does (for random upstream gradient {self.probe}, at {self.at}, it gives {self.amount:.6g} "
                    f"more than its own Jacobian entries account for; allowed {self.allowed:.3g})")
        if self.kind == "off pattern" and self.output:
            return (f"the Jacobian entry ∂{self.output} / ∂{self.at} is {self.formula:.6g} by the formula's backward, "
                    + ("where the declared surrogate's Jacobian is zero (the intended gradient has no entry there)" if self.role == "surrogate"
                       else "where the true Jacobian is zero (outside its pattern: the output does not depend on that input element here)"))
        if self.kind == "off pattern":
            return (f"for random upstream gradient {self.probe}, the formula's backward gives {self.at} {self.amount:.6g} more than its own "
                    "Jacobian entries account for: it mixes grad_output across outputs, or has entries where the true Jacobian is zero "
                    f"(allowed {self.allowed:.3g})")
        if self.kind == "probe":
            return (f"for random upstream gradient {self.probe}, uᵀJ at {self.at} is {_value(self.formula)} by the formula's backward, "
                    f"{self.truth:.6g} by the {truth} truth: the backward uses grad_output wrongly, or misses entries "
                    f"(allowed {self._allowed()})")
        if self.kind == "forward":
            whose = "the declared surrogate's" if self.role == "surrogate" else "the reference's"
            return (f"the formula's forward differs from {whose}: {self.output} is {self.formula:.6g} by the formula, {self.truth:.6g} "
                    f"by the {self.role} (allowed {self._allowed()})")
        if self.kind == "wrote grad_output":
            return (f"backward wrote into grad_output in place (by up to {self.amount:.3g}): every other consumer of that "
                    f"tensor then gets a corrupted gradient")
        if self.kind == "tied directions":
            return (f"along a direction that moves each group of tied values together, where the function is smooth, the "
                    f"formula's directional derivative is {self.formula:.6g} and the one-sided differences agree on {self.truth:.6g}: its "
                    f"gradient is not a valid subgradient over the tied elements jointly (each tied group's share must add up)")
        if self.kind == "condition":
            return (f"the gradient at {self.at} for a random upstream is {self.formula:.6g} by the formula's backward, "
                    f"{self.truth:.6g} by the {truth} truth, and {self.plain:.6g} without the condition")
        return (f"the drawn gradient at {self.at} is {self.formula:.6g} by the formula's backward, {self.truth:.6g} by the {truth} truth "
                f"({self._allowed()})")

    def _allowed(self) -> str:
        return tolerances_text(self.tolerances, self.against, self.scale, self.role) if self.tolerances is not None else ""


def truth_label(against: str, role: str = "reference") -> str:
    """A truth's name in a finding: the reference's is its role (``judge.ROLES``)."""
    return role if against == "reference" else against


def tolerances_text(tolerances: Tolerances, against: str, scale: float = 1.0, role: str = "reference") -> str:
    """The tolerance in words; atol is in units of the truth's scale (its largest |value|, ``judge.truth_scale``,
    floored where that is rounding)."""
    atol = f"{tolerances.atol:g}" if scale == 1.0 else f"{tolerances.atol:g}×{scale:.3g} (the truth's scale)"
    own_error = f", and {NOISE_FACTOR}× the differences' own error" if against == "numerical" else ""
    return f"{atol} + {tolerances.rtol:g}·|{truth_label(against, role)}|{own_error}"


def _value(a: float) -> str:
    return f"{a:.6g}" if np.isfinite(a) else f"not finite ({a})"

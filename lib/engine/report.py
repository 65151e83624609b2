"""Report: the result types every front end reads, and the one place that writes a verdict's words
from its fields."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .diagnosis import Diagnosis
from .finding import Finding
from .judge import JacobianVerdict
from .kernels import Kernel
from .planning import DifferencePlan
from .signature import Signature, name_element, name_index
from .tolerances import Tolerances
from ..errors import original


SOURCES = ("analytic", "reference", "numerical")


PAIRS = (("analytic", "reference"), ("analytic", "numerical"), ("reference", "numerical"))


STAGES = ("forward", "backward", "reference")  # where a formula's own exception can come from


@dataclass(frozen=True)
class Failure:
    """An exception raised by the code under test (never by Gradient Lab), as data: where it came
    from, its type and its message."""

    stage: str  # one of STAGES: the formula's forward or backward, or the family's reference
    kind: str  # the exception's type name
    message: str
    when: str = ""  # the condition it raised under, where only some do ("only x1 requires a gradient")

    @classmethod
    def of(cls, stage: str, error: BaseException, when: str = "") -> Failure:
        error = original(error)
        return cls(stage, type(error).__name__, str(error), when)

    @property
    def whose(self) -> str:
        return "the reference" if self.stage == "reference" else "the formula"

    def __str__(self) -> str:
        when = f" when {self.when}" if self.when else ""
        return f"{self.where}{when}: {self.kind}: {self.message}"

    @property
    def where(self) -> str:
        return "in forward" if self.stage == "reference" else f"in {self.stage}"

    @property
    def unconditioned(self) -> str:
        """Its words without the condition, for a sentence that names the condition first."""
        return f"{self.where}: {self.kind}: {self.message}"


CONDITION_OUTCOMES = ("pass", "fail", "as plain", "not applicable")  # "as plain": the plain gradient again, which fails


@dataclass(frozen=True)
class ConditionResult:
    """The verdict under one condition (``lib.engine.conditions``): how the case was changed, and
    what the formula's backward did there."""

    name: str  # reads after "when": "only x2 requires a gradient", "grad_output is transposed"
    group: str  # one of conditions.GROUPS
    label: str  # its words inside its group's: "transposed" (of "grad_output transposed, sliced")
    outcome: str  # one of CONDITION_OUTCOMES
    finding: str = ""  # what went wrong there, or why it does not apply, in words
    failure: Failure | None = None  # the code under test raised under it
    worst: str = ""  # the element worst off, named (``x1[2, 3]``), where one is
    found: Finding | None = None  # what failed there, as facts, where a comparison did

    @property
    def failed(self) -> bool:
        return self.outcome == "fail"


@dataclass(frozen=True)
class Conditions:
    """Every condition the verdict ran under, and what the formula does without needing to."""

    results: tuple[ConditionResult, ...]
    notes: tuple[str, ...] = ()  # not errors: a gradient computed that no input needed

    @property
    def failed(self) -> tuple[ConditionResult, ...]:
        return tuple(r for r in self.results if r.failed)

    @property
    def ran(self) -> tuple[ConditionResult, ...]:
        return tuple(r for r in self.results if r.outcome != "not applicable")

    def describe(self) -> str:
        """What was covered: "14 conditions: every subset of requires_grad (2), grad_output
        expanded, transposed and sliced, …"."""
        count = len(self.ran)
        return f"{count} condition{'s' if count != 1 else ''}: {self.covered}" if count else "no condition"

    @property
    def covered(self) -> str:
        """The conditions run, by group: "every subset of requires_grad (2), grad_output expanded, …"."""
        groups: dict[str, list[ConditionResult]] = {}
        for r in self.ran:
            groups.setdefault(r.group, []).append(r)
        parts = []
        for group, results in groups.items():
            labels = [r.label for r in results]
            if group == "requires_grad":
                parts.append(f"every subset of requires_grad ({len(labels)})" if results[0].label == "every" else
                             f"{len(labels)} subsets of requires_grad")
            elif group in ("grad_output", "inputs"):
                parts.append(f"{group} {_and(labels)}")
            else:
                parts.extend(labels)
        return ", ".join(parts)


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


OUTCOMES = ("pass", "fail", "no verdict")
LEADS = {"pass": "passes", "fail": "fails", "no verdict": "no verdict"}


@dataclass(frozen=True)
class Verdict:
    """The first-order verdict as facts; ``summary`` writes its one sentence from them."""

    outcome: str  # one of OUTCOMES; "no verdict": nothing could be compared
    coverage: str = ""  # what was covered, in words (``Coverage.describe``)
    finding: str = ""  # the worst entry, probe or drawn element out of tolerance, in words
    why: str = ""  # the diagnosis, where it names a cause
    failure: Failure | None = None  # the code under test raised
    forward: str = ""  # the formula's forward differs from its reference's (or surrogate's): then the backward is judged by its own
    condition: str = ""  # the condition it fails under where it passes without it ("only x2 requires a gradient")
    conditions: str = ""  # the conditions it also passed under, described (``Conditions.describe``)
    precision: str = ""  # below float64, the precision verdict's line (``Precision.describe``), pass or fail
    found: Finding | None = None  # what failed, as facts: the comparison behind ``finding`` (None: none failed, or it raised)

    @property
    def passed(self) -> bool:
        return self.outcome == "pass"

    @property
    def text(self) -> str:
        """The sentence without its leading outcome word; below float64, with the precision verdict's line."""
        text = self._text
        if not self.precision:
            return text
        return f"{self.precision}; in float64 on the same values, {text}" if self.passed else f"{text}; {self.precision}"

    @property
    def _text(self) -> str:
        if self.condition:
            return f"when {self.condition}: {self.finding}. Without it, it passes: {self.coverage}"
        if self.failure is not None:
            raised = f"{self.failure.whose} raised {self.failure}"
            return f"{self.why}. {raised[0].upper()}{raised[1:]}" if self.why else raised
        if self.forward:
            own = f"passes: {self.coverage}" if not self.finding else f"fails: {self.finding} (checked {self.coverage})"
            return f"{self.forward}. Judged against finite differences of its own forward, its backward {own}"
        if self.outcome == "no verdict":
            return f"the truth is not finite anywhere, so nothing could be compared ({self.coverage})"
        if self.outcome == "pass":
            return f"{self.coverage}; and under {self.conditions}" if self.conditions else self.coverage
        why = f"{self.why}. " if self.why else ""
        return f"{why}{self.finding} (checked {self.coverage})"

    @property
    def summary(self) -> str:
        """One sentence a user can act on, that says what was covered."""
        return f"{LEADS[self.outcome]}: {self.text}"


@dataclass(frozen=True)
class NonFinite:
    """Where a tensor holds NaN or ±Inf."""

    nan: int
    inf: int
    first: tuple[tuple[int, ...], ...]  # up to 10 indices

    @property
    def count(self) -> int:
        return self.nan + self.inf

    def describe(self, name: str) -> str:
        where = ", ".join(name_index(name, i) for i in self.first)
        more = "…" if self.count > len(self.first) else ""
        return f"{self.nan} NaN and {self.inf} Inf in {name}, at {where}{more}"


def non_finite(values: np.ndarray) -> NonFinite:
    if not values.size or (math.isfinite(float(values.max())) and math.isfinite(float(values.min()))):  # the common case: no masks
        return NonFinite(0, 0, ())
    nan, inf = np.isnan(values), np.isinf(values)
    count_nan, count_inf = int(nan.sum()), int(inf.sum())
    if not count_nan + count_inf:
        return NonFinite(0, 0, ())
    bad, first = (nan | inf).reshape(-1), list[int]()
    for start in range(0, bad.size, 2**16):  # the first ten, without listing millions (a gradient left NaN at scale)
        first += (np.flatnonzero(bad[start : start + 2**16])[: 10 - len(first)] + start).tolist()
        if len(first) >= 10:
            break
    return NonFinite(count_nan, count_inf, tuple(tuple(int(i) for i in np.unravel_index(k, values.shape)) for k in first))


@dataclass(frozen=True)
class ErrorMap:
    """a − b element by element, for one pair of gradient sources on one input."""

    pair: tuple[str, str]
    signed: np.ndarray
    relative: np.ndarray  # |a − b| / max(|b|, floor); the floor keeps zeros of b from dividing
    max_abs: float
    mean_abs: float
    max_rel: float
    worst: tuple[int, ...] | None  # index of the largest finite |a − b|

    @property
    def absolute(self) -> np.ndarray:
        return np.abs(self.signed)


def error_map(pair: tuple[str, str], a: np.ndarray, b: np.ndarray, computed: bool = True) -> ErrorMap:
    """a − b for one pair of sources; ``computed`` False where a side was not computed (a sampled
    verdict's numerical gradient): NaN, without arithmetic over millions of NaN."""
    if not computed:
        nothing = np.broadcast_to(np.nan, a.shape)  # read-only, no memory
        return ErrorMap(pair, nothing, nothing, math.nan, math.nan, math.nan, None)
    signed = a - b
    absolute = np.abs(signed)
    if a.size and math.isfinite(float(absolute.max())):  # every difference finite, the common case: no masks over millions of values
        magnitude = np.asarray(np.abs(b), dtype=float)  # an array even for 0-d values
        relative = np.maximum(magnitude, max(float(magnitude.max()) * 1e-12, np.finfo(np.float64).tiny), out=magnitude)
        np.divide(absolute, relative, out=relative)
        k = int(np.argmax(absolute))
        worst = tuple(int(i) for i in np.unravel_index(k, a.shape))
        return ErrorMap(pair, signed, relative, float(absolute.reshape(-1)[k]), float(absolute.mean()), float(relative.max()), worst)
    finite = np.isfinite(absolute)
    if not finite.any():  # nothing to compare (a side not computed: NaN); its relative error is NaN as well
        return ErrorMap(pair, signed, absolute, math.nan, math.nan, math.nan, None)
    magnitude = np.abs(b)
    largest = float(magnitude.max(initial=0.0))
    if not math.isfinite(largest):
        largest = float(magnitude[np.isfinite(magnitude)].max(initial=0.0))
    relative = absolute / np.maximum(magnitude, max(largest * 1e-12, np.finfo(np.float64).tiny))
    masked = np.where(finite, absolute, -1.0)
    worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(masked)), a.shape))
    return ErrorMap(
        pair,
        signed,
        relative,
        float(absolute[finite].max()),
        float(absolute[finite].mean()),
        float(np.nanmax(np.where(np.isfinite(relative), relative, np.nan))) if np.isfinite(relative).any() else math.nan,
        worst,
    )


@dataclass(frozen=True)
class InputComparison:
    """The three gradients of one input, and their differences."""

    name: str
    gradients: dict[str, np.ndarray]  # source -> gradient, float64, shaped like the input
    errors: dict[tuple[str, str], ErrorMap]
    non_finite: dict[str, NonFinite]  # "input" and each source
    plan: DifferencePlan
    jacobians: dict[str, np.ndarray] | None = None  # source -> (output elements, input elements)
    kinks: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # flat indices where the function has a kink

    def worst(self, pair: tuple[str, str] = ("analytic", "reference")) -> tuple[tuple[int, ...] | None, dict[str, float]]:
        """The worst element of ``pair``'s error map and the three gradients' values there."""
        index = self.errors[pair].worst
        if index is None:
            return None, {}
        return index, {source: float(self.gradients[source][index]) for source in SOURCES}


PARITY_OUTCOMES = ("agrees", "differs", "as eager", "raises", "not supported", "skipped")  # "as eager": eager's wrong gradient again


@dataclass(frozen=True)
class ParityCell:
    """What one path gave, judged."""

    key: str
    group: str
    label: str
    outcome: str  # one of PARITY_OUTCOMES
    finding: str = ""  # in words: the worst entry's three values, what raised, what is lacking and whose
    worst: str = ""  # the element named, where it differs
    error: str = ""  # the exception, shortened, where it raised or is not supported
    whose: str = ""  # where not supported or raising: "the Function" or "PyTorch"
    differences: tuple = ()  # per input, the path's value − the truth's, for the worst probe (the error map)
    names: tuple[str, ...] = ()  # what ``differences`` holds, per entry
    graphs: int | None = None  # graphs compiled (compile paths)
    recompiles: int | None = None  # graphs compiled again at the second size (dynamic)
    bypassed: bool = False  # the compiled gradient is autograd through the forward, not the Function's backward
    zeros: bool = False  # it differs by giving zeros everywhere the truth is not zero
    note: str = ""  # not a failure: a path that agrees only trivially (it ran eagerly), a recompile
    seconds: float = 0.0

    @property
    def parted(self) -> bool:
        """Where this path and eager part: it differs, or raises."""
        return self.outcome in ("differs", "raises")


@dataclass(frozen=True)
class OpcheckTest:
    """One of ``torch.library.opcheck``'s tests of a custom op."""

    name: str  # "test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"
    passed: bool
    message: str = ""


@dataclass(frozen=True)
class Parity:
    """The grid of one formula: a cell per path, the graph breaks, the canary, and a custom op's opcheck."""

    cells: tuple[ParityCell, ...]
    kind: str  # "autograd.Function", "custom op" or "callable"
    graph_breaks: tuple[str, ...] = ()
    canary: str = ""  # what the custom-backward-bypassed canary can tell for this formula
    opcheck: tuple[OpcheckTest, ...] = ()
    compiler: str = ""  # whether inductor could run
    seconds: float = 0.0

    @property
    def parted(self) -> tuple[ParityCell, ...]:
        return tuple(c for c in self.cells if c.parted)

    def cell(self, key: str) -> ParityCell | None:
        return next((c for c in self.cells if c.key == key), None)

    def describe(self) -> str:
        """One line: how many paths agree, and where they part."""
        counted = [c for c in self.cells if c.outcome in ("agrees", "differs", "as eager", "raises")]
        agreeing = sum(c.outcome == "agrees" for c in counted)
        words = f"agrees in {agreeing} of {len(counted)} ways of running it"
        parted = self.parted
        if parted:
            words += "; " + "; ".join(f"{c.outcome} under {c.label}" for c in parted)
        unsupported = [c for c in self.cells if c.outcome == "not supported"]
        if unsupported:
            words += f"; {len(unsupported)} not supported"
        failed = [t.name for t in self.opcheck if not t.passed]
        if self.opcheck:
            words += f"; opcheck: {'fails ' + ', '.join(failed) if failed else 'passes its four tests'}"
        return words

    # a card in a notebook, one line in a console, as GradientReport's
    def _repr_html_(self) -> str | None:
        return _written(self, "html")

    def __repr__(self) -> str:
        return _written(self, "repr")


BASELINES = {"reference": "PyTorch's own (autograd through the reference)", "surrogate": "the declared surrogate's autograd",
             "rounding": "the float64 truth rounded"}  # what a low-precision formula's error is held against, in words


@dataclass(frozen=True)
class ErrorStats:
    """One side's errors against the float64 truth, over the compared elements."""

    max_error: float  # the largest |value − truth|; inf where a value is not finite
    max_ulp: float  # the same in units in the last place of the dtype at the truth
    rel_rmse: float  # ‖value − truth‖ / ‖truth‖
    snr_db: float  # 10·log10(‖truth‖² / ‖value − truth‖²)
    mismatch: float  # the part of the elements outside the baseline's suggested tolerances (NaN: none suggested)
    ulp_counts: np.ndarray  # elements per bin of ``precision.ULP_EDGES``
    non_finite: int
    sample_magnitude: np.ndarray  # |truth| at a sample of elements, for the error-against-magnitude plot
    sample_error: np.ndarray  # |value − truth| there


@dataclass(frozen=True)
class SuggestedTolerance:
    """The tightest ``assert_close`` tolerances that fail at most ``rate`` of the time, from fresh draws."""

    atol: float  # NaN: no tolerance passes every draw (a value not finite)
    rtol: float  # assert_close's default for the dtype
    rate: float  # the failure rate the fit promises
    draws: int
    failures: int  # draws that fail at these tolerances (0 but where no tolerance could pass)
    non_finite: int = 0  # draws with a value not finite where the truth is

    @property
    def usable(self) -> bool:
        return math.isfinite(self.atol)


@dataclass(frozen=True)
class PrecisionResult:
    """One input's gradient (or the output) in the low dtype, against the float64 truth, beside the baseline."""

    name: str
    formula: ErrorStats
    baseline: ErrorStats
    baseline_kind: str  # a key of BASELINES
    scale: float  # the largest |truth|
    floor: float  # the noise floor, in the truth's units
    allowed: float  # the largest error allowed: RATIO × the baseline's + the floor
    allowed_rmse: float
    passed: bool
    compared: int
    left_out: int  # elements with no finite truth, both sides non-finite, or at a kink
    tolerance: SuggestedTolerance | None = None  # for the formula, from fresh draws
    baseline_tolerance: SuggestedTolerance | None = None  # for the baseline (a correct formula's)
    shape: tuple[int, ...] = ()
    worst: int = -1  # flat index of the element where the formula is furthest from the truth (-1: none)
    first_non_finite: int = -1  # flat index of the first element the formula makes non-finite where the baseline is finite

    def element(self, flat: int) -> str:
        return name_element(self.name, self.shape, flat) if flat >= 0 else ""

    @property
    def ratio(self) -> float:
        """The formula's largest error over the baseline's (1 where both are 0)."""
        mine, theirs = self.formula.max_error, self.baseline.max_error
        return mine / theirs if theirs > 0 else (1.0 if mine == 0 else math.inf)

    @property
    def rmse_ratio(self) -> float:
        mine, theirs = self.formula.rel_rmse, self.baseline.rel_rmse
        return mine / theirs if theirs > 0 else (1.0 if mine == 0 else math.inf)


@dataclass(frozen=True)
class Precision:
    """The precision verdict (``lib.engine.precision``): each input's gradient and the output in the
    low dtype, against float64 from the same values, beside the baseline in the same dtype."""

    dtype: str
    device: str  # where the formula and the baseline ran
    truth_device: str  # where the float64 truth ran
    k: float
    results: tuple[PrecisionResult, ...]  # per differentiable input
    output: PrecisionResult | None
    probes: int  # upstreams pooled per input
    draws: int  # fresh draws behind the suggested tolerances
    baseline_kind: str = "reference"
    failure: str = ""  # the formula raised in the dtype (its words)

    @property
    def judged(self) -> tuple[PrecisionResult, ...]:
        return self.results + ((self.output,) if self.output is not None else ())

    @property
    def passed(self) -> bool:
        return not self.failure and all(r.passed for r in self.judged)

    @property
    def worst(self) -> PrecisionResult | None:
        """The first failing result, else the one with the largest ratio."""
        failing = [r for r in self.judged if not r.passed]
        return failing[0] if failing else max(self.results or self.judged, key=lambda r: r.ratio, default=None)

    @property
    def ratio(self) -> float:
        worst = self.worst
        return worst.ratio if worst is not None else math.nan

    @property
    def baseline_words(self) -> str:
        words = BASELINES[self.baseline_kind]
        return f"{words} in {self.dtype}" if self.baseline_kind != "rounding" else f"{words} to {self.dtype}"

    def finding(self) -> str:
        """What fails, in words ("" where it passes)."""
        if self.failure:
            return f"in {self.dtype}, {self.failure}"
        worst = self.worst
        if worst is None or worst.passed:
            return ""
        what = "the output" if worst.name == "output" else f"the gradient of {worst.name}"
        base = BASELINES[worst.baseline_kind]
        f, b = worst.formula, worst.baseline
        if worst.first_non_finite >= 0:
            return (f"in {self.dtype}, {what} is not finite at {f.non_finite:,} element{'s' * (f.non_finite != 1)} (first "
                    f"{worst.element(worst.first_non_finite)}) where {base} is (against float64 from the same {self.dtype} values)")
        return (f"in {self.dtype}, {what} loses precision, worst at {worst.element(worst.worst)}: its largest error is "
                f"{times(worst.ratio)} that of {base} "
                f"({f.max_error:.3g} against {b.max_error:.3g}; allowed {worst.allowed:.3g}, {self.k:g}× plus a noise floor of "
                f"{worst.floor:.2g}), relative RMSE {f.rel_rmse:.2g} against {b.rel_rmse:.2g}, SNR {_db(f.snr_db)} against "
                f"{_db(b.snr_db)}, against float64 from the same {self.dtype} values")

    def describe(self) -> str:
        """One line, pass or fail: the ratio and the measures of the worst input."""
        if self.failure:
            return self.finding()
        worst = self.worst
        if worst is None:
            return f"in {self.dtype}: nothing to compare"
        f = worst.formula
        where = f" (on {self.device}, the truth on {self.truth_device})" if self.device != "cpu" else ""
        return (f"in {self.dtype}, {'the output' if worst.name == 'output' else worst.name}'s largest error is {times(worst.ratio)} "
                f"that of {self.baseline_words} (allowed {self.k:g}× plus a noise floor){where}: max {f.max_ulp:.3g} ULP, relative RMSE "
                f"{f.rel_rmse:.2g}, SNR {_db(f.snr_db)}")

    # a card in a notebook, one line in a console, as GradientReport's
    def _repr_html_(self) -> str | None:
        return _written(self, "html")

    def __repr__(self) -> str:
        return _written(self, "repr")


def times(ratio: float) -> str:
    """A ratio of errors in words: "1.3×", "35×", "∞×", "—" where there is none."""
    return "∞×" if ratio == math.inf else "—" if not math.isfinite(ratio) else f"{ratio:.2g}×" if ratio < 10 else f"{ratio:,.0f}×"


def _db(snr: float) -> str:
    return "∞ dB" if snr == math.inf else "−∞ dB" if snr == -math.inf else f"{snr:.1f} dB"


@dataclass(frozen=True)
class NonFiniteEvent:
    """One operation that made a non-finite value (``lib.engine.provenance``)."""

    op: str  # "aten.div"
    phase: str  # "forward", "backward" or "double backward"
    line: str  # the user's code that called it, file:line; in autograd's derivative of an op, the line that called that op
    element: str  # the first non-finite element of its output, "out[2, 3]"
    inputs: tuple[float, ...]  # the operation's inputs at that element (an in-place op's as they were before it)
    result: float  # what it gave there
    count: int  # non-finite elements of its output
    cause: str = ""  # a named cause, where one fits
    fix: str = ""  # the known fix, in one line
    derivative: str = ""  # where autograd's own backward ran it: the op whose derivative it is ("sqrt"); "" where code called it

    def describe(self) -> str:
        what = f"{self.derivative}'s derivative ({self.op})" if self.derivative else self.op
        where = f" at {self.line}" if self.line else " (in autograd's own backward)"
        values = ", ".join(f"{v:.6g}" for v in self.inputs)
        cause = f": {self.cause}" if self.cause else ""
        fix = f"; fix: {self.fix}" if self.fix else ""
        return (f"{what} in {self.phase}{where} gave {self.result:g} at {self.element} from ({values}){cause} "
                f"({self.count:,} element{'s' * (self.count != 1)}){fix}")


@dataclass(frozen=True)
class Provenance:
    """Where the first non-finite value was born (an inf or a NaN from finite inputs) and, where another
    op turned it into a NaN later, where it became NaN."""

    born: NonFiniteEvent | None  # the first non-finite value: its op, its line, its result (inf or nan)
    became_nan: NonFiniteEvent | None = None  # the first NaN made from inputs without one, where born gave an inf
    error: str = ""  # the code under test raised while it was traced

    def describe(self) -> str:
        if self.born is None:
            text = "no operation made a non-finite value from finite inputs" + (f" (it raised {self.error})" if self.error else "")
            return text + (f"; became NaN in {self.became_nan.describe()}" if self.became_nan is not None else "")
        text = f"born in {self.born.describe()}"
        if self.became_nan is not None:
            text += f"; became NaN in {self.became_nan.describe()}"
        return text


@dataclass(frozen=True)
class Spread:
    """One input's gradient over repeated runs of the backward (``lib.engine.determinism``)."""

    name: str
    shape: tuple[int, ...]
    varying: np.ndarray  # flat indices of the elements that are not bitwise the same in every run
    spread: np.ndarray  # max − min over the runs, per element, shaped like the input
    max_spread: float
    bits: int  # the most bits in which an element differs from the first run's, in the dtype's encoding
    worst: str = ""  # the element that varies most, named


@dataclass(frozen=True)
class RowComparison:
    row: int
    input: str
    where: str  # "alone" or "among other rows"
    outcome: str  # "bitwise", "rounding" or "different"
    difference: float  # the largest |gradient here − gradient in the case's batch|
    scale: float  # the row's largest |gradient|


@dataclass(frozen=True)
class BatchInvariance:
    outcome: str  # "bitwise", "rounding", "different", "declared" or "not applicable"
    words: str
    rows: tuple[RowComparison, ...] = ()

    @property
    def flagged(self) -> bool:
        return self.outcome == "different"


@dataclass(frozen=True)
class Determinism:
    """The backward run again and again on the same inputs, and a row alone or in other batches."""

    runs: int
    deterministic: bool
    spreads: tuple[Spread, ...]
    nondet_tol: float  # NaN where deterministic
    gradcheck: bool | None  # whether gradcheck passes with that nondet_tol (None: not tried)
    gradcheck_message: str = ""  # why it does not, in gradcheck's words
    dtype: str = "float64"
    device: str = "cpu"
    batch: BatchInvariance | None = None

    def describe(self) -> str:
        if self.deterministic:
            text = f"deterministic: {self.runs} runs of the backward bitwise equal"
        else:
            varying = [s for s in self.spreads if s.varying.size]
            worst = max(varying, key=lambda s: s.max_spread)
            tried = ("; gradcheck passes with it" if self.gradcheck else
                     f"; gradcheck still fails with it: {self.gradcheck_message}" if self.gradcheck is False else "")
            text = (f"nondeterministic: over {self.runs} runs {sum(s.varying.size for s in varying):,} elements vary, most at "
                    f"{worst.worst} by {worst.max_spread:.3g} ({worst.bits} bits); suggested nondet_tol={self.nondet_tol:.1g}{tried}")
        if self.device != "cpu":
            text += f" (on {self.device})"
        if self.batch is not None:
            text += f"; batch: {self.batch.words}"
        return text

    @property
    def flagged(self) -> bool:
        return not self.deterministic or (self.batch is not None and self.batch.flagged)

    # a card in a notebook, one line in a console, as GradientReport's
    def _repr_html_(self) -> str | None:
        return _written(self, "html")

    def __repr__(self) -> str:
        return _written(self, "repr")


# How results show in a notebook (their card, "html") and in a console (one line, "repr"): written by
# the presentation layer, which registers its writers here by class name (``present.notebook``, loaded
# with the public API), so that the engine imports nothing of it.
WRITERS: dict[str, dict[str, Callable[[Any], str]]] = {}


def _written(result: Any, kind: str) -> Any:
    writer = WRITERS.get(type(result).__name__, {}).get(kind)
    if writer is not None:
        return writer(result)
    return None if kind == "html" else f"<{type(result).__name__}>"  # no writer registered: the notebook shows the repr


@dataclass(frozen=True)
class GradientReport:
    family: str
    formula: str
    dtype: str
    device: str
    tolerances: Tolerances
    loss: float
    forward_max_error: float  # |formula output − reference output|, max
    inputs: tuple[InputComparison, ...]
    cosine: float  # between analytic and reference gradients, all inputs together; −1: flipped
    verdict: Verdict
    evaluations: int  # forward evaluations spent on finite differences
    failure: Failure | None = None  # the code under test's own exception, where its forward or backward raised
    notes: tuple[str, ...] = field(default_factory=tuple)
    upstream: str = "loss"  # what the drawn gradients' upstream was (see UPSTREAMS)
    jacobian: JacobianVerdict | None = None  # the whole-Jacobian check behind the verdict
    diagnosis: Diagnosis | None = None  # why the formula is wrong, where it is
    signature: Signature | None = None  # what the Function takes and gives; None when no forward ran
    stages: dict = field(default_factory=dict)  # the stages' results by name (``stages.STAGES``), in order; a stage not run is absent
    pending: tuple[str, ...] = ()  # stages that apply and have not run yet: a first-order report shown early (``pipeline.first_report``)
    seconds: float = math.nan  # what the check took, the first order and the stages (``pipeline.check``)
    kernel: Kernel | None = None  # a fused kernel's facts (``engine.kernels``): its native precision, Triton's interpreter

    # the stages every front end knows by name
    second_order = property(lambda self: self.stages.get("second_order"))  # SecondOrderVerdict
    conditions = property(lambda self: self.stages.get("conditions"))  # Conditions: the verdict again under each condition
    parity = property(lambda self: self.stages.get("parity"))  # Parity: the gradient under each way of running it
    precision = property(lambda self: self.stages.get("precision"))  # Precision, below float64
    provenance = property(lambda self: self.stages.get("provenance"))  # Provenance: where a non-finite value was born
    determinism = property(lambda self: self.stages.get("determinism"))  # Determinism: repeated backward, batch invariance
    training = property(lambda self: self.stages.get("training"))  # Training: does it train

    def passed(self, order: int = 2) -> bool:
        """The first-order verdict passes and, with ``order=2``, the second order is not wrong
        (not checked, or not differentiable by design, are not wrong)."""
        return self.verdict.passed and not (order == 2 and self.second_order is not None and self.second_order.failed)

    def input(self, name: str) -> InputComparison:
        return next(c for c in self.inputs if c.name == name)

    # shown in a notebook as its card, in a console as one line: the words are the presentation layer's (``WRITERS``)
    def _repr_html_(self) -> str | None:
        return _written(self, "html")

    def __repr__(self) -> str:
        return _written(self, "repr")

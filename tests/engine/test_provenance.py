"""Where a NaN or an Inf was born (lib.engine.provenance): the op, the user's line, the element, the
inputs there, the cause and its fix; and nothing traced where everything is finite."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from gradient_lab.app import views
from gradient_lab.app.case import Case
from gradient_lab.engine.provenance import FIXES, ROOT_AT_ZERO, trace_non_finite
from gradient_lab.explore.perturb import Perturbation
from gradient_lab.testing import assert_gradients_match, check_gradients

FIXTURES = Path(__file__).parents[1] / "specimens" / "modules"
sys.path.insert(0, str(FIXTURES))
import nan_functions as nf  # noqa: E402
import root_nan_functions as rf  # noqa: E402

SOURCE = (FIXTURES / "nan_functions.py").read_text().splitlines()
ROOT_SOURCE = (FIXTURES / "root_nan_functions.py").read_text().splitlines()


def marked_line(name: str, mark: str = "# NaN:") -> int:
    """The line of ``name``'s backward marked ``mark`` (``# born:`` falls back on ``# NaN:``)."""
    start = next(i for i, line in enumerate(SOURCE) if line.startswith(f"class {name}("))
    end = next((i for i in range(start + 1, len(SOURCE)) if SOURCE[i].startswith("class ")), len(SOURCE))
    found = [i + 1 for i in range(start, end) if mark in SOURCE[i]]
    return found[0] if found else marked_line(name)


@pytest.mark.parametrize("name", list(nf.CAUSES))
def test_each_cause_is_named_with_its_op_line_element_and_fix(name):
    found = trace_non_finite(getattr(nf, name).apply, [nf.inputs_for(name)], order=1)
    cause, op = nf.CAUSES[name]
    born = found.born
    assert born is not None and born.op == op and born.cause == cause and born.fix == FIXES[cause]
    assert born.element in ("out[1, 2]", "out[1, 0]")  # the broken element (a zero row: its first)
    assert born.line == f"nan_functions.py:{marked_line(name, '# born:')}" and born.phase == "backward"
    if name in nf.BECOMES_NAN:
        nan_cause, nan_op = nf.BECOMES_NAN[name]
        assert found.became_nan is not None and found.became_nan.op == nan_op and found.became_nan.cause == nan_cause
        assert found.became_nan.line == f"nan_functions.py:{marked_line(name)}"
        assert "became NaN in" in found.describe()
    else:
        assert found.became_nan is None


def test_the_inputs_that_made_it_are_given():
    found = trace_non_finite(nf.OverZero.apply, [nf.inputs_for("OverZero")], upstream=torch.ones(4, 5, dtype=torch.float64), order=1)
    assert found.born.inputs == (1.0, 0.0) and found.born.result == float("inf") and found.born.count == 1


def test_a_finite_function_is_never_traced_by_the_verdict():
    report = views.compare_case(Case(family="softmax", formulas=("corrected",)), "corrected")
    assert report.provenance is None


def test_the_verdict_traces_a_gradient_that_is_not_finite_where_the_truth_is():
    case = Case(family="normalize", formulas=("unclamped",), perturbation=Perturbation(near_zero_rows=1, near_zero_factor=0.0))
    report = views.compare_case(case, "unclamped")
    born = report.provenance.born
    assert born.op == "aten.div" and born.cause == "0/0" and born.line.startswith("normalize.py:") and born.phase == "backward"
    overflow = views.compare_case(Case(family="logsumexp", formulas=("naive",), dtype="float32", perturbation=Perturbation(norm1=1e3)),
                                  "naive")
    assert overflow.provenance.born.cause == "exp overflow" and overflow.provenance.became_nan.cause == "inf / inf"


def test_the_assertion_message_says_where_it_was_born():
    x = nf.inputs_for("OverZero")
    report = check_gradients(nf.OverZero.apply, x, reference=lambda v: v * 1.0, conditions="none")
    assert report.provenance is not None and report.provenance.born.cause == "x/0"
    with pytest.raises(AssertionError) as raised:
        assert_gradients_match(nf.OverZero.apply, x, lambda v: v * 1.0, conditions="none")
    assert f"not finite: born in aten.div in backward at nan_functions.py:{marked_line('OverZero')}" in str(raised.value)
    assert "x/0" in str(raised.value) and "clamp the denominator" in str(raised.value)


def test_a_double_backward_that_is_not_finite_is_traced_in_its_phase():
    class SqrtOnce(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return x * x

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 2 * torch.sqrt(x * x)  # |x|·2: the derivative of sqrt at 0 is x/0 in double backward

    x = nf.inputs_for("OverZero")  # positive, and 0 at x[1, 2]: the first order is right, its derivative is 0/0 there
    found = trace_non_finite(SqrtOnce.apply, [x], order=2)
    assert found.born is not None and found.born.phase == "double backward" and found.born.cause == ROOT_AT_ZERO  # sqrt's derivative
    assert found.became_nan is not None and found.became_nan.cause == "0 · inf"
    report = check_gradients(SqrtOnce.apply, x, reference=lambda v: v * v, order=2, conditions="none")
    assert report.verdict.passed and report.provenance is not None and report.provenance.born.phase == "double backward"


def test_always_traces_even_where_the_truth_is_not_finite_and_never_does_not():
    x = nf.inputs_for("MaskedSingularity")
    reference = lambda v: torch.where(v > 0, torch.log(v.clamp_min(1e-300)), torch.zeros_like(v))  # noqa: E731
    assert check_gradients(nf.OverZero.apply, x, reference=lambda v: v * 1.0, conditions="none", provenance="never").provenance is None
    forced = check_gradients(nf.MaskedSingularity.apply, x, reference=reference, conditions="none", provenance="always")
    assert forced.provenance is not None and forced.provenance.became_nan.cause.startswith("a where that masks")


def root_line(name: str, mark: str) -> str:
    """file:line of the line of ``name`` (in root_nan_functions.py) marked ``# inf:`` or ``# NaN:``."""
    start = next(i for i, line in enumerate(ROOT_SOURCE) if line.startswith(f"class {name}("))
    end = next((i for i in range(start + 1, len(ROOT_SOURCE)) if ROOT_SOURCE[i].startswith(("class ", "def "))), len(ROOT_SOURCE))
    return f"root_nan_functions.py:{next(i + 1 for i in range(start, end) if f'# {mark}:' in ROOT_SOURCE[i])}"


def test_an_inf_of_sqrts_derivative_in_double_backward_is_named_before_the_nan_it_becomes():
    found = trace_non_finite(rf.AbsTimesX.apply, [rf.inputs()], order=2)
    born, nan = found.born, found.became_nan
    assert born.phase == "double backward" and born.derivative == "sqrt" and born.op == "aten.div"  # SqrtBackward0's division
    assert born.line == root_line("AbsTimesX", "inf") and math.isinf(born.result) and born.element == "out[1, 2]"
    assert born.cause == ROOT_AT_ZERO and born.fix == FIXES[ROOT_AT_ZERO]
    assert nan.phase == "double backward" and nan.derivative == "mul" and nan.op == "aten.mul" and nan.cause == "0 · inf"
    assert nan.line == root_line("AbsTimesX", "NaN") and nan.element == "out[1, 2]" and math.isnan(nan.result)
    assert any(math.isinf(v) for v in nan.inputs) and 0.0 in nan.inputs
    words = found.describe()
    assert words.startswith(f"born in sqrt's derivative (aten.div) in double backward at {born.line} gave {born.result:g} at out[1, 2]")
    assert f"; became NaN in mul's derivative (aten.mul) in double backward at {nan.line} gave nan" in words


def test_the_verdict_names_sqrts_derivative_and_its_line():
    report = check_gradients(rf.AbsTimesX.apply, rf.inputs(), reference=lambda v: v * v.abs(), order=2, conditions="none")
    assert report.provenance is not None
    assert report.provenance.born.derivative == "sqrt" and report.provenance.born.line == root_line("AbsTimesX", "inf")
    assert report.provenance.became_nan.line == root_line("AbsTimesX", "NaN")


@pytest.mark.parametrize("name, op", [("RootPowerBackward", "aten.reciprocal"), ("InPlaceReciprocal", "aten.reciprocal")])
def test_an_inf_made_in_a_first_order_backward_is_named_before_the_nan(name, op):
    found = trace_non_finite(getattr(rf, name).apply, [rf.inputs()], order=1)
    born, nan = found.born, found.became_nan
    assert born.op == op and born.derivative == "" and born.phase == "backward" and born.cause == "x/0"
    assert born.line == root_line(name, "inf") and born.result == math.inf and born.element == "out[1, 2]"
    assert born.inputs[-1] == 0.0  # an in-place op's operand as it was before it wrote the inf over it
    assert nan.op == "aten.mul" and nan.cause == "0 · inf" and nan.line == root_line(name, "NaN") and nan.derivative == ""
    assert found.describe().startswith(f"born in {op} in backward at {born.line} gave inf")


def test_a_nan_born_directly_is_one_op():
    found = trace_non_finite(nf.ZeroOverZero.apply, [nf.inputs_for("ZeroOverZero")], order=1)
    assert found.born.op == "aten.div" and found.born.cause == "0/0" and found.born.derivative == ""
    assert math.isnan(found.born.result) and found.became_nan is None and "became NaN" not in found.describe()
    root_times_x = lambda v: torch.sqrt(v) * v  # noqa: E731 - sqrt's derivative at 0 is 0/0 here: a NaN with no inf before
    line = sys._getframe().f_lineno - 1
    plain = trace_non_finite(root_times_x, [rf.inputs()], order=1)
    assert plain.born.derivative == "sqrt" and plain.born.op == "aten.div" and plain.born.line == f"test_provenance.py:{line}"
    assert math.isnan(plain.born.result) and plain.born.cause == ROOT_AT_ZERO and plain.became_nan is None

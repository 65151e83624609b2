"""The verdict card's content: a headline a newcomer reads at once, key numbers, which picture,
and the evidence in sentences, for the gallery's formulas and for Functions as they ship."""

import pytest
import torch

from gradient_lab.app.family import get_family
from gradient_lab.engine.pipeline import compare_gradients
from gradient_lab.present.cards import HEADLINE_WORDS, PICTURES, card
from gradient_lab.testing import check_gradients
from tests.specimens import shipped
from tests.specimens.conditions import ProductUnboundWhenAlone

COSINE = get_family("cosine")
INPUTS = COSINE.build_inputs((8, 16), seed=0)


@pytest.mark.parametrize("formula", list(COSINE.formulas))
def test_every_cosine_formula_gets_a_short_capitalised_headline_numbers_a_picture_and_sentences(formula):
    report = compare_gradients(COSINE, formula, INPUTS)
    shown = card(report)
    assert shown.outcome == report.verdict.outcome and shown.picture in PICTURES
    assert len(shown.headline.split()) <= HEADLINE_WORDS + 1 and shown.headline[0].isupper()  # + the "…" of a cut
    assert [n.label for n in shown.numbers] == ["worst error", "cosine to truth", "entries checked"]
    assert shown.numbers[2].value == f"{report.jacobian.coverage.entries:,}"
    assert shown.details and all(line[0].isupper() and line.endswith(".") for line in shown.details)
    if report.verdict.passed:
        assert shown.headline == "Right on every entry"


def test_the_tutorials_headline_names_both_bugs_in_the_users_terms():
    shown = card(compare_gradients(COSINE, "tutorial", INPUTS))
    assert shown.headline == "Sign flipped · missing 1/(‖x1‖·‖x2‖) · extra term along each row"
    assert float(shown.numbers[1].value) < 0 and shown.picture == "scatter"  # cosine to the truth: flipped


def test_a_story_about_where_it_is_wrong_is_drawn_as_the_error_map():
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    shown = card(check_gradients(shipped.PaddedDifferences, x))
    assert shown.picture == "error map" and "boundary along dim 1" in shown.headline


def test_a_formula_that_raises_says_where_in_its_headline():
    x = torch.randn(3, 4, dtype=torch.float64)
    shown = card(check_gradients(ProductUnboundWhenAlone, (x, x.flip(0))))
    assert shown.headline == "Raises UnboundLocalError in backward when only x2 requires a gradient"
    assert any(line.startswith("It fails when only x2 requires a gradient: the formula raised in backward") for line in shown.details)
    assert shown.conditions[0] == "fail" and "only x2 requires a gradient" in shown.conditions[1]


def test_the_parity_line_says_where_the_paths_part_and_rows_keep_the_grids_order():
    from gradient_lab.engine.report import Parity, ParityCell
    from gradient_lab.present.cards import PARITY_COLUMNS, parity_line, parity_rows

    cell = lambda key, outcome, **kw: ParityCell(key, "torch.compile", key, outcome, **kw)  # noqa: E731
    parted = Parity((cell("eager", "agrees"), cell("aot_eager", "differs", finding="the gradient at x[1] is 2", worst="x[1]"),
                     cell("jvp", "not supported", whose="the Function", finding="it has no jvp")), "autograd.Function")
    outcome, words = parity_line(parted)
    assert outcome == "fail" and words.startswith("Agrees in 1 of 2 ways") and "differs under aot_eager" in words
    assert parity_line(Parity((cell("eager", "differs"), cell("aot_eager", "as eager")), "callable"))[0] == "fail"
    assert parity_line(Parity((cell("grad", "as eager"),), "callable"))[0] == "as plain"
    assert parity_line(Parity((cell("eager", "agrees"), cell("jvp", "not supported")), "callable"))[0] == "pass"
    assert parity_line(None) is None
    rows = parity_rows(parted)
    assert [r["outcome"] for r in rows] == ["agrees", "differs", "not supported"] and set(rows[0]) == set(PARITY_COLUMNS)
    assert rows[1]["worst entry"] == "x[1]" and rows[2]["why"] == "It has no jvp"


def _precision_report(family: str, formula: str, dtype: str):
    import sys
    from pathlib import Path

    from gradient_lab.app import views
    from gradient_lab.app.case import Case

    sys.path.insert(0, str(Path(__file__).parents[1] / "specimens" / "modules"))
    import precision_functions

    precision_functions.register_all()

    return views.compare_case(Case(family=family, formulas=(formula,), dtype=dtype), formula)


def test_below_float64_the_card_leads_with_the_ratio_to_pytorchs_own_error():
    from gradient_lab.present.cards import precision_line

    right = card(_precision_report("softmax", "corrected", "bfloat16"))
    assert right.headline == "Right, and as precise as PyTorch's own in bfloat16"
    assert right.numbers[0].label == "error vs PyTorch in bfloat16" and right.numbers[0].value.endswith("×")
    assert right.precision[0] == "pass" and right.precision[1].startswith("bfloat16: x's largest error is ")
    assert card(_precision_report("softmax", "corrected", "float64")).precision is None
    poor = _precision_report("precision standardize", "one-pass variance", "float16")
    outcome, words = precision_line(poor)
    assert outcome == "fail" and f"{poor.precision.ratio:.2g}×" in words
    assert card(poor).headline.startswith("Loses precision in float16:")
    assert card(poor).picture == "error map" and right.picture == "scatter"  # where it loses bits, in the dtype


def test_the_precision_rows_put_the_formula_beside_its_baseline_and_the_output_last():
    from gradient_lab.present.cards import PRECISION_COLUMNS, precision_rows

    report = _precision_report("cosine", "corrected", "float16")
    rows = precision_rows(report.precision)
    assert [r["of"] for r in rows] == ["gradient of x1", "gradient of x2", "output"]
    assert all(tuple(r) == PRECISION_COLUMNS and r["verdict"] == "pass" for r in rows)


def test_the_details_say_where_a_non_finite_gradient_was_born():
    from gradient_lab.app import views
    from gradient_lab.app.case import Case
    from gradient_lab.explore.perturb import Perturbation

    case = Case(family="logsumexp", formulas=("naive",), dtype="float32", perturbation=Perturbation(norm1=1e3))
    shown = card(views.compare_case(case, "naive"))
    assert any(line.startswith("Not finite: born in aten.exp in forward at logsumexp.py:") and "exp overflow" in line
               for line in shown.details)


def test_the_maps_upstream_is_named_as_asked_or_as_the_one_that_showed_the_failure():
    from gradient_lab.present.cards import drawn_upstream
    from gradient_lab.testing import check_gradients
    from tests.specimens.grad_output import Softmax, SoftmaxIgnoresGradOutput

    x = torch.randn(6, 8, generator=torch.Generator().manual_seed(3), dtype=torch.float64)

    right = check_gradients(Softmax, x, reference=lambda x: torch.softmax(x, -1), conditions="none", training=0)
    wrong = check_gradients(SoftmaxIgnoresGradOutput, x, reference=lambda x: torch.softmax(x, -1), conditions="none", training=0)
    assert drawn_upstream(right).startswith("the loss's") and wrong.upstream == "finding"
    assert drawn_upstream(wrong).startswith("random upstream gradient 1, which shows the failure")


def test_a_card_shown_before_its_stages_ran_says_which_are_still_running_and_the_same_headline():
    from dataclasses import replace

    from gradient_lab.engine.pipeline import CheckOptions, first_order, first_report

    problem = COSINE.problem("tutorial", INPUTS, {})
    options = CheckOptions(order=None)
    early = card(first_report(first_order(problem, options), options))
    whole = card(compare_gradients(COSINE, "tutorial", INPUTS))
    assert early.pending == "Checking second order, conditions and does it train…" and whole.pending == ""
    assert early.headline == whole.headline and early.outcome == whole.outcome == "fail"
    assert card(replace(first_report(first_order(problem, options), options), pending=("conditions",))).pending == "Checking conditions…"


def test_a_kernels_card_says_how_it_was_run_in_a_few_words_and_its_details_name_each_write_with_its_element():
    from tests.specimens.kernels import SquareWritingIntoSaved, square

    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    report = check_gradients(SquareWritingIntoSaved.apply, (x,), reference=square, kernel=True, conditions="none", training=0)
    shown = card(report)
    (outcome, line), = [s for s in shown.stages if s[0] == "kernel"]
    assert line.startswith("A kernel, judged in float32 (its native precision)") and "into its input x in backward, saved for it" in line
    saved = report.kernel.writes[0]
    assert saved.element not in line and any(saved.element in d for d in shown.details)  # the element one click away

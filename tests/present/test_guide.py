"""Start here says what each step shows; the engine must show it at the step's case."""

import numpy as np

from gradient_lab.app import views
from gradient_lab.app.case import Case
from gradient_lab.explore.perturb import Perturbation
from gradient_lab.present.cards import card
from gradient_lab.present.guide import PRESENT, TUTORIAL


def test_every_step_names_a_page_and_a_cosine_case_and_a_link_can_present_it():
    assert [step.page.split("/")[-1] for step in TUTORIAL] == ["2_Gradient_field.py", "5_Training.py", "1_Gradient_check.py",
                                                              "1_Gradient_check.py"]
    for step in TUTORIAL:
        params = step.query_params(present=True)
        assert params["family"] == "cosine" and params[PRESENT] == "true" and PRESENT not in step.query_params()


def test_the_missing_normalisation_step_shows_a_gradient_wrong_by_the_row_norms_and_the_fix_passes():
    def ratio(norm: float) -> tuple[float, str]:  # the formula's entries against the truth's, in the median
        report = views.gradient_report(Case(formulas=("sign-fixed",), perturbation=Perturbation(norm1=norm, norm2=norm)), "sign-fixed")
        e = report.jacobian.entries[0]
        return float(np.median(np.abs(e.values["analytic"]) / np.maximum(np.abs(e.values["reference"]), 1e-300))), card(report).headline

    (at_1, _), (at_10, headline) = ratio(1.0), ratio(10.0)
    assert "factor per row" in headline and at_10 > 100 and at_10 > 50 * at_1  # hidden at unit norm, hundreds of times too large at 10
    fixed = views.gradient_report(Case(formulas=("corrected",)), "corrected")
    assert fixed.verdict.passed and fixed.second_order.passed

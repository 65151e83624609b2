"""The diagnosis names why a backward is wrong: one class per zoo specimen, the gallery's own bugs
in words, and nothing at all for a correct Function."""

import numpy as np
import pytest
import torch

from gradient_lab.app.case import Case
from gradient_lab.engine.pipeline import compare_gradients
from gradient_lab.app.family import get_family
from gradient_lab.explore.perturb import Perturbation
from gradient_lab.app import views
from tests.specimens import zoo


@pytest.mark.parametrize("with_reference", [True, False], ids=["reference", "no reference"])
@pytest.mark.parametrize("specimen", zoo.WRONG, ids=[s.name for s in zoo.WRONG])
def test_each_class_of_bug_is_named(specimen, with_reference):
    report = compare_gradients(specimen.family(with_reference), "f", specimen.inputs())
    kinds = [f.kind for f in report.diagnosis.findings]
    assert specimen.diagnosis in kinds, (kinds, report.verdict.summary)


@pytest.mark.parametrize("with_reference", [True, False], ids=["reference", "no reference"])
@pytest.mark.parametrize("specimen", [s for s in zoo.WRONG if s.wrong_first], ids=[s.name for s in zoo.WRONG if s.wrong_first])
def test_each_class_of_bug_is_named_at_a_larger_shape(specimen, with_reference):
    # three times each dim: a roll is not a region of small |x|, a leak too small to locate is still a mix
    import dataclasses

    larger = dataclasses.replace(specimen, shapes=tuple(tuple(3 * d for d in shape) for shape in specimen.shapes))
    report = compare_gradients(larger.family(with_reference), "f", larger.inputs(), order=1)
    kinds = [f.kind for f in report.diagnosis.findings]
    assert specimen.diagnosis in kinds, (kinds, report.verdict.summary)


@pytest.mark.parametrize("specimen", zoo.RIGHT, ids=[s.name for s in zoo.RIGHT])
def test_nothing_is_named_for_a_correct_function(specimen):
    report = compare_gradients(specimen.family(True), "f", specimen.inputs())
    assert report.diagnosis.findings == ()


@pytest.mark.parametrize("name, region", [("band", "1 < |x1| < 2"), ("region", "|x1| > 1")])
def test_a_region_is_named_by_its_bounds(name, region):
    specimen = next(s for s in zoo.WRONG if s.name == name)
    report = compare_gradients(specimen.family(True), "f", specimen.inputs())
    assert f"wrong only where {region}" in report.diagnosis.words


def test_the_tutorial_is_flipped_and_lacks_its_normalisation_on_random_inputs():
    report = views.gradient_report(Case(), "tutorial")
    words = report.diagnosis.words
    assert words.startswith("sign flipped, and off by a factor per row, ‖x1‖·‖x2‖, a missing 1/(‖x1‖·‖x2‖)")
    assert report.verdict.summary.startswith(f"fails: {words}")  # the home page's verdict line names it


def test_on_unit_norm_inputs_the_tutorial_is_only_flipped():
    report = views.gradient_report(Case(perturbation=Perturbation(norm1=1.0, norm2=1.0)), "tutorial")
    assert [f.words for f in report.diagnosis.findings] == ["sign flipped"]


def test_on_3d_inputs_the_tutorial_reduces_over_the_wrong_dim():
    report = views.gradient_report(Case(shape=(3, 4, 5)), "tutorial")
    assert report.diagnosis.findings[0].kind == "reduction dim"
    assert "reduces over the wrong dim" in report.verdict.summary


def test_softmax_without_its_projection_misses_a_rank_one_term():
    family = get_family("softmax")
    report = compare_gradients(family, "no-subtract", family.build_inputs((4, 6), seed=0))
    assert [f.kind for f in report.diagnosis.findings] == ["rank-one term"]


@pytest.mark.parametrize("family", ["cosine", "softmax", "layernorm", "gelu", "softplus", "normalize", "logsumexp"])
def test_no_correct_formula_of_the_gallery_gets_a_diagnosis(family):
    f = get_family(family)
    inputs = f.build_inputs((4, 6), seed=1)
    for name, formula in f.formulas.items():
        if formula.correct:
            assert compare_gradients(f, name, inputs).diagnosis.findings == ()


def test_an_empty_pattern_is_diagnosed_without_error():
    """Rows of one element: cosine is ±1 and its true Jacobian all zeros (found by the fuzz tests)."""
    report = views.gradient_report(Case(shape=(8, 1)), "tutorial")
    assert report.jacobian.coverage.structural == 0 and report.diagnosis is not None


# ---- stories that must hold at a second point (issue #24) ---------------------------------------------

from gradient_lab.testing import check_gradients  # noqa: E402
from tests.specimens import shipped  # noqa: E402


def test_errors_at_a_transforms_boundary_columns_are_told_by_position_not_by_a_band_of_values():
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    report = check_gradients(shipped.PaddedDifferences, x)
    (finding,) = [f for f in report.diagnosis.findings if f.kind in ("position", "region")]
    assert finding.kind == "position" and "the boundary along dim 1" in finding.words
    assert "x[:, 0] and x[:, 7]" in finding.words and "second point" in finding.evidence


def test_a_region_is_named_only_once_a_second_point_confirms_it():
    specimen = next(s for s in zoo.WRONG if s.name == "region")
    report = compare_gradients(specimen.family(True), "f", specimen.inputs())
    region = next(f for f in report.diagnosis.findings if f.kind == "region")
    assert "second point" in region.evidence and region.predicts is None  # held to it, and kept as plain data


def test_a_story_that_a_second_point_does_not_bear_out_is_dropped():
    from gradient_lab.engine.diagnosis import Diagnosis, Finding, confirm

    band = Finding("region", "wrong only where 1.1 < |x| < 2", "", predicts=(0, lambda values: (np.abs(values) > 1.1) & (np.abs(values) < 2)))
    boundary = np.array([True, False, False, True])
    elsewhere = (np.array([0.0, 1.5, 1.6, 0.1]), boundary)  # the band predicts the middle two; the boundary is wrong
    assert confirm(Diagnosis((band,)), lambda i: elsewhere).findings == ()
    assert confirm(Diagnosis((band,)), lambda i: (np.array([1.5, 0.0, 0.0, 1.7]), boundary)).findings[0].kind == "region"
    assert confirm(Diagnosis((band,)), lambda i: None).findings[0].kind == "region"  # the second point cannot tell: kept


def test_a_gradient_pytorch_summed_to_fit_is_named_before_the_factor_it_makes():
    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    report = check_gradients(shipped.SquareSummedShape, x, reference=lambda x: x * x)
    kinds = [f.kind for f in report.diagnosis.findings]
    assert kinds[0] == "summed shape" and "(2, 2, 8)" in report.diagnosis.findings[0].words and "factor" in kinds


def test_a_backward_wrong_at_a_few_entries_is_not_called_off_by_a_constant_factor():
    # the case: an error only for z in (−1.17, −1), 5 of 32 entries off by varying amounts
    class ErfWrongInABand(torch.autograd.Function):
        @staticmethod
        def forward(ctx, z):
            ctx.save_for_backward(z)
            return torch.erf(z)

        @staticmethod
        def backward(ctx, g):
            (z,) = ctx.saved_tensors
            d = 2 / torch.pi**0.5 * torch.exp(-z * z)
            return g * torch.where((z > -1.17) & (z < -1), d * (1.0013 + 0.001 * (z + 1.17)), d)  # just past rtol there

    z = torch.randn(4, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    z.view(-1)[:5] = torch.tensor([-1.16, -1.12, -1.08, -1.04, -1.01], dtype=torch.float64)
    report = check_gradients(ErfWrongInABand, z, reference=torch.erf, conditions="none", training=0)
    assert not report.verdict.passed
    assert "factor" not in [f.kind for f in report.diagnosis.findings]


class _ScaleWithWeightGradientDoubled(torch.autograd.Function):
    """x · w (w broadcast over rows): right for x, the weight's gradient doubled."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g * w, 2 * (g * x).sum(0)


def test_one_inputs_gradient_off_by_a_factor_is_told_for_that_input_alone():
    from gradient_lab.testing import check_gradients

    x, w = torch.randn(3, 5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    report = check_gradients(_ScaleWithWeightGradientDoubled.apply, (x, w), reference=lambda x, w: x * w, conditions="none", training=0)
    (finding,) = report.diagnosis.findings
    assert finding.kind == "factor" and finding.words == "the gradient of x2 is off by a constant factor 2"

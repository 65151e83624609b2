"""Perturbations: each does what it says, leaves the rest alone, and is reproducible."""

import math

import pytest
import torch

from gradient_lab.errors import LabError
from gradient_lab.explore.perturb import Perturbation, apply_perturbation

F64 = torch.float64


def inputs(shape=(6, 5), seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=F64), torch.randn(shape, generator=g, dtype=F64)


def test_no_perturbation_returns_the_inputs_unchanged():
    xs = inputs()
    assert apply_perturbation(xs, Perturbation()) is xs
    assert not Perturbation().active and Perturbation().describe() == "none"


def test_row_norms_are_set_along_dim():
    x1, x2 = inputs((3, 4, 5))
    y1, y2 = apply_perturbation((x1, x2), Perturbation(norm1=2.0, norm2=0.5), dim=1)
    torch.testing.assert_close(y1.norm(dim=1), torch.full((3, 5), 2.0, dtype=F64))
    torch.testing.assert_close(y2.norm(dim=1), torch.full((3, 5), 0.5, dtype=F64))
    assert x1.norm(dim=1).sub(2.0).abs().max() > 0.1  # the originals are untouched


@pytest.mark.parametrize("align, sign", [("parallel", 1.0), ("antiparallel", -1.0)])
def test_alignment_puts_input_2_at_the_angle_keeping_its_norm(align, sign):
    x1, x2 = inputs()
    _, y2 = apply_perturbation((x1, x2), Perturbation(align=align, align_angle=5.0), dim=1)
    cos = torch.nn.functional.cosine_similarity(x1, y2)
    torch.testing.assert_close(cos, torch.full((6,), sign * math.cos(math.radians(5.0)), dtype=F64))
    torch.testing.assert_close(y2.norm(dim=1), x2.norm(dim=1))


def test_noise_near_zero_rows_and_injection():
    x1, x2 = inputs()
    p = Perturbation(noise2=0.1, near_zero_rows=2, near_zero_factor=0.5, inject="nan", inject_count=3)
    y1, y2 = apply_perturbation((x1, x2), p, dim=1, eps=1e-6, seed=3)
    assert 0 < (y2 - x2).std() < 0.2
    norms = y1.nan_to_num(0).norm(dim=1)
    assert int((norms < 1e-5).sum()) >= 1  # a shrunk row (a NaN may share it)
    assert int(torch.isnan(y1).sum()) == 3
    again = apply_perturbation((x1, x2), p, dim=1, eps=1e-6, seed=3)
    assert torch.equal(y2, again[1])  # reproducible
    inf = apply_perturbation((x1, x2), Perturbation(inject="inf", inject_count=2))[0]
    assert int(torch.isinf(inf).sum()) == 2


def test_dtype_and_device_are_kept():
    x1, x2 = (x.float() for x in inputs())
    y1, _ = apply_perturbation((x1, x2), Perturbation(noise1=0.1))
    assert y1.dtype == torch.float32


def test_input_2_perturbations_need_matching_shapes():
    x1, _ = inputs((4, 5))
    x2 = torch.randn(1, 5, dtype=F64)
    with pytest.raises(LabError, match="shape of input 1"):
        apply_perturbation((x1, x2), Perturbation(align="parallel"))
    assert apply_perturbation((x1, x2), Perturbation(noise1=0.1))[1] is not None


def test_unknown_choices_are_refused():
    with pytest.raises(LabError, match="alignment"):
        apply_perturbation(inputs(), Perturbation(align="sideways"))
    with pytest.raises(LabError, match="injection"):
        apply_perturbation(inputs(), Perturbation(inject="zero"))

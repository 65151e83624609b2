"""The Case builds its inputs, and turns bad settings into LabError messages."""

import pytest
import torch

from gradient_lab.app.case import Case
from gradient_lab.errors import LabError


def test_default_case_builds_float64_cpu_inputs():
    x1, x2 = Case().inputs()
    assert x1.dtype == torch.float64 and x1.device.type == "cpu" and x1.shape == (8, 16)
    assert hash(Case()) == hash(Case())


def test_case_settings_reach_the_inputs():
    x1, x2 = Case(shape=(3, 4, 5), dtype="float32", broadcast=True, params=(("dim", 1),)).inputs()
    assert x1.dtype == torch.float32 and x2.shape == (1, 4, 1)
    assert not torch.equal(Case(seed=1).inputs()[0], Case(seed=2).inputs()[0])


@pytest.mark.parametrize(
    "case, words",
    [
        (Case(shape=(0, 3)), "impossible"),
        (Case(shape=(3, 4), params=(("dim", 5),)), "out of range"),
        (Case(dtype="float8"), "Unknown dtype"),
        (Case(family="nope"), "no family named"),
    ],
)
def test_bad_settings_say_what_is_wrong(case, words):
    with pytest.raises(LabError, match=words):
        case.inputs()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_unavailable_device_is_a_clear_error():
    with pytest.raises(LabError, match="CUDA is not available"):
        Case(device="cuda").inputs()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_case_runs_on_cuda():
    from gradient_lab.app.views import compare_case

    x1, _ = Case(device="cuda").inputs()
    assert x1.is_cuda
    report = compare_case(Case(device="cuda"), "corrected")
    assert report.device.startswith("cuda") and report.verdict.passed

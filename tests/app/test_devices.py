"""Devices: the CPU is always there; a missing one says why."""

import pytest
import torch

from gradient_lab.app.devices import available_devices, device_problem, resolve_device
from gradient_lab.errors import LabError


def test_cpu_is_always_available():
    assert device_problem("cpu") is None
    assert resolve_device("cpu") == torch.device("cpu")
    assert set(available_devices()) == {"cpu", "cuda", "mps"}


def test_unknown_device_names_the_known_ones():
    assert "known: cpu, cuda, mps" in device_problem("tpu")
    with pytest.raises(LabError, match="cannot be used"):
        resolve_device("tpu")


def test_missing_cuda_index_is_explained():
    problem = device_problem("cuda:99")
    assert problem is not None and ("not available" in problem or "no CUDA device 99" in problem)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_absent_says_why():
    assert "CUDA is not available" in available_devices()["cuda"]

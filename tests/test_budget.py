"""The memory guard refuses in words, with the estimate and the limit."""

import pytest

from lib import budget
from lib.errors import LabError


def test_budget_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("GRADIENT_LAB_MEMORY_MB", raising=False)
    assert budget.memory_budget() == 2048 * 2**20
    monkeypatch.setenv("GRADIENT_LAB_MEMORY_MB", "64")
    assert budget.memory_budget() == 64 * 2**20
    monkeypatch.setenv("GRADIENT_LAB_MEMORY_MB", "lots")
    assert budget.memory_budget() == 2048 * 2**20


def test_refusal_names_the_estimate_and_the_limit():
    budget.require(1000, "A thing", "Make it smaller.", budget=2000)
    with pytest.raises(LabError) as refused:
        budget.require(3 * 2**30, "A surface of 40401 points", "Lower the resolution.", budget=2**30)
    text = str(refused.value)
    assert "3.0 GiB" in text and "1.0 GiB" in text and "Lower the resolution." in text and "GRADIENT_LAB_MEMORY_MB" in text
    with pytest.raises(LabError):
        budget.require(float("inf"), "Anything", "", budget=2**30)


def test_human_bytes():
    assert budget.human_bytes(512) == "512 B"
    assert budget.human_bytes(1536) == "1.5 KiB"
    assert budget.human_bytes(5 * 2**40) == "5.0 TiB"


def test_estimates_grow_with_the_work():
    assert budget.trajectory_bytes(2000, 10**6, 5) > budget.trajectory_bytes(20, 10**6, 5)
    assert budget.field_bytes(41 * 41, 8192, 3) == 41 * 41 * 8192 * 8 * 5
    assert budget.surface_bytes(201 * 201, 8192, 4, 256) < 2**30  # chunked: a 201² surface fits

"""Determinism and batch invariance (lib.engine.determinism): a backward that varies is reported with
its spread, its bits and a nondet_tol that gradcheck then passes with; a row that depends on its
batch is named; declared batch dependence and correct Functions raise no finding."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gradient_lab.app import views
from gradient_lab.app.case import Case
from gradient_lab.app.family import get_family

sys.path.insert(0, str(Path(__file__).parents[1] / "specimens" / "modules"))
import determinism_functions as zoo  # noqa: E402

GALLERY = ("cosine", "logsumexp", "softmax", "normalize", "softplus", "layernorm", "gelu")


@pytest.fixture(autouse=True)
def declared():
    zoo.register_all()


def found(family: str, formula: str, runs: int = 10, **case):
    return views.determinism(Case(family=family, formulas=(formula,), **case), formula, runs)


@pytest.mark.parametrize("formula", ["shuffled accumulation", "stochastic rounding"])
def test_a_backward_that_varies_is_reported_with_its_spread_and_a_nondet_tol_gradcheck_passes_with(formula):
    result = found("repeat scaled", formula)
    (x,) = result.spreads
    assert not result.deterministic and result.flagged and x.varying.size > 0 and x.max_spread > 0 and x.bits > 0
    assert x.worst.startswith("x[") and np.asarray(x.spread).shape == (8, 16)
    assert result.nondet_tol >= x.max_spread and result.gradcheck is True
    xs = (Case(family="repeat scaled").inputs()[0].requires_grad_(),)
    fn = get_family("repeat scaled").formulas[formula].function
    assert torch.autograd.gradcheck(fn, xs, nondet_tol=result.nondet_tol, fast_mode=False)
    assert f"suggested nondet_tol={result.nondet_tol:.1g}; gradcheck passes with it" in result.describe()


def test_more_runs_on_request_and_a_deterministic_backward_is_bitwise_equal():
    result = found("repeat scaled", "deterministic", runs=25)
    assert result.runs == 25 and result.deterministic and not result.flagged and np.isnan(result.nondet_tol)
    assert result.batch.outcome == "bitwise"


def test_a_function_that_mixes_rows_through_a_batch_statistic_is_named_batch_dependent():
    batch = found("repeat batch centred", "centred").batch
    assert batch.outcome == "different" and batch.flagged
    assert {c.row for c in batch.rows if c.outcome == "different"} == {0, 7} and "rows 0 and 7" in batch.words
    declared = found("repeat batch norm", "centred").batch
    assert declared.outcome == "declared" and not declared.flagged


@pytest.mark.parametrize("family", GALLERY)
def test_every_correct_gallery_function_is_deterministic_and_batch_invariant_on_the_cpu(family):
    for formula, spec in get_family(family).formulas.items():
        if spec.correct:
            result = found(family, formula, params=tuple(sorted(get_family(family).params.items())))
            assert result.deterministic and result.batch.outcome in ("bitwise", "rounding"), result.describe()


def test_low_precision_runs_in_the_dtype():
    # PyTorch's CPU cumsum accumulates float32 and bfloat16 in a wider type: reordering 16 products is exact there
    result = found("repeat scaled", "shuffled accumulation", dtype="float32")
    assert result.dtype == "float32" and result.deterministic and result.batch.outcome in ("bitwise", "rounding")


def test_runs_outside_two_to_a_thousand_are_refused_in_words():
    from gradient_lab.errors import LabError

    with pytest.raises(LabError, match="2 to 1,000 times"):
        found("repeat scaled", "deterministic", runs=1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: the determinism check on the GPU")
def test_on_cuda_the_backward_runs_again_on_the_gpu():
    result = found("repeat scaled", "deterministic", device="cuda")
    assert result.device.startswith("cuda") and result.deterministic

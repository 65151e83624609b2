"""A call that kills its process is run in a forked child: the checker survives and says so."""

import os
import signal

import pytest
import torch

from gradient_lab.engine.isolate import Crashed, isolated
from gradient_lab.testing import check_gradients


def test_a_result_and_an_exception_come_back_from_the_child():
    assert isolated(lambda: torch.arange(3).sum().item()) == 3
    with pytest.raises(ZeroDivisionError):
        isolated(lambda: 1 / 0)


def test_a_call_that_kills_its_process_is_a_crash_not_the_end_of_the_checker():
    outcome = isolated(lambda: os.kill(os.getpid(), signal.SIGSEGV))
    assert isinstance(outcome, Crashed) and outcome.how == "SIGSEGV"


class SegfaultsOnEmpty(torch.autograd.Function):
    """Square, whose backward takes its process down on an empty batch (as pdist's kernel does)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        if x.numel() == 0:
            os.kill(os.getpid(), signal.SIGSEGV)
        return 2 * x * g


def test_an_empty_batch_that_crashes_the_backward_fails_its_condition_and_the_check_goes_on():
    report = check_gradients(SegfaultsOnEmpty, torch.randn(4, 3, dtype=torch.float64), reference=lambda x: x * x, training=0)
    empty = next(r for r in report.conditions.results if r.name == "the batch is empty")
    assert empty.outcome == "fail" and "SIGSEGV" in empty.finding
    assert report.verdict.condition == "the batch is empty"

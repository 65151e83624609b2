"""One options object: the defaults live in CheckOptions, and every front end passes through it."""

import inspect

import pytest
import torch

from gradient_lab import assert_gradients_match, check_gradients
from gradient_lab.engine.options import CheckOptions
from gradient_lab.engine.pipeline import check
from gradient_lab.engine.stages import STAGES
from tests.specimens.zoo import Square


def test_the_front_ends_defaults_are_the_options_defaults():
    defaults = CheckOptions()
    for front_end in (check_gradients, assert_gradients_match):
        parameters = inspect.signature(front_end).parameters
        for name in ("order", "seed", "conditions", "batch_invariant"):
            assert parameters[name].default == getattr(defaults, name), (front_end.__name__, name)


def test_an_unknown_option_is_refused_and_a_bad_one_named():
    with pytest.raises(TypeError, match="unknown check option"):
        CheckOptions.of(orders=2)
    with pytest.raises(ValueError, match="order"):
        CheckOptions(order=3)
    with pytest.raises(ValueError, match="provenance"):
        CheckOptions(provenance="sometimes")


def test_options_are_hashable_and_keywords_override_them():
    options = CheckOptions(order=2, parity=["eager"])
    assert hash(options) == hash(CheckOptions(order=2, parity=("eager",)))
    assert CheckOptions.of(options, seed=3) == CheckOptions(order=2, parity=("eager",), seed=3)


def test_provenance_never_is_honoured_below_float64_too():
    class NaNBackward(Square):
        @staticmethod
        def backward(ctx, g):
            return g * torch.nan

    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for dtype in (None, torch.float32):
        assert check_gradients(NaNBackward, x, reference=lambda x: x * x, dtype=dtype, provenance="never").provenance is None
        assert check_gradients(NaNBackward, x, reference=lambda x: x * x, dtype=dtype).provenance is not None


def test_check_is_the_stages_in_order():
    names = [stage.name for stage in STAGES]
    assert names[0] == "second_order" and names[-1] == "training" and len(set(names)) == len(names)
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    from gradient_lab.testing import as_family

    report = check(as_family(Square, (x,), lambda x: x * x).problem("Square", (x,), {}), CheckOptions(), determinism=2)
    ran = list(report.stages)
    assert ran == [n for n in names if n in ran] and {"second_order", "conditions", "determinism", "training"} <= set(ran)

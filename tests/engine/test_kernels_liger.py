"""Liger-Kernel's Functions as shipped (requirements-dev.txt pins liger-kernel), checked as kernels
under Triton's interpreter: each right one passes in its native precision, the writes each makes
into its inputs, saved tensors or grad_output by design are named with their element, and the one
true bug found (its cross entropy's gradient on logits that are not row-major; the class of bug
fixed in TransformerEngine's cross_entropy_forward, NVIDIA/TransformerEngine#2734) is named as the
layout it needs; and its fused linear cross entropy gives the weight no gradient where the input
needs none (a frozen trunk under a trained head)."""

import os

import pytest
import torch
import torch.nn.functional as F

os.environ.setdefault("TRITON_INTERPRET", "1")  # as tests/specimens/triton_kernels.py: before triton is imported
pytest.importorskip("triton")
from gradient_lab import triton as gl_triton  # noqa: E402

try:
    gl_triton.interpret()  # before Liger's kernels bind libdevice's rsqrt and tanh
except RuntimeError as error:  # triton imported without the interpreter earlier in this process
    pytest.skip(str(error), allow_module_level=True)
liger = pytest.importorskip("liger_kernel.ops")

from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction  # noqa: E402
from liger_kernel.ops.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction  # noqa: E402
from liger_kernel.ops.geglu import LigerGELUMulFunction  # noqa: E402
from liger_kernel.ops.jsd import LigerJSDFunction  # noqa: E402
from liger_kernel.ops.layer_norm import LigerLayerNormFunction  # noqa: E402
from liger_kernel.ops.rms_norm import LigerRMSNormFunction  # noqa: E402
from liger_kernel.ops.rope import LigerRopeFunction  # noqa: E402
from liger_kernel.ops.swiglu import LigerSiLUMulFunction  # noqa: E402

from gradient_lab.testing import check_gradients  # noqa: E402

FAST = dict(kernel=True, conditions="none", training=0)
_generator = torch.Generator().manual_seed(0)
A, B = (torch.randn(4, 8, generator=_generator, dtype=torch.float64) for _ in range(2))
W = 1 + 0.1 * torch.randn(8, generator=_generator, dtype=torch.float64)
BIAS = 0.1 * torch.randn(8, generator=_generator, dtype=torch.float64)
TARGET = torch.randint(0, 8, (4,), generator=_generator)
ROWS, TARGETS = A[:2], TARGET[:2]  # the losses' failing verdicts look again at elements: two rows under the interpreter


def _writes(report) -> set[tuple[str, str]]:
    return {(w.target, w.name) for w in report.kernel.writes}


@pytest.mark.parametrize("function, reference", [
    (LigerSiLUMulFunction.apply, lambda a, b: F.silu(a) * b),
    (LigerGELUMulFunction.apply, lambda a, b: F.gelu(a, approximate="tanh") * b),  # libdevice's tanh, under the interpreter
])
def test_gated_units_pass_and_their_gradients_written_into_the_saved_inputs_are_named(function, reference):
    report = check_gradients(function, (A, B), reference=reference, **FAST)
    assert report.verdict.passed, report.verdict.summary
    assert report.kernel.native.dtype == "float32" and report.kernel.interpreted  # float32 inside: judged as such
    assert {("saved tensor", "x1"), ("saved tensor", "x2")} <= _writes(report)  # da, db stored where a, b were


def test_rmsnorm_refuses_float64_in_backward_passes_in_float32_and_its_write_into_grad_output_is_named():
    report = check_gradients(lambda x, w: LigerRMSNormFunction.apply(x, w, 1e-6), (A, W),
                             reference=lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w, **FAST)
    assert report.verdict.passed, report.verdict.summary
    assert (report.kernel.native.stage, report.kernel.native.kind) == ("backward", "KeyError")
    assert ("grad_output", "grad_output") in _writes(report)  # in_place=True, its default: dX stored in dY


def test_layernorm_passes_with_no_write():
    report = check_gradients(lambda x, w, b: LigerLayerNormFunction.apply(x, w, b, 1e-6), (A, W, BIAS),
                             reference=lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, 1e-6), **FAST)
    assert report.verdict.passed and report.kernel.writes == ()


def test_cross_entropy_passes_on_row_major_logits_and_fails_on_transposed_ones_by_its_layout():
    def liger(x, t):
        return LigerCrossEntropyFunction.apply(x, t, None, -100, 0.0, 0.0, "mean")[0]

    plain = check_gradients(liger, (ROWS, TARGETS), reference=F.cross_entropy, **FAST)
    assert plain.verdict.passed and {("input", "x1"), ("saved tensor", "x1")} <= _writes(plain)  # the gradient in the logits
    # the conditions pass the same values transposed (column-major) and find it; here checked on them directly
    transposed = ROWS.T.contiguous().T
    report = check_gradients(liger, (transposed, TARGETS), reference=F.cross_entropy, **FAST)
    assert not report.verdict.passed and report.verdict.found.input == "x1"
    x = transposed.clone().requires_grad_()
    liger(x, TARGETS).backward()
    assert not torch.allclose(x.grad, torch.func.grad(F.cross_entropy)(transposed, TARGETS), atol=1e-3)  # the bug, plainly


def test_fused_linear_cross_entropy_gives_the_weight_no_gradient_where_the_input_needs_none():
    weight = 0.3 * torch.randn(10, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    targets = torch.randint(0, 10, (2,), generator=torch.Generator().manual_seed(2))
    both = check_gradients(lambda x, w: LigerFusedLinearCrossEntropyFunction.apply(x, w, targets)[0], (ROWS, weight),
                           reference=lambda x, w: F.cross_entropy(x @ w.T, targets), **FAST)
    assert both.verdict.passed, both.verdict.summary
    frozen = ROWS.float()  # the input held, as a frozen trunk's output: only the weight needs a gradient
    alone = check_gradients(lambda w: LigerFusedLinearCrossEntropyFunction.apply(frozen, w.float(), targets)[0].double(), (weight,),
                            reference=lambda w: F.cross_entropy(frozen.double() @ w.T, targets), **FAST)
    assert not alone.verdict.passed  # the conditions find the same as "only x2 requires a gradient"


def test_a_declared_constant_and_several_outputs_break_no_rule_on_the_anatomy_page():
    from gradient_lab import declare
    from gradient_lab.app import views
    from gradient_lab.app.case import Case
    from tests.registry import families_kept

    def log_probs(shape, *, seed=0, dtype=torch.float64, **_):
        g = torch.Generator().manual_seed(seed)
        return tuple(torch.randn(shape, generator=g, dtype=dtype).log_softmax(-1) for _ in range(2))

    def rotations(shape, *, seed=0, dtype=torch.float64, **_):
        g, (seq, hd) = torch.Generator().manual_seed(seed), shape
        angle = torch.arange(seq, dtype=dtype)[:, None] * torch.linspace(1, 0.01, hd // 2, dtype=dtype)
        emb = torch.cat([angle, angle], -1)[None]
        return torch.randn(1, 2, seq, hd, generator=g, dtype=dtype), torch.randn(1, 2, seq, hd, generator=g, dtype=dtype), emb.cos(), emb.sin()

    def jsd(x, y, beta=0.5):  # x, y: log Q and log P; M = βP + (1 − β)Q, the mean over rows
        log_m = torch.log(beta * y.exp() + (1 - beta) * x.exp())
        return (beta * y.exp() * (y - log_m) + (1 - beta) * x.exp() * (x - log_m)).sum() / x.shape[0]

    def rotated(q, k, cos, sin):
        half = lambda x: torch.cat([-x.chunk(2, -1)[1], x.chunk(2, -1)[0]], -1)  # noqa: E731
        return q * cos[:, None] + half(q) * sin[:, None], k * cos[:, None] + half(k) * sin[:, None]

    with families_kept():  # Liger's JSD returns None for its target, declared a constant; its RoPE returns q and k rotated
        declare("liger jsd", {"liger": LigerJSDFunction}, reference=jsd, inputs=("x", "y"),
                constants=("y",), build_inputs=log_probs)
        declare("liger rope", {"liger": lambda q, k, c, s: LigerRopeFunction.apply(q, k, c, s)}, reference=rotated,
                inputs=("q", "k", "cos", "sin"), constants=("cos", "sin"), outputs=("q", "k"), build_inputs=rotations)
        for family in ("liger jsd", "liger rope"):
            case = Case(family=family, formulas=("liger",), shape=(4, 8))
            assert views.contract_problems(case) == {}, family
            assert not views.anatomy(case, "liger", timed=False).errors(), family
        jsd_report = views.gradient_report(Case(family="liger jsd", formulas=("liger",), shape=(4, 8), conditions="none"), "liger")
        assert jsd_report.verdict.passed, jsd_report.verdict.summary
        rope = views.gradient_report(Case(family="liger rope", formulas=("liger",), shape=(4, 8), conditions="none"), "liger")
        assert rope.verdict.passed and rope.kernel.detected  # not declared a kernel: it launches Triton's
        assert rope.second_order.outcome == "not checked" and rope.second_order.text.startswith("a kernel")  # first order, unasked

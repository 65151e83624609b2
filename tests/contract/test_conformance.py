"""The conformance report: what PyTorch's checks and torch.func say about a Function, never raising."""

import torch

from gradient_lab.contract.conformance import STATUSES, Check, conformance_report
from gradient_lab.app.functions.cosine import FORMULAS, CosineSimilarityLossFunction

F64 = torch.float64
NAMES = [
    "gradcheck (fast)",
    "gradcheck (slow)",
    "gradgradcheck",
    "forward-mode AD",
    "batched grad (vmap)",
    "backward twice",
    "torch.func.grad",
    "torch.func.jacrev",
    "torch.func.jacfwd",
    "torch.func.vmap",
]


def pair(shape=(3, 4), dtype=F64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=dtype), torch.randn(shape, generator=g, dtype=dtype)


def formula(name, dim=-1, eps=1e-8):
    function = FORMULAS[name]
    return lambda a, b: function.apply(a, b, dim, eps)


def by_name(report):
    assert [c.name for c in report] == NAMES
    assert all(isinstance(c, Check) and c.status in STATUSES and c.seconds >= 0 for c in report)
    return {c.name: c for c in report}


def statuses(report):
    return {name: check.status for name, check in by_name(report).items()}


def test_corrected_function_passes_every_check():
    report = conformance_report(formula("corrected"), pair())
    assert statuses(report) == dict.fromkeys(NAMES, "pass"), [(c.name, c.message) for c in report]


def test_tutorial_fails_gradcheck_and_lacks_forward_ad_and_functorch_support():
    checks = by_name(conformance_report(formula("tutorial"), pair()))
    # its backward is wrong: PyTorch's own Jacobian-mismatch message is kept
    for name in ("gradcheck (fast)", "gradcheck (slow)"):
        assert checks[name].status == "fail"
        assert "Jacobian mismatch for output 0 with respect to input 0" in checks[name].message
    assert "numerical:" in checks["gradcheck (slow)"].message and "analytical:" in checks["gradcheck (slow)"].message
    # legacy forward(ctx, ...): no jvp, and no setup_context, so no torch.func transform at all
    assert checks["forward-mode AD"].status == "not supported"
    assert "You must implement the jvp function" in checks["forward-mode AD"].message
    for name in ("torch.func.grad", "torch.func.jacrev", "torch.func.jacfwd", "torch.func.vmap"):
        assert checks[name].status == "not supported"
        assert "must override the setup_context staticmethod" in checks[name].message
    # its (wrong) backward is made of plain torch ops: differentiable, deterministic, vmappable
    for name in ("gradgradcheck", "batched grad (vmap)", "backward twice"):
        assert checks[name].status == "pass", checks[name].message


def test_specimen_as_published_gets_the_same_verdicts():
    report = conformance_report(CosineSimilarityLossFunction.apply, pair())
    assert statuses(report) == statuses(conformance_report(formula("tutorial"), pair()))


def test_long_messages_are_trimmed():
    def verbose(a, b):
        raise RuntimeError("x" * 5000)

    message = by_name(conformance_report(verbose, pair()))["gradcheck (fast)"].message
    assert message.startswith("RuntimeError: xxx") and len(message) < 1600
    assert message.endswith("(3514 more characters)")


def test_slow_gradcheck_is_skipped_above_slow_limit():
    checks = by_name(conformance_report(formula("corrected"), pair((3, 4)), slow_limit=23))
    assert checks["gradcheck (slow)"].status == "skipped"
    assert "24 input elements" in checks["gradcheck (slow)"].message and "slow_limit=23" in checks["gradcheck (slow)"].message
    assert checks["gradcheck (fast)"].status == "pass"
    assert by_name(conformance_report(formula("corrected"), pair((3, 4)), slow_limit=24))["gradcheck (slow)"].status == "pass"


class NoisyBackward(torch.autograd.Function):
    """y = 2x with a backward that adds fresh noise every time."""

    @staticmethod
    def forward(x):
        return 2 * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad_output):
        return 2 * grad_output + torch.rand_like(grad_output)


def test_nondeterministic_backward_fails_backward_twice():
    x = torch.randn(5, dtype=F64)
    check = by_name(conformance_report(NoisyBackward.apply, (x,)))["backward twice"]
    assert check.status == "fail"
    assert "max abs difference" in check.message
    assert by_name(conformance_report(NoisyBackward.apply, (x,), nondet_tol=2.0))["backward twice"].status == "pass"


class DetachedBackward(torch.autograd.Function):
    """y = x², its backward detached from autograd: no double backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**2

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return (2 * x * grad_output).detach()


def test_non_differentiable_backward_has_no_double_backward():
    checks = by_name(conformance_report(DetachedBackward.apply, (torch.randn(4, dtype=F64),)))
    assert checks["gradcheck (fast)"].status == "pass"
    assert checks["gradgradcheck"].status == "not supported"
    assert "backward is not differentiable" in checks["gradgradcheck"].message


class ClassmethodProduct(torch.autograd.Function):
    """x * y in the new style, every method a classmethod: PyTorch and torch.func accept them."""

    generate_vmap_rule = True

    @classmethod
    def forward(cls, x, y):
        return x * y

    @classmethod
    def setup_context(cls, ctx, inputs, output):
        ctx.save_for_backward(*inputs)
        ctx.save_for_forward(*inputs)

    @classmethod
    def backward(cls, ctx, grad_output):
        x, y = ctx.saved_tensors
        return grad_output * y, grad_output * x

    @classmethod
    def jvp(cls, ctx, x_tangent, y_tangent):
        x, y = ctx.saved_tensors
        return x_tangent * y + x * y_tangent


def test_classmethods_pass_every_check():
    report = conformance_report(ClassmethodProduct.apply, pair())
    assert statuses(report) == dict.fromkeys(NAMES, "pass"), [(c.name, c.message) for c in report]


def test_callers_inputs_are_untouched():
    x1, x2 = pair()
    x2.requires_grad_()
    before = x1.clone(), x2.detach().clone()
    conformance_report(formula("tutorial"), (x1, x2))
    conformance_report(formula("corrected"), (x1, x2))
    assert (x1.requires_grad, x2.requires_grad) == (False, True)
    assert x1.grad is None and x2.grad is None
    assert torch.equal(x1, before[0]) and torch.equal(x2.detach(), before[1])


def test_float32_uses_float32_tolerances():
    inputs = pair(dtype=torch.float32)
    assert by_name(conformance_report(formula("corrected"), inputs))["gradcheck (fast)"].status == "pass"
    # with float64's tolerances, finite differences in float32 are too coarse to pass
    strict = by_name(conformance_report(formula("corrected"), inputs, step=1e-6, atol=1e-5, rtol=1e-3))
    assert strict["gradcheck (fast)"].status == "fail"


def test_a_function_that_raises_gives_a_report_of_failures():
    def broken(a, b):
        raise ValueError("forward is broken")

    report = conformance_report(broken, pair())
    assert statuses(report) == dict.fromkeys(NAMES, "fail")
    assert all(c.message == "ValueError: forward is broken" for c in report)

"""Kernels: formulas whose forward and backward are fused kernels (Triton, CUDA, CuTe) that autograd
cannot see into (``declare(..., kernel=True)``, ``check_gradients(..., kernel=True)``, or detected:
undeclared, one that launches a Triton kernel, ``launches_triton``). Three things change for them:

- every backward call gets a graph of its own (``fresh_graphs``): a fresh forward on fresh copies
  of the inputs, then one backward with a copy of grad_output. A kernel may write into its inputs,
  its saved tensors or grad_output through pointers; on a graph reused across calls, as the verdict
  reuses one, the next call would read what the last one overwrote;
- its native precision (``native_precision``): a kernel that computes in float32 whatever it is
  given, or refuses float64, runs in float32 and is judged with float32's tolerances against the
  float64 truth of its reference on the same values (``in_native``);
- the writes autograd cannot see are found and named (``unseen_writes``): into an input, a saved
  tensor or grad_output, and a second backward that differs from the first. They are facts of the
  report (``Kernel.writes``), never a wrong gradient: many shipped kernels write so by design, to
  save memory (Liger-Kernel's SwiGLU stores its gradients in its saved inputs, its RMSNorm in
  grad_output, its cross entropy in the logits), and with a graph per backward call the gradients
  they return are judged as they are.
"""

from __future__ import annotations

import math
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from .signature import name_element

Tensor = torch.Tensor
NATIVE = torch.float32  # the precision kernels compute in when they do not compute in float64
# a float64 output this far from the reference's (relative to its largest value) computes in float32: float64's own rounding is
# about 1e-16, float32's about 6e-8
FLOAT32_ACCURATE = 1e-10


class _FreshGraph(torch.autograd.Function):
    """``run`` on copies of the inputs; each backward runs it again on fresh copies and calls its
    backward once, with a copy of grad_output. So no graph of the kernel's serves two backward
    calls, and no write of the kernel's reaches the caller's tensors."""

    @staticmethod
    def forward(ctx: Any, run: Callable[..., Any], *inputs: Any) -> Any:
        ctx.run = run
        ctx.others = [None if isinstance(x, Tensor) else x for x in inputs]
        ctx.save_for_backward(*[x if isinstance(x, Tensor) else None for x in inputs])
        outputs = run(*[x.clone() if isinstance(x, Tensor) else x for x in inputs])
        several = isinstance(outputs, (tuple, list))
        ctx.several = several
        outputs = tuple(outputs) if several else (outputs,)
        ctx.mark_non_differentiable(*[o for o in outputs if isinstance(o, Tensor) and not (o.is_floating_point() or o.is_complex())])
        return outputs if several else outputs[0]

    @staticmethod
    def backward(ctx: Any, *grads: Tensor) -> Any:
        saved = ctx.saved_tensors
        inputs = [x.detach().clone().requires_grad_(needs and x.is_floating_point()) if x is not None else other
                  for x, other, needs in zip(saved, ctx.others, ctx.needs_input_grad[1:])]
        with torch.enable_grad():
            outputs = ctx.run(*inputs)
        outputs = tuple(outputs) if ctx.several else (outputs,)
        pairs = [(o, g) for o, g in zip(outputs, grads) if isinstance(o, Tensor) and o.requires_grad and g is not None]
        wanted = [x for x in inputs if isinstance(x, Tensor) and x.requires_grad]
        found = iter(torch.autograd.grad([o for o, _ in pairs], wanted, [g.clone() for _, g in pairs], allow_unused=True)
                     if pairs and wanted else [None] * len(wanted))
        return (None, *[next(found) if isinstance(x, Tensor) and x.requires_grad else None for x in inputs])


def fresh_graphs(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` with a graph of its own for every backward call (``_FreshGraph``)."""

    def fresh(*inputs: Any) -> Any:
        return _FreshGraph.apply(function, *inputs)

    fresh.__name__ = getattr(function, "__name__", "kernel")
    fresh.__wrapped__ = function  # type: ignore[attr-defined]
    return fresh


def in_native(function: Callable[..., Any], dtype: torch.dtype) -> Callable[..., Any]:
    """``function`` run in ``dtype``: its floating-point inputs cast to it, its floating-point
    outputs cast back to the first input's dtype (autograd carries both casts)."""

    def native(*inputs: Any) -> Any:
        given = next((x.dtype for x in inputs if isinstance(x, Tensor) and x.is_floating_point()), dtype)
        outputs = function(*[x.to(dtype) if isinstance(x, Tensor) and x.is_floating_point() else x for x in inputs])
        back = lambda o: o.to(given) if isinstance(o, Tensor) and o.is_floating_point() else o  # noqa: E731
        return type(outputs)(back(o) for o in outputs) if isinstance(outputs, (tuple, list)) else back(outputs)

    native.__name__ = getattr(function, "__name__", "kernel")
    return native


@dataclass(frozen=True)
class Native:
    """Why a kernel is judged in ``dtype``: its float64 run raised (``stage``, ``kind``, ``message``),
    or its float64 output is ``error`` away from its reference's (relative), float32's rounding."""

    dtype: str
    stage: str  # "forward", "backward", or "" where it ran in float64
    kind: str = ""  # the exception's type where it raised
    message: str = ""
    error: float = math.nan  # the float64 output's relative error against the reference's


def native_precision(function: Callable[..., Any], reference: Callable[..., Any] | None, inputs: Sequence[Any]) -> Native | None:
    """The kernel's native precision: float32 where its float64 run raises (in forward or in
    backward) or its float64 output is float32-accurate against the reference's; None where it
    computes in float64 (or there is nothing to tell by)."""
    given = [x.detach().to(torch.float64) if isinstance(x, Tensor) and x.is_floating_point() else x for x in inputs]
    if not any(isinstance(x, Tensor) and x.is_floating_point() for x in given):
        return None
    leaves = [x.clone().requires_grad_() if isinstance(x, Tensor) and x.is_floating_point() else x for x in given]
    try:
        with torch.enable_grad():
            output = fresh_graphs(function)(*leaves)
    except Exception as error:  # noqa: BLE001 - the kernel refusing float64 is what is asked
        return Native(str(NATIVE).removeprefix("torch."), "forward", type(error).__name__, str(error))
    outputs = [o for o in (output if isinstance(output, (tuple, list)) else (output,)) if isinstance(o, Tensor) and o.is_floating_point()]
    try:
        differentiable = [o for o in outputs if o.requires_grad]
        if differentiable:
            torch.autograd.grad(differentiable, [x for x in leaves if isinstance(x, Tensor) and x.requires_grad],
                                [torch.ones_like(o) for o in differentiable], allow_unused=True)
    except Exception as error:  # noqa: BLE001
        return Native(str(NATIVE).removeprefix("torch."), "backward", type(error).__name__, str(error))
    if reference is None or not outputs:
        return None
    with torch.no_grad():
        truth = reference(*given)
    truths = [t for t in (truth if isinstance(truth, (tuple, list)) else (truth,)) if isinstance(t, Tensor) and t.is_floating_point()]
    if len(truths) != len(outputs) or any(t.shape != o.shape for t, o in zip(truths, outputs)):
        return None  # the verdict says how they differ
    relative = 0.0
    for o, t in zip(outputs, truths):
        scale = float(t.abs().max()) if t.numel() else 0.0
        if scale > 0 and math.isfinite(scale):
            relative = max(relative, float((o.detach() - t).abs().nan_to_num(nan=0.0, posinf=0.0).max()) / scale)
    if relative > FLOAT32_ACCURATE:
        return Native(str(NATIVE).removeprefix("torch."), "", error=relative)
    return None


@dataclass(frozen=True)
class Write:
    """A write the kernel makes that autograd cannot see: into ``target`` ("input", "saved tensor",
    "grad_output" or "a second backward"), by ``stage``, first at ``element`` (before → after)."""

    target: str
    name: str  # the input's name ("grad_output" for it)
    stage: str  # "forward" or "backward"
    element: str
    before: float
    after: float


def writes_by_kind(writes: Sequence[Write]) -> list[tuple[str, list[Write]]]:
    """(target, its writes) per kind of write, in the order found."""
    grouped: dict[str, list[Write]] = {}
    for w in writes:
        grouped.setdefault(w.target, []).append(w)
    return list(grouped.items())


def describe_writes(writes: Sequence[Write]) -> list[tuple[str, str]]:
    """(target, sentence) per kind of write, in the order found: the inputs a kernel wrote into of one
    kind in one sentence, each with its first element changed and what the write does to the caller."""
    return [(target, _sentence(target, group)) for target, group in writes_by_kind(writes)]


def inputs_written(group: Sequence[Write]) -> str:
    """"its input x", "its inputs a and b": the inputs one kind of write went into."""
    names = list(dict.fromkeys(w.name for w in group))
    return ("its input " if len(names) == 1 else "its inputs ") + _and(names)


def _sentence(target: str, group: Sequence[Write]) -> str:
    names, written = _and([w.name for w in group]), inputs_written(group)
    tensors = "tensor is" if len(group) == 1 else "tensors are"
    where = "; ".join(f"{w.element}: {w.before:.6g} {'the first time' if target == 'a second backward' else 'before'}, "
                      f"{w.after:.6g} {'the second' if target == 'a second backward' else 'after'}" for w in group)
    if target == "input":
        return (f"its forward writes into {written} ({where}) without ctx.mark_dirty: autograd cannot see the write, and the "
                f"caller's {tensors} overwritten")
    if target == "saved tensor":
        return (f"its backward writes into {written}, saved for backward ({where}): autograd cannot see the write; the caller's "
                f"{tensors} overwritten, and a second backward through the same graph reads the overwritten values")
    if target == "grad_output":
        return f"its backward writes into grad_output ({where}): another consumer of the same gradient buffer reads the overwritten values"
    return (f"a second backward through the same graph (retain_graph=True) gives another gradient for {names} ({where}): the first "
            "backward changed what the second reads")


def _and(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


@dataclass(frozen=True)
class Kernel:
    """What a report says of a kernel: the precision it was judged in (None: float64, as given),
    whether it ran under Triton's interpreter, and the writes autograd cannot see that it makes."""

    native: Native | None
    interpreted: bool
    writes: tuple[Write, ...] = ()
    detected: bool = False  # not declared (``kernel=True``): found to launch Triton kernels (``launches_triton``)


_DETECTING = threading.Lock()  # one detection at a time: each patches triton's launchers for the whole process


def launches_triton(function: Callable[..., Any], inputs: Sequence[Any]) -> bool:
    """Whether ``function`` launches a Triton kernel, compiled or under the interpreter, in its
    forward or its backward on copies of ``inputs``: a kernel, though not declared one. False where
    triton was never imported (nothing could launch one) or the call raises (the verdict says why)."""
    if "triton" not in sys.modules:
        return False
    launchers = _launchers()
    launched: list[bool] = []

    def counting(run: Callable[..., Any]) -> Callable[..., Any]:
        def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
            launched.append(True)
            return run(self, *args, **kwargs)

        return counted

    with _DETECTING:
        originals = {cls: cls.__dict__["run"] for cls in launchers}
        try:
            for cls, run in originals.items():
                cls.run = counting(run)  # type: ignore[attr-defined]
            leaves = [x.detach().clone().requires_grad_(x.is_floating_point()) if isinstance(x, Tensor) else x for x in inputs]
            with torch.enable_grad():
                output = function(*leaves)
                if not launched:  # a forward in torch ops may still hand its backward to a kernel
                    outputs = [o for o in (output if isinstance(output, (tuple, list)) else (output,))
                               if isinstance(o, Tensor) and o.requires_grad]
                    wanted = [x for x in leaves if isinstance(x, Tensor) and x.requires_grad]
                    if outputs and wanted:
                        torch.autograd.grad(outputs, wanted, [torch.ones_like(o) for o in outputs], allow_unused=True)
        except Exception:  # noqa: BLE001 - the formula's own error: the verdict reports it
            pass
        finally:
            for cls, run in originals.items():
                cls.run = run  # type: ignore[attr-defined]
    return bool(launched)


def _launchers() -> list[type]:
    """Triton's classes whose ``run`` launches a kernel: the compiled one and the interpreter's."""
    found = []
    for module, name in (("triton.runtime.jit", "JITFunction"), ("triton.runtime.interpreter", "InterpretedFunction")):
        cls = getattr(sys.modules.get(module), name, None)
        if isinstance(cls, type) and "run" in cls.__dict__:
            found.append(cls)
    return found


def interpreted() -> bool:
    """Whether kernels run under Triton's interpreter (``TRITON_INTERPRET=1``): interpreter
    semantics, no races, tf32 or GPU layouts tested. (``gradient_lab.triton`` imports no Triton.)"""
    from ..triton import interpreting

    return interpreting()


def refuse_interpreted(inputs: Sequence[Any]) -> None:
    """Raise LabError where the inputs' dtype gives silently wrong numbers under Triton's interpreter
    (bfloat16, float8: ``gradient_lab.triton.check_dtype`` says why)."""
    from ..errors import LabError
    from ..triton import check_dtype

    for dtype in {x.dtype for x in inputs if isinstance(x, Tensor) and x.is_floating_point()}:
        try:
            check_dtype(dtype)
        except ValueError as error:
            raise LabError(f"{error}.") from None


# ---- writes that autograd cannot see ----------------------------------------------------------------------

def unseen_writes(function: Callable[..., Any], inputs: Sequence[Any], names: Sequence[str]) -> list[Write]:
    """Every write of ``function``'s into its inputs (in forward, or in backward where an input is
    saved for it), into grad_output, and a second backward on one graph that differs from the first."""
    found: list[Write] = []
    leaves = [x.detach().clone().requires_grad_(x.is_floating_point()) if isinstance(x, Tensor) else x for x in inputs]
    try:
        with torch.enable_grad():
            output = function(*leaves)
    except Exception:  # noqa: BLE001 - a forward that raises is the verdict's to report
        return []
    found += _changed(inputs, leaves, names, "input", "forward")  # the leaves are copies: the inputs as given
    outputs = [o for o in (output if isinstance(output, (tuple, list)) else (output,)) if isinstance(o, Tensor) and o.requires_grad]
    wanted = [x for x in leaves if isinstance(x, Tensor) and x.requires_grad]
    if not outputs or not wanted:
        return found
    generator = torch.Generator().manual_seed(0)
    upstreams = [torch.randn(o.shape, generator=generator, dtype=torch.float64).to(o) for o in outputs]
    handed = [u.clone() for u in upstreams]
    after_forward = [x.detach().clone() if isinstance(x, Tensor) else x for x in leaves]
    try:
        first = [g.detach().clone() if g is not None else None
                 for g in torch.autograd.grad(outputs, wanted, handed, retain_graph=True, allow_unused=True)]
    except Exception:  # noqa: BLE001 - a backward that raises is the verdict's to report
        return found
    found += _changed(after_forward, leaves, names, "saved tensor", "backward")
    for u, h in zip(upstreams, handed):
        found += _first_difference(u, h, "grad_output", "grad_output", "backward")
    try:
        second = torch.autograd.grad(outputs, wanted, [u.clone() for u in upstreams], allow_unused=True)
    except Exception:  # noqa: BLE001 - a backward that raises when called again on its graph: named by the verdict as such
        return found
    names_wanted = [n for n, x in zip(names, leaves) if isinstance(x, Tensor) and x.requires_grad]
    for name, a, b in zip(names_wanted, first, second):
        if a is not None and b is not None:
            found += _first_difference(a, b.detach(), "a second backward", name, "backward")
    return found


def _changed(before: Sequence[Any], after: Sequence[Any], names: Sequence[str], target: str, stage: str) -> list[Write]:
    found = []
    for name, b, a in zip(names, before, after):
        if isinstance(b, Tensor) and isinstance(a, Tensor):
            found += _first_difference(b.detach(), a.detach(), target, name, stage)
    return found


def _first_difference(before: Tensor, after: Tensor, target: str, name: str, stage: str) -> list[Write]:
    """The first element where ``after`` differs from ``before`` (NaN where both are NaN is no
    difference), as a Write; none where they agree."""
    differs = (before != after) & ~(before.isnan() & after.isnan()) if before.is_floating_point() else before != after
    where = differs.reshape(-1).nonzero()
    if not where.numel():
        return []
    flat = int(where[0, 0])
    return [Write(target, name, stage, name_element(name, tuple(before.shape), flat), float(before.reshape(-1)[flat]),
                  float(after.reshape(-1)[flat]))]

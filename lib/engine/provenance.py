"""Where a NaN or an Inf was born: the formula's forward, backward and double backward rerun under a
dispatch-level recorder that watches every operation.

``detect_anomaly`` names the forward op whose backward gave a NaN, without tensor context; inside a
custom Function's backward nothing names the line. Here every aten operation is seen as it runs
(``TorchDispatchMode``, which autograd's engine carries into backward): the first whose output is
non-finite where all its inputs are finite is where the value was *born*; where that was an Inf,
the first that turns non-NaN inputs into a NaN is where it *became NaN* (``1/x`` gives inf, then
``0 · inf`` gives NaN). Each is named with the op, the user's line (the innermost frame of the
stack outside torch and Gradient Lab), the element, the input values there, a cause where one fits
(0/0, x/0, log of ≤ 0, sqrt of < 0, a negative power of 0, exp overflow, inf − inf, 0 · inf, a
masked singularity) and its known fix. It runs only where something is not finite: it costs
nothing otherwise.

An op that autograd's own derivative of a forward op ran (``SqrtBackward0``'s division in a double
backward) is named by that forward op (``derivative="sqrt"``) and by the user's line that called it,
read from the node's creation stack (anomaly mode records it), not by the line that called
``autograd.grad``. An in-place op is judged by its operands as they were before it wrote them.
"""

from __future__ import annotations

import math
import os
import re
import traceback
import warnings
from typing import Any, Callable, Iterable, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from .report import NonFiniteEvent, Provenance
from .signature import name_index

Tensor = torch.Tensor
_TORCH = os.path.dirname(torch.__file__)
_LAB = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # lib/: Gradient Lab's machinery is not the user's code
_GALLERY = os.path.join(_LAB, "app", "functions")  # but the gallery's Functions are code under study, as a user's are
PHASES = ("forward", "backward", "double backward")
FIXES = {
    "0/0": "guard the division: torch.where(d == 0, 0, n / torch.where(d == 0, 1, d)) (the double-where trick), or clamp d",
    "x/0": "clamp the denominator away from 0 (d.clamp_min(eps)), or mask it with the double-where trick",
    "log of ≤ 0": "clamp the argument first: torch.log(x.clamp_min(eps))",
    "sqrt of < 0": "clamp the argument first: torch.sqrt(x.clamp_min(0))",
    "a negative power of 0 (the derivative of sqrt or a norm at 0)": "add eps inside the root (sqrt(x + eps)), or mask x = 0 "
                                                                    "with the double-where trick",
    "exp overflow": "subtract the max before exp (the shifted exp of a stable softmax or logsumexp), or work in log space",
    "overflow": "rescale before the operation, or compute it in a wider dtype",
    "inf / inf": "an overflow before the division: shift before exp (subtract the max), or rescale both terms",
    "inf − inf": "avoid subtracting two infinities: shift both terms (subtract the max) before they overflow",
    "0 · inf": "mask before multiplying: zero the factor that overflows where the other is 0 (torch.where on the input, not the output)",
    "a where that masks a singularity in the forward but not in the backward": "the double-where trick: make the masked-off input safe "
                                                                               "too, x_safe = torch.where(mask, x, 1), then "
                                                                               "torch.where(mask, f(x_safe), 0)",
}


ROOTS = {"sqrt", "rsqrt", "pow", "norm", "linalg_vector_norm", "dist", "cdist"}  # derivatives that divide by a root or a norm
ROOT_AT_ZERO = "a negative power of 0 (the derivative of sqrt or a norm at 0)"
_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def _user_line(frames: Iterable[tuple[str, int | None]] | None = None) -> str:
    """The innermost frame outside torch and Gradient Lab of ``frames`` (outermost first; the live
    stack where None): the user's code, as file:line."""
    frames = [(f.filename, f.lineno) for f in traceback.extract_stack()] if frames is None else list(frames)
    for filename, lineno in reversed(frames):
        path = os.path.abspath(filename)
        ours = path.startswith(_LAB) and not path.startswith(_GALLERY)
        if not path.startswith(_TORCH) and not ours and "<frozen" not in path:
            return f"{os.path.basename(path)}:{lineno}"
    return ""


def _derivative() -> tuple[str, str | None]:
    """The forward op whose derivative autograd's engine is running now (``SqrtBackward0`` -> "sqrt")
    and the user's line that called it, from the node's creation stack; ("", None) where the code
    running is the user's own (a forward, a custom Function's backward)."""
    node = torch._C._current_autograd_node()
    if node is None or isinstance(node, torch.autograd.function.BackwardCFunction):
        return "", None
    name = re.sub(r"Backward\d*$", "", node.name())
    op = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()
    stack = node.metadata.get("traceback_") or []  # type: ignore[attr-defined]  # a dict at runtime; torch's stubs declare a method
    return op, _user_line((path, int(line)) for entry in stack for path, line in _FRAME.findall(entry))


def _operands(func, args: tuple, kwargs: dict) -> list[Any]:
    """An op's inputs, flat; for one that writes into an argument, that argument as it was before
    (a copy), and an ``out=`` it only writes not at all."""
    if not func._schema.is_mutable:
        return tree_flatten((args, kwargs))[0]
    operands = []
    for position, argument in enumerate(func._schema.arguments):
        value = args[position] if position < len(args) else kwargs.get(argument.name)
        written = argument.alias_info is not None and argument.alias_info.is_write
        if written and argument.kwarg_only:
            continue
        if written:
            value = tree_map(lambda t: t.clone() if isinstance(t, Tensor) else t, value)
        operands.extend(tree_flatten(value)[0])
    return operands


def _finite(t: Any) -> bool:
    return not isinstance(t, Tensor) or not t.is_floating_point() or t.numel() == 0 or bool(torch.isfinite(t).all())


def _has_nan(t: Any) -> bool:
    return isinstance(t, Tensor) and t.is_floating_point() and t.numel() > 0 and bool(torch.isnan(t).any())


def _at(t: Any, shape: torch.Size, index: tuple[int, ...]) -> float | None:
    """The value of ``t`` (a tensor broadcastable to ``shape``, or a number) at ``index`` of ``shape``."""
    if isinstance(t, (int, float)):
        return float(t)
    if not isinstance(t, Tensor) or not t.is_floating_point():
        return None
    try:
        return float(t.detach().expand(shape)[index]) if t.dim() <= len(shape) else None
    except RuntimeError:
        return None


def _cause(op: str, values: list[float | None], result: float, masked: bool) -> str:
    """The named cause of a non-finite ``result`` of ``op`` at one element, from the inputs there."""
    a = values[0] if values else None
    b = values[1] if len(values) > 1 else None
    if op in ("div", "true_divide", "reciprocal") or (op == "pow" and a == 0 and b is not None and b < 0):
        if op == "pow":
            return "a negative power of 0 (the derivative of sqrt or a norm at 0)"
        d = b if op != "reciprocal" else a
        n = a if op != "reciprocal" else 1.0
        if d == 0:
            return "0/0" if n == 0 else "x/0"
    if op in ("div", "true_divide") and a is not None and b is not None and math.isinf(a) and math.isinf(b):
        return "inf / inf"
    if op in ("log", "log2", "log10", "log1p") and a is not None and a <= (-1 if op == "log1p" else 0):
        return "log of ≤ 0"
    if op in ("sqrt", "rsqrt") and a is not None and a < 0:
        return "sqrt of < 0"
    if op == "rsqrt" and a == 0:
        return "a negative power of 0 (the derivative of sqrt or a norm at 0)"
    if op in ("exp", "exp2", "expm1") and math.isinf(result):
        return "exp overflow"
    if op in ("sub", "add", "rsub") and a is not None and b is not None and math.isinf(a) and math.isinf(b):
        return "inf − inf"
    if op == "mul" and a is not None and b is not None and ((a == 0 and math.isinf(b)) or (b == 0 and math.isinf(a))):
        return "a where that masks a singularity in the forward but not in the backward" if masked else "0 · inf"
    if math.isinf(result) and all(v is None or math.isfinite(v) for v in values):
        return "overflow"
    return ""


class _Recorder(TorchDispatchMode):
    """Sees every aten operation: the first to make a non-finite value from finite inputs, and the
    first to make a NaN from inputs without one."""

    def __init__(self) -> None:
        super().__init__()
        self.phase = "forward"
        self.born: NonFiniteEvent | None = None
        self.nan: NonFiniteEvent | None = None
        self.masked = False  # a where ran in forward: a 0 · inf in backward is its masked singularity

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.born is not None and self.nan is not None:
            return func(*args, **(kwargs or {}))
        inputs = _operands(func, args, kwargs or {})  # before the op: an in-place one writes over them
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__.rstrip("_")
        if name == "where" and self.phase == "forward":
            self.masked = True
        outputs = [o for o in tree_flatten(out)[0] if isinstance(o, Tensor)]
        if not outputs or all(_finite(o) for o in outputs):
            return out
        nan = any(_has_nan(o) for o in outputs) and not any(_has_nan(i) for i in inputs)
        if self.born is None and all(_finite(i) for i in inputs):
            self.born = self._event(name, inputs, outputs)
            if nan:  # born NaN (0/0): one event
                self.nan = self.born
        elif self.nan is None and nan:
            self.nan = self._event(name, inputs, outputs, nan=True)
        return out

    def _event(self, op: str, inputs: Sequence[Any], outputs: Sequence[Tensor], nan: bool = False) -> NonFiniteEvent:
        output = next(o for o in outputs if not _finite(o))
        bad = torch.isnan(output) if nan else ~torch.isfinite(output)
        index = tuple(int(i) for i in torch.nonzero(bad)[0].tolist()) if output.dim() else ()
        result = float(output.detach()[index]) if output.dim() else float(output)
        values = [_at(i, output.shape, index) for i in inputs if isinstance(i, (Tensor, int, float)) and not isinstance(i, bool)]
        cause = _cause(op, values, result, self.masked and self.phase != "forward")
        derivative, line = _derivative()
        if derivative in ROOTS and cause in ("x/0", "0/0"):  # autograd's derivative of a root or a norm, divided by it at 0
            cause = ROOT_AT_ZERO
        return NonFiniteEvent(op=f"aten.{op}", phase=self.phase, line=_user_line() if line is None else line,
                              element=name_index("out", index), inputs=tuple(v for v in values if v is not None), result=result,
                              count=int(bad.sum()), cause=cause, fix=FIXES.get(cause, ""), derivative=derivative)


def trace_non_finite(function: Callable[..., Tensor], inputs: Sequence[Tensor], upstream: Tensor | None = None,
                     order: int = 2, seed: int = 0) -> Provenance:
    """Run ``function``'s forward, its backward for ``upstream`` (random, seeded, where None) and,
    with ``order=2``, its double backward, under the recorder; the first non-finite value's birth
    and, where different, where it became NaN. Anomaly mode (without its NaN check) records each
    autograd node's creation stack: the line an op of autograd's own derivative is named by."""
    recorder = _Recorder()
    xs = [x.detach().requires_grad_() for x in inputs]
    error = ""
    try:
        with (torch.enable_grad(), torch.autograd.set_detect_anomaly(True, check_nan=False), warnings.catch_warnings(),
              recorder):
            warnings.filterwarnings("ignore", message="Error detected in")  # anomaly mode's note on a backward that raised
            y = function(*xs)
            u = upstream if upstream is not None else torch.randn(tuple(y.shape), generator=torch.Generator().manual_seed(seed + 4241),
                                                                  dtype=torch.float64).to(y)
            recorder.phase = "backward"
            grads = torch.autograd.grad(y, xs, u.to(y.dtype), create_graph=order == 2, allow_unused=True)
            used = [(g, x) for g, x in zip(grads, xs) if g is not None and g.requires_grad]
            if order == 2 and used:
                recorder.phase = "double backward"
                v = [torch.randn(tuple(x.shape), generator=torch.Generator().manual_seed(seed + 7), dtype=torch.float64).to(x) for _, x in used]
                paired = sum((g * w).sum() for (g, _), w in zip(used, v))
                assert isinstance(paired, torch.Tensor)  # used is not empty
                torch.autograd.grad(paired, xs, allow_unused=True)
    except Exception as raised:  # noqa: BLE001 - the code under test may raise; what was recorded before stands
        error = f"{type(raised).__name__}: {raised}"
    nan = recorder.nan if recorder.nan is not recorder.born else None
    return Provenance(born=recorder.born, became_nan=nan, error=error)

"""Signature: what a Function takes and gives, as every stage sees it.

Real Functions take integer targets, boolean masks and declared constants beside the tensors they
differentiate, and return several outputs (``values, indices``; ``out, aux``), some integer or
marked non-differentiable. The engine checks the Jacobian of the differentiable outputs with respect
to the differentiable inputs, and this module says which those are and presents a Function in that
one canonical form: a function of the differentiable inputs alone (the others held as they are)
that returns one tensor, its differentiable outputs packed (one output keeps its shape; several are
flattened and concatenated, in order). Every stage after it sees one tensor in per input and one out.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Sequence, SupportsInt

import numpy as np
import torch

Tensor = torch.Tensor


def name_index(name: str, index: Sequence[SupportsInt]) -> str:
    """``x1[2, 3]``: the element at ``index`` of a tensor called ``name``; a 0-d one is its name."""
    return f"{name}[{', '.join(str(int(i)) for i in index)}]" if len(index) else name


def name_element(name: str, shape: Sequence[int], flat: int) -> str:
    """The same for element ``flat`` (row-major) of a tensor of ``shape``."""
    return name_index(name, np.unravel_index(int(flat), tuple(shape)) if len(shape) else ())


def as_tuple(outputs: Any) -> tuple:
    return tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)


def differentiable(value: Any) -> bool:
    """Whether a tensor can carry a gradient at all: floating point or complex."""
    return isinstance(value, Tensor) and (value.is_floating_point() or value.is_complex())


def differentiable_outputs(outputs: Any) -> tuple[bool, ...]:
    """Which of a Function's outputs carry a gradient: floating-point tensors, and where any of them
    is attached to a graph, only those (an output marked non-differentiable is detached)."""
    outputs = as_tuple(outputs)
    floating = [differentiable(o) for o in outputs]
    attached = [f and o.requires_grad for f, o in zip(floating, outputs)]
    return tuple(attached) if any(attached) else tuple(floating)


@dataclass(frozen=True)
class Slot:
    """One input or output: its name, shape, dtype, and whether the verdict differentiates it."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    differentiable: bool

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def element(self, flat: int) -> str:
        return name_element(self.name, self.shape, flat)


@dataclass(frozen=True)
class Signature:
    """A Function's inputs and outputs, and the canonical form the engine checks."""

    inputs: tuple[Slot, ...]
    outputs: tuple[Slot, ...]

    @property
    def wrt(self) -> tuple[int, ...]:
        """Positions of the differentiable inputs."""
        return tuple(i for i, s in enumerate(self.inputs) if s.differentiable)

    @property
    def kept(self) -> tuple[int, ...]:
        """Positions of the differentiable outputs."""
        return tuple(i for i, s in enumerate(self.outputs) if s.differentiable)

    @property
    def names(self) -> tuple[str, ...]:
        """The differentiable inputs' names: what the verdict names its gradients by."""
        return tuple(self.inputs[i].name for i in self.wrt)

    @property
    def constants(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.inputs if not s.differentiable)

    @property
    def packed_shape(self) -> tuple[int, ...]:
        kept = [self.outputs[i] for i in self.kept]
        return kept[0].shape if len(kept) == 1 else (sum(s.numel for s in kept),)

    def output_element(self, flat: int) -> str:
        """The packed output's element ``flat``, named as the Function's own output: ``values[1, 2]``."""
        for i in self.kept:
            slot = self.outputs[i]
            if flat < slot.numel:
                return slot.element(flat)
            flat -= slot.numel
        raise IndexError(f"the packed output has no element {flat}")

    def pack(self, outputs: Any) -> Tensor:
        """The differentiable outputs as one tensor (one output as it is)."""
        outputs = as_tuple(outputs)
        if len(outputs) != len(self.outputs):
            raise TypeError(f"the function returned {len(outputs)} outputs where {len(self.outputs)} were expected")
        kept = [as_real(outputs[i]) for i in self.kept]
        if len(kept) == 1:
            return kept[0]
        dtype = functools.reduce(torch.promote_types, (o.dtype for o in kept))  # any number of outputs (result_type takes two)
        return torch.cat([o.to(dtype).reshape(-1) for o in kept])

    def mismatch(self, outputs: Any) -> str:
        """How another function's return (a reference's) does not fit these outputs: their number, or a
        differentiated output's shape, in words; "" where it fits."""
        outputs = as_tuple(outputs)
        if len(outputs) != len(self.outputs):
            return f"the formula gives {len(self.outputs)} output(s), the reference {len(outputs)}"
        for i in self.kept:
            got = tuple(outputs[i].shape) if isinstance(outputs[i], torch.Tensor) else None
            if got != self.outputs[i].shape:
                return (f"the formula's output {self.outputs[i].name} has shape {self.outputs[i].shape}, the reference's "
                        f"{got if got is not None else type(outputs[i]).__name__}")
        return ""

    def unpack(self, packed: Tensor) -> tuple[Tensor, ...]:
        """The differentiable outputs back in their own shapes (views of ``packed``)."""
        kept = [self.outputs[i] for i in self.kept]
        if len(kept) == 1:
            return (packed,)
        pieces = torch.split(packed, [s.numel for s in kept])
        return tuple(p.reshape(s.shape) for p, s in zip(pieces, kept))

    def canonical(self, function: Callable[..., Any], inputs: Sequence[Tensor]) -> Callable[..., Tensor]:
        """``function`` as a function of the differentiable inputs alone, the others held as given,
        returning the packed differentiable outputs."""
        inputs, wrt = tuple(inputs), self.wrt

        def packed(*xs: Tensor) -> Tensor:
            full = list(inputs)
            for i, x in zip(wrt, xs):
                full[i] = x
            return self.pack(function(*full))

        return packed

    def split(self, inputs: Sequence[Tensor]) -> tuple[Tensor, ...]:
        """The differentiable inputs, in order."""
        return tuple(inputs[i] for i in self.wrt)


def as_real(output: Any) -> Any:
    """A complex output as its real and imaginary parts (a trailing dim of 2), as gradcheck
    judges one: the engine's truths and tolerances are real."""
    return torch.view_as_real(output.resolve_conj()) if isinstance(output, Tensor) and output.is_complex() else output


def _slot(name: str, value: Any, is_differentiable: bool) -> Slot:
    if isinstance(value, Tensor):
        return Slot(name, tuple(value.shape), str(value.dtype).removeprefix("torch."), is_differentiable)
    return Slot(name, (), type(value).__name__, False)


def output_names(count: int, declared: Sequence[str] = ()) -> tuple[str, ...]:
    """The family's names for its outputs; else ``out`` for one, ``out0``, ``out1``, … for several."""
    if len(declared) >= count:
        return tuple(declared[:count])
    return ("out",) if count == 1 else tuple(declared) + tuple(f"out{i}" for i in range(len(declared), count))


def read_signature(functions: Sequence[Callable[..., Any] | None], inputs: Sequence[Tensor], input_names: Sequence[str],
                   outputs: Sequence[str] = (), constants: Sequence[str] = ()) -> Signature:
    """The signature of the first of ``functions`` (the formula, then its reference) whose forward
    runs: inputs are differentiable where they are floating point and not declared ``constants``;
    outputs as ``differentiable_outputs`` finds them. Raises the last forward's exception when
    none runs (the caller reports it as the formula's)."""
    slots = tuple(_slot(n, x, differentiable(x) and n not in constants) for n, x in zip(input_names, inputs))
    error: Exception | None = None
    for function in functions:
        if function is None:
            continue
        xs = [x.detach().requires_grad_(s.differentiable) if isinstance(x, Tensor) and s.differentiable else x
              for x, s in zip(inputs, slots)]
        try:
            with torch.enable_grad():
                result = as_tuple(function(*xs))
        except Exception as failure:  # noqa: BLE001 - the formula under test may be broken: try the next
            error = failure
            continue
        names = output_names(len(result), outputs)
        return Signature(slots, tuple(_slot(n, as_real(o) if d else o, d) for n, o, d in zip(names, result, differentiable_outputs(result))))
    raise error if error is not None else ValueError("no function to read a signature from")


def function_class(function: Callable) -> type[torch.autograd.Function] | None:
    """The autograd.Function behind ``function`` (``SomeFunction.apply``, or ``positional_apply``'s
    wrapper of it), if there is one."""
    owner = getattr(inspect.unwrap(function), "__self__", None)
    return owner if isinstance(owner, type) and issubclass(owner, torch.autograd.Function) else None


def forward_parameters(function: type[torch.autograd.Function]) -> list[str]:
    """The names of what a Function's forward takes, inputs then params, ctx left out."""
    names = list(inspect.signature(function.forward).parameters)  # bound for a classmethod: cls is already gone
    takes_ctx = function.setup_context is torch.autograd.Function.setup_context  # the setup_context style's forward has none
    return names[1:] if takes_ctx and names else names


def positional_apply(function: type[torch.autograd.Function]) -> Callable[..., Any]:
    """``function.apply`` taking params as keywords, passed by position in the order of forward's
    signature: ``apply`` binds no keywords for a Function whose forward takes ctx (a classmethod
    ``forward(ctx, X, dim)`` called with ``dim=1`` misses ``X``). A param forward does not name
    is refused by name; one it names and is not given takes forward's default."""
    forward = inspect.signature(function.forward)
    names = forward_parameters(function)
    variadic = any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in forward.parameters.values())

    @functools.wraps(function.apply)
    def apply(*inputs, **params):
        if not params or variadic:
            return function.apply(*inputs, **params)
        unknown = [name for name in params if name not in names[len(inputs):]]
        if unknown:
            raise TypeError(f"{function.__name__}.forward takes no param {', '.join(map(repr, unknown))} after its "
                            f"{len(inputs)} input(s); it takes: {', '.join(names[len(inputs):]) or 'none'}")
        rest = []
        for name in names[len(inputs):]:
            if name in params:
                rest.append(params[name])
            elif forward.parameters[name].default is not inspect.Parameter.empty:
                rest.append(forward.parameters[name].default)
            else:
                break  # a later param has no value: apply raises its own error
        return function.apply(*inputs, *rest)

    return apply


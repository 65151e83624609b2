"""Families of gradient problems, and the registry that later code asks for them.

A family is one function under study (cosine similarity first): a reference built from
differentiable torch ops, whose autograd gradient is the ground truth; several formulas, each a
custom ``torch.autograd.Function`` with a hand-written backward; how to build example inputs;
the loss that reduces the output to a scalar; and the maths as LaTeX. Code downstream takes a
``Family`` and never names cosine, so new families (and a user's own Functions) plug in unchanged.
"""

from __future__ import annotations

import functools
import importlib
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import torch

from ..engine.kernels import (NATIVE, Native, Write, fresh_graphs, in_native, launches_triton, native_precision, refuse_interpreted,
                              unseen_writes)
from ..engine.pipeline import Problem, problem
from ..errors import FormulaError
from ..engine.signature import as_tuple, differentiable, differentiable_outputs, positional_apply

Tensor = torch.Tensor


@dataclass(frozen=True)
class Formula:
    """One way of computing the family's function, with its own backward."""

    name: str
    function: Callable[..., Any]  # (*inputs, **params) -> output, or a tuple of outputs
    summary: str  # one line: what is right or wrong with it
    latex: str  # its gradient, as it computes it
    correct: bool  # whether its gradient is meant to equal the reference's


@dataclass(frozen=True)
class Family:
    """One gradient problem: reference, formulas, inputs, loss and maths."""

    name: str
    title: str
    description: str
    input_names: tuple[str, ...]
    reference: Callable[..., Any] | None  # (*inputs, **params) -> output(s), plain differentiable ops
    formulas: Mapping[str, Formula]
    build_inputs: Callable[..., tuple[Tensor, ...]]  # (shape, *, seed, dtype, device, **options)
    loss: Callable[..., Tensor]  # (*differentiable outputs) -> scalar
    params: Mapping[str, float | int] = field(default_factory=dict)  # keyword defaults, e.g. dim, eps
    forward_latex: str = ""
    gradient_latex: str = ""  # the true gradient
    specimen: str = ""  # the code under study, its bugs marked in comments, for the home page
    # the point an input is pulled towards, (inputs, index, params) -> tensor shaped like it, or None
    target: Callable[[tuple[Tensor, ...], int, Mapping], Tensor | None] | None = None
    broadcast: bool = False  # whether build_inputs can give the second input size 1 off the reduced dim
    # what to look for, in words, where pages explain a view: "training", "field", "sweep:<kind>";
    # a page falls back to its own family-neutral words
    notes: Mapping[str, str] = field(default_factory=dict)
    output_names: tuple[str, ...] = ()  # the outputs' names, where the Function returns several (default out0, out1, …)
    constants: tuple[str, ...] = ()  # floating-point inputs that are not differentiated (integer and bool ones never are)
    # plain torch ops whose autograd gradient is the *intended* one (a straight-through estimator, a
    # gradient reversal): then it, not the derivative of forward, is the truth; None: the reference is
    surrogate: Callable[..., Any] | None = None
    # how many times the formulas are meant to be differentiable: 1 leaves the second order unchecked, 2 asks for it; None (not
    # declared): checked where the backward can be differentiated again, "first order only" (neutral) where it cannot
    order: int | None = None
    module: str = ""  # the module whose import declares the family ("" where it is declared otherwise, inside a function)
    batch_invariant: bool = True  # False: a row's gradient depends on the other rows by design (batch norm); not flagged
    # per input, the dim that is a batch (None: not batched, kept whole), as torch.func.vmap's in_dims; None: inferred
    batch_dims: tuple[int | None, ...] | None = None
    # fused kernels (Triton, CUDA): a graph of their own per backward call, run in their native precision (``engine.kernels``)
    # True: the formulas are declared kernels; None: detected, a formula that launches Triton kernels is one; False: none is
    kernel: bool | None = None
    _launches: dict[str, bool] = field(default_factory=dict, compare=False, hash=False, repr=False)  # per formula: detected

    def note(self, place: str, default: str = "") -> str:
        return self.notes.get(place, default)

    def formula(self, name: str) -> Formula:
        try:
            return self.formulas[name]
        except KeyError:
            known = ", ".join(self.formulas)
            raise KeyError(f"family {self.name!r} has no formula {name!r}; it has: {known}") from None

    def bind(self, formula: str | None, params: Mapping | None = None) -> Callable[..., Any]:
        """One formula (``None``: the reference) as a function of the inputs alone, its params bound;
        a kernel's with a graph of its own for every backward call (``kernels.fresh_graphs``)."""
        bound = self.bind_as_given(formula, params)
        return fresh_graphs(bound) if self.kernel and formula is not None else bound

    def bind_as_given(self, formula: str | None, params: Mapping | None = None) -> Callable[..., Any]:
        """As ``bind``, a kernel's as it runs: the writes it makes are its own (``kernels.unseen_writes``)."""
        return self._bound(self.reference if formula is None else self.formula(formula).function,
                           f"{self.title}'s reference" if formula is None else f"The formula {formula!r}", params)

    def kernel_of(self, formula: str, inputs: Sequence[Any], params: Mapping | None = None) -> str:
        """How ``formula`` is known to be a fused kernel: "declared" (``kernel=True``), "detected" (not
        declared either way, it launches Triton kernels: ``kernels.launches_triton``, once per
        formula) or "" (``kernel=False``, or no launch)."""
        if self.kernel is not None:
            return "declared" if self.kernel else ""
        if formula not in self._launches:
            self._launches[formula] = launches_triton(self.bind_as_given(formula, params), inputs)
        return "detected" if self._launches[formula] else ""

    def native(self, formula: str, inputs: Sequence[Tensor], params: Mapping | None = None) -> Native | None:
        """A kernel's native precision on ``inputs`` (``kernels.native_precision``)."""
        refuse_interpreted(inputs)
        return native_precision(self.bind_as_given(formula, params), self.bind(None, params) if self.reference is not None else None,
                                inputs)

    def writes(self, formula: str, inputs: Sequence[Any], params: Mapping | None = None, native: Native | None = None) -> list[Write]:
        """The writes a kernel makes that autograd cannot see (``kernels.unseen_writes``), run as it
        runs: in its native precision, on tensors of that dtype (a cast copy would hide them)."""
        cast = [x.to(NATIVE) if native is not None and isinstance(x, Tensor) and x.is_floating_point() else x for x in inputs]
        return unseen_writes(self.bind_as_given(formula, params), cast, self.input_names)

    def _bound(self, function: Callable[..., Any] | None, whose: str, params: Mapping | None) -> Callable[..., Any]:
        merged = {**self.params, **(params or {})}
        if function is None:
            raise KeyError(f"family {self.name!r} has no reference")

        @functools.wraps(function)
        def bound(*inputs: Any) -> Any:
            try:
                return function(*inputs, **merged)
            except FormulaError:
                raise
            except Exception as error:  # noqa: BLE001 - the code under test's own: said as its, never as Gradient Lab's
                raise FormulaError(whose, error) from error

        return bound

    def run(self, formula: str | None, inputs: tuple[Tensor, ...], **params: Any) -> Any:
        """The output(s) of one formula (``None``: the reference) on ``inputs``."""
        return self.bind(formula, params)(*inputs)

    def structure_key(self, params: Mapping | None = None) -> tuple:
        """What the reference's Jacobian structure depends on besides the input shapes: this family
        and its params (a kept structure is verified at each new point before it is used)."""
        merged = {**self.params, **(params or {})}
        return (self.name, id(self), tuple(sorted((k, repr(v)) for k, v in merged.items())))

    def problem(self, formula: str, inputs: Sequence[Tensor], params: Mapping | None = None) -> Problem:
        """``formula`` on ``inputs`` in the engine's canonical form (``lib.engine.pipeline.problem``)."""
        surrogate = self._bound(self.surrogate, f"{self.title}'s surrogate", params) if self.surrogate is not None else None
        kernel = self.kernel_of(formula, inputs, params)
        function = fresh_graphs(self.bind_as_given(formula, params)) if kernel else self.bind(formula, params)
        native = self.native(formula, inputs, params) if kernel else None
        if native is not None:  # run in its precision, on values it can hold: the truth sees the same ones
            function = in_native(function, NATIVE)
            inputs = [x.to(NATIVE).to(x.dtype) if isinstance(x, Tensor) and x.is_floating_point() else x for x in inputs]
        writes = self.writes(formula, inputs, params, native) if kernel else ()
        return problem(formula, function, self.bind(None, params) if self.reference is not None else None, inputs,
                       self.input_names, self.loss, outputs=self.output_names, constants=self.constants,
                       structure_key=self.structure_key(params), surrogate=surrogate, batch_dims=self.batch_dims, kernel=kernel,
                       native=native, writes=writes)

    def differentiates(self, index: int, value: Any) -> bool:
        """Whether input ``index`` (holding ``value``) is one the verdict differentiates."""
        return differentiable(value) and self.input_names[index] not in self.constants

    def objective(self, outputs: Any) -> Tensor:
        """The family's loss of a formula's output(s): of its differentiable outputs, in order."""
        outputs = as_tuple(outputs)
        return self.loss(*(o for o, d in zip(outputs, differentiable_outputs(outputs)) if d))


_REGISTRY: dict[str, Family] = {}
_BUILTIN_MODULES = (".functions.cosine", ".functions.logsumexp", ".functions.softmax", ".functions.normalize", ".functions.softplus",
                    ".functions.layernorm", ".functions.gelu")  # relative to this package


def register(family: Family) -> Family:
    """Make ``family`` known to the app; a later registration of the same name replaces it."""
    _REGISTRY[family.name] = family
    return family


def unregister(name: str) -> Family | None:
    """Forget the family ``name`` (a test's, say); the family it was, or None if none was."""
    return _REGISTRY.pop(name, None)


def families() -> dict[str, Family]:
    """Every registered family by name: the built-in ones first, in their modules' order, then
    users' in the order they were declared."""
    builtin = [importlib.import_module(module, __package__).FAMILY.name for module in _BUILTIN_MODULES]
    return {**{name: _REGISTRY[name] for name in builtin if name in _REGISTRY}, **_REGISTRY}


def get_family(name: str) -> Family:
    known = families()
    try:
        return known[name]
    except KeyError:
        raise KeyError(f"no family named {name!r}; known: {', '.join(known)}") from None


def _same_shaped_normals(names: tuple[str, ...]) -> Callable[..., tuple[Tensor, ...]]:
    def build_inputs(shape: Sequence[int], *, seed: int = 0, dtype: torch.dtype = torch.float64, device: str | torch.device = "cpu",
                     broadcast: bool = False, **_params: Any) -> tuple[Tensor, ...]:
        generator = torch.Generator().manual_seed(seed)
        draws = [torch.randn(tuple(shape), generator=generator, dtype=torch.float64) for _ in names]
        return tuple(x.to(dtype=dtype, device=device) for x in draws)

    return build_inputs


def checked_batch_dims(batch_dims: Sequence[int | None] | None, n_inputs: int) -> tuple[int | None, ...] | None:
    """``batch_dims`` as a tuple, one per input, or a clear error."""
    if batch_dims is None:
        return None
    dims = tuple(batch_dims)
    if len(dims) != n_inputs or not all(d is None or (isinstance(d, int) and not isinstance(d, bool)) for d in dims):
        raise ValueError(f"batch_dims must give one int or None per input ({n_inputs}), as vmap's in_dims, not {batch_dims!r}")
    if all(d is None for d in dims):
        raise ValueError("batch_dims must name at least one batched input (an int), or be None to infer it")
    return dims


def sum_of_outputs(*outputs: Tensor) -> Tensor:
    total = sum(o.sum() for o in outputs)
    assert isinstance(total, Tensor), "no differentiable output to sum"
    return total


def declare(
    name: str,
    formulas: Mapping[str, Callable[..., Tensor] | type[torch.autograd.Function]],
    *,
    reference: Callable[..., Tensor] | None = None,
    inputs: tuple[str, ...] = ("x",),
    correct: tuple[str, ...] = (),
    build_inputs: Callable[..., tuple[Tensor, ...]] | None = None,
    loss: Callable[..., Tensor] | None = None,
    params: Mapping[str, float | int] | None = None,
    outputs: tuple[str, ...] = (),
    constants: tuple[str, ...] = (),
    surrogate: Callable[..., Tensor] | None = None,
    order: int | None = None,
    batch_invariant: bool = True,
    batch_dims: Sequence[int | None] | None = None,
    title: str | None = None,
    description: str = "",
    latex: Mapping[str, str] | None = None,
    notes: Mapping[str, str] | None = None,
    kernel: bool | None = None,
) -> Family:
    """Register a family with as little ceremony as possible; the contract for users' modules.

    ``formulas`` maps names to autograd.Function classes (their ``apply`` is used) or callables of
    the inputs (and the ``params`` as keywords). Without a ``reference``, finite differences are the
    reference. Defaults: standard-normal inputs of the sidebar's shape, one per name in
    ``inputs``; the loss is the sum of every differentiable output. A Function may return several
    outputs (``outputs`` names them) and take integer or boolean inputs (passed through, never
    differentiated), as may floating-point inputs named in ``constants``. ``notes``: what to look for on a page, in
    your words ("training", "field", "sweep:input norm", ...); pages have neutral defaults.

    ``surrogate``: where a backward is right by design yet not the derivative of forward (a
    straight-through round, a gradient reversal), plain torch ops with the same forward whose
    autograd gradient is the intended one, e.g. ``lambda x: x + (torch.round(x) - x).detach()``;
    it is then the truth. ``order=1``: the formulas are meant to be differentiated once (as with
    ``@once_differentiable``); the second order is not checked. ``order=2``: they must be differentiable
    twice, and a backward that cannot be differentiated again fails. Undeclared (None), the double
    backward is checked where it runs, and one that cannot run is "first order only", neutral. ``batch_dims``: per input, the dim
    that is a batch or None (a parameter such as a bias, kept whole), as ``torch.func.vmap``'s
    ``in_dims``: what the empty-batch and one-row conditions cut; by default, inferred. ``kernel=True``: the formulas are
    fused kernels (Triton, CUDA) that autograd cannot see into: each backward call gets a fresh forward on fresh copies, a
    kernel that computes in float32 (or refuses float64) is judged in float32 against the float64 truth, the writes it
    makes into its inputs, saved tensors or grad_output are named, and only the first order is checked unless ``order=2``.
    Undeclared (None), a formula that launches Triton kernels is detected as one, and the report says so; ``kernel=False``:
    none is.
    """
    if order not in (1, 2, None):
        raise ValueError(f"order must be 1 or 2 (or None, not declared), not {order!r}")
    if kernel and order is None:  # a kernel's backward is a kernel too: not differentiable again unless said
        order = 1
    def as_callable(f: Callable[..., Tensor] | type[torch.autograd.Function]) -> Callable[..., Any]:
        return positional_apply(f) if isinstance(f, type) and issubclass(f, torch.autograd.Function) else f

    latex = dict(latex or {})
    caller = sys._getframe(1)  # a module's top level declares its families on import: a script can import it again
    module = caller.f_globals.get("__name__", "") if caller.f_code.co_name == "<module>" else ""
    return register(
        Family(
            name=name,
            title=title or name,
            description=description or f"{name}: a user's family.",
            input_names=tuple(inputs),
            reference=reference,
            formulas={n: Formula(n, as_callable(f), "correct by declaration" if n in correct else "under test", latex.get(n, ""), n in correct)
                      for n, f in formulas.items()},
            build_inputs=build_inputs or _same_shaped_normals(tuple(inputs)),
            loss=loss or sum_of_outputs,
            params=dict(params or {}),
            output_names=tuple(outputs),
            constants=tuple(constants),
            surrogate=surrogate,
            order=order,
            batch_invariant=batch_invariant,
            batch_dims=checked_batch_dims(batch_dims, len(inputs)),
            kernel=kernel,
            module=module,
            forward_latex=latex.get("forward", ""),
            gradient_latex=latex.get("gradient", ""),
            notes=dict(notes or {}),
        )
    )

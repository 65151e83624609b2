"""The Case: every setting of one view, frozen and hashable.

It is what caches key on and what a shared link carries, and it builds the view's inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch

from .devices import resolve_device
from ..engine.options import CheckOptions
from ..errors import LabError
from .family import Family, get_family
from ..explore.perturb import Perturbation, apply_perturbation

Tensor = torch.Tensor
DTYPES = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class Case:
    family: str = "cosine"
    formulas: tuple[str, ...] = ("tutorial", "corrected")
    shape: tuple[int, ...] = (8, 16)
    dtype: str = "float64"
    device: str = "cpu"
    seed: int = 0
    broadcast: bool = False  # the second input has size 1 off the reduced dim
    params: tuple[tuple[str, float | int], ...] = field(default_factory=tuple)  # family params (dim, eps, ...)
    step: float | None = None  # finite-difference step; None: the dtype's default
    atol: float | None = None
    rtol: float | None = None
    perturbation: Perturbation = Perturbation()
    upstream: str = "loss"  # the upstream gradient the maps draw: the loss's, "ones" or "random" (seeded)
    order: int | None = None  # how many times the formulas are checked differentiable; None: as the family declares
    conditions: str = "default"  # which conditions the verdict runs under (lib.engine.conditions.CONDITION_SETS)
    parity: str = ""  # which ways of running it the parity grid runs (lib.engine.parity.PARITY_SETS or keys); "": none

    def get_family(self) -> Family:
        try:
            return get_family(self.family)
        except KeyError as error:
            raise LabError(str(error.args[0])) from None

    def param_values(self) -> dict[str, float | int]:
        return {**self.get_family().params, **dict(self.params)}

    def cost(self) -> Case:
        """This case with what does not change the work left out (the seed, the perturbation): the
        key under which the dashboard remembers how long its work took."""
        return replace(self, seed=0, perturbation=Perturbation())

    def options(self) -> CheckOptions:
        """The check's options this case sets (the rest are ``CheckOptions``'s defaults)."""
        return CheckOptions(order=self.declared_order(), conditions=self.conditions, seed=self.seed, upstream=self.upstream, step=self.step,
                            atol=self.atol, rtol=self.rtol, batch_invariant=self.get_family().batch_invariant)

    def declared_order(self) -> int | None:
        return self.order if self.order is not None else self.get_family().order

    def torch_dtype(self) -> torch.dtype:
        try:
            return DTYPES[self.dtype]
        except KeyError:
            raise LabError(f"Unknown dtype {self.dtype!r}; choose one of: {', '.join(DTYPES)}.") from None

    def inputs(self) -> tuple[Tensor, ...]:
        """The family's inputs for this case, on its device and in its dtype."""
        if not self.shape or any(n < 1 for n in self.shape):
            raise LabError(f"Shape {self.shape} is impossible: every size must be at least 1.")
        device = resolve_device(self.device)
        family = self.get_family()
        params = self.param_values()
        try:
            inputs = family.build_inputs(self.shape, seed=self.seed, dtype=self.torch_dtype(), device=device, broadcast=self.broadcast, **params)
        except (IndexError, ValueError, RuntimeError) as error:
            raise LabError(f"Cannot build inputs of shape {self.shape} for {family.title}: {error}") from None
        return apply_perturbation(inputs, self.perturbation, dim=int(params.get("dim", -1)), eps=float(params.get("eps", 1e-8)), seed=self.seed)

    def input_bytes(self) -> int:
        """The inputs' size before any is built: what the memory guard starts from."""
        elements = math.prod(self.shape)
        return elements * self.torch_dtype().itemsize * len(self.get_family().input_names)


def default_formulas(family: Family) -> list[str]:
    """Up to two wrong formulas and every correct one: enough to compare without clutter."""
    wrong = [n for n, f in family.formulas.items() if not f.correct][:2]
    return wrong + [n for n, f in family.formulas.items() if f.correct]


def opening_case(family_name: str = Case.family) -> Case:
    """The case the sidebar holds when a page is opened without a link: the family's default
    formulas and its own params, named (the case Home is first asked about, and the one the warmed
    server checks ahead)."""
    family = get_family(family_name)
    return Case(family=family.name, formulas=tuple(default_formulas(family)), params=tuple(sorted(family.params.items())))

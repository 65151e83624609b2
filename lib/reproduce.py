"""A Gradient check as a standalone Python script: what the page computed, in plain torch.

``python_snippet(case, formula)`` writes a script that runs on its own, from any directory, with
the Gradient Lab environment's python: it puts this repository on ``sys.path`` (its absolute path
is written in when the script is made), rebuilds the case's exact inputs with ``lib`` (the Case's
repr is valid Python), and then does the check with nothing but torch: the formula's analytic
gradient and the reference's through ``torch.autograd.grad``, their largest difference per input
and their cosine, and ``torch.autograd.gradcheck`` in float64. It prints each number.
"""

from __future__ import annotations

import re
import sys
from dataclasses import fields
from pathlib import Path

import torch

from lib.case import Case
from lib.errors import LabError
from lib.perturb import Perturbation
from lib.tolerances import default_tolerances

REPOSITORY = Path(__file__).resolve().parents[1]


def _perturbation_source(perturbation: Perturbation) -> str:
    """``Perturbation(...)`` with only the fields that differ from their defaults."""
    default = Perturbation()
    changed = [f"{f.name}={getattr(perturbation, f.name)!r}" for f in fields(perturbation) if getattr(perturbation, f.name) != getattr(default, f.name)]
    return f"Perturbation({', '.join(changed)})"


def case_source(case: Case) -> str:
    """``Case(...)`` as Python source, one field a line (the perturbation with only its active
    fields); evaluates, with Case and Perturbation in scope, to a Case equal to ``case``."""
    lines = [
        f"    {f.name}={_perturbation_source(case.perturbation) if f.name == 'perturbation' else repr(getattr(case, f.name))},"
        for f in fields(case)
    ]
    return "Case(\n" + "\n".join(lines) + "\n)"


def file_name(case: Case, formula: str) -> str:
    """A file name for the script, e.g. ``check_cosine_sign_norm_fixed.py``."""
    return re.sub(r"[^A-Za-z0-9]+", "_", f"check_{case.family}_{formula}").strip("_") + ".py"


_TEMPLATE = '''\
"""Gradient Lab's check of the {title} formula {formula!r}, in plain PyTorch.

Run it with the Gradient Lab environment's python, from any directory:
    {python} {file_name}
It rebuilds the case's exact inputs with Gradient Lab's lib (the repository below), then checks
the formula with nothing but torch: the analytic gradient (the formula's own backward) and the
reference gradient (autograd through PyTorch's ops) of the family's loss, their largest difference
per input and their cosine, and torch.autograd.gradcheck in float64.
If the formula's backward raises (the app reports it), this script stops with the same error.
"""

import sys

import torch

REPOSITORY = {repository!r}  # where lib/ lives: only needed to rebuild the inputs
sys.path.insert(0, REPOSITORY)

from lib.case import Case  # noqa: E402
from lib.family import get_family  # noqa: E402
from lib.perturb import Perturbation  # noqa: E402

case = {case}
formula = {formula!r}

family = get_family(case.family)
params = case.param_values()  # {params}
inputs = case.inputs()  # seeded, perturbed, in the case's dtype, on its device
print(f"case: {{family.title}}, formula {{formula!r}}, params {{params}}")
for name, x in zip(family.input_names, inputs):
    print(f"{{name}}: shape {{tuple(x.shape)}}, {{x.dtype}}, {{x.device}}")

# 1. Analytic gradient: d loss / d inputs through the formula's own backward.
xs = tuple(x.detach().requires_grad_() for x in inputs)
loss = family.loss(family.run(formula, xs, **params))
analytic = torch.autograd.grad(loss, xs, allow_unused=True, materialize_grads=True)

# 2. Reference gradient: the same loss through the reference, differentiated by autograd.
rs = tuple(x.detach().requires_grad_() for x in inputs)
reference_loss = family.loss(family.reference(*rs, **params))
reference = torch.autograd.grad(reference_loss, rs, allow_unused=True, materialize_grads=True)
print(f"loss (reference forward): {{reference_loss.item()!r}}")
print(f"loss (formula forward): {{loss.item()!r}}")

# 3. How far apart they are (NaN/Inf elements left out), input by input, and their cosine
#    over all inputs together (-1: the gradient points exactly the wrong way).
for name, a, r in zip(family.input_names, analytic, reference):
    difference = (a.double() - r.double()).abs()
    difference = difference[difference.isfinite()]
    largest = difference.max().item() if difference.numel() else float("nan")
    print(f"{{name}}: max |analytic - reference| = {{largest!r}}")
a = torch.cat([g.double().flatten() for g in analytic])
r = torch.cat([g.double().flatten() for g in reference])
finite = a.isfinite() & r.isfinite()
a, r = a[finite], r[finite]
cosine = (a @ r / (a.norm() * r.norm())).item()
print(f"cosine(analytic, reference) = {{cosine!r}}")

# 4. PyTorch's own check of the formula, in float64 (finite differences of its forward against
#    its backward along random directions).
xs64 = tuple(x.detach().to(torch.float64).requires_grad_() for x in inputs)
passed = torch.autograd.gradcheck(
    lambda *xs: family.run(formula, xs, **params), xs64,
    eps={step!r}, atol={atol!r}, rtol={rtol!r}, fast_mode=True, raise_exception=False,
)
print(f"gradcheck (float64, fast_mode=True): {{passed}}")
'''


def python_snippet(case: Case, formula: str) -> str:
    """A standalone script that reproduces the check of ``formula`` on ``case`` (see the module)."""
    family = case.get_family()
    if formula not in family.formulas:
        raise LabError(f"{family.title} has no formula {formula!r}; it has: {', '.join(family.formulas)}.")
    tolerances = default_tolerances(torch.float64, step=case.step, atol=case.atol, rtol=case.rtol)
    return _TEMPLATE.format(
        title=family.title.lower(),
        formula=formula,
        python=sys.executable,
        file_name=file_name(case, formula),
        repository=str(REPOSITORY),
        case=case_source(case),
        params=case.param_values(),
        step=tolerances.step,
        atol=tolerances.atol,
        rtol=tolerances.rtol,
    )

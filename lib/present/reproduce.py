"""A Gradient check as a standalone Python script: what the page computed, in plain torch.

``python_snippet(case, formula)`` writes a script that needs nothing but torch and the module that
defines the formula, imported by name from wherever Python finds it (else from the directory where
it was when the script was written). The case's inputs and the upstream gradient the page draws
are embedded exactly (base64 of zlib-compressed ``torch.save``), so neither Gradient Lab's ``lib`` nor the
family's input builder or loss is needed. The script computes the formula's analytic gradient and
the truth for the same upstream gradient: the reference's, through autograd, when the reference
is importable by name, else central differences of the formula's forward; their largest
difference per input and their cosine, and ``torch.autograd.gradcheck`` in float64. It prints each.
"""

from __future__ import annotations

import ast
import base64
import dataclasses
import inspect
import io
import re
import string
import sys
import textwrap
import zlib
from dataclasses import fields
from pathlib import Path

import torch

from ..app.case import Case
from ..engine.pipeline import choose_upstream
from ..app.devices import device_problem
from ..errors import LabError
from ..explore.perturb import Perturbation
from ..engine.signature import forward_parameters, function_class
from ..engine.precision import CONFIDENCE, is_low
from ..engine.tolerances import default_tolerances

PACKAGE = __name__.split(".")[0]  # Gradient Lab's import package: gradient_lab
_INIT = sys.modules[PACKAGE].__file__
assert _INIT is not None  # a package of files
REPOSITORY = Path(_INIT).resolve().parents[1]  # where it is importable from: a checkout's root, or site-packages


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


# ---- where the code under study comes from ---------------------------------------------------------


def _by_name(obj) -> tuple[str, str] | None:
    """(module, qualified name) that import ``obj`` back, or None when they don't (a lambda, a
    function defined inside another, a functools.partial, ...)."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    found = sys.modules.get(module) if module and qualname else None
    for part in qualname.split(".") if found is not None and qualname else ():
        found = getattr(found, part, None)
    return (module, qualname) if found is obj and found is not None and module and qualname else None


def _location(module_name: str) -> tuple[str, Path | None]:
    """The name to import a loaded module by, and the directory to search for it (None: Python
    finds it by itself). lib.app.plugins loads a file path under a made-up name
    (``gradient_lab_user_<stem>_<hash>``): such a module is imported by its file's own name."""
    file = getattr(sys.modules[module_name], "__file__", None)
    if not file:
        return module_name, None
    file = Path(file).resolve()
    if module_name.split(".")[0] == PACKAGE:  # Gradient Lab's own (the gallery): by its package's name, from where that is
        return module_name, REPOSITORY
    parts = module_name.split(".")
    tail = (*parts, "__init__.py") if file.name == "__init__.py" else (*parts[:-1], parts[-1] + ".py")
    if file.parts[-len(tail):] == tail:
        return module_name, file.parents[len(tail) - 1]
    return file.stem, file.parent


def _imports_lib(module_name: str) -> bool:
    """Whether a module's source imports Gradient Lab (a user's module does, for declare)."""
    try:
        tree = ast.parse(inspect.getsource(sys.modules[module_name]))
    except (OSError, TypeError, SyntaxError):
        return True  # cannot tell: the script says where Gradient Lab is, to be safe
    return any(
        (isinstance(node, ast.Import) and any(alias.name.split(".")[0] == PACKAGE for alias in node.names))
        or (isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == PACKAGE)
        for node in ast.walk(tree)
    )


def _import_line(module: str, name: str, comment: str) -> str:
    if all(part.isidentifier() for part in module.split(".")):
        return f"from {module} import {name}  # {comment}  # noqa: E402"
    # e.g. my-functions.py: a valid module file, but not a valid name for an import statement
    return f"{name} = importlib.import_module({module!r}).{name}  # {comment}"


def _blob(tensors) -> str:
    """A Python string literal: base64 of zlib-compressed torch.save of CPU tensors in their dtype
    (the callers clone them: torch.save of a view writes its whole storage)."""
    buffer = io.BytesIO()
    torch.save(tensors, buffer)
    text = base64.b64encode(zlib.compress(buffer.getvalue(), 9)).decode("ascii")
    return "(\n" + "\n".join(f'    "{text[i:i + 96]}"' for i in range(0, len(text), 96)) + "\n)"


# ---- the script ---------------------------------------------------------------------------------


_TEMPLATE = string.Template('''\
"""Gradient Lab's check of the $title formula $formula_repr, in plain PyTorch.

Run it with any python that has torch, from any directory:
    python $file_name
$needs
The case's inputs and the upstream gradient the app draws (d loss / d output of the family's loss)
are embedded exactly, so the gradients below are the app's without its input builder or loss.
It checks the formula's analytic gradient (its own backward) against the truth:
$truth_words
It prints their largest difference per input, their cosine, and torch.autograd.gradcheck in float64.
If the formula's backward raises (the app reports it), this script stops with the same error.
"""

import base64
import io
import sys
import zlib

import torch

$paths
$imports

# The case, as Gradient Lab holds it (lib.app.case.Case; not needed here, for the record):
$case
title = $title_repr
formula = $formula_repr
names = $names
params = $params  # the family's params, passed as the app passes them (a Function's apply: by position)
WRT = $wrt  # the inputs that are differentiated (the others: integer targets, masks, constants, as they are)
KEPT = $kept  # the outputs whose gradient is checked (the others: integer, or marked non-differentiable)


def packed(outputs):
    """The checked outputs as one tensor: one as it is, several flattened and concatenated."""
    outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    kept = [outputs[k] for k in KEPT]
    return kept[0] if len(kept) == 1 else torch.cat([o.reshape(-1) for o in kept])


def formula_function(*xs):
    return packed($formula_invocation)
$reference_function

def load(blob):
    """Tensors from base64 of zlib-compressed torch.save."""
    return torch.load(io.BytesIO(zlib.decompress(base64.b64decode(blob))), weights_only=True)


# The inputs, exactly as the app built them: torch.save of the CPU tensors ($dtype).
INPUTS = $inputs
# The upstream gradient the app draws (its "$upstream_kind" upstream, $upstream_dtype): the gradients below
# are upstream · d output / d input.
UPSTREAM = $upstream
# The app ran the case on $device_repr$device_note. The tensors go there if this machine has it, else stay on the CPU.
DEVICE = $device_repr
try:
    device = torch.device(DEVICE)
    torch.empty(0, device=device)
except Exception:  # noqa: BLE001 - no such device here (a CPU-only torch raises AssertionError for CUDA)
    print(f"device {DEVICE!r} is not available here: the check runs on the CPU")
    device = torch.device("cpu")
inputs = tuple(x.to(device) for x in load(INPUTS))
upstream = load(UPSTREAM).to(device)
print(f"case: {title}, formula {formula!r}, params {params}")
for name, x in zip(names, inputs):
    print(f"{name}: shape {tuple(x.shape)}, {x.dtype}, {x.device}")


def gradients(function):
    """The output of ``function`` on the inputs, and upstream · d output / d input for each input
    in WRT, by autograd through its backward (zeros for an input the output does not use)."""
    xs = tuple(x.detach().requires_grad_() if k in WRT else x for k, x in enumerate(inputs))
    y = function(*xs)
    wrt = [xs[k] for k in WRT]
    grads = torch.autograd.grad(y, wrt, upstream.to(y.dtype), allow_unused=True)
    return y.detach(), [torch.zeros_like(x) if g is None else g for x, g in zip(wrt, grads)]


def float64(t):
    return t.detach().cpu().double()  # on the CPU first: MPS has no float64


# 1. Analytic gradient: through the formula's own backward.
output, analytic = gradients(formula_function)
$truth_setup$truth_block
# 3. How far apart they are (NaN/Inf elements left out), input by input, and their cosine over all
#    inputs together (-1: the gradient points exactly the wrong way).
for name, a, t in zip([names[k] for k in WRT], analytic, truth):
    difference = (float64(a) - float64(t)).abs()
    difference = difference[difference.isfinite()]
    largest = difference.max().item() if difference.numel() else float("nan")
    print(f"{name}: max |analytic - $truth_name| = {largest!r}")
a = torch.cat([float64(g).flatten() for g in analytic])
t = torch.cat([float64(g).flatten() for g in truth])
finite = a.isfinite() & t.isfinite()
a, t = a[finite], t[finite]
cosine = (a @ t / (a.norm() * t.norm())).item() if a.norm() > 0 and t.norm() > 0 else float("nan")
print(f"cosine(analytic, $truth_name) = {cosine!r}")

# 4. PyTorch's own check of the formula, in float64: finite differences of its forward against its
#    backward, column by column of the whole Jacobian (fast_mode=False).
check_device = device if device.type != "mps" else torch.device("cpu")  # MPS has no float64
xs64 = tuple(x.detach().to(device=check_device, dtype=torch.float64).requires_grad_() if k in WRT else x.to(check_device)
             for k, x in enumerate(inputs))
passed = torch.autograd.gradcheck(
    formula_function, xs64, eps=$step64, atol=$atol64, rtol=$rtol64, fast_mode=False, raise_exception=False,
)
print(f"gradcheck (float64, fast_mode=False): {passed}")
''')

_REFERENCE_FUNCTION = '''

def reference_function(*xs):
    return packed({call}(*xs, **params))
'''

_REFERENCE_TRUTH = '''
# 2. Reference gradient: the same upstream through the reference (plain torch ops), by autograd.
reference_output, truth = gradients(reference_function)
difference = (float64(output) - float64(reference_output)).abs().nan_to_num(nan=float("inf"))
print(f"max |formula output - reference output| = {difference.max().item() if difference.numel() else 0.0!r}")
'''

_LOW_TRUTH = '''
# 2a. Below float64 the truth is float64 on the very values the formula saw: the inputs and the
#     upstream, upcast ({dtype} is judged against float64; lib.check --dtype {dtype} gives the precision verdict).
inputs = tuple(x.double() if x.is_floating_point() else x for x in inputs)
upstream = upstream.double()
'''

_NUMERICAL_TRUTH = '''
{why}
STEP = {step!r}


def numerical(function):
    v = float64(upstream).flatten()
    grads = []
    with torch.no_grad():
        for k in WRT:
            x = inputs[k]

            def at(z):
                return function(*inputs[:k], z.reshape(x.shape), *inputs[k + 1:])
            flat, gradient = x.reshape(-1), torch.zeros(x.numel(), dtype=torch.float64)
            for i in range(x.numel()):
                plus, minus = flat.clone(), flat.clone()
                plus[i] += STEP
                minus[i] -= STEP
                gradient[i] = (float64((at(plus) - at(minus)) / (2 * STEP)).flatten() * v).sum()
            grads.append(gradient.reshape(x.shape))
    return grads


truth = numerical(formula_function)
'''


def _formula_code(function) -> tuple[object, str]:
    """What to import for a formula, and how the script calls it: a Function's class and
    ``Name.apply`` (``declare`` wraps it to take params by position), or the callable itself."""
    owner = function_class(function)
    return (owner, ".apply") if owner is not None else (function, "")


def _invocation(code, call: str, params: dict) -> str:
    """How the script calls the formula on ``xs``: a Function's ``apply`` takes its params by
    position, in forward's order (it binds no keywords); anything else takes them as keywords."""
    if not (isinstance(code, type) and issubclass(code, torch.autograd.Function)) or not params:
        return f"{call}(*xs, **params)"
    after = [name for name in forward_parameters(code) if name in params]
    return f"{call}(*xs, {', '.join(f'params[{name!r}]' for name in after)})"


def _inputs_and_upstream(case: Case, family, formula: str, params: dict):
    """The case's inputs (built on the CPU when its device cannot be used here), the formula in the
    engine's canonical form on them, and the upstream gradient the engine draws: choose_upstream at
    the reference's (packed) output, else the formula's."""
    built_on = case if device_problem(case.device) is None else dataclasses.replace(case, device="cpu")
    inputs = tuple(x.detach() for x in built_on.inputs())
    problem = family.problem(formula, inputs, params)
    with torch.no_grad():
        try:
            output = (problem.reference or problem.function)(*problem.inputs) if problem.signature is not None else None
        except Exception:  # noqa: BLE001 - a formula that raises: the script shows the error itself
            output = None
    upstream = choose_upstream(case.upstream, problem.loss, output, case.seed) if output is not None else None
    return built_on, inputs, upstream, problem


def _sources(family, formula: str) -> tuple[list[str], list[str], list[str], str, str | None]:
    """What the script imports, by name: the formula (a LabError if it cannot be) and the
    reference when it can be (else the truth is finite differences). Returns the import lines,
    the lines that put the modules' directories on sys.path, the modules, and how the script
    calls the formula and the reference (None: not imported)."""
    code, suffix = _formula_code(family.formula(formula).function)
    named = _by_name(code)
    declared = None  # a lambda or closure: the module that declares its family is imported, and the formula taken from the family
    if named is None:
        declaring = sys.modules.get(family.module)
        declared = family.module if getattr(declaring, "__file__", None) and family.module != "__main__" else None
        if declared is None:
            raise LabError(f"The formula {formula!r} ({getattr(code, '__qualname__', code)!r}) cannot be imported by name, and its family "
                           "is not declared at the top level of a module, so a script cannot get it back: declare the family at a module's "
                           "top level, or define the formula there.")
        named = (declared, "")
    reference = _by_name(family.reference) if family.reference is not None else None
    wanted = [(named, "the formula under test")]
    if reference:
        wanted.append((reference, "the reference: plain torch ops, differentiated by autograd"))
    imports: list[str] = []
    directories: dict[str, str] = {}  # directory -> the script's name for it
    modules: list[str] = []
    for (module, qualname), comment in wanted:
        import_name, directory = _location(module)
        if qualname:
            imports.append(_import_line(import_name, qualname.split(".")[0], comment))
        else:  # it registers its families when imported; the formula is a lambda or closure, known to the registry alone
            imports += [f"importlib.import_module({import_name!r})  # declares the family (its formula {formula!r} is a lambda or "
                        "closure: not importable by name)", f"from {PACKAGE}.app.family import get_family  # noqa: E402"]
            directories.setdefault(str(REPOSITORY), "LAB_DIR")
        modules += [import_name] if import_name not in modules else []
        if directory is not None:
            directories.setdefault(str(directory), "REFERENCE_DIR" if directories else "MODULE_DIR")
        if import_name.split(".")[0] != PACKAGE and _imports_lib(module):
            directories.setdefault(str(REPOSITORY), "LAB_DIR")  # a user's module that imports gradient_lab (for declare)
    if any("importlib" in line for line in imports):
        imports.insert(0, "import importlib  # noqa: E402")
    paths = [f"{variable} = {directory!r}" for directory, variable in directories.items()]
    if directories:
        paths.append(f"sys.path += [{', '.join(directories.values())}]  # searched last: a copy Python finds first wins")
    call = f"get_family({family.name!r}).formulas[{formula!r}].function" if declared else named[1] + suffix
    return imports, paths, modules, call, reference[1] if reference else None



def _wrap(text: str, prefix: str = "") -> str:
    return textwrap.fill(text, width=100, initial_indent=prefix, subsequent_indent=prefix)


EMBEDDED_SHOWN = 1 << 16  # input and upstream elements up to which the script shown on a page embeds them (the download always does)
ELIDED = '(\n    "..."  # the data, embedded in the downloaded script\n)'


def python_snippet(case: Case, formula: str, embed: bool = True) -> str:
    """A standalone script that reproduces the check of ``formula`` on ``case`` (see the module).
    ``embed=False``: the inputs and upstream are left out (a page shows the script of a large case
    so; what it sends to the browser does not grow with the tensors)."""
    family = case.get_family()
    if formula not in family.formulas:
        raise LabError(f"{family.title} has no formula {formula!r}; it has: {', '.join(family.formulas)}.")
    params = case.param_values()
    imports, paths, modules, formula_call, reference_call = _sources(family, formula)
    built_on, inputs, upstream, problem = _inputs_and_upstream(case, family, formula, params)
    signature = problem.signature
    if upstream is None:  # the formula raised and there is no reference: the script raises there too
        upstream = torch.ones(())
    tolerances = default_tolerances(case.torch_dtype(), step=case.step, atol=case.atol, rtol=case.rtol)
    tolerances64 = default_tolerances(torch.float64, step=case.step, atol=case.atol, rtol=case.rtol)
    low = is_low(case.torch_dtype())  # then the truth is float64 on the same values, as the app's maps have it

    many = len(modules) > 1
    needs = (f"It needs nothing but torch and the module{'s' if many else ''} {' and '.join(modules)}, imported by name from "
             f"wherever Python finds {'them' if many else 'it'} (PYTHONPATH, the working directory), else from where "
             f"{'they were' if many else 'it was'} when this script was written (the directories below, searched last).")
    if any(line.startswith("LAB_DIR") for line in paths):
        needs += (f" {' and '.join(m for m in modules if m.split('.')[0] != PACKAGE)} imports Gradient Lab "
                  f"(for {PACKAGE}.declare): LAB_DIR says where it was.")
    if reference_call:
        truth_name, truth_words = "reference", "the gradient of the family's reference, by autograd through its plain torch ops."
        truth_block = _REFERENCE_TRUTH
    else:
        why = ("the family has no reference" if family.reference is None
               else "the family's reference cannot be imported by name (a lambda, or defined inside a function)")
        truth_name, truth_words = "numerical", f"central differences of the formula's forward ({why})."
        comment = (f"2. Numerical gradient: {why}, so the truth is central differences of the formula's forward, element by element, "
                   "in the inputs' dtype at the app's step, along the same upstream (two evaluations per input element: slow for "
                   "large inputs).")
        truth_block = _NUMERICAL_TRUTH.format(why=_wrap(comment, "# "), step=(tolerances64 if low else tolerances).step)
    return _TEMPLATE.substitute(
        title=family.title.lower(),
        title_repr=repr(family.title),
        formula_repr=repr(formula),
        file_name=file_name(case, formula),
        needs=_wrap(needs),
        truth_words=_wrap(truth_words, "    "),
        truth_name=truth_name,
        paths="\n".join(paths),
        imports="\n".join(imports),
        case="\n".join("# " + line for line in case_source(case).splitlines()),
        names=repr(tuple(family.input_names)),
        wrt=repr(signature.wrt if signature else tuple(range(len(inputs)))),
        kept=repr(signature.kept if signature else (0,)),
        params=repr(params),
        formula_invocation=_invocation(_formula_code(family.formula(formula).function)[0], formula_call, params),
        reference_function=_REFERENCE_FUNCTION.format(call=reference_call) if reference_call else "",
        dtype=case.dtype,
        inputs=_blob(tuple(x.cpu().clone() for x in inputs)) if embed else ELIDED,
        upstream_kind=case.upstream,
        upstream=_blob(upstream.detach().cpu().clone()) if embed else ELIDED,
        upstream_dtype=str(upstream.dtype).removeprefix("torch."),
        device_repr=repr(case.device),
        device_note="" if built_on is case else " (not usable where this script was written: the inputs were built on the CPU)",
        truth_block=truth_block,
        truth_setup=_LOW_TRUTH.format(dtype=case.dtype) if low else "",
        step64=repr(tolerances64.step),
        atol64=repr(tolerances64.atol),
        rtol64=repr(tolerances64.rtol),
    )


# ---- the suggested tolerances as a pytest test -------------------------------------------------------

_PRECISION_TEST = string.Template('''\
"""$title $formula_repr in $dtype: Gradient Lab's suggested tolerances, as a pytest test.

Each input's assert_close(atol, rtol) below fails under 1 in $per draws of the case's inputs: a
generalized Pareto tail fitted to $draws fresh draws ($confidence% confident), of which $failures failed.
The gradient is the formula's own backward in $dtype, for a random upstream; the truth is float64
autograd through the $truth on the same values, upcast.
"""

import dataclasses
import importlib
import sys

import pytest
import torch

$paths
$imports
from $package.app.case import Case  # noqa: E402
from $package.explore.perturb import Perturbation  # noqa: E402,F401

CASE = $case
TOLERANCES = $tolerances  # input -> (atol, rtol)


@pytest.mark.parametrize("seed", range(100))
def test_${name}_gradient_in_${dtype}(seed):
    case = dataclasses.replace(CASE, seed=10_000 + seed)  # fresh inputs, drawn as the case draws them
    family, params = case.get_family(), case.param_values()
    given = case.inputs()
    low = family.problem(CASE.formulas[0], given, params)
    exact = family.problem(CASE.formulas[0], [x.double() if x.is_floating_point() else x for x in given], params)
    xs = [x.detach().requires_grad_() for x in low.inputs]
    out = low.function(*xs)
    g = torch.randn(tuple(out.shape), generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(out)
    grads = torch.autograd.grad(out, xs, g)
    ts = [x.detach().double().requires_grad_() for x in low.inputs]
    truths = torch.autograd.grad(exact.$truth_function(*ts), ts, g.double())
    for name, grad, truth in zip(low.names, grads, truths):
        atol, rtol = TOLERANCES[name]
        torch.testing.assert_close(grad.double(), truth, atol=atol, rtol=rtol)
''')


def _short_case(case: Case) -> str:
    """``Case(...)`` with the fields that differ from a default Case (family, formulas and dtype always)."""
    default = Case()
    kept = [f.name for f in fields(case) if f.name in ("family", "formulas", "dtype") or getattr(case, f.name) != getattr(default, f.name)]
    shown = [f"{name}={_perturbation_source(case.perturbation) if name == 'perturbation' else repr(getattr(case, name))}" for name in kept]
    return "Case(" + ", ".join(shown) + ")"


def precision_test(case: Case, formula: str, precision) -> str | None:
    """A pytest file that holds the formula's gradient in the case's dtype to the tolerances the
    precision verdict suggests (``lib.engine.precision``), on fresh draws; None where there are none
    to hold it to (it fails the precision verdict, or no tolerance passes every draw)."""
    if precision is None or not precision.passed or not precision.results:
        return None
    tolerances = {r.name: r.tolerance for r in precision.results}
    if any(t is None or not t.usable for t in tolerances.values()):
        return None
    family = case.get_family()
    imports, paths, _modules, _call, _reference = _sources(family, formula)
    first = next(iter(tolerances.values()))
    by_reference = all(r.baseline_kind != "rounding" for r in precision.results) and family.reference is not None
    return _PRECISION_TEST.substitute(
        title=family.title, formula_repr=repr(formula), dtype=case.dtype, per=f"{1 / first.rate:,.0f}", draws=first.draws,
        confidence=f"{100 * CONFIDENCE:.0f}", failures=max(t.failures for t in tolerances.values()),
        truth="reference" if by_reference else "formula (its float64 backward, checked by the verdict)",
        paths="\n".join(paths), imports="\n".join(imports), package=PACKAGE,
        case=_short_case(dataclasses.replace(case, formulas=(formula,))),
        tolerances="{" + ", ".join(f"{name!r}: ({t.atol!r}, {t.rtol!r})" for name, t in tolerances.items()) + "}",
        name=re.sub(r"[^A-Za-z0-9]+", "_", f"{case.family}_{formula}").strip("_").lower(),
        truth_function="reference" if by_reference else "function",
    )

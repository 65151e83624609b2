"""Triton's interpreter as a place to check hand-written kernels' backwards on CPU (optional).

Nothing else in Gradient Lab imports this module: Triton stays optional, and triton itself is
imported only by :func:`interpret` (``pip install 'gradient-lab[triton]'``). Use it before the
kernels are defined::

    from gradient_lab import triton as gl_triton

    gl_triton.interpret()  # sets TRITON_INTERPRET=1, patches the interpreter's gaps
    import my_kernels      # @triton.jit now gives interpreted kernels, run on CPU tensors

The API:

- :func:`interpret`: turns Triton's interpreter on (``TRITON_INTERPRET=1`` and
  ``triton.knobs.runtime.interpret``) and applies the workarounds below, each only where its probe
  finds the gap; idempotent; returns the names of the workarounds in effect. Call it before the
  kernels' module is imported: ``@triton.jit`` reads the switch when a kernel is defined.
- :func:`interpreting`: whether kernels defined now would run under the interpreter.
- :func:`check_dtype`: raises ``ValueError`` for the dtypes the interpreter computes silently
  wrong (bfloat16 and the float8 types, held as their integer bit patterns); the engine calls it.
- :data:`INTERPRETER_SEMANTICS`: one sentence for labels, on what such a check does not test.

The workarounds, for gaps users met with triton 3.9.0 beside torch 2.13 (CPU). Each is a function
of its own, ``fix_*``, that runs a tiny probe kernel first and patches only when the probe fails,
so each one stops applying by itself once Triton fixes its gap (its docstring says how to tell):

- :func:`fix_float_arguments`: a Python float argument is an fp32 scalar tensor in the kernel, as on
  a GPU, not a Python float (``scale.to(tl.float32)``).
- :func:`fix_libdevice`: ``tl.extra.libdevice`` (and ``triton.language.extra.cuda/hip.libdevice``)
  functions run numpy under the interpreter, through the interpreter's own numpy operations where
  it has them; a function with no numpy counterpart here raises ``NotImplementedError`` by name.
- :func:`fix_autotune`: ``@triton.autotune`` takes the first config left after its pruning, without
  benchmarking (no GPU driver asked for; timings mean nothing under the interpreter anyway).
- :func:`fix_loop_variables`: a ``for i in range(...)`` (or ``tl.range``) loop variable is an integer
  scalar tensor, of the dtype the compiler gives it, not a Python int (``i.to(tl.float32)``).
"""

from __future__ import annotations

import ast
import functools
import importlib.abc
import linecache
import math
import os
import sys
import warnings
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = ["INTERPRETER_SEMANTICS", "check_dtype", "interpret", "interpret_when_imported", "interpreting"]

INTERPRETER_SEMANTICS = (
    "checked under Triton's interpreter (CPU, numpy): interpreter semantics, so no data races, tf32 rounding "
    "or GPU memory layouts are tested"
)

_EXTRA = "pip install 'gradient-lab[triton]'"
_CHECKED = "triton 3.9.0"  # the version every workaround's gap was found in and checked against
_MARK = "__gradient_lab_workaround__"  # set on what a workaround installs, so it is applied once
_TRUE = {"1", "true", "on", "yes", "y"}

_applied: tuple[str, ...] | None = None
_probes: dict[str, Any] | None = None


def _triton() -> Any:
    """The triton package, or an ImportError that names the extra."""
    try:
        import triton
    except ImportError as error:
        raise ImportError(f"gradient_lab.triton needs Triton, which is optional: {_EXTRA}") from error
    return triton


# ---------------------------------------------------------------------------------------------------
# the switch


def interpret() -> tuple[str, ...]:
    """Turn Triton's interpreter on for this process and apply the workarounds whose gaps are present.

    Call it before the kernels' module is imported (``@triton.jit`` decides then, once per kernel).
    Idempotent: a second call changes nothing and returns the same names. Returns the names of the
    workarounds in effect (``"float_arguments"``, ``"libdevice"``, ``"autotune"``,
    ``"loop_variables"``), none where this Triton has fixed the gaps.
    """
    global _applied
    # before triton is imported: triton.language's own @jit functions (tl.zeros, tl.sum, tl.cdiv, ...)
    # are defined when it is, and must be interpreted ones too
    previous = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        triton = _triton()
    except ImportError:
        if previous is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = previous
        raise
    triton.knobs.runtime.interpret = True
    from triton.runtime.jit import JITFunction

    if any(isinstance(member, JITFunction) for member in vars(triton.language.standard).values()):
        raise RuntimeError(
            "triton was imported before Triton's interpreter was turned on, so triton.language's own @triton.jit "
            "functions (tl.zeros, tl.sum, ...) are compiled ones that an interpreted kernel cannot call: call "
            "gradient_lab.triton.interpret() before anything imports triton, or set TRITON_INTERPRET=1 in the "
            "environment"
        )
    if _applied is None:
        applied = []
        for name, fix in _WORKAROUNDS:
            try:
                if fix():
                    applied.append(name)
            except (AttributeError, KeyError, TypeError) as error:  # the interpreter's code moved: this gap stays
                warnings.warn(f"gradient_lab.triton: the {name} workaround does not fit triton {triton.__version__} ({error!r}); "
                              f"its gap stays (checked against {_CHECKED})", RuntimeWarning, stacklevel=2)
        _applied = tuple(applied)
    return _applied


def interpret_when_imported() -> None:
    """Apply :func:`interpret` at the moment triton is first imported, where ``TRITON_INTERPRET`` is
    on then: a module of kernels that sets it itself (``os.environ.setdefault("TRITON_INTERPRET",
    "1")``) before it imports triton and its kernels (Liger-Kernel's as shipped) gets the workarounds
    too, before its kernels bind the libdevice stubs. Nothing where triton is imported already, or
    is not installed; the hook removes itself at the first import of triton."""
    import importlib.util

    if "triton" in sys.modules or any(isinstance(f, _InterpretOnImport) for f in sys.meta_path):
        return
    if importlib.util.find_spec("triton") is None:
        return
    sys.meta_path.insert(0, _InterpretOnImport())


class _InterpretOnImport:
    """A meta path finder for ``triton`` alone: with the interpreter on, triton is imported as ever
    and :func:`interpret` runs as soon as it is (the module's own loader, wrapped)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        from importlib.machinery import PathFinder

        if name != "triton":
            return None
        sys.meta_path.remove(self)  # once: every later import is triton's own
        if os.environ.get("TRITON_INTERPRET", "").strip().lower() not in _TRUE:
            return None
        spec = PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenInterpret(spec.loader)
        return spec


class _ThenInterpret(importlib.abc.Loader):
    """Triton's own loader, then :func:`interpret` on the module it made."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        interpret()

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package, …: triton's loader's
        return getattr(self.loader, name)


def interpreting() -> bool:
    """Whether kernels defined now run under Triton's interpreter (False where triton is missing)."""
    triton = sys.modules.get("triton")
    if triton is not None and hasattr(triton, "knobs"):
        return bool(triton.knobs.runtime.interpret)
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in _TRUE


def _refused_dtypes() -> dict[torch.dtype, str]:
    import torch

    names = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu"]
    refused = {torch.bfloat16: "bfloat16"}
    refused.update({getattr(torch, name): name for name in names if hasattr(torch, name)})
    return refused


def check_dtype(dtype: torch.dtype, *, interpreted: bool | None = None) -> None:
    """Raise ``ValueError`` where a kernel's numbers in ``dtype`` would be silently wrong under the interpreter.

    numpy has no bfloat16 or float8, so the interpreter holds those values as their integer bit
    patterns (uint16, uint8): a kernel that casts to float32 before computing is right, but
    arithmetic done in the dtype itself works on the integers and gives wrong numbers without an
    error. A check cannot see which a kernel does, so it refuses the dtype. ``interpreted``
    defaults to :func:`interpreting`; nothing is refused where kernels run compiled.
    """
    if not (interpreting() if interpreted is None else interpreted):
        return
    name = _refused_dtypes().get(dtype)
    if name is not None:
        raise ValueError(
            f"{name} is not checked under Triton's interpreter: numpy has no {name}, so the interpreter holds "
            f"{name} values as their integer bit patterns, and a kernel that computes in {name} (before a cast "
            "to float32) works on those integers, giving silently wrong numbers; check in float32 or float16, "
            "or on a GPU (without TRITON_INTERPRET)"
        )


# ---------------------------------------------------------------------------------------------------
# probes: tiny kernels, one per gap, defined under the interpreter in a namespace of their own


_PROBE_SOURCE = '''
import triton
import triton.language as tl
from triton.language.extra import libdevice
from triton.language.extra.cuda import libdevice as cuda_libdevice


@triton.jit
def float_argument(out, scale):
    tl.store(out, scale.to(tl.float32))


@triton.jit
def libdevice_tanh(out):
    x = tl.full([1], 0.5, tl.float32)
    tl.store(out + tl.arange(0, 1), libdevice.tanh(x) + cuda_libdevice.tanh(x))


@triton.autotune(configs=[triton.Config({"B": 1}), triton.Config({"B": 2})], key=[])
@triton.jit
def autotuned(out, B: tl.constexpr):
    tl.atomic_add(out, 1.0)
    tl.store(out + 1, B)


@triton.jit
def loop_variable(out):
    for i in range(2, 3):
        tl.store(out, i.to(tl.float32))
'''


def _probe_kernels() -> dict[str, Any]:
    """The probe kernels, defined once (under the interpreter) from source the interpreter can read back."""
    global _probes
    if not interpreting():
        raise RuntimeError("the probes of Triton's interpreter run under it: call gradient_lab.triton.interpret() first")
    if _probes is None:
        filename = "<gradient_lab.triton probes>"
        # the interpreter rewrites a kernel from its source (inspect.getsourcelines), so the source
        # is registered with linecache; the kernels' globals (which the interpreter adds its own
        # names to) are this namespace, not the module's
        linecache.cache[filename] = (len(_PROBE_SOURCE), None, _PROBE_SOURCE.splitlines(keepends=True), filename)
        namespace: dict[str, Any] = {"__name__": "gradient_lab.triton.probes"}
        exec(compile(_PROBE_SOURCE, filename, "exec"), namespace)  # noqa: S102 - the probe kernels above
        _probes = namespace
    return _probes


def _probe(kernel: str, out: list[float], expected: list[float], *args: Any) -> bool:
    """Whether the gap is present: the probe kernel, launched on one program, raised or wrote wrong numbers.

    Raises RuntimeError where the interpreter is off (a probe means nothing then).
    """
    import torch

    probe = _probe_kernels()[kernel]
    written = torch.tensor(out)
    try:
        probe[(1,)](written, *args)
    except Exception:  # noqa: BLE001 - any failure of the probe kernel is the gap
        return True
    return not torch.allclose(written, torch.tensor(expected), rtol=1e-6, atol=0)


def _float_arguments_gap() -> bool:
    return _probe("float_argument", [0.0], [0.5], 0.5)


def _libdevice_gap() -> bool:
    return _probe("libdevice_tanh", [0.0], [2 * math.tanh(0.5)])


def _autotune_gap() -> bool:
    return _probe("autotuned", [0.0, 0.0], [1.0, 1.0])  # one run, with the first config


def _loop_variables_gap() -> bool:
    return _probe("loop_variable", [0.0], [2.0])


# ---------------------------------------------------------------------------------------------------
# 1. float arguments


def fix_float_arguments() -> bool:
    """A Python float passed to a kernel becomes an fp32 scalar tensor inside it, as it is on a GPU.

    The gap (checked against triton 3.9.0): the interpreter's ``_implicit_cvt`` turns bools, ints and
    tensors into Triton values but leaves a float as it is, so ``scale.to(tl.float32)`` raises
    ``'float' object has no attribute 'to'`` and a float mixes with fp16 data as a weak scalar
    rather than the fp32 scalar a GPU gets. Fixed in Triton when the probe kernel (which calls
    ``scale.to(tl.float32)`` on a float argument) runs without this: then this applies nothing.
    Returns whether it patched.
    """
    triton = _triton()
    from triton.runtime import interpreter

    if getattr(interpreter._implicit_cvt, _MARK, False) or not _float_arguments_gap():
        return False
    tl = triton.language
    original = interpreter._implicit_cvt

    @functools.wraps(original)
    def implicit_cvt(arg: Any) -> Any:
        if isinstance(arg, float):
            ty = tl.str_to_ty(triton.runtime.jit.mangle_type(arg), None)  # fp32, as a compiled kernel takes it
            handle = interpreter.TensorHandle(np.array([arg], dtype=interpreter._get_np_dtype(ty)), ty)
            return tl.tensor(handle, ty)
        return original(arg)

    setattr(implicit_cvt, _MARK, True)
    interpreter._implicit_cvt = implicit_cvt  # read as a global by GridExecutor.__call__ at every launch
    return True


# ---------------------------------------------------------------------------------------------------
# 2. libdevice


def _elementwise(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A scalar math function over numpy arrays, in the first array's dtype."""

    def call(x: np.ndarray, *rest: np.ndarray) -> np.ndarray:
        return np.vectorize(fn, otypes=[x.dtype])(x, *rest)

    return call


def _tgamma(x: float) -> float:
    try:
        return math.gamma(x)
    except OverflowError:
        return math.inf
    except ValueError:  # a pole: +-inf at +-0, nan at the negative integers, as libdevice
        return math.copysign(math.inf, x) if x == 0 else math.nan


def _lgamma(x: float) -> float:
    try:
        return math.lgamma(x)
    except (ValueError, OverflowError):  # the poles
        return math.inf


def _remainder(x: float, y: float) -> float:
    try:
        return math.remainder(x, y)
    except ValueError:  # y == 0 or x infinite
        return math.nan


def _round_half_away(x: np.ndarray) -> np.ndarray:
    t = np.trunc(x)
    return np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t)


def _exp10(x: np.ndarray) -> np.ndarray:
    return np.power(x.dtype.type(10), x)


# libdevice's functions by name (the same in the cuda and hip modules): a string is the interpreter
# builder's own method (its numpy mapping of tl.math, reused), a function computes on numpy arrays;
# results are cast to the function's return dtype (int32 for the predicates). The float rounding
# modes other than round-to-nearest (_rz, _rd, _ru) and the bit tricks are left out: they raise.
_LIBDEVICE: dict[str, str | Callable[..., Any]] = {
    # the interpreter's own numpy mapping (InterpreterBuilder.create_*)
    "exp": "create_exp", "exp2": "create_exp2", "log": "create_log", "log2": "create_log2",
    "sqrt": "create_precise_sqrt", "sqrt_rn": "create_precise_sqrt", "rsqrt": "create_rsqrt", "rsqrt_rn": "create_rsqrt",
    "erf": "create_erf", "floor": "create_floor", "ceil": "create_ceil", "sin": "create_sin", "cos": "create_cos",
    "fma": "create_fma", "fma_rn": "create_fma", "fast_expf": "create_exp", "fast_logf": "create_log",
    "fast_log2f": "create_log2", "fast_sinf": "create_sin", "fast_cosf": "create_cos",
    "div_rn": "create_precise_divf", "fast_dividef": "create_fdiv", "add_rn": "create_fadd", "sub_rn": "create_fsub",
    "mul_rn": "create_fmul",
    # numpy
    "abs": np.abs, "tanh": np.tanh, "fast_tanhf": np.tanh, "sinh": np.sinh, "cosh": np.cosh, "tan": np.tan,
    "fast_tanf": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "expm1": np.expm1, "log1p": np.log1p, "log10": np.log10,
    "fast_log10f": np.log10, "exp10": _exp10, "fast_exp10f": _exp10, "cbrt": np.cbrt,
    "rcbrt": lambda x: 1 / np.cbrt(x), "rcp_rn": lambda x: 1 / x, "sinpi": lambda x: np.sin(np.pi * x),
    "cospi": lambda x: np.cos(np.pi * x), "trunc": np.trunc, "rint": np.rint, "nearbyint": np.rint,
    "round": _round_half_away, "llrint": np.rint, "llround": _round_half_away, "saturatef": lambda x: np.clip(x, 0, 1),
    "erfc": _elementwise(math.erfc), "lgamma": _elementwise(_lgamma), "tgamma": _elementwise(_tgamma),
    "normcdf": _elementwise(lambda x: 0.5 * math.erfc(-x / math.sqrt(2))),
    "isnan": np.isnan, "isinf": np.isinf, "isfinited": np.isfinite, "finitef": np.isfinite, "signbit": np.signbit,
    "pow": np.power, "fast_powf": np.power, "atan2": np.arctan2, "hypot": np.hypot, "copysign": np.copysign,
    "fmod": np.fmod, "remainder": _elementwise(_remainder), "fdim": lambda x, y: np.where(x > y, x - y, 0),
    "nextafter": np.nextafter, "ldexp": np.ldexp, "scalbn": np.ldexp,
    "float_as_int": lambda x: x.view(np.int32), "int_as_float": lambda x: x.view(np.float32),
}


_libdevice_calls: list[str] = []  # the libdevice functions being called from interpreted kernels, innermost last


def _extern_elementwise(self: Any, lib_name: str, lib_path: str, symbol: str, args: list, ret_type: Any, is_pure: bool) -> Any:
    """``InterpreterBuilder.create_extern_elementwise``: the libdevice function being called, by numpy.

    The function is the one :func:`_interpreted` announced (its name, not the backend's symbol, so
    cuda's ``__nv_tanhf`` and hip's ``__ocml_tanh_f32`` are one entry); the arguments arrive
    converted and broadcast by the backend's function, as compiled.
    """
    from triton.runtime import interpreter

    impl = _LIBDEVICE.get(_libdevice_calls[-1]) if _libdevice_calls else None
    if impl is None:
        raise NotImplementedError(f"extern_elementwise ({symbol}) not supported in interpreter mode")
    with np.errstate(all="ignore"):  # nan and inf come back as values, as on a GPU
        if isinstance(impl, str):
            return getattr(self, impl)(*args)  # the interpreter's own numpy mapping
        data = impl(*(arg.data for arg in args))
    scalar = ret_type.scalar
    return interpreter.TensorHandle(np.asarray(data).astype(interpreter._get_np_dtype(scalar)), scalar)


def _interpreted(name: str, backend: Any, signature_of: Any) -> Callable[..., Any]:
    """``backend`` (a cuda or hip libdevice builtin) made callable from an interpreted kernel; compiled calls pass through."""
    from triton.runtime import interpreter

    @functools.wraps(signature_of)
    def call(*args: Any, _semantic: Any = None, **kwargs: Any) -> Any:
        if _semantic is not None and _semantic is not interpreter.interpreter_semantic:
            return backend(*args, _semantic=_semantic, **kwargs)  # the compiler's call
        if name not in _LIBDEVICE or backend is None:
            raise NotImplementedError(
                f"libdevice.{name} has no numpy implementation under Triton's interpreter (gradient_lab.triton); "
                "use a tl.math function or check the kernel on a GPU"
            )
        _libdevice_calls.append(name)
        try:
            return backend(*args, _semantic=interpreter.interpreter_semantic, **kwargs)
        finally:
            _libdevice_calls.pop()

    setattr(call, _MARK, True)
    return call


def fix_libdevice() -> bool:
    """libdevice functions compute by numpy under the interpreter, as ``tl.math``'s do.

    The gap (checked against triton 3.9.0): under the interpreter, ``tl.extra.libdevice.tanh`` and
    the rest are the empty stubs of ``triton/language/extra/libdevice.py`` (the compiler swaps in a
    backend's module; the interpreter does not), so they return None; the backends' own modules
    (``triton.language.extra.cuda.libdevice``) are builtins the interpreter never hands its
    semantic to ("Did you forget to add @triton.jit ?"); and its builder's
    ``create_extern_elementwise`` raises NotImplementedError. This replaces the stubs and the
    backends' functions with ones that, called from an interpreted kernel, run the backend's
    function (its dtype checks and broadcasting, as compiled) with the interpreter's semantic, and
    gives ``InterpreterBuilder`` a ``create_extern_elementwise`` that computes the function being
    called by numpy, through the builder's own ``create_exp``-style operations (its numpy mapping
    of ``tl.math``) where it has one (see ``_LIBDEVICE``). Calls from the compiler pass through,
    and the stubs keep the module and name the compiler maps them by. Fixed in Triton when the
    probe kernel (``libdevice.tanh`` and ``cuda.libdevice.tanh``) runs without this. Returns
    whether it patched.
    """
    _triton()
    import importlib

    from triton.runtime import interpreter

    stubs = importlib.import_module("triton.language.extra.libdevice")
    if getattr(getattr(stubs, "tanh", None), _MARK, False) or not _libdevice_gap():
        return False

    def functions(module: Any) -> dict[str, Any]:
        return {name: member for name, member in vars(module).items()
                if callable(member) and getattr(member, "__module__", "") == module.__name__ and not name.startswith("_")}

    originals: dict[str, Any] = {}  # name: the backend's function, cuda's first (the stubs' default), then hip's
    for backend in ("cuda", "hip"):
        try:
            module = importlib.import_module(f"triton.language.extra.{backend}.libdevice")
        except ImportError:
            continue
        for name, member in functions(module).items():
            originals.setdefault(name, member)
            setattr(module, name, _interpreted(name, member, member))
    for name, stub in functions(stubs).items():
        setattr(stubs, name, _interpreted(name, originals.get(name), stub))
    interpreter.InterpreterBuilder.create_extern_elementwise = _extern_elementwise
    return True


# ---------------------------------------------------------------------------------------------------
# 3. autotune


def _no_benchmark(kernel_call: Callable[[], Any], quantiles: Any = None, **_: Any) -> Any:
    """The autotuner's benchmarker under the interpreter: runs nothing, every config ties (the first wins)."""
    return [0.0] * len(quantiles) if quantiles else 0.0


def fix_autotune() -> bool:
    """``@triton.autotune`` takes its first config (after pruning) under the interpreter, without benchmarking.

    The gap (checked against triton 3.9.0): with more than one config, ``Autotuner.run`` benchmarks
    each through ``driver.active.get_benchmarker()``, which on a CPU-only machine raises "0 active
    drivers ([]). There should only be one." (and on a GPU one times interpreted runs, which mean
    nothing). This makes ``Autotuner.do_bench`` a benchmarker that runs nothing and ties every
    config while the interpreter is on, so ``min`` keeps the first of the pruned configs
    (``prune_configs_by`` still applies); a compiled kernel keeps Triton's own. Fixed in Triton when
    the probe kernel (two configs, counting its runs) runs once without this. Returns whether it
    patched.
    """
    triton = _triton()
    from triton.runtime.autotuner import Autotuner

    original = Autotuner.__dict__["do_bench"]
    if getattr(original, _MARK, False) or not _autotune_gap():
        return False

    def do_bench(self: Any) -> Any:
        if triton.knobs.runtime.interpret:
            return _no_benchmark
        return original.func(self) if isinstance(original, functools.cached_property) else original.__get__(self)

    prop = functools.cached_property(do_bench)
    prop.__set_name__(Autotuner, "do_bench")
    setattr(prop, _MARK, True)
    Autotuner.do_bench = prop
    return True


# ---------------------------------------------------------------------------------------------------
# 4. loop variables

_LOOP_RANGE = "_gradient_lab_loop_range"  # the helper's name in the rewritten kernels' globals


def _loop_range(range_fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``range_fn(*args, **kwargs)``'s values as scalar tensors, of the dtype the compiler gives the loop variable."""
    from triton.runtime import interpreter

    tl = _triton().language
    semantic = interpreter.interpreter_semantic
    bounds = [*args, *([kwargs["step"]] if "step" in kwargs else [])]
    iv_type = None
    for bound in bounds:  # as the code generator's visit_For: integer promotion of lb, ub and step
        ty = bound.dtype if isinstance(bound, tl.tensor) else semantic.to_tensor_type(bound.value if isinstance(bound, tl.constexpr) else bound)
        iv_type = ty if iv_type is None else semantic.integer_promote_impl(iv_type, ty)
    if iv_type is None or not iv_type.is_int():
        raise TypeError(f"For loop bounds and step must all be ints, are {bounds}")
    np_dtype = interpreter._get_np_dtype(iv_type)
    for value in range_fn(*args, **kwargs):
        yield tl.tensor(interpreter.TensorHandle(np.array([value], dtype=np_dtype), iv_type), iv_type)


def fix_loop_variables() -> bool:
    """A ``for i in range(...)`` or ``tl.range(...)`` loop variable is an integer scalar tensor, as compiled.

    The gap (checked against triton 3.9.0): the interpreter runs a kernel's loops as Python loops,
    so the variable is a Python int and ``i.to(tl.float32)`` raises ``'int' object has no
    attribute 'to'`` (compiled, it is an int32 or int64 tensor). This extends the interpreter's AST
    rewriter (``FunctionRewriter.ast_transformer``, which already turns assignments into tensors)
    so a ``for`` over a call to ``range`` or ``*.range`` iterates ``_loop_range``, which yields the
    values as tensors of the promoted dtype of the bounds; ``tl.static_range`` (compile-time
    constants) is left alone, and kernels rewritten before are rewritten again. Fixed in Triton
    when the probe kernel (``i.to(tl.float32)`` in a loop) runs without this. Returns whether it
    patched.
    """
    _triton()
    from triton.runtime import interpreter

    rewriter = interpreter.FunctionRewriter
    if getattr(rewriter.ast_transformer, _MARK, False) or not _loop_variables_gap():
        return False

    class LoopTransformer(type(rewriter.ast_transformer)):  # type: ignore[misc]
        def visit_For(self, node: ast.For) -> ast.AST:
            node = self.generic_visit(node)
            call = node.iter
            if isinstance(call, ast.Call) and (getattr(call.func, "id", None) == "range" or getattr(call.func, "attr", None) == "range"):
                wrapped = ast.Call(func=ast.Name(id=_LOOP_RANGE, ctx=ast.Load()), args=[call.func, *call.args], keywords=call.keywords)
                node.iter = ast.copy_location(wrapped, call)
            return node

    transformer = LoopTransformer()
    setattr(transformer, _MARK, True)
    # the rewriter adds the interpreter module's globals to a kernel's, so the helper is found there
    setattr(interpreter, _LOOP_RANGE, _loop_range)
    rewriter.ast_transformer = transformer
    interpreter.InterpretedFunction.rewritten_fn.clear()
    return True


_WORKAROUNDS: tuple[tuple[str, Callable[[], bool]], ...] = (
    ("float_arguments", fix_float_arguments),
    ("libdevice", fix_libdevice),
    ("autotune", fix_autotune),
    ("loop_variables", fix_loop_variables),
)

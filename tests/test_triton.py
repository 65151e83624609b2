"""gradient_lab.triton: Triton's interpreter made usable for checking kernels' backwards on CPU.

Each of the interpreter's four gaps is met by a tiny kernel, run in a fresh Python (the workarounds
patch triton for the whole process, and TRITON_INTERPRET must be set before triton is imported): on
the pinned triton the probe finds the gap and the kernel fails; after the workaround the kernel's
numbers match torch's and the probe finds nothing. One script runs the four (an import of torch and
triton costs seconds), each test reads its own record. ``interpret()`` itself runs in a second fresh
Python, the dtype refusal and the missing-triton message in this one.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

# as tests/specimens/triton_kernels.py: triton's own @jit functions are defined when it is imported,
# under the interpreter only where the switch is set by then; an explicit TRITON_INTERPRET=0 is kept
os.environ.setdefault("TRITON_INTERPRET", "1")
triton = pytest.importorskip("triton")

from gradient_lab import triton as gl_triton  # noqa: E402

ROOT = Path(__file__).parents[1]
PINNED = "3.9.0"  # requirements-dev.txt's triton, the version the gaps were found in

GAPS = r'''
import json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice
from triton.language.extra.cuda import libdevice as cuda_libdevice
from gradient_lab import triton as gl_triton

N = 37
x = torch.rand(N, generator=torch.Generator().manual_seed(0)) + 0.5


@triton.jit
def scaled(x, y, scale, n, B: tl.constexpr):
    o = tl.program_id(0) * B + tl.arange(0, B)
    m = o < n
    tl.store(y + o, tl.load(x + o, mask=m) * scale.to(tl.float32), mask=m)


@triton.jit
def special(x, y, n, B: tl.constexpr):
    o = tl.program_id(0) * B + tl.arange(0, B)
    m = o < n
    v = tl.load(x + o, mask=m, other=1.0)
    r = libdevice.tanh(v) * libdevice.rsqrt(v) + cuda_libdevice.erf(v) + libdevice.pow(v, 3.0) + libdevice.exp2(v)
    tl.store(y + o, r, mask=m)


@triton.autotune(configs=[triton.Config({"B": 16}), triton.Config({"B": 64})], key=["n"])
@triton.jit
def tuned(x, y, n, B: tl.constexpr):
    o = tl.program_id(0) * B + tl.arange(0, B)
    m = o < n
    tl.store(y + o, tl.load(x + o, mask=m) * 2, mask=m)


@triton.jit
def looped(x, y, n, B: tl.constexpr):
    o = tl.program_id(0) * B + tl.arange(0, B)
    m = o < n
    v = tl.load(x + o, mask=m)
    acc = tl.zeros([B], tl.float32)
    for i in range(1, 4):
        acc += v * i.to(tl.float32)
    tl.store(y + o, acc, mask=m)


def launch(kernel, *args, B=None):
    y = torch.zeros(N)
    if B is None:
        kernel[lambda meta: (triton.cdiv(N, meta["B"]),)](x, y, *args, N)
    else:
        kernel[(triton.cdiv(N, B),)](x, y, *args, N, B=B)
    return y


CASES = {
    "float_arguments": (gl_triton._float_arguments_gap, gl_triton.fix_float_arguments,
                        lambda: launch(scaled, 0.25, B=16), x * 0.25),
    "libdevice": (gl_triton._libdevice_gap, gl_triton.fix_libdevice, lambda: launch(special, B=16),
                  torch.tanh(x) * torch.rsqrt(x) + torch.erf(x) + x**3 + torch.exp2(x)),
    "autotune": (gl_triton._autotune_gap, gl_triton.fix_autotune, lambda: launch(tuned), x * 2),
    "loop_variables": (gl_triton._loop_variables_gap, gl_triton.fix_loop_variables,
                       lambda: launch(looped, B=16), x * 6),
}
records = {}
for name, (gap, fix, run, expected) in CASES.items():
    record = records[name] = {"version": triton.__version__, "gap_before": gap()}
    try:
        run()
        record["error_before"] = None
    except Exception as error:
        record["error_before"] = f"{type(error).__name__}: {error}"
    record["applied"] = fix()
    record["max_error"] = (run() - expected).abs().max().item()
    record["gap_after"] = gap()
    record["applied_again"] = fix()
records["autotune"]["best_config"] = tuned.best_config.kwargs
print(json.dumps(records))
'''

INTERPRET = r'''
import json, sys
import gradient_lab
from gradient_lab import triton as gl_triton
imported_early = "triton" in sys.modules
interpreting_before = gl_triton.interpreting()
names = gl_triton.interpret()
again = gl_triton.interpret()

import torch
import triton
import triton.language as tl
from triton.language.extra.libdevice import tanh


@triton.autotune(configs=[triton.Config({"B": 8}), triton.Config({"B": 32})], key=["n"])
@triton.jit
def kernel(x, y, scale, n, B: tl.constexpr):
    o = tl.program_id(0) * B + tl.arange(0, B)
    m = o < n
    v = tl.load(x + o, mask=m)
    acc = tl.zeros([B], tl.float32)
    for i in tl.range(0, 3):
        acc += tanh(v) * scale.to(tl.float32) * i.to(tl.float32)
    tl.store(y + o, acc, mask=m)


x = torch.linspace(-2, 2, 21)
y = torch.zeros(21)
kernel[lambda meta: (triton.cdiv(21, meta["B"]),)](x, y, 0.5, 21)
print(json.dumps({"imported_early": imported_early, "interpreting_before": interpreting_before,
                  "interpreting": gl_triton.interpreting(), "names": names, "again": again,
                  "max_error": (y - torch.tanh(x) * 1.5).abs().max().item()}))
'''

TOO_LATE = r'''
import triton
from gradient_lab import triton as gl_triton
try:
    gl_triton.interpret()
except RuntimeError as error:
    print(error)
'''


def _run(tmp_path: Path, name: str, source: str) -> str:
    """``source`` run as a script in a fresh Python, without TRITON_INTERPRET; its stdout's last line."""
    script = tmp_path / f"{name}.py"  # a file: the interpreter reads a kernel's source back
    script.write_text(textwrap.dedent(source))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def gaps(tmp_path_factory):
    return json.loads(_run(tmp_path_factory.mktemp("gaps"), "gaps", GAPS))


def _assert_fixed(record: dict, gap_message: str) -> None:
    if record["version"] == PINNED:  # the gap is there on the pinned triton, the kernel fails without the workaround
        assert record["gap_before"] and record["applied"]
        assert gap_message in record["error_before"]
    if record["gap_before"]:
        assert record["applied"]
    assert record["max_error"] < 1e-5  # with it (or without, where triton fixed the gap), torch's numbers
    assert not record["gap_after"]
    assert not record["applied_again"]  # applied once


def test_a_float_argument_is_an_fp32_scalar_inside_the_kernel(gaps):
    _assert_fixed(gaps["float_arguments"], "'float' object has no attribute 'to'")


def test_libdevice_functions_compute_by_numpy(gaps):
    _assert_fixed(gaps["libdevice"], "NoneType")  # what the empty stubs return


def test_autotune_takes_the_first_config_without_a_gpu(gaps):
    _assert_fixed(gaps["autotune"], "0 active drivers")
    assert gaps["autotune"]["best_config"] == {"B": 16}


def test_a_loop_variable_is_a_tensor_scalar(gaps):
    _assert_fixed(gaps["loop_variables"], "'int' object has no attribute 'to'")


def test_interpret_turns_the_interpreter_on_applies_the_workarounds_once_and_kernels_run(tmp_path):
    result = json.loads(_run(tmp_path, "interpret", INTERPRET))
    assert not result["imported_early"]  # Gradient Lab imports no triton until interpret()
    assert not result["interpreting_before"] and result["interpreting"]
    if triton.__version__ == PINNED:
        assert result["names"] == ["float_arguments", "libdevice", "autotune", "loop_variables"]
    assert result["again"] == result["names"]
    assert result["max_error"] < 1e-5


def test_interpret_after_triton_was_imported_says_to_call_it_first(tmp_path):
    message = _run(tmp_path, "too_late", TOO_LATE)
    assert "triton was imported before Triton's interpreter was turned on" in message
    assert "interpret() before anything imports triton" in message


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2])
def test_bfloat16_and_float8_are_refused_under_the_interpreter_with_the_reason(dtype):
    with pytest.raises(ValueError, match="integer bit patterns") as refused:
        gl_triton.check_dtype(dtype, interpreted=True)
    assert str(dtype).removeprefix("torch.") in str(refused.value)
    gl_triton.check_dtype(dtype, interpreted=False)  # compiled kernels compute them


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_the_dtypes_numpy_has_are_checked(dtype):
    gl_triton.check_dtype(dtype, interpreted=True)


def test_the_label_says_what_the_interpreter_does_not_test():
    assert "Triton's interpreter" in gl_triton.INTERPRETER_SEMANTICS
    assert all(word in gl_triton.INTERPRETER_SEMANTICS for word in ("races", "tf32", "memory layouts"))


def test_without_triton_interpret_names_the_extra_and_leaves_the_environment(monkeypatch):
    before = os.environ.get("TRITON_INTERPRET")
    monkeypatch.setitem(sys.modules, "triton", None)  # what an import finds where triton is not installed
    with pytest.raises(ImportError, match=r"pip install 'gradient-lab\[triton\]'"):
        gl_triton.interpret()
    assert os.environ.get("TRITON_INTERPRET") == before


KERNELS_MODULE = r'''
import os
os.environ.setdefault("TRITON_INTERPRET", "1")  # the module turns the interpreter on itself, as shipped kernels' tests do
import torch
import triton
import triton.language as tl
from triton.language.extra.libdevice import tanh  # bound at import, as Liger-Kernel binds rsqrt and tanh

from gradient_lab import declare


@triton.jit
def tanh_kernel(X, Y, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(Y + i, tanh(tl.load(X + i, mask=i < n, other=0.0)), mask=i < n)


def run(x):
    y = torch.empty_like(x)
    tanh_kernel[(1,)](x, y, x.numel(), BLOCK=triton.next_power_of_2(x.numel()))
    return y


declare("tanh kernel", {"kernel": run}, reference=torch.tanh, kernel=True)
'''

LOADS = r'''
import json, sys, torch
from gradient_lab.app import plugins
result = plugins.load("kernels_module.py")
module = next(m for name, m in sys.modules.items() if name.startswith("gradient_lab_user_kernels_module"))
x = torch.linspace(-2, 2, 7)
print(json.dumps({"error": result.error, "families": result.families, "max_error": float((module.run(x) - torch.tanh(x)).abs().max())}))
'''


def test_a_module_that_turns_the_interpreter_on_itself_is_loaded_with_the_workarounds(tmp_path):
    (tmp_path / "kernels_module.py").write_text(KERNELS_MODULE)
    result = json.loads(_run(tmp_path, "loads", LOADS))
    assert result["error"] is None and result["families"] == ["tanh kernel"]
    assert result["max_error"] < 1e-6  # the libdevice stub it bound at import computes (the empty stub returns None)

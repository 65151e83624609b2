"""The whole suite's one setting: Triton's interpreter, switched on before anything imports triton.

A report imports triton (through torch's compile stack) wherever it is installed, and triton decides
at import whether its own @triton.jit functions are interpreted: kernels the tests define later (the
Triton specimens, Liger-Kernel's) run on the CPU only where the switch was set first. An explicit
TRITON_INTERPRET=0 (a GPU machine) is kept."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

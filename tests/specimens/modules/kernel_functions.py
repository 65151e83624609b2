"""Kernel stand-ins (tests.specimens.kernels) declared as kernels: right ones that compute in float32
or refuse float64, a planted bug, and writers autograd cannot see (right gradients, their writes
named, as Liger-Kernel's SwiGLU and cross entropy write by design)."""

from gradient_lab import declare
from tests.specimens.kernels import (SquareHalfGradient, SquareInFloat32, SquareRefusingFloat64, SquareWritingIntoInput,
                                     SquareWritingIntoSaved, square)

declare("kernel square", {"float32 inside": SquareInFloat32, "refuses float64": SquareRefusingFloat64, "half gradient": SquareHalfGradient,
                          "writes into saved": SquareWritingIntoSaved, "writes into its input": SquareWritingIntoInput},
        reference=square, correct=("float32 inside", "refuses float64", "writes into saved", "writes into its input"), kernel=True)

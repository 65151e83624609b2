"""Every correct gallery formula under the sidebar's own settings: rows near zero at 0.1, 1 and 10
eps, a third dim reduced along each dim, row norms from 1e-6 to 1e4, inputs parallel and
antiparallel, a broadcast second input, float32 and bfloat16, several seeds. A correct formula
must pass every one of them (with the default conditions); the lines printed name those that do not.

    .venv/bin/python benchmarks/sweep_gallery.py

Last line: ``failures=N``."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gradient_lab.app import views  # noqa: E402
from gradient_lab.app.case import Case  # noqa: E402
from gradient_lab.app.family import families  # noqa: E402
from gradient_lab.explore.perturb import Perturbation  # noqa: E402


def settings(family) -> list[tuple[str, dict]]:
    """(label, Case fields) of every setting that applies to ``family``."""
    two = len(family.input_names) > 1
    found = [("defaults", {})]
    found += [(f"2 rows near zero at {f:g}·eps", {"perturbation": Perturbation(near_zero_rows=2, near_zero_factor=f)}) for f in (0.1, 1.0, 10.0)]
    found += [(f"row norm {n:g}", {"perturbation": Perturbation(norm1=n, norm2=n if two else 0.0)}) for n in (1e-6, 1e-3, 1e2, 1e4)]
    if two:
        found += [(f"{a} within {angle:g}°", {"perturbation": Perturbation(align=a, align_angle=angle)})
                  for a in ("parallel", "antiparallel") for angle in (0.0, 1.0)]
    if family.broadcast:
        found.append(("broadcast", {"broadcast": True}))
    if "dim" in family.params:
        found += [(f"(4, 6, 8) along dim {d}", {"shape": (4, 6, 8), "params": (("dim", d),)}) for d in (0, 1, 2, -1)]
    found += [(dtype, {"dtype": dtype}) for dtype in ("float32", "bfloat16")]
    found += [(f"seed {s}", {"seed": s}) for s in (1, 2)]
    return found


def main() -> None:
    argparse.ArgumentParser(description=__doc__).parse_args()
    failures = runs = 0
    for family in families().values():
        correct = [name for name, formula in family.formulas.items() if formula.correct]
        for label, fields in settings(family):
            case = dataclasses.replace(Case(family=family.name, formulas=tuple(correct)), **fields)
            for formula in correct:
                runs += 1
                try:
                    report = views.gradient_report(case, formula)
                    bad = not report.verdict.passed
                    why = f"{report.verdict.condition}: {report.verdict.finding}" if bad else ""
                except Exception as error:  # noqa: BLE001 - a crash is a failure too
                    bad, why = True, f"raised {type(error).__name__}: {error}"
                if bad:
                    failures += 1
                    print(f"{family.name} {formula} [{label}]: {why[:300]}", flush=True)
    print(f"runs={runs}")
    print(f"failures={failures}")


if __name__ == "__main__":
    main()

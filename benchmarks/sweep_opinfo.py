"""PyTorch's own formulas against the verdict: the first float64 sample of every differentiable
OpInfo op, judged by ``check_gradients(op, inputs, order=1, conditions=...)`` (no reference: the
truth is finite differences) beside ``torch.autograd.gradcheck`` in slow mode. The ops' backwards
are PyTorch's, so wherever the two disagree one of them is wrong; the lines printed name them.

Each op runs in a child process that reports one line per op, and a crashed child (an op that
takes the process down) is replaced and the sweep goes on. Usage:

    .venv/bin/python benchmarks/sweep_opinfo.py [--conditions none|default] [--limit N] [--only NAME,...]

Last line: ``disagreements=N`` (crashes and disagreements with gradcheck's slow mode)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child(names: list[str], conditions: str) -> None:
    import warnings

    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    sys.path.insert(0, ROOT)
    from gradient_lab.errors import LabError
    from gradient_lab.testing import check_gradients

    warnings.filterwarnings("ignore")
    ops = {f"{op.name}.{op.variant_test_name}".rstrip("."): op for op in op_db}
    for name in names:
        op = ops[name]
        line = {"op": name}
        try:
            sample = next(iter(op.sample_inputs("cpu", torch.float64, requires_grad=True)))
            given = [sample.input, *sample.args]
            where = [i for i, t in enumerate(given) if isinstance(t, torch.Tensor) and t.requires_grad]
            if isinstance(sample.input, (list, tuple)):  # a list input (cat, stack): its tensors are the inputs
                line["skipped"] = "a list input"
                print(json.dumps(line), flush=True)
                continue
            if not where:
                line["skipped"] = "no differentiable tensor"
                print(json.dumps(line), flush=True)
                continue
            tensors = [given[i].detach() for i in where]

            def call(*xs, given=given, where=where, sample=sample, op=op):
                args = list(given)
                for i, x in zip(where, xs):
                    args[i] = x
                out = op(args[0], *args[1:], **sample.kwargs)
                out = sample.output_process_fn_grad(out)
                if isinstance(out, (list, tuple)):
                    out = tuple(o for o in out if isinstance(o, torch.Tensor) and o.is_floating_point())
                    return out if len(out) != 1 else out[0]
                return out

            try:
                line["gradcheck"] = bool(torch.autograd.gradcheck(call, [t.clone().requires_grad_() for t in tensors], fast_mode=False,
                                                                   raise_exception=False, check_undefined_grad=False,
                                                                   check_batched_grad=False))
            except Exception as error:  # noqa: BLE001
                line["gradcheck"] = f"raises {type(error).__name__}"
            try:
                report = check_gradients(call, tensors, order=1, conditions=conditions, training=0)
                line["verdict"] = report.verdict.outcome
                if not report.verdict.passed:
                    line["why"] = (report.verdict.condition + ": " if report.verdict.condition else "") + report.verdict.finding[:300]
            except LabError as error:  # a clear refusal (sparse inputs, say): not a crash
                line["verdict"] = f"refused: {str(error)[:200]}"
            except Exception as error:  # noqa: BLE001
                line["verdict"] = f"crash {type(error).__name__}: {str(error)[:200]}"
        except Exception as error:  # noqa: BLE001
            line["skipped"] = f"sample: {type(error).__name__}"
        print(json.dumps(line), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conditions", default="none")
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--only", default="")
    parser.add_argument("--child", action="store_true")
    parser.add_argument("names", nargs="*")
    args = parser.parse_args()
    if args.child:
        child(args.names, args.conditions)
        return
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    names = [f"{op.name}.{op.variant_test_name}".rstrip(".") for op in op_db
             if op.supports_autograd and torch.float64 in op.supported_dtypes("cpu")]
    if args.only:
        wanted = set(args.only.split(","))
        names = [n for n in names if n in wanted or n.split(".")[0] in wanted]
    names = names[: args.limit or None]
    lines, todo = [], list(names)
    while todo:
        run = subprocess.run([sys.executable, __file__, "--child", "--conditions", args.conditions, *todo], capture_output=True, text=True,
                             cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
        done = [json.loads(text) for text in run.stdout.splitlines() if text.startswith("{")]
        lines.extend(done)
        todo = todo[len(done):]
        if todo:  # the child died on todo[0]
            lines.append({"op": todo[0], "verdict": f"crash: the process died ({run.returncode})"})
            todo = todo[1:]
    bad = 0
    for line in lines:
        if "skipped" in line:
            continue
        verdict, gradcheck = line.get("verdict", ""), line.get("gradcheck")
        disagree = verdict.startswith("crash") or (gradcheck is True and verdict != "pass") or (gradcheck is False and verdict == "pass")
        if disagree:
            bad += 1
            print(json.dumps(line))
    judged = sum("skipped" not in line for line in lines)
    refused = sum(line.get("verdict", "").startswith("refused") for line in lines)
    print(f"ops={len(names)} judged={judged} refused={refused} disagreements={bad}")
    print(f"disagreements={bad}")


if __name__ == "__main__":
    main()

"""The ``gradient-lab`` command, for test suites, CI and the dashboard:

    gradient-lab check path/or/module [--family NAME] [--shape 8,16] [--dtype float64] [--seed 0]
                       [--order 1|2] [--conditions default|all|none] [--parity [all|quick|PATH,...]] [--determinism [N]]
                       [--format text|json|junit] [--report report.html]
    gradient-lab app [--functions MODULE ...] [streamlit options, e.g. --server.port 8600]

``check`` loads the module as ``--functions`` does (``app.plugins``, with the same messages) and, for
every family the module declares and every formula, runs what the home page runs: the
whole-Jacobian verdict with its coverage and its conditions, the diagnosis, the second order, PyTorch's own
conformance checks, and the Function contract's lint (``contract.anatomy``); with ``--parity``, the
gradient again under torch.compile, torch.func and double backward (``engine.parity``), which compiles. Below float64
(``--dtype float32|bfloat16|float16``) the verdict is also the precision verdict (``engine.precision``): the gradient's error in
that dtype at most twice the reference's in the same dtype, against float64 from the same values, with the tolerances a test
can paste. The text format is a
table that reads at 100 columns; JSON is for machines; JUnit XML gives CI systems one test case per
formula. ``--report`` also writes one self-contained HTML file (``present.html_report``).
``python -m lib.check`` in a checkout is the same as ``gradient-lab check``.

Exit status of ``check``: 0 when every formula declared correct passes; 1 when one fails (a buggy
formula that passes is a warning: its bug may not show on this case); 2 when the module cannot be
loaded, or the arguments are wrong. Progress goes to stderr once a run has taken more than a second.

``app`` starts the dashboard from wherever Gradient Lab is installed (its pages included), from any
directory; ``--functions`` names your modules as for ``streamlit run app.py -- --functions``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence
from xml.etree import ElementTree

from .app import plugins, views
from .app.case import Case
from .engine.report import Determinism, GradientReport, Parity
from .engine.conditions import CONDITION_SETS
from .engine.parity import PATH_KEYS, paths_of
from .engine.second_order import FAILING
from .contract.conformance import Check
from .errors import LabError
from .present.cards import stage_lines
from .present.report_data import determinism_data, parity_data, summary
from .app.family import get_family
from .testing import failure_message, precision_lines

WIDTH = 100
FORMATS = ("text", "json", "junit")
DTYPES = ("float64", "float32", "float16", "bfloat16")


@dataclass
class FormulaResult:
    """One formula's checks, as the home page shows them."""

    family: str
    formula: str
    correct: bool  # declared correct by its family
    outcome: str  # "pass", "fail", "no verdict", or "error" (the check itself could not run)
    summary: str
    second_order: str = "not checked"
    diagnosis: str = ""
    conformance: list[Check] = field(default_factory=list)
    conformance_note: str = ""  # why PyTorch's checks did not run, if they did not
    contract: list[str] = field(default_factory=list)  # the rules of the Function contract it breaks (lib.contract.anatomy), in words
    parity: Parity | None = None  # the gradient under each way of running it, with --parity
    determinism: Determinism | None = None  # the backward run again and again, and a row in other batches, with --determinism
    seconds: float = 0.0
    report: GradientReport | None = None
    case: Case | None = None

    @property
    def gradients_wrong(self) -> bool:
        return self.outcome != "pass" or self.second_order in FAILING

    @property
    def passed(self) -> bool:
        return not self.gradients_wrong and not self.contract and not self.parted

    @property
    def parted(self) -> tuple:
        """The ways of running it whose gradient differs from the truth, or that raise (with --parity)."""
        return self.parity.parted if self.parity is not None else ()

    @property
    def why(self) -> str:
        """Why the gradients are wrong, in a few words; "" where they are right."""
        if not self.gradients_wrong:
            return ""
        failure = self.report.failure if self.report is not None else None
        precision = self.report.precision if self.report is not None else None
        condition = self.report.verdict.condition if self.report is not None else ""
        if not self.diagnosis and condition:  # right as gradcheck calls it, wrong as real code does (the assertion's words)
            return f"it fails only when {condition}"
        if not self.diagnosis and not failure and precision is not None and not precision.passed:
            return precision.finding()
        return self.diagnosis or (f"the formula raised: {failure}" if failure else "the check could not run: " + self.summary
                                  if self.outcome == "error" else "no single cause found")

    @property
    def status(self) -> str:
        """"ok" (as declared), "FAILED" (a correct formula that does not pass), "warning" (a buggy
        one that passes here) or "caught" (a buggy one that fails, as it should)."""
        if self.correct:
            return "ok" if self.passed else "FAILED"
        return "warning" if self.passed else "caught"

    def conformance_counts(self) -> str:
        if not self.conformance:
            return "not run" if self.conformance_note else "-"
        counts = {s: sum(c.status == s for c in self.conformance) for s in ("pass", "fail")}
        return f"{counts['pass']} pass, {counts['fail']} fail of {len(self.conformance)}"

    def details(self) -> str:
        if self.report is None:
            return self.summary
        text = failure_message(self.report, order=2) if self.gradients_wrong else f"first order {self.summary}"
        if not self.gradients_wrong:  # failure_message says the other stages already
            text += "".join("\n" + textwrap.fill(f"{line} [{outcome}]", WIDTH, initial_indent="  ", subsequent_indent="    ")
                            for outcome, line in stage_lines(self.report))
        for c in self.parted:
            text += "\n" + textwrap.fill(f"{c.outcome} under {c.label}: {_cut(c.finding, 240)}", WIDTH, initial_indent="  ",
                                         subsequent_indent="    ")
        if self.contract:
            text += "\n" + "\n".join(textwrap.fill(f"breaks the Function contract: {c}", WIDTH, initial_indent="  ",
                                                   subsequent_indent="    ") for c in self.contract)
        failed = [c for c in self.conformance if c.status == "fail"]
        if failed:
            text += "\n" + "\n".join(textwrap.fill(f"PyTorch's {c.name} fails: {_cut(' '.join(c.message.split()), 160)}", WIDTH,
                                                   initial_indent="  ", subsequent_indent="    ") for c in failed)
        return text

    def as_dict(self) -> dict:
        """The command line's facts about the formula, with its gradient report in the one schema the
        pages' download uses (``lib.present.report_data.summary``)."""
        return {
            "family": self.family, "formula": self.formula, "declared": "correct" if self.correct else "buggy",
            "status": self.status, "why": self.why or None, "seconds": round(self.seconds, 3),
            "refused": self.summary if self.report is None else None,  # why no report could be made
            "report": summary(self.report, self.case) if self.report is not None else None,
            "conformance_note": self.conformance_note,
            "conformance": [{"name": c.name, "status": c.status, "message": c.message} for c in self.conformance],
            "contract": self.contract,
            "parity": parity_data(self.parity),
            "determinism": determinism_data(self.determinism),
        }  # fmt: skip


class Progress:
    """Lines on stderr, only once the run has taken more than ``after`` seconds."""

    def __init__(self, after: float = 1.0, stream=None) -> None:
        self.start, self.after, self.stream = time.monotonic(), after, stream or sys.stderr

    def say(self, text: str) -> None:
        if time.monotonic() - self.start > self.after:
            print(f"[{time.monotonic() - self.start:5.1f} s] {text}", file=self.stream, flush=True)


def check_formula(case: Case, formula: str, correct: bool, determinism: int = 0) -> FormulaResult:
    start = time.monotonic()
    try:
        report = views.gradient_report(case, formula)
    except LabError as error:
        return FormulaResult(case.family, formula, correct, "error", str(error), seconds=time.monotonic() - start, case=case)
    result = FormulaResult(case.family, formula, correct, report.verdict.outcome, report.verdict.summary,
                           second_order=report.second_order.outcome if report.second_order else "not checked",
                           diagnosis=report.diagnosis.words if report.diagnosis else "", report=report, case=case)
    try:
        result.conformance = views.conformance(case, formula)
    except LabError as error:
        result.conformance_note = str(error)
    try:  # as Home's contract line: a formula that raises is the verdict's to report
        result.contract = [f"{b.rule}: {b.message}" for b in views.contract_problems(case).get(formula, [])]
    except LabError as error:
        result.contract = []
        result.conformance_note = result.conformance_note or str(error)
    if case.parity:
        try:
            result.parity = views.parity(case, formula)
        except LabError as error:
            result.conformance_note = result.conformance_note or f"parity not run: {error}"
    if determinism:
        try:
            result.determinism = views.determinism(case, formula, determinism)
        except LabError as error:
            result.conformance_note = result.conformance_note or f"determinism not run: {error}"
    result.seconds = time.monotonic() - start
    return result


def check_module(source: str, *, family: str | None = None, shape: tuple[int, ...] = (8, 16), dtype: str = "float64",
                 seed: int = 0, order: int | None = None, progress: Progress | None = None,
                 conditions: str = "default", parity: str = "", determinism: int = 0) -> list[FormulaResult]:
    """Every formula of every family ``source`` declares (or of ``family`` alone), to ``order``
    (None: as each family declares). Raises LabError when the module cannot be loaded or declares
    no such family."""
    loaded = plugins.load(source)
    if loaded.error:
        raise LabError(loaded.error)
    names = loaded.families
    if family is not None:
        if family not in names:
            raise LabError(f"{source} declares no family {family!r}; it declares: {', '.join(names) or 'none'}.")
        names = (family,)
    progress = progress or Progress()
    results = []
    for name in names:
        declared = get_family(name)
        for formula, spec in declared.formulas.items():
            progress.say(f"checking {name} / {formula} …")
            case = Case(family=name, formulas=(formula,), shape=shape, dtype=dtype, seed=seed, order=order, conditions=conditions,
                        parity=parity)
            results.append(check_formula(case, formula, spec.correct, determinism))
    return results


def exit_status(results: Sequence[FormulaResult]) -> int:
    return 1 if any(r.status == "FAILED" for r in results) else 0


# ---- formats ---------------------------------------------------------------------------------------


def text_table(results: Sequence[FormulaResult]) -> str:
    header = f"{'family / formula':<30} {'declared':<8} {'status':<8} {'1st order':<10} {'2nd order':<18} PyTorch's checks"
    lines = [header, "-" * WIDTH]
    for r in results:
        name = f"{r.family} / {r.formula}"
        lines.append(f"{_cut(name, 30):<30} {'correct' if r.correct else 'buggy':<8} {r.status:<8} {_cut(r.outcome, 10):<10} "
                     f"{_cut(r.second_order, 18):<18} {r.conformance_counts()}")
        if r.why:
            lines.append(textwrap.fill(f"why: {r.why}", WIDTH, initial_indent="    ", subsequent_indent="      "))
        for broken in r.contract:
            lines.append(textwrap.fill(f"contract: {broken}", WIDTH, initial_indent="    ", subsequent_indent="      "))
        if r.report is not None and r.report.precision is not None and not r.gradients_wrong:
            lines += [textwrap.fill(line, WIDTH, initial_indent="    ", subsequent_indent="      ") for line in precision_lines(r.report)]
        if r.report is not None and r.report.provenance is not None:
            lines.append(textwrap.fill(f"not finite: {r.report.provenance.describe()}", WIDTH, initial_indent="    ",
                                       subsequent_indent="      "))
        for _, line in stage_lines(r.report, short=True) if r.report is not None else ():  # the other stages: does it train, …
            lines.append(textwrap.fill(line[0].lower() + line[1:], WIDTH, initial_indent="    ", subsequent_indent="      "))
        if r.determinism is not None:
            lines.append(textwrap.fill(f"determinism: {r.determinism.describe()}", WIDTH, initial_indent="    ",
                                       subsequent_indent="      "))
        if r.parity is not None:
            lines.append(textwrap.fill(f"parity: {r.parity.describe()}", WIDTH, initial_indent="    ", subsequent_indent="      "))
            lines += [f"      {c.label:<52} {c.outcome}" for c in r.parity.cells]
            failing = [t.name for t in r.parity.opcheck if not t.passed]
            if r.parity.opcheck:
                lines.append(f"    opcheck: {'fails ' + ', '.join(failing) if failing else 'passes'} (it checks no numbers)")
    lines.append("-" * WIDTH)
    failed = [r for r in results if r.status == "FAILED"]
    warned = [r for r in results if r.status == "warning"]
    for r in failed:
        lines += ["", f"FAILED {r.family} / {r.formula} (declared correct):", r.details()]
    for r in warned:
        lines += ["", textwrap.fill(f"warning: {r.family} / {r.formula} is declared buggy yet passes on this case: its bug may "
                                    "need other inputs (another shape, dtype, or a perturbation).", WIDTH)]
    counts = {s: sum(r.status == s for r in results) for s in ("ok", "caught", "FAILED", "warning")}
    lines += ["", textwrap.fill(f"{len(results)} formulas: {counts['ok']} correct and passing, {counts['caught']} buggy and caught, "
                                f"{counts['FAILED']} correct but failing, {counts['warning']} buggy but passing (warnings)", WIDTH)]
    return "\n".join(lines)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def json_text(results: Sequence[FormulaResult]) -> str:
    """Strict JSON: NaN and ±Inf become null."""
    return json.dumps(_plain({"exit_status": exit_status(results), "formulas": [r.as_dict() for r in results]}), indent=2,
                      allow_nan=False)


def _plain(value):
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return value if value is None or isinstance(value, (str, int, bool)) else str(value)


def junit_xml(results: Sequence[FormulaResult]) -> str:
    """One test case per formula: a correct formula that fails is a failure; a buggy one that
    passes is skipped with a warning (it is not wrong, but its bug went unseen); a check that could
    not run is an error."""
    suite = ElementTree.Element("testsuite", name="gradient-lab", tests=str(len(results)),
                                failures=str(sum(r.status == "FAILED" and r.outcome != "error" for r in results)),
                                errors=str(sum(r.status == "FAILED" and r.outcome == "error" for r in results)),
                                skipped=str(sum(r.status == "warning" for r in results)),
                                time=f"{sum(r.seconds for r in results):.3f}")
    for r in results:
        case = ElementTree.SubElement(suite, "testcase", classname=f"gradient_lab.{r.family}", name=r.formula, time=f"{r.seconds:.3f}")
        if r.status == "FAILED":
            tag = "error" if r.outcome == "error" else "failure"
            ElementTree.SubElement(case, tag, message=_cut(r.diagnosis or r.summary, 300), type=f"gradient {r.outcome}").text = r.details()
        elif r.status == "warning":
            ElementTree.SubElement(case, "skipped", message=f"warning: declared buggy yet passes on this case: {_cut(r.summary, 200)}")
        else:
            ElementTree.SubElement(case, "system-out").text = f"{r.status}: {r.summary}"
        for c in r.report.conditions.results if r.report is not None and r.report.conditions is not None else ():
            sub = ElementTree.SubElement(suite, "testcase", classname=f"gradient_lab.{r.family}.{r.formula}", name=f"when {c.name}", time="0")
            if c.outcome == "fail" and r.correct:
                ElementTree.SubElement(sub, "failure", message=_cut(c.finding, 300), type="condition fail").text = c.finding
            elif c.outcome in ("not applicable", "as plain"):
                ElementTree.SubElement(sub, "skipped", message=f"{c.outcome}: {_cut(c.finding, 200)}")
        for c in r.parity.cells if r.parity is not None else ():
            sub = ElementTree.SubElement(suite, "testcase", classname=f"gradient_lab.{r.family}.{r.formula}.parity", name=c.label,
                                         time=f"{c.seconds:.3f}")
            if c.parted and r.correct:
                ElementTree.SubElement(sub, "failure", message=_cut(c.finding, 300), type=f"parity {c.outcome}").text = c.finding
            elif c.outcome != "agrees":
                ElementTree.SubElement(sub, "skipped", message=f"{c.outcome}: {_cut(c.finding or c.error, 200)}")
    suite.set("tests", str(len(suite)))
    suite.set("failures", str(sum(1 for t in suite for child in t if child.tag == "failure")))
    suite.set("skipped", str(sum(1 for t in suite for child in t if child.tag == "skipped")))
    root = ElementTree.Element("testsuites")
    root.append(suite)
    ElementTree.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ElementTree.tostring(root, encoding="unicode") + "\n"


# ---- the command -------------------------------------------------------------------------------------


def _shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a shape is sizes separated by commas, like 8,16; not {text!r}") from None
    if not shape or any(size < 1 for size in shape):
        raise argparse.ArgumentTypeError(f"every size must be at least 1: {text!r}")
    return shape


def _check_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("source", help="a module's file path (my_functions.py) or dotted name (mypkg.my_functions)")
    p.add_argument("--family", help="only this family of the module")
    p.add_argument("--shape", type=_shape, default=(8, 16), help="the inputs' shape, e.g. 8,16 (default) or 4,8,16")
    p.add_argument("--dtype", choices=DTYPES, default="float64")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--conditions", choices=CONDITION_SETS, default="default",
                   help="the verdict again under conditions (requires_grad subsets, grad_output and input layouts, aliasing, an empty "
                        "batch, ties): default, all (every subset, every row), or none")
    p.add_argument("--parity", nargs="?", const="all", default="", metavar="all|quick|PATH,...",
                   help="the gradient again under torch.compile (aot_eager, inductor, fullgraph, dynamic), torch.func (grad, vjp, "
                        f"jvp, jacrev, jacfwd, vmap) and double backward; it compiles, so it takes seconds per formula. quick: no "
                        f"inductor. Paths: {', '.join(PATH_KEYS)}")
    p.add_argument("--determinism", nargs="?", type=int, const=10, default=0, metavar="N",
                   help="run each backward N times (default 10) on the same inputs: bitwise equal or not, the spread and a "
                        "nondet_tol for gradcheck; and a row alone and among other rows (batch invariance)")
    p.add_argument("--order", type=int, choices=(1, 2), default=None,
                   help="check the gradients to this order: 1 leaves double backward unchecked (default: as each family declares, else 2)")
    p.add_argument("--format", choices=FORMATS, default="text", help="text (a table), json, or junit (XML)")
    p.add_argument("--report", metavar="FILE.html", help="also write a self-contained HTML report here")
    return p


EXIT_STATUS = "Exit status: 0 every correct formula passes; 1 one fails; 2 the module cannot be loaded."


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gradient-lab", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = p.add_subparsers(dest="command", required=True, metavar="{check,app}")
    _check_arguments(commands.add_parser("check", help="check every formula a module declares", epilog=EXIT_STATUS))
    commands.add_parser("app", help="start the dashboard (streamlit options and --functions MODULE pass through)", add_help=False)
    return p


def check(args: argparse.Namespace) -> int:
    progress = Progress()
    try:
        paths_of(args.parity or "all")
    except ValueError as error:  # an unknown --parity path, refused before anything runs
        print(f"gradient lab: {error}", file=sys.stderr)
        return 2
    if args.report and "plotly" in missing_app_packages():  # refused before anything runs, not after the checks
        print(f"gradient lab: the HTML report draws with plotly, which comes with the dashboard's extra: {APP_EXTRA}", file=sys.stderr)
        return 2
    try:
        results = check_module(args.source, family=args.family, shape=args.shape, dtype=args.dtype, seed=args.seed,
                               order=args.order, progress=progress, conditions=args.conditions, parity=args.parity,
                               determinism=args.determinism)
    except LabError as error:
        print(f"gradient lab: cannot check {args.source}: {error}", file=sys.stderr)
        return 2
    output = {"text": text_table, "json": json_text, "junit": junit_xml}[args.format](results)
    print(output)
    if args.report:
        from .present.html_report import write_report

        progress.say(f"writing {args.report} …")
        write_report(results, args.report, source=args.source)
        print(f"report written to {args.report}", file=sys.stderr)
    for r in results:
        if r.status == "warning":
            print(f"warning: {r.family} / {r.formula} is declared buggy yet passes on this case", file=sys.stderr)
    return exit_status(results)


def dashboard() -> Path:
    """Where the dashboard's scripts are: ``app.py``, ``pages/`` and ``.streamlit/`` (installed as
    the package's ``dashboard`` data; in a checkout, the repository's root)."""
    installed = Path(__file__).resolve().parent / "dashboard"
    return installed if (installed / "app.py").is_file() else Path(__file__).resolve().parents[1]


def app_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``streamlit run`` of the dashboard with the options given, ``--functions`` taken out (they
    become GRADIENT_LAB_FUNCTIONS, file paths made absolute: the server runs in the dashboard's folder)."""
    options, sources, rest = list(argv), [], []
    while options:
        arg = options.pop(0)
        if arg == "--functions" and options:
            sources.append(options.pop(0))
        elif arg.startswith("--functions="):
            sources.append(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    resolved = [str(Path(s).resolve()) if s.endswith(".py") or Path(s).is_file() else s for s in sources]
    return [sys.executable, "-m", f"{__package__}.ui.serve", *rest], resolved  # streamlit run app.py, warmed first


APP_EXTRA = "pip install 'gradient-lab[app]'"


def missing_app_packages() -> list[str]:
    """The dashboard's packages (the ``app`` extra) that are not installed."""
    import importlib.util

    return [name for name in ("streamlit", "plotly") if importlib.util.find_spec(name) is None]


def app(argv: Sequence[str]) -> int:
    missing = missing_app_packages()
    if missing:  # the assertion and the check need neither: the dashboard is an extra
        print(f"gradient lab: the dashboard needs {' and '.join(missing)}, which come with its extra: {APP_EXTRA}", file=sys.stderr)
        return 2
    command, sources = app_command(argv)
    env = dict(os.environ)
    if sources:
        env[plugins.ENVIRONMENT_VARIABLE] = ",".join(filter(None, [env.get(plugins.ENVIRONMENT_VARIABLE, ""), *sources]))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH", "")]))  # dotted names from here
    try:
        return subprocess.call(command, cwd=dashboard(), env=env)
    except KeyboardInterrupt:
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["app"]:
        return app(argv[1:])
    return check(parser().parse_args(argv))

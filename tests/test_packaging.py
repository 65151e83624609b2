"""Gradient Lab as a package: the wheel holds gradient_lab (lib/ under its name) and the dashboard, and
nothing named lib; installed, it imports by its own name from any folder, beside a user's own lib/,
and its command checks a module and starts the dashboard."""

import os
import shutil
import subprocess
import sys
import time
import tomllib
import urllib.request
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def pins(file: Path) -> set[str]:
    lines = (line.split("#")[0].strip() for line in file.read_text().splitlines())
    return {line for line in lines if line and not line.startswith("-r")}


def pinned(file: Path) -> dict[str, str]:
    """The exact pins of a requirements file, by normalised name."""
    found = {}
    for line in pins(file):
        requirement = Requirement(line)
        (specifier,) = requirement.specifier
        assert specifier.operator == "==", f"{file.name} pins exactly: {line}"
        found[canonicalize_name(requirement.name)] = specifier.version
    return found


def test_the_package_declares_ranges_and_the_requirements_pin_versions_inside_them():
    project = PYPROJECT["project"]
    declared = [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["app"]]
    assert sorted(canonicalize_name(r.name) for r in declared) == ["numpy", "plotly", "streamlit", "torch"]
    assert not any(s.operator == "==" for r in declared for s in r.specifier)  # ranges: a user's torch is kept
    assert {canonicalize_name(Requirement(r).name) for r in project["dependencies"]} == {"numpy", "torch"}  # no web framework for the assertion
    application = pinned(ROOT / "requirements.txt")
    assert set(application) == {canonicalize_name(r.name) for r in declared}
    for requirement in declared:
        assert application[canonicalize_name(requirement.name)] in requirement.specifier, (requirement, application)
    assert set(project["optional-dependencies"]["dev"]) | set(PYPROJECT["build-system"]["requires"]) == pins(ROOT / "requirements-dev.txt")
    assert project["scripts"] == {"gradient-lab": "gradient_lab.cli:main"}
    assert project["entry-points"]["pytest11"] == {"gradient_lab": "gradient_lab.pytest_plugin"}


def test_the_public_api_is_three_names_with_docstrings():
    import gradient_lab

    assert sorted(gradient_lab.__all__) == ["assert_gradients_match", "check_gradients", "declare"]
    for name in gradient_lab.__all__:
        function = getattr(gradient_lab, name)
        assert function.__doc__ and function.__annotations__, name
    assert gradient_lab.__version__ == PYPROJECT["project"]["version"]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The wheel, built from this checkout, installed into a fresh venv. Its dependencies are this
    environment's, seen through a .pth file (torch is not downloaded or installed again)."""
    out, source = tmp_path_factory.mktemp("wheel"), tmp_path_factory.mktemp("source") / "gradient-lab"
    # built from a copy: setuptools writes build/ and *.egg-info beside the sources, and the checkout stays clean
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".venv", ".git", "build", "dist", "*.egg-info", "__pycache__",
                                                                ".pytest_cache", ".hypothesis", "node_modules"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(source)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = out.glob("gradient_lab-*.whl")
    venv = tmp_path_factory.mktemp("venv") / "fresh"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
    (site,) = (venv / "lib").glob("python3*/site-packages")
    (site / "dependencies.pth").write_text("\n".join(p for p in sys.path if p.endswith("site-packages")) + "\n")
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
                   check=True, capture_output=True, timeout=300)
    return wheel, venv


def run_installed(venv: Path, cwd: Path, *args):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GRADIENT_LAB_FUNCTIONS")}
    return subprocess.run([str(venv / "bin" / args[0]), *args[1:]], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_wheel_holds_gradient_lab_and_the_dashboard_and_nothing_named_lib(installed):
    wheel, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.startswith("lib/")]
    for wanted in ("gradient_lab/__init__.py", "gradient_lab/engine/pipeline.py", "gradient_lab/cli.py", "gradient_lab/py.typed",
                   "gradient_lab/dashboard/app.py", "gradient_lab/dashboard/pages/1_Gradient_check.py",
                   "gradient_lab/dashboard/.streamlit/config.toml"):
        assert wanted in names, wanted
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "gradient-lab = gradient_lab.cli:main" in text and "gradient_lab = gradient_lab.pytest_plugin" in text


def test_installed_it_checks_a_users_module_beside_the_users_own_lib_package(installed, tmp_path):
    _, venv = installed
    (tmp_path / "lib").mkdir()  # the user's project has a lib/ of its own: it must not shadow Gradient Lab
    (tmp_path / "lib" / "__init__.py").write_text("MINE = True\n")
    (tmp_path / "my_functions.py").write_text((ROOT / "examples" / "my_functions.py").read_text())
    (tmp_path / "wrong.py").write_text((ROOT / "tests" / "specimens" / "modules" / "broken_correct.py").read_text())
    found = run_installed(venv, tmp_path, "python", "-c", "import gradient_lab, lib; from gradient_lab import assert_gradients_match, "
                          "check_gradients, declare; print(gradient_lab.__file__, lib.MINE)")
    assert found.returncode == 0 and found.stdout.startswith(str(venv)) and "True" in found.stdout, found.stderr
    assert not list(venv.glob("lib/python3*/site-packages/lib")), "a top-level lib package was installed"
    done = run_installed(venv, tmp_path, "gradient-lab", "check", "my_functions.py")
    assert done.returncode == 0, done.stderr
    assert "swish / forgot chain rule" in done.stdout and "cross entropy / cross entropy" in done.stdout
    wrong = run_installed(venv, tmp_path, "gradient-lab", "check", "wrong.py", "--format", "json")
    assert wrong.returncode == 1 and '"status": "FAILED"' in wrong.stdout
    broken = run_installed(venv, tmp_path, "python", "-m", "gradient_lab", "check", "no_such_module")
    assert broken.returncode == 2 and "cannot check no_such_module" in broken.stderr


def test_installed_its_pytest_plugin_registers_itself_and_writes_the_report(installed, tmp_path):
    _, venv = installed
    (tmp_path / "test_users.py").write_text(
        "import torch\nfrom gradient_lab import assert_gradients_match\n\n"
        "def test_square():\n    x = torch.randn(3, 4, dtype=torch.float64)\n"
        "    assert_gradients_match(lambda t: t * t, (x,), reference=lambda t: t * t)\n")
    done = run_installed(venv, tmp_path, "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--gradient-report=r.html",
                         "test_users.py")
    assert done.returncode == 0, done.stdout + done.stderr
    report = (tmp_path / "r.html").read_text()
    assert "test_users.py::test_square" in report and "1 checks, 0 failed" in report


@pytest.mark.slow
def test_installed_it_starts_the_dashboard_from_any_folder(installed, tmp_path):
    _, venv = installed
    from tests.e2e.harness import free_port, healthy

    port = free_port()
    (tmp_path / "my_functions.py").write_text((ROOT / "examples" / "my_functions.py").read_text())
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GRADIENT_LAB_FUNCTIONS")}
    server = subprocess.Popen([str(venv / "bin" / "gradient-lab"), "app", "--functions", "my_functions.py", "--server.port", str(port),
                               "--server.headless", "true", "--browser.gatherUsageStats", "false"],
                              cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(240):
            if healthy(url) or server.poll() is not None:
                break
            time.sleep(0.25)
        assert healthy(url), server.stdout.read().decode() if server.poll() is not None else "the server did not answer"
        with urllib.request.urlopen(f"{url}/Gradient_check") as page:
            assert page.status == 200
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=20)
    # the installed scripts run, importing the installed package: the home page and Gradient check draw without an error
    (dashboard,) = venv.glob("lib/python3*/site-packages/gradient_lab/dashboard")
    script = ("from streamlit.testing.v1 import AppTest\n"
              "from gradient_lab.ui.compute import INTERNAL_ERROR\n"
              f"at = AppTest.from_file({str(dashboard / 'app.py')!r}, default_timeout=180).run()\n"
              "assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])\n"
              "at.switch_page('pages/1_Gradient_check.py').run()\n"
              "crashes = [e.value for e in at.error if e.value.startswith(INTERNAL_ERROR)]\n"
              "assert not at.exception and not crashes and any(m.value.startswith('##### Sign flipped') for m in at.markdown), (at.exception, crashes)\n"
              "import gradient_lab; print(gradient_lab.__file__)\n")
    ran = run_installed(venv, tmp_path, "python", "-c", script)
    assert ran.returncode == 0 and ran.stdout.strip().startswith(str(venv)), ran.stderr[-3000:]



WITHOUT_THE_APP = '''
import sys
class Absent:  # as in an environment where only the package's own dependencies are installed
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("streamlit", "plotly"):
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, Absent())
import importlib.util
importlib.util.find_spec = (lambda find: lambda name, *a: None if name.split(".")[0] in ("streamlit", "plotly") else find(name, *a))(importlib.util.find_spec)
'''


def test_without_the_app_extra_the_assertion_checks_and_the_dashboard_is_refused_by_its_extras_name(tmp_path):
    script = WITHOUT_THE_APP + (
        "import torch\nfrom gradient_lab import assert_gradients_match, cli\n"
        "x = torch.randn(3, 4, dtype=torch.float64)\n"
        "assert_gradients_match(lambda t: t * t, (x,), reference=lambda t: t * t)\n"
        "try:\n    assert_gradients_match(lambda t: 1.01 * t * t, (x,), reference=lambda t: t * t)\n"
        "except AssertionError as error:\n    print('caught:', str(error).splitlines()[0])\n"
        "from gradient_lab import check_gradients\n"
        "card = check_gradients(lambda t: 1.01 * t * t, (x,), reference=lambda t: t * t, order=1)._repr_html_()\n"
        "print('notebook card:', 'fail' in card.lower() and '<svg' in card)\n"
        f"print('app exit', cli.main(['app']))\n"
        f"print('report exit', cli.main(['check', {str(ROOT / 'examples' / 'my_functions.py')!r}, '--report', {str(tmp_path / 'r.html')!r}]))\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'streamlit', 'plotly'}))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "caught: gradients of" in done.stdout and "app exit 2" in done.stdout and "report exit 2" in done.stdout
    assert "notebook card: True" in done.stdout  # a report draws its card, picture included, without plotly
    assert done.stdout.strip().endswith("[]")  # neither was imported
    assert done.stderr.count("pip install 'gradient-lab[app]'") == 2 and "streamlit and plotly" in done.stderr
    assert not (tmp_path / "r.html").exists()

"""Users' own Functions: modules named by the person starting the server, loaded once.

Sources come from the command line (``streamlit run app.py -- --functions mypkg.my_functions
--functions path/to/file.py``) and from ``GRADIENT_LAB_FUNCTIONS`` (separated by commas or the
path separator). Nothing typed in the browser is ever imported or executed. A module that fails
to import, or declares no family, is reported with Python's message; the others keep working.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping, Sequence

from .family import Family, families, register

ENVIRONMENT_VARIABLE = "GRADIENT_LAB_FUNCTIONS"


@dataclass(frozen=True)
class LoadResult:
    source: str
    families: tuple[str, ...]  # the families the module declared
    error: str | None  # Python's message when it failed, in one paragraph
    digest: str = ""  # the module file's content when it was loaded: an edit shows as another digest
    reloaded: bool = False  # loaded again because its file changed since the last load


def requested_sources(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> list[str]:
    """Sources from ``--functions X`` / ``--functions=X`` arguments and the environment, in order."""
    argv = sys.argv[1:] if argv is None else argv
    environ = os.environ if environ is None else environ
    found: list[str] = []
    for i, arg in enumerate(argv):
        if arg == "--functions" and i + 1 < len(argv):
            found.append(argv[i + 1])
        elif arg.startswith("--functions="):
            found.append(arg.split("=", 1)[1])
    raw = environ.get(ENVIRONMENT_VARIABLE, "")
    found += [part for chunk in raw.split(os.pathsep) for part in chunk.split(",")]
    unique = []
    for source in (s.strip() for s in found):
        if source and source not in unique:
            unique.append(source)
    return unique


def _import(source: str):
    """A module from a file path (``.py``) or a dotted name importable from the working directory."""
    path = Path(source).expanduser()
    if source.endswith(".py") or path.is_file():
        if not path.is_file():
            raise FileNotFoundError(f"no such file: {path.resolve()}")
        digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]
        spec = importlib.util.spec_from_file_location(f"gradient_lab_user_{path.stem}_{digest}", path)
        assert spec is not None and spec.loader is not None  # a .py file's: a source loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module
    if os.getcwd() not in sys.path:  # where the server was started: the user's package lives there
        sys.path.append(os.getcwd())
    if source in sys.modules:  # loaded before and changed since: its new code
        return importlib.reload(sys.modules[source])
    return importlib.import_module(source)


def source_digest(source: str) -> str:
    """The content of the file ``source`` names (a path, or a dotted module's file), hashed; "" where
    there is none to read."""
    path = Path(source).expanduser()
    if not (source.endswith(".py") or path.is_file()):
        try:
            spec = importlib.util.find_spec(source)
        except (ImportError, ValueError):
            return ""
        if spec is None or not spec.origin:
            return ""
        path = Path(spec.origin)
    try:
        return hashlib.sha1(path.read_bytes()).hexdigest() if path is not None else ""
    except OSError:
        return ""


def _interpreter_made_usable() -> None:
    """Under Triton's interpreter (``TRITON_INTERPRET=1``, set in the environment or by the module
    before it imports triton), its gaps patched for checking (``gradient_lab.triton.interpret``): a
    module of kernels as shipped (Liger-Kernel's) is checked as any other. Nothing without Triton."""
    from ..triton import interpret, interpret_when_imported, interpreting

    if interpreting() and importlib.util.find_spec("triton") is not None:
        try:
            interpret()
        except RuntimeError:  # triton was imported compiled before the switch: a kernel defined now says so when it runs
            pass
    else:
        interpret_when_imported()


def load(source: str) -> LoadResult:
    """Import one source and report the families it declared; never raises."""
    digest = source_digest(source)
    before = {name: id(f) for name, f in families().items()}
    try:
        _interpreter_made_usable()
        module = _import(source)
    except BaseException as error:  # noqa: BLE001 - a user's module may raise anything, SystemExit included
        frame = traceback.extract_tb(error.__traceback__)[-1] if error.__traceback__ else None
        where = f" ({Path(frame.filename).name}, line {frame.lineno})" if frame else ""
        return LoadResult(source, (), f"{type(error).__name__}: {error}{where}", digest)
    for value in vars(module).values():  # Family objects made but not registered: register them
        if isinstance(value, Family) and families().get(value.name) is not value:
            register(value)
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, Family) for v in value):
            for family in value:
                register(family)
    declared = tuple(name for name, f in families().items() if before.get(name) != id(f))
    if not declared:
        return LoadResult(source, (), "it declares no family: call gradient_lab.declare(...) in the module (see examples/).", digest)
    return LoadResult(source, declared, None, digest)


_LOADED: dict[str, LoadResult] = {}


def ensure_loaded(sources: Sequence[str] | None = None) -> list[LoadResult]:
    """Load every requested source once, and again whenever its file's content has changed (a user
    who fixed their backward sees the fix on the next rerun); the results of all of them, a source
    loaded again marked ``reloaded`` (its families are new objects: results kept for the old ones
    do not apply)."""
    for source in requested_sources() if sources is None else sources:
        if source not in _LOADED:
            _LOADED[source] = load(source)
        elif _LOADED[source].digest and source_digest(source) not in ("", _LOADED[source].digest):
            _LOADED[source] = replace(load(source), reloaded=True)
        elif _LOADED[source].reloaded:
            _LOADED[source] = replace(_LOADED[source], reloaded=False)  # said once
    return list(_LOADED.values())

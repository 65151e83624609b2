"""The house's rules, held by the tree itself: no import circle in lib/ (imports for type checking
alone excepted), no private name imported from another module, pages that reach the maths only
through ``lib/app/views.py`` (and the presentation layer), and streamlit imported only by lib/ui/."""

import ast
from pathlib import Path

ROOT = Path(__file__).parents[1]
LIB = ROOT / "lib"


def _module(path: Path) -> str:
    parts = path.relative_to(LIB).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in LIB.rglob("*.py")}


def _imports(tree: ast.AST):
    """Every import node, but those under ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        else:
            yield from _imports(node)


def _target(module: str, node: ast.ImportFrom) -> str:
    package = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
    return ".".join([*base, *([node.module] if node.module else [])]).strip(".")


def _graph() -> dict[str, set[str]]:
    graph = {}
    for name, path in MODULES.items():
        deps = set()
        for node in _imports(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                target = _target(name, node)
                for alias in node.names:
                    full = f"{target}.{alias.name}".strip(".")
                    deps.add(full if full in MODULES else target)
        graph[name] = {d for d in deps if d in MODULES and d != name}
    return graph


def test_lib_has_no_import_circle():
    graph, done, circles = _graph(), set(), []

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            circles.append(path[path.index(node):] + [node])
            return
        if node in done:
            return
        for dep in sorted(graph[node]):
            visit(dep, [*path, node])
        done.add(node)

    for node in sorted(graph):
        visit(node, [])
    assert circles == []


def test_no_private_name_is_imported_from_another_module():
    private = []
    for path in [*LIB.rglob("*.py"), *(ROOT / "pages").glob("*.py"), ROOT / "app.py"]:
        for node in _imports(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                private += [f"{path.relative_to(ROOT)}: {alias.name}" for alias in node.names
                            if alias.name.startswith("_") and not alias.name.startswith("__")]
    assert private == []


def test_pages_import_nothing_from_the_engine_and_only_lib_ui_imports_streamlit():
    engine = [f"{p.name}: {n.module}" for p in (ROOT / "pages").glob("*.py") for n in _imports(ast.parse(p.read_text()))
              if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("gradient_lab.engine")]
    assert engine == []
    streamlit = [name for name, path in MODULES.items() if not name.startswith("ui") and any(
        (isinstance(n, ast.Import) and any(a.name.split(".")[0] == "streamlit" for a in n.names))
        or (isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "streamlit") for n in _imports(ast.parse(path.read_text())))]
    assert streamlit == []

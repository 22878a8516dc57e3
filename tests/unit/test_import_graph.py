"""The harness stands on its own: no module of it imports the lab, and no two library modules
import each other, however indirectly. Read from the source (every import statement, at module
level, in functions and under TYPE_CHECKING alike), so that a new import fails here at once."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "src"
LAB = ROOT / "lab" / "src"
#: What the harness distribution ships besides its package: the product's own folders.
PRODUCT = ("fixtures", "suites", "locustfiles", "conftest.py")


def module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def python_files(paths: Iterable[Path]) -> Iterator[Path]:
    for path in paths:
        if path.is_file():
            yield path
        elif path.is_dir():
            yield from sorted(p for p in path.rglob("*.py") if "__pycache__" not in p.parts)


def imports_of(path: Path, name: str) -> set[str]:
    """Every module ``path`` (module ``name``) names in an import statement, absolute."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def library_graph() -> dict[str, set[str]]:
    """Module -> the library modules it imports (names that are not modules drop out)."""
    files = {module_name(p, base): p for base in (HARNESS, LAB) for p in python_files([base])}
    return {name: {m for m in imports_of(path, name) if m in files and m != name}
            for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_harness_module_imports_the_lab() -> None:
    offenders = []
    for path in python_files([HARNESS / "lbconform", *(ROOT / p for p in PRODUCT)]):
        base = HARNESS if path.is_relative_to(HARNESS) else ROOT
        named = imports_of(path, module_name(path, base))
        lab = sorted(m for m in named if m.split(".")[0] == "lbconform_lab")
        offenders += [f"{path.relative_to(ROOT)} imports {m}" for m in lab]
    assert not offenders, "\n".join(offenders)


def test_no_import_circles_among_the_library_modules() -> None:
    assert cycles(library_graph()) == []


def test_the_checks_see_an_import_of_the_lab_and_a_circle(tmp_path: Path) -> None:
    """What the two tests above would fail on: a function-local import of the lab, a relative
    import, and two modules that import each other."""
    pkg = tmp_path / "lbconform"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from lbconform_lab.cluster import Lab\n    from . import b\n")
    (pkg / "b.py").write_text("from lbconform.a import f\n")
    assert "lbconform_lab.cluster" in imports_of(pkg / "a.py", "lbconform.a")
    graph = {name: {m for m in imports_of(pkg / f"{name.rpartition('.')[2]}.py", name)
                    if m.startswith("lbconform.")} for name in ("lbconform.a", "lbconform.b")}
    assert graph["lbconform.a"] == {"lbconform.b"}
    assert cycles(graph) == [["lbconform.a", "lbconform.b"]]

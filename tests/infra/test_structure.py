"""The house holds its shape: no import circle, no room over 400 lines, no chain of more than a few floors.

Covers the app (`shared/`) and every room around it: the benchmarks, the simulation, the emulators, the dev stack
and the client. Function-level imports count as edges: a circle hidden inside a function is still a circle. The
line bound covers the tests too (a test module is a module to read); circles and floors are not checked there.

Floors: inside one package, the longest chain of its own modules each importing the next (a module alone is one
floor; subpackages are rooms of their own and are counted on their own). `shared/engine/` has the most today,
seven, and that is the bound: a flat folder read through a chain of modules (as BENCHMARKS.md once was, report
module after report module) fails it. The layers between packages are the import contracts' job (pyproject.toml).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# directory -> the package name it is imported as
PACKAGES = {
    "shared": "shared",
    "bench": "bench",
    "sim": "sim",
    "emulators": "emulators",
    "devstack": "devstack",
    "client/queue_drain_client": "queue_drain_client",
}
# the line bound's rooms: the packages and the tests
LINES_CHECKED = {**PACKAGES, "tests": "tests"}
MAX_LINES = 400
MAX_FLOORS = 7
# Known to be over a bound when this check came in, each to be split by the change that owns it; an entry that comes
# under must leave its list (the check fails until it does), and nothing new may join. A tall package's floors are
# held at their count: a chain that grows or shrinks fails the check until the count here is brought down with it.
KNOWN_LONG: dict[str, str] = {}
KNOWN_TALL: dict[str, int] = {}


def modules(root: Path, packages: dict[str, str]) -> dict[str, Path]:
    """Every module by its dotted name (a package by its own name, for its __init__.py)."""
    found: dict[str, Path] = {}
    for directory, package in packages.items():
        base = root / directory
        for path in sorted(base.rglob("*.py")):
            parts = path.relative_to(base).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def imported(name: str, path: Path) -> Iterator[str]:
    """The dotted names a module imports, anywhere in it (function-level imports too), relative ones resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph(found: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules it imports among `found` (a module's import of its own ancestor package left out:
    importing `a.b.c` runs `a/__init__.py` anyway, and that is not a circle of the code's making)."""
    edges: dict[str, set[str]] = {name: set() for name in found}
    for name, path in found.items():
        for target in imported(name, path):
            while target and target not in found:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                edges[name].add(target)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def floors(found: dict[str, Path], edges: dict[str, set[str]]) -> dict[str, list[str]]:
    """Per package, its longest chain of its own modules (not subpackages) each importing the next.
    Call only on a graph without circles."""
    chains: dict[str, list[str]] = {}
    longest: dict[str, list[str]] = {}

    def chain(node: str, siblings: set[str]) -> list[str]:
        if node not in chains:
            below = [chain(child, siblings) for child in sorted(edges[node] & siblings)]
            chains[node] = [node, *max(below, key=len, default=[])]
        return chains[node]

    for package, path in found.items():
        if path.name != "__init__.py":
            continue
        own = {name for name, p in found.items() if name.rpartition(".")[0] == package and p.name != "__init__.py"}
        longest[package] = max((chain(name, own) for name in sorted(own)), key=len, default=[])
    return longest


@pytest.fixture(scope="module")
def house() -> tuple[dict[str, Path], dict[str, set[str]]]:
    found = modules(ROOT, PACKAGES)
    return found, import_graph(found)


def test_no_import_circle_anywhere(house: tuple[dict[str, Path], dict[str, set[str]]]) -> None:
    _, edges = house
    assert circles(edges) == []


def long_modules(root: Path, packages: dict[str, str]) -> dict[str, int]:
    """Each module over MAX_LINES, by its path under `root`, with its length."""
    return {
        str(path.relative_to(root)): lines
        for path in modules(root, packages).values()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }


def test_no_module_over_400_lines() -> None:
    long = long_modules(ROOT, LINES_CHECKED)
    assert set(long) == set(KNOWN_LONG), long


def test_no_chain_of_more_than_seven_floors_inside_a_package(
    house: tuple[dict[str, Path], dict[str, set[str]]],
) -> None:
    found, edges = house
    tall = {package: chain for package, chain in floors(found, edges).items() if len(chain) > MAX_FLOORS}
    assert set(tall) == set(KNOWN_TALL), tall
    assert {package: len(chain) for package, chain in tall.items()} == KNOWN_TALL, {
        p: " > ".join(c) for p, c in tall.items()
    }
    assert max(len(chain) for package, chain in floors(found, edges).items() if package.startswith("shared")) == 7


def write(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return modules(root, {"pkg": "pkg"})


def test_the_checks_see_a_circle_hidden_in_a_function_and_a_chain_of_floors(tmp_path: Path) -> None:
    found = write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg import b\n",
            "pkg/b.py": "def later():\n    from . import a\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/one.py": "from pkg.sub.two import x\n",
            "pkg/sub/two.py": "from .three import y\nx = y\n",
            "pkg/sub/three.py": "y = 1\n",
        },
    )
    edges = import_graph(found)
    assert circles(edges) == [["pkg.a", "pkg.b"]]
    edges["pkg.b"].clear()
    assert floors(found, edges)["pkg.sub"] == ["pkg.sub.one", "pkg.sub.two", "pkg.sub.three"]
    assert floors(found, edges)["pkg"] == ["pkg.a", "pkg.b"]


def test_the_line_bound_sees_a_long_test_module(tmp_path: Path) -> None:
    write(
        tmp_path,
        {"tests/app/test_long.py": "x = 1\n" * (MAX_LINES + 1), "tests/app/test_short.py": "x = 1\n" * MAX_LINES},
    )
    assert long_modules(tmp_path, {"tests": "tests"}) == {str(Path("tests/app/test_long.py")): MAX_LINES + 1}

#!/usr/bin/env python3
"""How tableflow_core's packages stack, read from the source (nothing is imported).

usage: python3 scripts/layering.py [PACKAGE_DIR] [--exceptions]

Prints, for the layer order of docs/architecture.md (`LAYERS` below, bottom up):
- imports pointing up: an import from a package of a lower layer into one of a higher layer;
- package cycles (packages that import each other, directly or through others);
- cross-package imports inside functions (each import statement counts once; imports
  under `if TYPE_CHECKING:` are not counted anywhere: they never run);
- with --exceptions: the exception classes defined in the package and their roots
  (imports the package, so run it with the project's interpreter).

Exits 1 when an import points up or packages form a cycle. tests/unit/test_layering.py
runs it; `python3 /work/shared/tools/package_cycles.py` gives the same cycles.
"""

from __future__ import annotations

import ast
import pathlib
import sys
from collections import Counter
from dataclasses import dataclass

# Bottom up. A package may import packages of its own layer or of layers below it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "foundation",
        ("text", "sql_text", "errors", "redaction", "output_files", "addresses", "collector"),
    ),
    ("config", ("config",)),
    (
        "outside systems",
        (
            "jvm",
            "kafka",
            "schemas",
            "state",
            "delta",
            "publish",
            "registry",
            "catalog",
            "dev",
            "targets",
            "readers",
        ),
    ),
    ("table libraries", ("transforms", "checks")),
    ("ingest spec", ("ingest",)),
    ("table services", ("deadletter", "maintenance")),
    ("plan", ("plan",)),
    ("engine", ("engine",)),
    ("pipeline", ("pipeline",)),
    ("runner", ("runner",)),
    ("tasks", ("tasks", "docs_site", "observability")),
    ("cli", ("cli", "__main__")),
)
LAYER_OF = {package: index for index, (_, packages) in enumerate(LAYERS) for package in packages}


@dataclass(frozen=True)
class Import:
    source: str  # top-level package (or module) of the importing file
    target: str  # top-level package (or module) imported
    module: str  # the module imported
    where: str  # file:line
    in_function: bool


def _walk(tree: ast.AST):
    """(node, inside a function) for every node, skipping `if TYPE_CHECKING:` bodies."""

    def visit(node: ast.AST, in_function: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for branch in child.orelse:
                    yield branch, in_function
                    yield from visit(branch, in_function)
                continue
            yield child, in_function
            inner = in_function or isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            )
            yield from visit(child, inner)

    yield from visit(tree, False)


def imports(root: pathlib.Path) -> list[Import]:
    top = root.name
    found: list[Import] = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        source = parts[0] if len(parts) > 1 else parts[0].removesuffix(".py")
        for node, in_function in _walk(ast.parse(path.read_text())):
            modules: list[str] = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = list(parts[:-1])[: len(parts) - node.level]
                    module = ".".join([top, *base, *([node.module] if node.module else [])])
                else:
                    module = node.module or ""
                if module == top:  # `from tableflow_core import x`
                    modules = [f"{top}.{alias.name}" for alias in node.names]
                else:
                    modules = [module]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            for module in modules:
                if not module.startswith(top + "."):
                    continue
                target = module.split(".")[1]
                if target != source:
                    where = f"{path.relative_to(root.parent)}:{node.lineno}"
                    found.append(Import(source, target, module, where, in_function))
    return found


def cycles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """Strongly connected groups of more than one package (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def exception_classes(root: pathlib.Path) -> dict[str, str]:
    """Exception class (module.Name) -> its root: the topmost ancestor defined in the package."""
    import importlib
    import pkgutil

    sys.path.insert(0, str(root.parent))
    package = importlib.import_module(root.name)
    for info in pkgutil.walk_packages(package.__path__, root.name + "."):
        if info.name.endswith("__main__"):
            continue
        importlib.import_module(info.name)
    found: dict[str, str] = {}
    seen: set[type] = set()
    pending: list[type] = [BaseException]
    while pending:
        cls = pending.pop()
        for sub in cls.__subclasses__():
            if sub in seen:
                continue
            seen.add(sub)
            pending.append(sub)
            if sub.__module__.startswith(root.name + "."):
                ours = [c for c in sub.__mro__ if c.__module__.startswith(root.name + ".")]
                top = ours[-1]
                found[f"{sub.__module__}.{sub.__qualname__}"] = (
                    f"{top.__module__}.{top.__qualname__}"
                )
    return found


def main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("--")]
    root = pathlib.Path(args[0] if args else "tableflow_core").resolve()
    found = imports(root)
    unknown = sorted({i.source for i in found} | {i.target for i in found} - set(LAYER_OF))
    unknown = [p for p in unknown if p not in LAYER_OF]
    upward = [
        i
        for i in found
        if i.source in LAYER_OF and i.target in LAYER_OF and LAYER_OF[i.target] > LAYER_OF[i.source]
    ]
    groups = cycles({(i.source, i.target) for i in found})
    in_functions = [i for i in found if i.in_function]

    print("layers, bottom up:")
    for number, (name, packages) in enumerate(LAYERS, 1):
        print(f"  {number:2}. {name}: {', '.join(packages)}")
    if unknown:
        print(f"packages in no layer: {', '.join(unknown)}")
    print(f"cross-package imports: {len(found)}, inside functions: {len(in_functions)}")
    print(f"imports pointing up: {len(upward)}")
    for i in upward:
        print(f"  {i.where}: {i.source} -> {i.module}")
    print(f"package cycles: {len(groups)}")
    for group in groups:
        print(f"  {', '.join(group)}")
    by_pair = Counter((i.source, i.target) for i in in_functions)
    if in_functions:
        print("imports inside functions, by package pair:")
        for (a, b), n in sorted(by_pair.items()):
            print(f"  {a} -> {b}: {n}")
    if "--exceptions" in argv:
        classes = exception_classes(root)
        roots = Counter(classes.values())
        print(f"exception classes: {len(classes)}, roots: {len(roots)}")
        for top, n in roots.most_common():
            print(f"  {top}: {n} class(es)")
    return 1 if upward or groups or unknown else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

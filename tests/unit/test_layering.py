"""The packages stack in the layers docs/architecture.md describes (scripts/layering.py):
no import points up a layer, no two packages import each other, and `plan` never
imports pyspark (it runs without a JVM)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "tableflow_core"


def layering() -> ModuleType:
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import layering as module
    finally:
        sys.path.remove(str(REPO / "scripts"))
    return module


def test_no_import_points_up_and_no_package_cycle() -> None:
    tool = layering()
    found = tool.imports(PACKAGE)
    every = {i.source for i in found} | {i.target for i in found}
    assert every <= set(tool.LAYER_OF), f"packages in no layer: {every - set(tool.LAYER_OF)}"
    upward = [
        f"{i.where}: {i.source} -> {i.module}"
        for i in found
        if tool.LAYER_OF[i.target] > tool.LAYER_OF[i.source]
    ]
    assert upward == []
    assert tool.cycles({(i.source, i.target) for i in found}) == []


def test_the_layers_of_the_docs_are_the_layers_checked() -> None:
    doc = (REPO / "docs" / "architecture.md").read_text()
    for _name, packages in layering().LAYERS:
        line = ", ".join(packages)
        assert line in doc, f"docs/architecture.md does not list the layer {line!r}"


def test_plan_never_imports_pyspark_at_module_level() -> None:
    """(tests/integration/test_plan_world.py checks the modules a whole plan loads.)"""
    for path in sorted((PACKAGE / "plan").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                module = node.module if isinstance(node, ast.ImportFrom) else ""
                assert not any((n or "").startswith("pyspark") for n in [*names, module]), (
                    f"{path}:{node.lineno} imports pyspark"
                )

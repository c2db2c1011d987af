"""``ops`` is an app every CRM installs; the WeCom sandbox is a development tool, an app
of its own (``wecom_sandbox``) that the wheel does not hold. So ``ops`` holds no part of
it and no module of ``ops`` imports it, whether by name, relatively or as a dotted path
in a string (``import_string``, ``INSTALLED_APPS``)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.processes import REPO

OPS = REPO / "ops"
SANDBOX = ("wecom_sandbox", "ops.sandbox")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    """The dotted names a module imports (relative imports resolved), and the strings it
    holds that read as a dotted path."""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names |= {module, *(f"{module}.{alias.name}" for alias in node.names)}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)
    return names


def names_the_sandbox(name: str) -> bool:
    return any(name == root or name.startswith(f"{root}.") for root in SANDBOX)


def test_ops__no_module_imports_the_sandbox():
    found = {
        module_name(path): sorted(name for name in imported(path) if names_the_sandbox(name))
        for path in sorted(OPS.rglob("*.py"))
    }

    assert {module: names for module, names in found.items() if names} == {}


def test_ops__holds_no_part_of_the_sandbox():
    parts = [
        str(path.relative_to(REPO)) for path in OPS.rglob("*") if "sandbox" in path.name.lower()
    ]

    assert parts == []

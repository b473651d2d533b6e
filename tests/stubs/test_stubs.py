"""The type stubs of the extension modules (and of the generated _build_info) list exactly what
the modules define.

``openreg_runtime/_runtime.pyi`` and ``torch_openreg/_C.pyi`` are kept by hand (mypy
checks the Python layers against them in ``nox -s lint``); this test fails when a
binding is added, renamed or removed without its stub following. It runs in
``nox -s "integration(autoload)"``, where both packages are installed.
"""

import ast
import importlib
import importlib.resources

import pytest


def stub_names(tree: ast.Module) -> dict[str, set[str]]:
    """Top-level names of the stub, each with the members it declares (for classes)."""
    names: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            members = set()
            for item in node.body:
                if getattr(item, "name", "").startswith("_"):
                    continue
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    members.add(item.name)
                elif isinstance(item, ast.Assign | ast.AnnAssign):
                    targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                    members.update(t.id for t in targets if isinstance(t, ast.Name))
            names[node.name] = members
        elif isinstance(node, ast.FunctionDef):
            names[node.name] = set()
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = set()
    names.pop("__all__", None)
    return names


def public_members(cls: type) -> set[str]:
    """Methods and properties a class defines itself (not dunders, not pybind11's own)."""
    return {name for name in vars(cls) if not name.startswith("_")}


@pytest.mark.parametrize(
    "package, module",
    [("openreg_runtime", "_runtime"), ("torch_openreg", "_C"), ("torch_openreg", "_build_info")],
)
def test_stub_lists_every_binding_and_nothing_else(package, module):
    extension = importlib.import_module(f"{package}.{module}")
    text = importlib.resources.files(package).joinpath(f"{module}.pyi").read_text()
    stub = stub_names(ast.parse(text))
    module = {name for name in vars(extension) if not name.startswith("__")}
    assert set(stub) == module
    for name, members in stub.items():
        value = getattr(extension, name)
        if isinstance(value, type) and not issubclass(value, int):
            assert members == public_members(value), name

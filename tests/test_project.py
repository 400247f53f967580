"""The project's one configuration file: what `pip install -e .` installs, pytest's and mutmut's settings."""
from __future__ import annotations

import ast
import tomllib

from helpers import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_package_installs_every_package_folder_of_the_library_and_the_app():
    packages = PYPROJECT["tool"]["setuptools"]["packages"]
    folders = {".".join(init.parent.relative_to(ROOT).parts) for top in ("transformer", "viz", "ui")
               for init in (ROOT / top).rglob("__init__.py")}
    assert sorted(packages) == sorted(folders)


def test_pyproject_is_the_only_configuration_file():
    assert not [name for name in ("pytest.ini", "setup.cfg", "tox.ini", ".ruff.toml", "ruff.toml")
                if (ROOT / name).exists()]
    assert {"ruff", "pytest", "mutmut"} <= set(PYPROJECT["tool"])


def test_every_public_function_of_viz_is_annotated():
    missing = []
    for path in sorted((ROOT / "viz").glob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                arguments = node.args.args + node.args.kwonlyargs + [node.args.vararg, node.args.kwarg]
                if node.returns is None or any(a is not None and a.annotation is None for a in arguments):
                    missing.append(f"{path.name}: {node.name}")
    assert not missing

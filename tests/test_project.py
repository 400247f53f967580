"""The project's one configuration file: what `pip install -e .` installs, pytest's and mutmut's settings."""
from __future__ import annotations

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

"""The import contract of transformer/ (docs/architecture.md): its subpackages in layers, each importing only those
below it, no import cycles between modules; the public API where the README says it is; and every module, name, file
and link the README and docs/ point to is there."""
from __future__ import annotations

import importlib
import re
import subprocess
import sys

import pytest

import transformer
from helpers import ROOT, imported_modules, reaches

LAYERS = ("model", "io", "data", "inference", "analysis", "training")  # lowest first
COMMANDS = ("train", "convert", "evaluate", "average", "corpus", "faithfulness")  # `python -m transformer.NAME`
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "deploy" / "README.md"]


def module_name(path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in (ROOT / "transformer").rglob("*.py")}
LIBRARY = {name: path for name, path in MODULES.items() if name.count(".") >= 1 and name.split(".")[1] in LAYERS}


def transformer_imports(path) -> set[str]:
    """The modules of transformer/ that `path` imports (an imported name that is a module counts as one)."""
    return {module for module in imported_modules(path) if module in MODULES}


def layer(module: str) -> int:
    return LAYERS.index(module.split(".")[1])


def test_every_module_of_the_library_is_in_a_layer():
    outside = set(MODULES) - set(LIBRARY) - {"transformer"} - {f"transformer.{command}" for command in COMMANDS}
    assert not outside, "transformer/ holds its modules in " + ", ".join(LAYERS)


@pytest.mark.parametrize("module", sorted(LIBRARY), ids=str)
def test_a_module_imports_nothing_above_its_layer(module):
    above = {imported for imported in transformer_imports(LIBRARY[module])
             if imported == "transformer" or layer(imported) > layer(module)}
    assert not above, f"{module} ({LAYERS[layer(module)]}) imports {sorted(above)} above it"


def test_no_module_imports_itself_through_others():
    graph = {module: transformer_imports(path) - {module} for module, path in LIBRARY.items()}
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.get(module, ()):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    assert not cycles


def test_the_library_and_the_figures_know_nothing_of_the_app():
    for top in ("transformer", "viz"):
        for path in (ROOT / top).rglob("*.py"):
            assert not reaches(imported_modules(path), ("ui", "app", "streamlit")), path
    for path in (ROOT / "viz").rglob("*.py"):
        assert not reaches(imported_modules(path), ("torch", "transformer")), path


def test_the_public_api_is_importable_from_the_package():
    assert transformer.__all__ and all(hasattr(transformer, name) for name in transformer.__all__)
    assert transformer.load_checkpoint.__module__ == "transformer.inference.translation"


@pytest.mark.slow  # five interpreters
@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_line_runs_as_documented(command):
    done = subprocess.run([sys.executable, "-m", f"transformer.{command}", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and f"python -m transformer.{command}" in done.stdout, done.stderr


def documented(pattern: str) -> list[tuple[str, str]]:
    """(document, match) for every match of `pattern` in the README and docs/."""
    return sorted({(path.relative_to(ROOT).as_posix(), match) for path in DOCUMENTS
                   for match in re.findall(pattern, path.read_text(encoding="utf-8"))})


@pytest.mark.parametrize(("document", "dotted"), documented(r"\btransformer(?:\.\w+)+"))
def test_every_dotted_name_in_the_docs_exists(document, dotted):
    """`transformer.inference.decoding.greedy`, `transformer.analysis.attribution.METHODS`: the longest importable
    module, then attributes."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[split:]:
            assert hasattr(found, attribute), f"{document}: {dotted}"
            found = getattr(found, attribute)
        return
    pytest.fail(f"{document}: {dotted}")


ADDING_A_VIEW = (ROOT / "README.md").read_text(encoding="utf-8").split("### Adding a view", 1)[1].split("\n#", 1)[0]
ADDING_A_PASS = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8").split(
    "## Adding a view with its own pass", 1)[1].split("\n## ", 1)[0]
FILE_PATH = r"\b(?:transformer|ui|viz|tests|benchmarks|deploy|decks)/[\w/.*-]*\w"


@pytest.mark.parametrize(("document", "path"), documented(FILE_PATH))
def test_every_file_path_in_the_docs_exists(document, path):
    """Files a reader is told to create are the only paths not there: NAME.py, or the README's "Adding a view" and
    docs/architecture.md's "Adding a view with its own pass"."""
    made = "NAME" in path or path in ADDING_A_VIEW or path in ADDING_A_PASS
    assert (ROOT / path).exists() or list(ROOT.glob(path)) or made, f"{document}: {path}"


@pytest.mark.parametrize(("document", "line"), documented(r"from transformer[\w.]* import [\w, ]+"))
def test_every_import_in_the_docs_runs(document, line):
    module, names = line[len("from "):].split(" import ")
    imported = importlib.import_module(module)
    assert all(hasattr(imported, name.strip()) for name in names.split(",") if name.strip()), f"{document}: {line}"


def test_every_relative_link_in_the_docs_leads_to_a_file():
    broken = []
    for path in DOCUMENTS:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text(encoding="utf-8")):
            if not re.match(r"[a-z]+:", target) and not (path.parent / target).exists():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
    assert not broken

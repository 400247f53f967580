"""docs/architecture.md against the code: every module path and every Python name it cites exists, and its example of a
view with its own pass runs as written (three files: it imports neither torch nor `transformer`)."""
from __future__ import annotations

import ast
import builtins
import importlib.util
import pkgutil
import re
import types

import numpy as np
import pytest

from helpers import ROOT, reaches

DOC = ROOT / "docs" / "architecture.md"
TEXT = DOC.read_text(encoding="utf-8")
PROSE = re.sub(r"```.*?```", "", TEXT, flags=re.S)  # the example's code is run below, not read as citations
SPANS = re.findall(r"`([^`\n]+)`", PROSE)
EXAMPLE_SECTION = TEXT.split("## Adding a view with its own pass", 1)[1].split("\n## ", 1)[0]
EXAMPLE = EXAMPLE_SECTION.split("```python\n", 1)[1].split("```", 1)[0]
EXAMPLE_PATH = re.search(r"`(ui/views/\w+\.py)`:", EXAMPLE_SECTION)[1]  # the file a reader is told to create
PACKAGES = ("transformer", "ui", "viz")
PLACEHOLDERS = {"NAME", "PASS"}  # what a reader fills in


def definitions() -> set[str]:
    """Every name the code defines or imports: functions, classes, assignments, fields, parameters, imports."""
    names = set()
    for path in [ROOT / "app.py", *(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names | set(dir(builtins))


DEFINED = definitions()
EXAMPLE_NAME = EXAMPLE_PATH.removeprefix("ui/views/").removesuffix(".py")  # `sureness.VIEW` names the new module


def resolves(dotted: str) -> bool:
    """`ui.passes.run`, `transformer.analysis.lens:logit_lens`: the longest importable module, then attributes."""
    try:
        pkgutil.resolve_name(dotted)
    except (ImportError, AttributeError, ValueError):
        return False
    return True


def cited_paths() -> list[str]:
    """`ui/passes.py`, `transformer/io/safety.py`, and each file of the packages' table (`config.py` in `model/`'s
    row is transformer/model/config.py)."""
    paths = set(re.findall(r"\b(?:transformer|ui|viz|tests)/[\w/.-]*\w", PROSE))
    for package, cells in re.findall(r"^\| \d \| `(\w+)/` \| (.*) \|$", PROSE, flags=re.M):
        paths.update(f"transformer/{package}/{name}" for name in re.findall(r"`([\w/.]+(?:\.\w+|/))`", cells))
    return sorted(path for path in paths - {EXAMPLE_PATH} if "NAME" not in path)


def cited_modules() -> list[str]:
    """Dotted names rooted at a package (`ui.shared.PASSES`, `transformer.analysis.attribution.METHODS`), and the
    "module:function" strings of pass declarations."""
    dotted = re.findall(r"\b(?:transformer|ui|viz)(?:[.:]\w+)+", PROSE)
    return sorted(set(dotted))


def cited_names() -> list[str]:
    """Every name of a backticked span that reads as Python (`BY_KEY[key].render(page)`, `Checkpoint.prepare`),
    outside the dotted names above and the placeholders."""
    names = set()
    for span in SPANS:
        if "/" in span or re.fullmatch(r"[\w.]+\.(py|md|json|toml)", span):
            continue  # a path (above)
        try:
            tree = ast.parse(span, mode="eval")
        except SyntaxError:
            try:
                tree = ast.parse(span)  # `VIEW = View(key, label, render)`
            except SyntaxError:
                continue  # a path, a command line, a link's `?view=`
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.keyword) and node.arg:
                names.add(node.arg)
    return sorted(names - PLACEHOLDERS - set(PACKAGES))


def test_the_page_cites_what_it_should():
    """The parsers find the citations (an empty list would pass every test below)."""
    assert "ui/passes.py" in cited_paths() and "transformer/model/config.py" in cited_paths()
    assert "ui.passes.library" in cited_modules() and "BY_KEY" in cited_names() and "folder_problem" in cited_names()


@pytest.mark.parametrize("path", cited_paths())
def test_every_cited_path_exists(path):
    assert (ROOT / path).exists(), f"docs/architecture.md cites {path}"


@pytest.mark.parametrize("dotted", cited_modules())
def test_every_cited_dotted_name_imports(dotted):
    assert resolves(dotted), f"docs/architecture.md cites {dotted}"


@pytest.mark.parametrize("name", cited_names())
def test_every_cited_name_is_defined_in_the_code(name):
    """A package the code uses counts (`transformers`, the converters' reference)."""
    known = name in DEFINED | {EXAMPLE_NAME} or importlib.util.find_spec(name)
    assert known, f"docs/architecture.md cites `{name}`, which no module of {PACKAGES} or app.py defines"


def test_the_example_view_imports_neither_torch_nor_the_library():
    imported = set()
    for node in ast.walk(ast.parse(EXAMPLE)):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.update([node.module, *(f"{node.module}.{alias.name}" for alias in node.names)])
    assert not reaches(imported, ("torch", "transformer", "ui.passes")), imported


@pytest.mark.slow  # AppTest
def test_the_example_view_with_its_own_pass_runs_as_written(app, app_checkpoints):
    """The view, as a module of its own and a line in the registry (for this test), opened from a link: its table is
    the library's logit lens of the page's output, through the declared pass."""
    import ui.views
    from transformer import load_checkpoint
    from transformer.analysis.lens import logit_lens

    module = types.ModuleType(f"ui.views.{EXAMPLE_NAME}")
    exec(compile(EXAMPLE, EXAMPLE_PATH, "exec"), module.__dict__)
    ui.views.VIEWS.append(module.VIEW)
    ui.views.BY_KEY[module.VIEW.key] = module.VIEW
    try:
        at = app(view=module.VIEW.key, text="abc12")
    finally:
        ui.views.VIEWS.remove(module.VIEW)
        del ui.views.BY_KEY[module.VIEW.key]
    assert not at.exception, [error.value for error in at.exception]
    shown = at.dataframe[0].value
    folder = next(path for path in sorted(app_checkpoints.iterdir()) if (path / "card.json").exists())
    checkpoint = load_checkpoint(folder)
    output = checkpoint.translate("abc12", beam_size=checkpoint.card.decoding.get("beam_size", 1))
    expected = logit_lens(checkpoint.model, output.src_ids, output.tgt_ids, output.output_ids)
    assert list(shown.index) == expected.stages and shown.shape[1] == len(output.output_tokens)
    np.testing.assert_allclose(shown.to_numpy(), expected.target_probs, atol=1e-6)

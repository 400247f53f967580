"""Hostile folders given to the converter: config fields of the wrong type, a tokenizer whose post-processor adds
tokens its vocabulary lacks (which makes the `tokenizers` library panic on first use), and outputs that would replace
the source. Each is refused with a message naming the field or file, and nothing is written or deleted."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from transformer import CheckpointError, load_checkpoint
from transformer.io.convert import main
from transformer.io.tokenizer import JsonTokenizer

pytest.importorskip("transformers", reason="the converter's tests need transformers (requirements-dev)")
tokenizers = pytest.importorskip("tokenizers")

from families import save_family  # noqa: E402  (after the skips)
from test_convert import make_marian_folder  # noqa: E402

FAMILIES = ("marian", "gpt2", "bert", "bart")


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    """A small random Hugging Face folder of each family, as save_pretrained writes it."""
    root = tmp_path_factory.mktemp("hf")
    make_marian_folder(root / "marian", "shared")
    for family in FAMILIES[1:]:
        save_family(family, root / family)
    return {family: root / family for family in FAMILIES}


def copy_with(source: Path, folder: Path, file: str, change) -> Path:
    """A copy of `source` in `folder` whose JSON `file` is edited in place by `change`."""
    shutil.copytree(source, folder)
    values = json.loads((folder / file).read_text())
    change(values)
    (folder / file).write_text(json.dumps(values))
    return folder


@pytest.mark.parametrize(("family", "field", "value", "kind"), [
    ("marian", "dropout", [1], "a number"), ("marian", "activation_function", ["swish"], "text"),
    ("marian", "d_model", "512", "a whole number"), ("marian", "scale_embedding", "yes", "true or false"),
    ("gpt2", "resid_pdrop", [1], "a number"), ("gpt2", "layer_norm_epsilon", "abc", "a number"),
    ("gpt2", "activation_function", ["gelu_new"], "text"), ("gpt2", "n_layer", 2.5, "a whole number"),
    ("bert", "hidden_dropout_prob", {"p": 1}, "a number"), ("bert", "layer_norm_eps", "abc", "a number"),
    ("bert", "hidden_act", ["gelu"], "text"), ("bert", "is_decoder", "no", "true or false"),
    ("bart", "dropout", [1], "a number"), ("bart", "activation_function", ["gelu"], "text"),
    ("bart", "scale_embedding", "yes", "true or false"), ("bart", "vocab_size", True, "a whole number"),
])
def test_a_config_field_of_the_wrong_type_is_named(sources, tmp_path, family, field, value, kind):
    folder = copy_with(sources[family], tmp_path / "hf", "config.json", lambda config: config.update({field: value}))
    with pytest.raises(SystemExit, match=rf"error: .*config\.json: {field} is .*, not {kind}$"):
        main([family, str(folder), str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def undefined_special(tokenizer: dict) -> None:
    tokenizer["post_processor"]["special_tokens"] = {}  # the template still adds [CLS] and [SEP]


def special_beyond_vocabulary(tokenizer: dict) -> None:
    tokenizer["post_processor"]["special_tokens"]["[SEP]"]["ids"] = [10_000]


@pytest.mark.parametrize(("change", "message"), [
    (undefined_special, r"tokenizer\.json: the post-processor's template adds '\[(CLS|SEP)\]' but does not define it"),
    (special_beyond_vocabulary, r"tokenizer\.json: the post-processor adds '\[SEP\]' as id 10000, outside the "
                                r"vocabulary's \d+ tokens"),
])
def test_a_tokenizer_adding_tokens_its_vocabulary_lacks_is_refused_on_conversion_and_on_loading(
        sources, tmp_path, change, message):
    folder = copy_with(sources["bert"], tmp_path / "hf", "tokenizer.json", change)
    with pytest.raises(SystemExit, match=message):
        main(["bert", str(folder), str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()
    main(["bert", str(sources["bert"]), str(tmp_path / "atlas")])
    good = json.loads((tmp_path / "atlas" / "tokenizer.json").read_text())
    change(good)
    (tmp_path / "atlas" / "tokenizer.json").write_text(json.dumps(good))
    with pytest.raises(CheckpointError, match=message):  # a folder edited after conversion is refused too
        load_checkpoint(tmp_path / "atlas")


def test_a_panic_inside_the_tokenizer_is_the_checkpoints_error(sources):
    """The library's PanicException derives from BaseException: uncaught, it ends the session's thread mid-page."""
    file = sources["bert"] / "tokenizer.json"
    tokenizer = JsonTokenizer(file, file.read_bytes())
    broken = json.loads(file.read_text())
    undefined_special(broken)
    tokenizer._backend = tokenizers.Tokenizer.from_str(json.dumps(broken))  # past the check, as a future library
    with pytest.raises(CheckpointError, match=r"tokenizer\.json: the tokenizer's encode_with_specials failed "
                                              r"\(PanicException: "):
        tokenizer.encode_with_specials("Paris is the capital of France.")
    assert tokenizer.encode("Paris") == tokenizer._backend.encode("Paris", add_special_tokens=False).ids


def test_replace_never_deletes_or_writes_into_the_source(sources, tmp_path, monkeypatch):
    source = tmp_path / "work" / "gpt2"
    shutil.copytree(sources["gpt2"], source)
    before = {path.name: path.read_bytes() for path in source.iterdir()}
    for out, relation in ((source, "is"), (source / "atlas", "lies inside"), (tmp_path / "work", "holds")):
        with pytest.raises(SystemExit, match=f"{out}: {relation} {source}, which this command reads; "
                                             "nothing was written"):
            main(["gpt2", str(source), str(out), "--replace"])
    monkeypatch.chdir(tmp_path / "work")
    for out in (".", "..", str(tmp_path)):
        with pytest.raises(SystemExit, match="is the folder this command runs in, or holds it; nothing was written"):
            main(["gpt2", "gpt2", out, "--replace"])
    assert {path.name: path.read_bytes() for path in source.iterdir()} == before
    assert sorted(path.name for path in tmp_path.rglob("*.lock")) == []
    main(["gpt2", "gpt2", "atlas"])  # beside the source, in the folder the command runs in: fine
    assert load_checkpoint(tmp_path / "work" / "atlas").config.stacks == "decoder-only"


@pytest.mark.slow  # AppTest
def test_the_app_lists_a_folder_whose_tokenizer_would_panic_and_serves_the_others(sources, tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    root = tmp_path / "checkpoints"
    main(["gpt2", str(sources["gpt2"]), str(root / "gpt2")])
    main(["bert", str(sources["bert"]), str(root / "broken")])
    broken = json.loads((root / "broken" / "tokenizer.json").read_text())
    undefined_special(broken)
    (root / "broken" / "tokenizer.json").write_text(json.dumps(broken))
    monkeypatch.setenv("ATLAS_CHECKPOINTS", str(root))
    at = AppTest.from_file(str(Path(__file__).parents[1] / "app.py"), default_timeout=60)
    at.query_params.update(checkpoint="broken", text="Paris is the [MASK] of France.")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    texts = [element.value for element in at.text]
    assert any(text.startswith("broken: cannot be loaded:") and "the post-processor's template adds" in text
               for text in texts), texts
    assert at.session_state.checkpoint == "gpt2"  # the link's checkpoint is refused, with a notice, not hung on
    assert any("`checkpoint`" in warning.value for warning in at.warning), [w.value for w in at.warning]


def test_a_download_that_fails_is_one_line_not_a_traceback(tmp_path, monkeypatch):
    huggingface_hub = pytest.importorskip("huggingface_hub")

    def offline(name, **kwargs):
        raise huggingface_hub.errors.LocalEntryNotFoundError(
            "An error happened while trying to locate the files on the Hub\nand we cannot find them in the cache.")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(SystemExit) as exit_:
        main(["marian", "--from-hub", "Helsinki-NLP/opus-mt-en-fr", str(tmp_path / "out")])
    assert str(exit_.value) == (
        "error: Helsinki-NLP/opus-mt-en-fr: could not be downloaded from the Hugging Face hub "
        "(LocalEntryNotFoundError: An error happened while trying to locate the files on the Hub). Without a network, "
        "copy the model's folder here and convert it as SRC_FOLDER")
    assert not (tmp_path / "out").exists()

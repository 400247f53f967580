"""Hostile folders given to the converter: config fields of the wrong type, a tokenizer whose post-processor adds
tokens its vocabulary lacks (which makes the `tokenizers` library panic on first use), and outputs that would replace
the source. Each is refused with a message naming the field or file, and nothing is written or deleted."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from transformer import CheckpointError, load_checkpoint
from transformer.io.convert import main
from transformer.io.tokenizer import JsonTokenizer

pytest.importorskip("transformers", reason="the converter's tests need transformers (requirements-dev)")
tokenizers = pytest.importorskip("tokenizers")

from families import SHAPES, save_family  # noqa: E402  (after the skips)
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


@pytest.fixture(scope="module")
def decoders(tmp_path_factory) -> dict[str, Path]:
    """A small Llama and Qwen2 folder (the families whose head width is computed from the config)."""
    root = tmp_path_factory.mktemp("hf-decoders")
    for family in ("llama", "qwen2"):
        save_family(family, root / family, **SHAPES[family][0])
    return {family: root / family for family in ("llama", "qwen2")}


AT_LEAST_ONE = "not a whole number of at least 1"
TOO_SHORT = ("not a whole number of at least 8 (the positions the shortest sentence needs, with its start and end "
             "tokens)")


@pytest.mark.parametrize(("family", "key", "value", "message"), [
    ("llama", "num_attention_heads", 0, AT_LEAST_ONE), ("qwen2", "num_attention_heads", 0, AT_LEAST_ONE),
    ("llama", "num_key_value_heads", 0, AT_LEAST_ONE), ("llama", "hidden_size", -4, AT_LEAST_ONE),
    ("llama", "max_position_embeddings", 1, TOO_SHORT), ("qwen2", "max_position_embeddings", 7, TOO_SHORT),
    ("gpt2", "n_head", 0, AT_LEAST_ONE), ("gpt2", "n_positions", 1, TOO_SHORT), ("gpt2", "n_inner", -1,
                                                                                  "not a whole number of at least 0"),
    ("bert", "num_attention_heads", 0, AT_LEAST_ONE), ("bert", "intermediate_size", 0, AT_LEAST_ONE),
    ("bart", "d_model", 0, AT_LEAST_ONE), ("bart", "max_position_embeddings", 2, TOO_SHORT),
])
def test_a_size_of_zero_or_too_few_positions_is_one_line_naming_the_field(sources, decoders, tmp_path, family, key,
                                                                           value, message):
    folder = copy_with({**sources, **decoders}[family], tmp_path / "hf", "config.json",
                       lambda config: config.update({key: value}))
    with pytest.raises(SystemExit, match=f"^error: {folder / 'config.json'}: {key} is {value}, {re.escape(message)}$"):
        main([family, str(folder), str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_a_converted_folder_edited_to_too_few_positions_is_refused_on_loading(decoders, tmp_path):
    main(["llama", str(decoders["llama"]), str(tmp_path / "atlas")])
    config = json.loads((tmp_path / "atlas" / "config.json").read_text())
    (tmp_path / "atlas" / "config.json").write_text(json.dumps(config | {"max_len": 1}))
    with pytest.raises(CheckpointError, match=r"config\.json: max_len is 1, fewer than the 8 positions the shortest "
                                              "sentence needs with its start and end tokens"):
        load_checkpoint(tmp_path / "atlas")


def test_what_is_planted_at_the_hidden_paths_is_refused_never_followed(sources, tmp_path):
    """A symlink at .OUT.converting or .OUT.lock (to a folder or a file of someone else's) stops the conversion
    with a message; the target is left as it was. A real folder there is an interrupted conversion's, and goes."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("mine")
    out = tmp_path / "atlas"
    (tmp_path / ".atlas.converting").symlink_to(elsewhere)
    with pytest.raises(SystemExit, match=f"error: {tmp_path / '.atlas.converting'}: is a symlink, not what an "
                                         "interrupted run of this command leaves there; nothing was written"):
        main(["gpt2", str(sources["gpt2"]), str(out)])
    (tmp_path / ".atlas.converting").unlink()
    (tmp_path / ".atlas.lock").unlink()  # the lock file the refused run made (a lock is kept between runs)
    (tmp_path / ".atlas.lock").symlink_to(elsewhere / "keep.txt")
    with pytest.raises(SystemExit, match=r"\.atlas\.lock: cannot be used to write .*atlas \(.*\); nothing was "
                                         "written"):
        main(["gpt2", str(sources["gpt2"]), str(out)])
    assert [path.name for path in elsewhere.iterdir()] == ["keep.txt"]
    assert (elsewhere / "keep.txt").read_text() == "mine"
    assert not out.exists()
    (tmp_path / ".atlas.lock").unlink()
    (tmp_path / ".atlas.converting").mkdir()  # left by a conversion that was killed
    (tmp_path / ".atlas.converting" / "config.json").write_text("{")
    main(["gpt2", str(sources["gpt2"]), str(out)])
    assert load_checkpoint(out).config.stacks == "decoder-only" and not (tmp_path / ".atlas.converting").exists()

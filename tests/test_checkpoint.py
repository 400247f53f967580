"""Checkpoint folders: round trip, translate, and every broken or hostile file refused with a clear error."""
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import transformer.io.text
from helpers import small_config
from transformer import (
    Caveat,
    CheckpointError,
    Transformer,
    capture,
    checkpoint_folders,
    load_checkpoint,
    resolve_checkpoint,
)
from transformer.io.checkpoint import (
    CARD_FILE,
    CONFIG_FILE,
    SOURCE_WORDS_FILE,
    SRC_TOKENIZER_FILE,
    WEIGHTS_FILE,
    parameter_count,
    write_source_words,
)
from transformer.io.text import words
from transformer.io.tokenizer import BOS_ID, EOS_ID


@pytest.fixture
def folder(tiny_checkpoint, tmp_path):
    """A private copy of the tiny checkpoint that a test may damage."""
    return shutil.copytree(tiny_checkpoint, tmp_path / "copy")


def test_translate_result_is_consistent(tiny_checkpoint):
    checkpoint = load_checkpoint(tiny_checkpoint)
    result = checkpoint.translate("abc12")
    assert checkpoint.model.training is False
    assert result.src_tokens == ["a", "b", "c", "1", "2", "</s>"]
    assert result.src_ids == checkpoint.encode("abc12")
    assert result.tgt_tokens[0] == "<s>" and result.tgt_ids[0] == BOS_ID
    assert len(result.output_tokens) == len(result.tgt_tokens) == len(result.probs)
    assert result.output_tokens[:-1] == result.tgt_tokens[1:]
    assert all(0.0 < p <= 1.0 for p in result.probs)
    cross = result.attention["decoder.layers.0.cross_attn"]
    assert cross.shape == (1, 4, len(result.tgt_tokens), len(result.src_tokens))
    # The record is one pass over the final output: re-running it gives the same weights and probabilities.
    src, tgt = torch.tensor([result.src_ids]), torch.tensor([result.tgt_ids])
    with torch.no_grad(), capture(checkpoint.model) as record:
        probs = checkpoint.model(src, tgt).softmax(-1)[0]
    torch.testing.assert_close(record["decoder.layers.0.cross_attn"], cross)
    for position, prob in enumerate(result.probs[:-1]):  # each generated token is the next decoder input
        assert prob == pytest.approx(float(probs[position, result.tgt_ids[position + 1]]), abs=1e-6)
    assert result.output_ids[:-1] == result.tgt_ids[1:]
    assert checkpoint.tgt_tokenizer.pieces(result.output_ids) == result.output_tokens
    assert result.probs[-1] == pytest.approx(float(probs[-1, result.output_ids[-1]]), abs=1e-6)


def test_beam_search_translation(tiny_checkpoint):
    result = load_checkpoint(tiny_checkpoint).translate("hello", beam_size=3)
    assert result.tgt_tokens[0] == "<s>" and len(result.probs) == len(result.output_tokens)


def test_encode_sides(tiny_checkpoint):
    checkpoint = load_checkpoint(tiny_checkpoint)
    assert checkpoint.encode("ab", side="tgt")[0] == BOS_ID and checkpoint.encode("ab", side="tgt")[-1] == EOS_ID
    assert checkpoint.encode("ab")[-1] == EOS_ID and BOS_ID not in checkpoint.encode("ab")
    with pytest.raises(ValueError, match="side"):
        checkpoint.encode("ab", side="both")


@pytest.mark.parametrize("text", ["", "   ", "\n\t "])
def test_empty_text_is_a_clear_value_error(tiny_checkpoint, text):
    with pytest.raises(ValueError, match="empty"):
        load_checkpoint(tiny_checkpoint).translate(text)


def test_long_text_is_truncated_with_a_warning(tiny_checkpoint):
    checkpoint = load_checkpoint(tiny_checkpoint)
    result = checkpoint.translate("a" * 100)
    assert len(result.src_ids) == checkpoint.config.max_len
    assert any(warning.code == "cut_off_pieces" for warning in result.warnings)


def never_ending(checkpoint):
    """`checkpoint` with a model that never chooses EOS: every output runs to the decoding's limit."""
    with torch.no_grad():
        checkpoint.model.generator.bias[checkpoint.config.eos_id] = -1e4
    return checkpoint


@pytest.mark.parametrize("beam_size", [1, 3])
def test_an_output_the_model_never_ends_stops_at_twice_the_input_plus_ten(tiny_checkpoint, beam_size):
    """As `python -m transformer.evaluate` decodes (decoding.output_limit), not at max_len, and the output says so."""
    checkpoint = never_ending(load_checkpoint(tiny_checkpoint))
    source = len(checkpoint.encode("abc"))  # three characters and </s>
    result = checkpoint.translate("abc", beam_size=beam_size)
    assert len(result.tgt_ids) == 2 * source + 9  # a decoder sequence of 2 x 4 + 10 tokens, the last not fed back
    assert result.warnings == [Caveat("unended_at_output_limit", {"pieces": 2 * source + 9, "src_len": 4})]
    assert checkpoint.translate("abc", beam_size=beam_size, max_len=6).warnings[-1] == Caveat(
        "unended_at_max_len", {"pieces": 5, "max_len": 6})
    long = checkpoint.translate("abcdefghijklmnop", beam_size=beam_size)  # 2 x 17 + 10 is beyond max_len
    max_len = checkpoint.config.max_len
    assert len(long.tgt_ids) == max_len - 1
    assert long.warnings[-1] == Caveat("unended_at_max_len", {"pieces": max_len - 1, "max_len": max_len})


def test_an_output_the_model_ends_has_no_such_warning(tiny_checkpoint):
    result = load_checkpoint(tiny_checkpoint).translate("abc")
    assert result.output_ids[-1] == EOS_ID and result.warnings == []


def test_unknown_characters_become_unk_with_a_warning(tiny_checkpoint):
    result = load_checkpoint(tiny_checkpoint).translate("ab€")
    assert "<unk>" in result.src_tokens and Caveat("unknown_pieces", {"count": 1}) in result.warnings


@pytest.mark.parametrize("weights", [WEIGHTS_FILE, "model.pt"])  # in the safetensors file's place, or alone
def test_planted_pickle_is_refused_and_never_runs(folder, tmp_path, weights):
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    (folder / WEIGHTS_FILE).unlink()
    with open(folder / weights, "wb") as f:
        pickle.dump({"weights": Exploit()}, f)
    with pytest.raises(CheckpointError, match=weights):
        load_checkpoint(folder)
    assert not marker.exists()


def test_torch_save_of_an_object_is_refused(folder):
    (folder / WEIGHTS_FILE).unlink()
    torch.save({"config": object()}, folder / "model.pt")
    with pytest.raises(CheckpointError, match="model.pt"):
        load_checkpoint(folder)


@pytest.mark.parametrize("save", [torch.save, save_file], ids=["torch-zip", "safetensors"])
def test_truncated_weights(folder, save):
    """Weights cut short, in either format, are refused with the file's name (a torch zip loses its central
    directory, a safetensors file the bytes its header promises)."""
    path = folder / ("model.pt" if save is torch.save else WEIGHTS_FILE)
    save(dict(load_file(folder / WEIGHTS_FILE)), path)
    if save is torch.save:
        (folder / WEIGHTS_FILE).unlink()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=path.name):
        load_checkpoint(folder)


@pytest.mark.parametrize("content", [None, b"not a sentencepiece model"])
def test_missing_or_corrupt_tokenizer(folder, content):
    if content is None:
        (folder / SRC_TOKENIZER_FILE).unlink()
    else:
        (folder / SRC_TOKENIZER_FILE).write_bytes(content)
    with pytest.raises(CheckpointError, match="src.model"):
        load_checkpoint(folder)


def test_config_that_does_not_match_the_weights(folder):
    config = json.loads((folder / CONFIG_FILE).read_text())
    config["d_ff"] *= 2
    (folder / CONFIG_FILE).write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="does not match config.json"):
        load_checkpoint(folder)


@pytest.mark.parametrize("change", [
    {"examples": "not a list"}, {"metrics": {"bleu": "high"}}, {"parameters": "many"}, {"history": {}},
    {"snapshots": [{"name": "../../etc/passwd"}]}, {"unexpected": 1},
])
def test_card_with_wrong_types(folder, change):
    card = json.loads((folder / CARD_FILE).read_text())
    card.update(change)
    (folder / CARD_FILE).write_text(json.dumps(card))
    with pytest.raises(CheckpointError, match="card.json"):
        load_checkpoint(folder)


def test_broken_json_and_missing_folder(folder, tmp_path):
    (folder / CONFIG_FILE).write_text("{not json")
    with pytest.raises(CheckpointError, match="config.json"):
        load_checkpoint(folder)
    with pytest.raises(CheckpointError, match="no such checkpoint folder"):
        load_checkpoint(tmp_path / "nowhere")


def test_unknown_snapshot_name(tiny_checkpoint):
    with pytest.raises(CheckpointError, match="no snapshot named"):
        load_checkpoint(tiny_checkpoint).load_snapshot("../model")


@pytest.fixture
def checkpoints_root(tiny_checkpoint, tmp_path):
    """A checkpoints folder with one real checkpoint, and every kind of entry that must not count as one."""
    root = tmp_path / "checkpoints"
    shutil.copytree(tiny_checkpoint, root / "real")
    shutil.copytree(tiny_checkpoint, tmp_path / "outside")  # loadable, but not in the folder
    (root / "nested" / "inner").mkdir(parents=True)
    (root / ".hidden").mkdir()
    (root / "notes.txt").write_text("not a folder")
    (root / "alias").symlink_to(root / "real")  # stays inside: allowed
    (root / "escape").symlink_to(tmp_path / "outside")
    (root / "self").symlink_to(root)
    (root / "up").symlink_to("..")
    (root / "dangling").symlink_to(root / "missing")
    return root


def test_checkpoint_folders_are_the_visible_sub_folders_that_stay_inside(checkpoints_root):
    assert checkpoint_folders(checkpoints_root) == ["alias", "nested", "real"]
    assert checkpoint_folders(checkpoints_root / "nowhere") == []
    assert resolve_checkpoint(checkpoints_root, "real") == checkpoints_root / "real"
    assert load_checkpoint(resolve_checkpoint(checkpoints_root, "alias")).name == "alias"  # and it loads


@pytest.mark.parametrize("name", [
    "..", ".", "", "../checkpoints/real", "real/", "real/snapshots", "nested/inner", "/etc", "/", ".hidden",
    "notes.txt", "escape", "self", "up", "dangling", "missing", "real\x00", "~", "\udc80",
])
def test_names_that_would_leave_the_folder_are_refused(checkpoints_root, name):
    with pytest.raises(CheckpointError, match="no checkpoint folder named"):
        resolve_checkpoint(checkpoints_root, name)


def test_an_absolute_path_is_refused_even_into_the_folder(checkpoints_root):
    with pytest.raises(CheckpointError):
        resolve_checkpoint(checkpoints_root, str(checkpoints_root / "real"))


def test_the_test_checkpoints_differ_wherever_the_app_compares(tiny_checkpoint, tiny_twin):
    """Heads of a layer, layers, the twin checkpoint and a training snapshot each give other attention on the same
    sequence, so a comparison that shows A against A cannot pass for a real one."""
    checkpoint, twin = load_checkpoint(tiny_checkpoint), load_checkpoint(tiny_twin)
    assert twin.src_tokenizer.pieces(checkpoint.encode("ab12")) == ["a", "b", "1", "2", "</s>"]  # the same ids
    src, tgt = torch.tensor([checkpoint.encode("q1w2e3")]), torch.tensor([checkpoint.encode("3e2w1q", "tgt")[:-1]])
    records = []
    for model in (checkpoint.model, twin.model, checkpoint.load_snapshot(checkpoint.snapshot_names()[0])):
        with torch.no_grad(), capture(model) as record:
            model(src, tgt)
        records.append(record)
    mine, others = records[0], records[1:]
    for key in mine:
        weights = mine[key][0]  # (heads, q_len, k_len)
        assert all(not torch.allclose(weights[a], weights[b], atol=0.05) for a in range(4) for b in range(a)), key
        assert all(not torch.allclose(weights, other[key][0], atol=0.05) for other in others), key
    for kind in ("encoder.layers.{}.self_attn", "decoder.layers.{}.self_attn", "decoder.layers.{}.cross_attn"):
        assert not torch.allclose(mine[kind.format(0)], mine[kind.format(1)], atol=0.05)


@pytest.mark.slow  # a fresh interpreter
def test_loading_a_checkpoint_imports_no_compiler(tiny_checkpoint):
    """The safety checks build the model on the meta device; ops there that run PyTorch's Python decompositions
    import torch._dynamo on first use, seconds before a server's first visitor sees a figure."""
    script = ("import sys\nfrom transformer import load_checkpoint\n"
              f"checkpoint = load_checkpoint({str(tiny_checkpoint)!r})\n"
              "checkpoint.translate(checkpoint.card.examples[0] or 'a')\n"
              "print(sorted(m for m in sys.modules if m.startswith('torch._dynamo')))")
    result = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).parents[1], capture_output=True,
                            text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_expected_state_matches_a_real_model(tiny_checkpoint):
    from transformer.io.checkpoint import expected_state
    from transformer.model.model import Transformer

    config = load_checkpoint(tiny_checkpoint).config
    expected, real = expected_state(config, tiny_checkpoint), Transformer(config).state_dict()
    assert {name: (t.shape, t.dtype) for name, t in expected.items()} == {
        name: (t.shape, t.dtype) for name, t in real.items()}


def test_words_are_lower_cased_runs_of_letters():
    assert words("We’re NOT going, Café 3 días!") == ["we", "re", "not", "going", "café", "días"]
    assert words("<b>x</b> **y** [z](u)") == ["b", "x", "b", "y", "z", "u"]  # no markup survives


def test_unseen_words_are_named_in_one_warning(folder):
    write_source_words(folder, ["abc ab", "ba 12 cab"])
    assert (folder / SOURCE_WORDS_FILE).read_text() == "ab\nabc\nba\ncab\n"  # sorted, one a line
    checkpoint = load_checkpoint(folder)
    assert checkpoint.unseen_words("abc ba") == []
    assert checkpoint.unseen_words("abc cc ba cc aa") == ["cc", "aa"]  # each once, in order
    warning, = [w for w in checkpoint.translate("abc cc").warnings if w.code == "unseen_words"]
    assert warning.values == {"words": ["cc"]}
    many = checkpoint.translate("a b c aa bb cc dd")
    warning, = [w for w in many.warnings if w.code == "unseen_words"]
    assert warning.values == {"words": ["a", "b", "c", "aa", "bb", "cc", "dd"]}  # all of them: the app names a few


def test_the_input_is_normalised_once_where_it_enters(folder, monkeypatch):
    """translate() reads the text once (Checkpoint.read): encoding, the warnings and the typed pieces all take that
    reading, so the text is bounded and normalised once, however many of them look at it."""
    write_source_words(folder, ["abc ab", "ba 12 cab"])
    checkpoint = load_checkpoint(folder)
    calls = []
    normalize = transformer.io.text.normalize
    monkeypatch.setattr(transformer.io.text, "normalize", lambda text: calls.append(text) or normalize(text))
    result = checkpoint.translate("ＡＢＣ  cc\tba")  # full-width letters: NFKC makes them "ABC"
    assert calls == ["ＡＢＣ cc ba"]  # bounded (whitespace collapsed), then normalised, once
    assert result.src_typed[:-1] == checkpoint.src_tokenizer.encode_pieces("ABC cc ba")
    assert Caveat("unseen_words", {"words": ["cc"]}) in result.warnings  # the unseen words of the read text


def test_without_a_word_list_nothing_is_unseen(tiny_checkpoint):
    checkpoint = load_checkpoint(tiny_checkpoint)
    assert checkpoint.source_words is None and checkpoint.unseen_words("zzz qqq") == []
    assert not any(w.code == "unseen_words" for w in checkpoint.translate("zzz").warnings)


@pytest.mark.parametrize("content", [b"ab\nA\n", b"ab\n<b>\n", b"two words\n", b"\xff\xfe\n"])
def test_a_word_list_that_is_not_words_is_refused(folder, content):
    (folder / SOURCE_WORDS_FILE).write_bytes(content)
    with pytest.raises(CheckpointError, match=SOURCE_WORDS_FILE):
        load_checkpoint(folder)


@pytest.mark.parametrize("overrides", [
    {"num_encoder_layers": 5, "num_decoder_layers": 3},
    {"stacks": "decoder-only", "num_encoder_layers": 0, "num_decoder_layers": 4, "src_vocab_size": 41,
     "positional": "rotary", "norm": "rms", "feed_forward": "gated", "num_kv_heads": 2, "attention_bias": "qkv"},
    {"stacks": "encoder-only", "num_encoder_layers": 3, "num_decoder_layers": 0, "src_vocab_size": 41},
], ids=["encoder-decoder", "llama-like", "encoder-only"])
def test_the_parameter_count_is_the_built_models(overrides):
    """The cap is checked from a model of one layer a stack (a config asking for thousands of layers is refused in
    the time one takes): the count is the full model's."""
    config = small_config(**overrides)
    assert parameter_count(config) == Transformer(config).num_parameters()

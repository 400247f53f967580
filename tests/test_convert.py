"""Converted Marian (opus-mt) models equal transformers' MarianMTModel: logits, every attention, token ids, greedy and
beam decoding. The models are random and tiny, built here from a MarianConfig, with sentencepiece models trained here;
nothing is downloaded."""
from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
import sentencepiece as spm
import torch

from benchmarks.chromium import RUN_S
from helpers import outputs
from transformer import CheckpointError, beam_search, capture, greedy, load_checkpoint
from transformer.io.convert import convert, main
from transformer.model.masks import decoder_lengths
from transformer.model.positional import sinusoidal_table

transformers = pytest.importorskip("transformers", reason="the equivalence tests need transformers (requirements-dev)")

ENGLISH = ["I am cold.", "She is reading a book.", "Where is the station?", "The children are playing in the garden.",
           "We will go to the beach tomorrow.", "He bought a red car.", "Do you speak French?", "It is raining today.",
           "Tom is taller than Mary.", "I don't like cats at all."]
FRENCH = ["J'ai froid.", "Elle lit un livre.", "Où est la gare ?", "Les enfants jouent dans le jardin.",
          "Nous irons à la plage demain.", "Il a acheté une voiture rouge.", "Parlez-vous français ?",
          "Il pleut aujourd'hui.", "Tom est plus grand que Marie.", "Je n'aime pas du tout les chats."]
SENTENCES = ["I am cold.", "The children are reading in the garden!", "Zebras? Quixotic jazz ~ 42 %",
             "  spaces   everywhere  ", ">>fra<< I like cats.", "Où est la gare ?", "don’t", "ünïcödé naïve café"]
MAX_LENGTH = 14  # generation length (start token included) for both libraries
WEIGHT_STD = 0.35  # random weights this large give sharp, distinct attention patterns (the init's are near-uniform)


def train_spm(sentences: list[str], vocab_size: int) -> bytes:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(sentences), model_writer=model, vocab_size=vocab_size,
                                   model_type="unigram", hard_vocab_limit=False, num_threads=1, minloglevel=2)
    return model.getvalue()


def pieces_of(model: bytes) -> list[str]:
    processor = spm.SentencePieceProcessor(model_proto=model)
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())
            if not (processor.is_control(i) or processor.is_unknown(i))]


# (shared vocabulary, tie_word_embeddings, heads, encoder layers, decoder layers)
SHAPES = {"shared": (True, True, 3, 3, 2), "separate": (False, True, 6, 2, 3),
          "separate-untied": (False, False, 2, 1, 2)}


def make_marian_folder(folder: Path, shape: str) -> None:
    """A random MarianMTModel of `shape`, written by save_pretrained with its MarianTokenizer files."""
    shared, tied, heads, encoder_layers, decoder_layers = SHAPES[shape]
    folder.mkdir(parents=True)
    source_spm, target_spm = train_spm(ENGLISH, 60), train_spm(FRENCH, 55)
    (folder / "source.spm").write_bytes(source_spm)
    (folder / "target.spm").write_bytes(target_spm)
    # As in opus-mt: </s> is 0, <unk> is 1, <pad> is the last id; the spm's own ids mean nothing to the model. A few
    # pieces are left out, so that they become <unk>, and a language code is a token of its own.
    source_pieces, target_pieces = pieces_of(source_spm)[:-3], pieces_of(target_spm)[:-3]
    if shared:
        pieces = ["</s>", "<unk>", ">>fra<<"] + source_pieces + [p for p in target_pieces if p not in source_pieces]
        vocabs = {"vocab.json": {piece: i for i, piece in enumerate(pieces + ["<pad>"])}}
    else:
        target = ["</s>", "<unk>"] + target_pieces + ["<pad>"]
        source = ["</s>", "<unk>", ">>fra<<"] + source_pieces
        source = source[: len(target) - 1] + ["<pad>"] + source[len(target) - 1:]  # <pad>: the same id on both sides
        vocabs = {"vocab.json": {p: i for i, p in enumerate(source)},
                  "target_vocab.json": {p: i for i, p in enumerate(target)}}
    for file, vocab in vocabs.items():
        (folder / file).write_text(json.dumps(vocab), encoding="utf-8")
    pad = vocabs["vocab.json"]["<pad>"]
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "MarianTokenizer", "source_lang": "en", "target_lang": "fr", "separate_vocabs": not shared,
         "model_max_length": 512}), encoding="utf-8")
    (folder / "README.md").write_text("---\nlicense: cc-by-4.0\n---\n# a test model\n", encoding="utf-8")
    config = transformers.MarianConfig(
        vocab_size=len(vocabs["vocab.json"]), decoder_vocab_size=len(vocabs.get("target_vocab.json", [])) or None,
        d_model=24, encoder_layers=encoder_layers, decoder_layers=decoder_layers, encoder_attention_heads=heads,
        decoder_attention_heads=heads, encoder_ffn_dim=40, decoder_ffn_dim=40, max_position_embeddings=48,
        activation_function="swish", scale_embedding=True, pad_token_id=pad, decoder_start_token_id=pad,
        eos_token_id=0, forced_eos_token_id=0, share_encoder_decoder_embeddings=shared, tie_word_embeddings=tied)
    torch.manual_seed(len(shape))
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "embed_positions" not in name:
                parameter.normal_(1.0 if "layer_norm.weight" in name else 0.0, 0.1 if "norm" in name else WEIGHT_STD)
        model.final_logits_bias.normal_(0.0, 1.0)
    model.generation_config.bad_words_ids = [[pad]]  # as every opus-mt generation_config: pad is never generated
    tokenizer = transformers.MarianTokenizer(
        str(folder / "source.spm"), str(folder / "target.spm"), str(folder / "vocab.json"),
        target_vocab_file=None if shared else str(folder / "target_vocab.json"), separate_vocabs=not shared)
    with torch.no_grad():
        model.final_logits_bias[0, config.eos_token_id] += eos_bias_for_varied_lengths(model, tokenizer)
    model.save_pretrained(folder)


def eos_bias_for_varied_lengths(model, tokenizer) -> float:
    """A random model rarely ends a sentence. Raising </s>'s logit by b leaves the greedy path unchanged until the
    first step where </s> trails the best token by less than b, and ends it there: pick the b (midway between two
    such gaps, far from either) that gives the most different output lengths."""
    batch = tokenizer(SENTENCES, return_tensors="pt", padding=True)
    out = model.generate(**batch, num_beams=1, do_sample=False, max_length=MAX_LENGTH, forced_eos_token_id=None,
                         output_logits=True, return_dict_in_generate=True)
    logits = torch.stack(out.logits, dim=1)  # (batch, steps, vocab)
    logits[..., model.config.pad_token_id] = float("-inf")
    gaps = logits.max(dim=-1).values - logits[..., model.config.eos_token_id]  # (batch, steps)
    candidates = gaps.flatten().sort().values
    candidates = (candidates[1:] + candidates[:-1]) / 2

    def end_steps(bias: float) -> set[int]:
        ends = (gaps < bias).float()
        return {int(row.argmax()) if row.any() else -1 for row in ends}

    return float(max(candidates, key=lambda b: (len(end_steps(float(b))), -float(b))))


# The shared-vocabulary shape runs in the fast loop (-m "not slow"), the other two in the whole suite.
@pytest.fixture(scope="module", params=[pytest.param(shape, marks=() if shape == "shared" else pytest.mark.slow)
                                        for shape in sorted(SHAPES)])
def converted(request, tmp_path_factory):
    """(their model in eval mode with eager attention, their tokenizer, our checkpoint) for one shape."""
    root = tmp_path_factory.mktemp(request.param)
    make_marian_folder(root / "hf", request.param)
    convert("marian", root / "hf", root / "atlas", command="python -m transformer.convert marian hf atlas",
                   log=lambda line: None)
    theirs = transformers.MarianMTModel.from_pretrained(root / "hf", attn_implementation="eager").eval()
    tokenizer = transformers.MarianTokenizer.from_pretrained(root / "hf")
    return theirs, tokenizer, load_checkpoint(root / "atlas")


def their_batch(tokenizer, texts: list[str]) -> dict:
    return tokenizer(texts, return_tensors="pt", padding=True)


def test_positional_halves_layout_equals_marians():
    marian = transformers.models.marian.modeling_marian.MarianSinusoidalPositionalEmbedding
    for d_model in (24, 7):  # even and odd widths
        theirs = marian(50, d_model).create_weight()
        torch.testing.assert_close(sinusoidal_table(50, d_model, "halves"), theirs, atol=1e-6, rtol=0)
    interleaved, halves = sinusoidal_table(50, 24), sinusoidal_table(50, 24, "halves")  # the same sinusoids, moved
    torch.testing.assert_close(interleaved, torch.stack([halves[:, :12], halves[:, 12:]], dim=2).flatten(1),
                               atol=1e-4, rtol=0)


def test_token_ids_equal_marian_tokenizers(converted):
    _, tokenizer, checkpoint = converted
    for text in SENTENCES:
        assert checkpoint.encode(text) == tokenizer(text)["input_ids"], text
        expected_target = tokenizer(text_target=text)["input_ids"]  # pieces + </s>; our decoder sequence adds start
        assert checkpoint.encode(text, side="tgt") == [checkpoint.config.bos_id] + expected_target, text
    assert any(checkpoint.src_tokenizer.unk_id in checkpoint.encode(text) for text in SENTENCES)  # <unk> is tested
    assert checkpoint.encode(">>fra<< I like cats.")[0] == tokenizer.convert_tokens_to_ids(">>fra<<")


def test_logits_and_every_attention_equal_transformers(converted):
    theirs, tokenizer, checkpoint = converted
    batch = their_batch(tokenizer, SENTENCES[:4])  # different lengths: the source is padded
    labels = tokenizer(text_target=FRENCH[:4], return_tensors="pt", padding=True)["input_ids"]  # padded with <pad>
    decoder_input = transformers.models.marian.modeling_marian.shift_tokens_right(
        labels, theirs.config.pad_token_id, theirs.config.decoder_start_token_id)
    lengths = decoder_lengths(decoder_input, checkpoint.config.pad_id)  # the start token (the pad id) counts
    decoder_attention_mask = torch.arange(decoder_input.size(1)) < lengths[:, None]
    with torch.no_grad():
        expected = theirs(**batch, decoder_input_ids=decoder_input, decoder_attention_mask=decoder_attention_mask,
                          output_attentions=True)
        with capture(checkpoint.model) as record:
            logits = checkpoint.model(batch["input_ids"], decoder_input)
    torch.testing.assert_close(logits, expected.logits, atol=1e-4, rtol=0)
    for kind, their_layers in (("encoder.self_attn", expected.encoder_attentions),
                               ("decoder.self_attn", expected.decoder_attentions),
                               ("decoder.cross_attn", expected.cross_attentions)):
        keys = record.keys_of(kind)
        assert len(keys) == len(their_layers)
        for key, their_weights in zip(keys, their_layers):
            torch.testing.assert_close(record[key], their_weights, atol=1e-5, rtol=0, msg=key)


def test_greedy_equals_generate(converted):
    theirs, tokenizer, checkpoint = converted
    batch = their_batch(tokenizer, SENTENCES)
    with torch.no_grad():
        expected = theirs.generate(**batch, num_beams=1, do_sample=False, max_length=MAX_LENGTH,
                                   forced_eos_token_id=None)  # ours never forces </s> at the length limit
    ours = greedy(checkpoint.model, batch["input_ids"], MAX_LENGTH)
    assert ours[:, : expected.size(1)].tolist() == expected.tolist()
    assert (ours[:, expected.size(1):] == checkpoint.config.pad_id).all()
    for text, row in zip(SENTENCES, expected):  # one sentence at a time, through the app's entry point
        translation = checkpoint.translate(text, max_len=MAX_LENGTH)
        generated = row[1: int(decoder_lengths(row[None], checkpoint.config.pad_id)[0])].tolist()
        assert translation.output_ids == generated
        assert translation.text == tokenizer.decode(generated, skip_special_tokens=True)


def test_beam_search_equals_generate_without_length_penalty(converted):
    """Both searches rank by summed log-probability when the length penalty is off; with it on they differ by design
    (ours divides by GNMT's ((5 + length) / 6) ** alpha, transformers by length ** alpha), so only 0 is compared."""
    theirs, tokenizer, checkpoint = converted
    batch = their_batch(tokenizer, SENTENCES)
    for beams in (2, 4):
        with torch.no_grad():
            expected = theirs.generate(**batch, num_beams=beams, do_sample=False, max_length=MAX_LENGTH,
                                       length_penalty=0.0, early_stopping=False, forced_eos_token_id=None)
        ours = beam_search(checkpoint.model, batch["input_ids"], beams, MAX_LENGTH, length_penalty=0.0)
        width = max(ours.size(1), expected.size(1))
        pad = checkpoint.config.pad_id
        padded = [torch.nn.functional.pad(t, (0, width - t.size(1)), value=pad) for t in (ours, expected)]
        assert padded[0].tolist() == padded[1].tolist(), beams


def test_converted_folder_is_a_checkpoint(converted):
    _, _, checkpoint = converted
    card = checkpoint.card
    assert card.task == "translate" and card.licence == "cc-by-4.0"
    assert card.conversion_command.startswith("python -m transformer.convert marian")
    assert card.source and card.parameters == checkpoint.model.num_parameters()
    config = checkpoint.config
    assert (config.activation, config.positional_layout, config.bos_id) == ("silu", "halves", config.pad_id)
    translation = checkpoint.translate(card.examples[0], beam_size=3)
    assert translation.tgt_ids[0] == config.pad_id and translation.tgt_tokens[0] == "<pad>"


@pytest.fixture(scope="module")
def marian_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile") / "hf"
    make_marian_folder(folder, "shared")
    return folder


def damaged(marian_folder: Path, tmp_path: Path, file: str, content: bytes | None) -> Path:
    folder = shutil.copytree(marian_folder, tmp_path / "hf")
    if content is None:
        (folder / file).unlink()
    else:
        (folder / file).write_bytes(content)
    return folder


@pytest.mark.parametrize("file, content, message", [
    ("model.safetensors", None, "model.safetensors: file is missing"),
    ("model.safetensors", b"\x00" * 40, "model.safetensors: not a readable safetensors file"),
    ("config.json", b"{not json", "config.json: not valid JSON"),
    ("config.json", None, "config.json: file is missing"),
    ("vocab.json", b'{"<unk>": 0, "a": 0}', "vocab.json"),
    ("vocab.json", None, "vocab.json: file is missing"),
    ("source.spm", b"garbage", "source.spm"),
    ("target.spm", None, "target.spm: file is missing"),
])
def test_hostile_or_truncated_folder_names_the_file(marian_folder, tmp_path, file, content, message):
    folder = damaged(marian_folder, tmp_path, file, content)
    with pytest.raises(CheckpointError, match=message.replace(".", r"\.").replace("(", r"\(")):
        convert("marian", folder, tmp_path / "out", log=lambda line: None)
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_truncated_weights_are_refused(marian_folder, tmp_path):
    weights = (marian_folder / "model.safetensors").read_bytes()
    folder = damaged(marian_folder, tmp_path, "model.safetensors", weights[: len(weights) // 2])
    with pytest.raises(CheckpointError, match=r"model\.safetensors: not a readable safetensors file"):
        convert("marian", folder, tmp_path / "out", log=lambda line: None)


@pytest.mark.parametrize("change, message", [
    ({"model_type": "bart", "architectures": ["BartForConditionalGeneration"]}, "model_type is 'bart', not 'marian'"),
    ({"decoder_attention_heads": 6}, r"encoder_attention_heads \(3\) differs from decoder_attention_heads \(6\)"),
    ({"activation_function": "quick_gelu"}, "activation_function 'quick_gelu'"),
    ({"normalize_before": True}, "normalize_before is on"),
    ({"d_model": 30}, "does not match"),
])
def test_other_architectures_are_refused_naming_what_differs(marian_folder, tmp_path, change, message):
    hf_config = json.loads((marian_folder / "config.json").read_text())
    folder = damaged(marian_folder, tmp_path, "config.json", json.dumps(hf_config | change).encode())
    with pytest.raises(CheckpointError, match=message):
        convert("marian", folder, tmp_path / "out", log=lambda line: None)


def test_command_line_writes_a_checkpoint(marian_folder, tmp_path, capsys):
    main(["marian", str(marian_folder), str(tmp_path / "opus")])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("reading") and lines[-1].startswith("done")  # a progress line per stage
    assert load_checkpoint(tmp_path / "opus").card.conversion_command.startswith("python -m transformer.convert")
    with pytest.raises(SystemExit, match="error: .*nowhere: no such folder"):
        main(["marian", str(tmp_path / "nowhere"), str(tmp_path / "x")])


# A Marian decoder starts with the pad id: the masks view must read the model's own masks, not the "<pad>" piece, or
# it shows that start token as padding (ui.analysis reads the masks).
APP_VIEWS = ("attention", "model", "compare", "decoding", "positional", "heads", "ablation", "training", "masks")


@pytest.mark.parametrize("view", APP_VIEWS)
@pytest.mark.slow  # AppTest of every view
def test_the_app_opens_a_converted_folder_in_every_view(marian_folder, tmp_path_factory, monkeypatch, view):
    from streamlit.testing.v1 import AppTest

    root = tmp_path_factory.getbasetemp() / "app-marian"
    if not root.exists():
        convert("marian", marian_folder, root / "opus-mt-test", log=lambda line: None)
    monkeypatch.setenv("ATLAS_CHECKPOINTS", str(root))
    at = AppTest.from_file(str(Path(__file__).parents[1] / "app.py"), default_timeout=RUN_S)
    at.query_params.update(view=view, text="I am cold.")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert outputs(at)[0] is not None  # the translation

"""Converted GPT-2, BERT and BART models equal transformers': token ids, logits, every attention, and greedy
generation (GPT-2, BART) or masked-token predictions (BERT). The models are random and small, built here from their
transformers configs, with tokenizers trained here with the `tokenizers` library; nothing is downloaded."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from transformer import CheckpointError, capture, greedy, load_checkpoint
from transformer.convert import main

transformers = pytest.importorskip("transformers", reason="the equivalence tests need transformers (requirements-dev)")
tokenizers = pytest.importorskip("tokenizers")
pytest.importorskip("safetensors", reason="the equivalence tests need safetensors (requirements-dev)")

CORPUS = ["Paris is the capital of France.", "The children are playing in the garden.", "She is reading a book.",
          "Where is the station?", "We will go to the beach tomorrow.", "He bought a red car.",
          "Berlin is the capital of Germany.", "It is raining today.", "Tom is taller than Mary.",
          "The cat sat on the mat.", "I don't like cats at all.", "Rome is the capital of Italy."] * 3
TEXTS = ["Paris is the capital of France.", "The cat is reading in the garden!", "Zebras? Quixotic jazz ~ 42 %",
         "ünïcödé naïve café"]
WEIGHT_STD = 0.3  # random weights this large give sharp, distinct attention patterns (the init's are near-uniform)
NEW_TOKENS = 12


def byte_level_bpe(specials: list[str]) -> tokenizers.Tokenizer:
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE())
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                             initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(CORPUS, trainer)
    return tokenizer


def wordpiece() -> tokenizers.Tokenizer:
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = tokenizers.normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = tokenizers.decoders.WordPiece()
    trainer = tokenizers.trainers.WordPieceTrainer(vocab_size=200,
                                                   special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    tokenizer.train_from_iterator(CORPUS, trainer)
    tokenizer.post_processor = tokenizers.processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", tokenizer.token_to_id("[CLS]")), ("[SEP]", tokenizer.token_to_id("[SEP]"))])
    return tokenizer


def make_gpt2(folder: Path):
    backend = byte_level_bpe(["<|endoftext|>"])
    end = backend.token_to_id("<|endoftext|>")
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>",
                                                     bos_token="<|endoftext|>")
    config = transformers.GPT2Config(vocab_size=backend.get_vocab_size(), n_positions=64, n_embd=32, n_layer=3,
                                     n_head=4, bos_token_id=end, eos_token_id=end)
    return transformers.GPT2LMHeadModel(config), tokenizer


def make_bert(folder: Path):
    backend = wordpiece()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]")
    config = transformers.BertConfig(vocab_size=backend.get_vocab_size(), hidden_size=32, num_hidden_layers=3,
                                     num_attention_heads=4, intermediate_size=48, max_position_embeddings=64,
                                     pad_token_id=0)
    return transformers.BertForMaskedLM(config), tokenizer


def make_bart(folder: Path):
    backend = byte_level_bpe(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])  # BART's ids: 0, 1, 2, 3, then the rest
    backend.post_processor = tokenizers.processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", pad_token="<pad>", eos_token="</s>", unk_token="<unk>",
        mask_token="<mask>")
    config = transformers.BartConfig(
        vocab_size=backend.get_vocab_size(), d_model=32, encoder_layers=2, decoder_layers=3,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48,
        max_position_embeddings=64, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
        forced_bos_token_id=None, forced_eos_token_id=None)
    return transformers.BartForConditionalGeneration(config), tokenizer


MAKERS = {"gpt2": make_gpt2, "bert": make_bert, "bart": make_bart}


@pytest.fixture(scope="module", params=sorted(MAKERS))
def converted(request, tmp_path_factory):
    """(family, their model in eval mode with eager attention, their tokenizer, our checkpoint)."""
    family, root = request.param, tmp_path_factory.mktemp(request.param)
    torch.manual_seed(0)
    model, tokenizer = MAKERS[family](root / "hf")
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name.lower() or "ln_" in name:
                parameter.normal_(1.0 if name.endswith("weight") else 0.0, 0.1)
            else:
                parameter.normal_(0.0, WEIGHT_STD)
    model.save_pretrained(root / "hf")
    tokenizer.save_pretrained(root / "hf")
    main([family, str(root / "hf"), str(root / "atlas")])
    theirs = type(model).from_pretrained(root / "hf", attn_implementation="eager").eval()
    return family, theirs, transformers.AutoTokenizer.from_pretrained(root / "hf"), load_checkpoint(root / "atlas")


def test_token_ids_equal_theirs(converted):
    _, _, tokenizer, checkpoint = converted
    for text in TEXTS:
        assert checkpoint.src_tokenizer.encode_with_specials(text) == tokenizer(text).input_ids
        assert checkpoint.src_tokenizer.encode(text) == tokenizer(text, add_special_tokens=False).input_ids


def run_both(family, theirs, ids):
    """Their output (with attentions) and ours (logits, record) for one input (1, length)."""
    model = theirs
    with torch.no_grad():
        if family == "bart":
            tgt = torch.cat([torch.tensor([[theirs.config.decoder_start_token_id]]), ids[:, :-1]], dim=1)
            out = model(input_ids=ids, decoder_input_ids=tgt, output_attentions=True)
            attentions = {**{f"encoder.{i}.self": a for i, a in enumerate(out.encoder_attentions)},
                          **{f"decoder.{i}.self": a for i, a in enumerate(out.decoder_attentions)},
                          **{f"decoder.{i}.cross": a for i, a in enumerate(out.cross_attentions)}}
            return out.logits, attentions, (ids, tgt)
        out = model(input_ids=ids, output_attentions=True)
        side = "decoder" if family == "gpt2" else "encoder"
        inputs = (None, ids) if family == "gpt2" else (ids, None)
        return out.logits, {f"{side}.{i}.self": a for i, a in enumerate(out.attentions)}, inputs


def test_logits_and_every_attention_equal_theirs(converted):
    family, theirs, tokenizer, checkpoint = converted
    for text in TEXTS:
        ids = torch.tensor([tokenizer(text).input_ids])
        logits, attentions, inputs = run_both(family, theirs, ids)
        with torch.no_grad(), capture(checkpoint.model) as record:
            ours = checkpoint.model(*inputs)
        assert ours.shape == logits.shape
        assert (ours - logits).abs().max() <= 1e-4
        assert sorted(record) == sorted(attentions)
        for key, attention in attentions.items():
            assert (record[key] - attention).abs().max() <= 1e-5, key
        assert max(float(a.max()) for a in attentions.values()) > 0.5  # sharp patterns: a real comparison


def test_generation_or_masked_predictions_equal_theirs(converted):
    family, theirs, tokenizer, checkpoint = converted
    config = checkpoint.config
    for text in TEXTS:
        if family == "bert":
            ids = tokenizer(text).input_ids
            ids[2] = tokenizer.mask_token_id
            ids = torch.tensor([ids])
            with torch.no_grad():
                expected = theirs(input_ids=ids).logits[0, 2].topk(5).indices
                ours = checkpoint.model.predict_masked(ids)[0, 2].topk(5).indices
            assert ours.tolist() == expected.tolist()
            continue
        ids = torch.tensor([tokenizer(text).input_ids])
        never = sorted({config.pad_id, config.bos_id} - {config.eos_id})  # what our decoding never generates
        with torch.no_grad():
            expected = theirs.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1,
                                       suppress_tokens=never or None, pad_token_id=config.pad_id)
        start = ids.size(1) if family == "gpt2" else 0
        ours = greedy(checkpoint.model, ids, max_len=start + NEW_TOKENS + 1 - (family == "gpt2"))
        width = min(ours.size(1), expected.size(1))
        assert ours[0, :width].tolist() == expected[0, :width].tolist()
        assert width >= start + NEW_TOKENS - 1


def test_gpt2_conv1d_weights_are_transposed(converted):
    family, theirs, _, checkpoint = converted
    if family != "gpt2":
        pytest.skip("GPT-2 only")
    c_attn = theirs.transformer.h[0].attn.c_attn.weight  # (in, 3 out) as Conv1D stores it
    d_model = checkpoint.config.d_model
    assert torch.equal(checkpoint.model.decoder.layers[0].self_attn.W_k.weight, c_attn[:, d_model:2 * d_model].t())


def test_config_records_the_shape(converted):
    family, _, _, checkpoint = converted
    expected = {"gpt2": ("decoder.self",), "bert": ("encoder.self",),
                "bart": ("encoder.self", "decoder.self", "decoder.cross")}[family]
    assert checkpoint.config.kinds == expected


def test_refuses_another_family(tmp_path):
    folder = tmp_path / "hf"
    model, tokenizer = make_gpt2(folder)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    with pytest.raises(SystemExit, match="model_type is 'gpt2', not 'bert'"):
        main(["bert", str(folder), str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_refuses_leftover_tensors(tmp_path):
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "hf"
    model, tokenizer = make_gpt2(folder)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    tensors = load_file(folder / "model.safetensors")
    tensors["transformer.h.0.attn.extra.weight"] = torch.zeros(2, 2)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(SystemExit, match="no place for: transformer.h.0.attn.extra.weight"):
        main(["gpt2", str(folder), str(tmp_path / "out")])


def test_checkpoint_refuses_a_tokenizer_bigger_than_the_model(converted, tmp_path):
    import shutil

    _, _, _, checkpoint = converted
    folder = tmp_path / "copy"
    shutil.copytree(checkpoint.path, folder)
    config = (folder / "config.json").read_text()
    vocab = checkpoint.config.src_vocab_size
    (folder / "config.json").write_text(config.replace(f'"src_vocab_size": {vocab}', '"src_vocab_size": 10')
                                        .replace(f'"tgt_vocab_size": {vocab}', '"tgt_vocab_size": 10'))
    with pytest.raises(CheckpointError, match="tokenizer.json: vocabulary of"):
        load_checkpoint(folder)

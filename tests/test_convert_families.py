"""Converted GPT-2, BERT and BART models equal transformers': token ids, logits, every attention, and greedy
generation (GPT-2, BART) or masked-token predictions (BERT). The models are random and small, built here from their
transformers configs, with tokenizers trained here with the `tokenizers` library; nothing is downloaded."""
from __future__ import annotations

import pytest
import torch

from transformer import CheckpointError, capture, greedy, load_checkpoint
from transformer.convert import main

transformers = pytest.importorskip("transformers", reason="the equivalence tests need transformers (requirements-dev)")
pytest.importorskip("tokenizers")
pytest.importorskip("safetensors", reason="the equivalence tests need safetensors (requirements-dev)")

from families import MAKERS, NEW_TOKENS, TEXTS, make_gpt2, save_family  # noqa: E402  (after the skips)


@pytest.fixture(scope="module", params=sorted(MAKERS))
def converted(request, tmp_path_factory):
    """(family, their model in eval mode with eager attention, their tokenizer, our checkpoint)."""
    family, root = request.param, tmp_path_factory.mktemp(request.param)
    model, _ = save_family(family, root / "hf")
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


def test_pieces_read_as_text(converted):
    family, _, tokenizer, checkpoint = converted
    text = "Paris is the capital\tof France."
    pieces = checkpoint.src_tokenizer.pieces(tokenizer(text).input_ids)
    assert all(piece.isprintable() for piece in pieces)  # labels on one line
    if family != "bert":  # byte-level BPE: "Ġis" reads "▁is", as sentencepiece pieces do; a tab stays "ĉ"
        assert "\u2581is" in pieces and not any("\u0120" in piece for piece in pieces)
        joined = "".join(piece for piece in pieces if piece not in ("<s>", "</s>"))
        assert joined.replace("\u2581", " ").replace("\u0109", "\t") == text


def test_one_piece_is_an_input_and_nothing_readable_is_refused(converted):
    family, _, tokenizer, checkpoint = converted
    one = next(text for text in ("the", "The", "Paris")
               if len(tokenizer(text, add_special_tokens=False).input_ids) == 1)
    translation = checkpoint.translate(one)
    assert translation.src_ids == tokenizer(one).input_ids
    invisible = "\u200b\ufeff"
    if family == "bert":  # WordPiece drops them; byte-level BPE reads every byte
        with pytest.raises(ValueError, match="no characters this model reads"):
            checkpoint.translate(invisible)
    else:
        assert checkpoint.translate(invisible).src_ids == tokenizer(invisible).input_ids

"""Converted GPT-2, BERT, BART, Llama, Qwen2 and Mistral models equal transformers': token ids, logits, every
attention, and greedy generation (all but BERT) or masked-token predictions (BERT). The models are random and small,
built here from their transformers configs in several shapes each (tests/families.py: SHAPES), with tokenizers trained
here with the `tokenizers` library; nothing is downloaded."""
from __future__ import annotations

import json

import pytest
import torch

from transformer import CheckpointError, capture, greedy, load_checkpoint
from transformer.io.convert import main

transformers = pytest.importorskip("transformers", reason="the equivalence tests need transformers (requirements-dev)")
pytest.importorskip("tokenizers")

from families import MAKERS, NEW_TOKENS, SHAPES, TEXTS, make_gpt2, save_family  # noqa: E402  (after the skips)

LLAMA_FAMILY = ("llama", "qwen2", "mistral")
# One shape a family runs in the fast loop (-m "not slow"), the others in the whole suite: Llama's second shape is
# Llama 3's rope scaling with grouped-query attention, Mistral's first a window shorter than every text.
FAST = {"bart": 0, "bert": 0, "gpt2": 0, "llama": 1, "mistral": 0, "qwen2": 0}
CASES = [pytest.param((family, shape), id=f"{family}-{shape}", marks=() if FAST[family] == shape else pytest.mark.slow)
         for family in sorted(MAKERS) for shape in range(len(SHAPES[family]))]


@pytest.fixture(scope="module", params=CASES)
def converted(request, tmp_path_factory):
    """(family, their model in eval mode with eager attention, their tokenizer, our checkpoint)."""
    family, shape = request.param
    root = tmp_path_factory.mktemp(family)
    model, _ = save_family(family, root / "hf", **SHAPES[family][shape])
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
            attentions = {**{f"encoder.layers.{i}.self_attn": a for i, a in enumerate(out.encoder_attentions)},
                          **{f"decoder.layers.{i}.self_attn": a for i, a in enumerate(out.decoder_attentions)},
                          **{f"decoder.layers.{i}.cross_attn": a for i, a in enumerate(out.cross_attentions)}}
            return out.logits, attentions, (ids, tgt)
        out = model(input_ids=ids, output_attentions=True)
        side = "encoder" if family == "bert" else "decoder"
        inputs = (ids, None) if family == "bert" else (None, ids)
        return out.logits, {f"{side}.layers.{i}.self_attn": a for i, a in enumerate(out.attentions)}, inputs


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
        start = 0 if family == "bart" else ids.size(1)
        ours = greedy(checkpoint.model, ids, max_len=start + NEW_TOKENS + (family == "bart"))
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
    expected = {"bert": ("encoder.self_attn",), "bart": ("encoder.self_attn", "decoder.self_attn",
                                                         "decoder.cross_attn")}.get(family, ("decoder.self_attn",))
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
    if family == "mistral":  # sentencepiece-like pieces are shown as they are; a tab it never saw is <unk>
        assert "\u2581is" in pieces and "<unk>" in pieces
    elif family != "bert":  # byte-level BPE: "Ġis" reads "▁is", as sentencepiece pieces do; a tab stays "ĉ"
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


@pytest.fixture
def llama_folder(tmp_path):
    """A small Llama (GQA, llama3 rope, untied, biases on) saved as save_pretrained writes it, for a test to change."""
    save_family("llama", tmp_path / "hf", **SHAPES["llama"][1])
    return tmp_path / "hf"


def converted_state(folder, out):
    main(["llama", str(folder), str(out)])
    return load_checkpoint(out).model.state_dict()


def test_sharded_safetensors_and_a_plain_state_dict_convert_to_the_same_weights(llama_folder, tmp_path):
    from safetensors.torch import load_file

    expected = converted_state(llama_folder, tmp_path / "one")
    model = transformers.LlamaForCausalLM.from_pretrained(llama_folder)
    sharded = tmp_path / "sharded"
    model.save_pretrained(sharded, max_shard_size="40KB")
    assert len(list(sharded.glob("model-*.safetensors"))) > 2 and not (sharded / "model.safetensors").exists()
    (sharded / "tokenizer.json").write_bytes((llama_folder / "tokenizer.json").read_bytes())
    plain = tmp_path / "plain"
    plain.mkdir()
    for file in ("config.json", "tokenizer.json"):
        (plain / file).write_bytes((llama_folder / file).read_bytes())
    torch.save(load_file(llama_folder / "model.safetensors"), plain / "pytorch_model.bin")
    for folder in (sharded, plain):
        state = converted_state(folder, tmp_path / f"{folder.name}-atlas")
        assert state.keys() == expected.keys() and all(torch.equal(state[k], expected[k]) for k in expected)


def edit_json(path, change) -> None:
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


@pytest.mark.parametrize(("change", "message"), [
    (lambda c: c | {"rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0}},
     "rope type 'yarn' is not computed here"),
    (lambda c: c | {"rope_parameters": {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 4.0}},
     "rope type 'dynamic' is not computed here"),
    (lambda c: {k: v for k, v in c.items() if k != "rope_parameters"} | {"rope_scaling": {"type": "longrope"}},
     "rope type 'longrope' is not computed here"),
    (lambda c: c | {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "beta_fast": 32}},
     "rope parameters 'beta_fast' are not read"),
    (lambda c: c | {"rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.5}},
     "partial_rotary_factor is not 1"),
    (lambda c: c | {"head_dim": 16}, r"head_dim \(16\) is not hidden_size / num_attention_heads"),
    (lambda c: c | {"eos_token_id": [2, 3]}, r"eos_token_id is '\[2, 3\]', not a whole number"),
    (lambda c: c | {"num_key_value_heads": 3}, r"num_kv_heads \(3\) must divide num_heads \(4\)"),
    (lambda c: c | {"architectures": ["LlamaForSequenceClassification"]}, "architectures is"),
])
def test_refuses_what_our_llama_does_not_compute(llama_folder, tmp_path, change, message):
    edit_json(llama_folder / "config.json", change)
    with pytest.raises(SystemExit, match=message):
        main(["llama", str(llama_folder), str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_refuses_qwen2_with_windows_on_some_layers(tmp_path):
    save_family("qwen2", tmp_path / "hf", **SHAPES["qwen2"][0])
    edit_json(tmp_path / "hf" / "config.json", lambda c: c | {"use_sliding_window": True, "sliding_window": 4})
    with pytest.raises(SystemExit, match="use_sliding_window is on"):
        main(["qwen2", str(tmp_path / "hf"), str(tmp_path / "out")])


def test_refuses_a_tied_output_that_differs_from_the_embedding(tmp_path):
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "hf"
    save_family("llama", folder, **SHAPES["llama"][0])  # tied: the file holds the embedding only
    tensors = load_file(folder / "model.safetensors")
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"] + 1
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(SystemExit, match="tie_word_embeddings is on, but lm_head.weight differs"):
        main(["llama", str(folder), str(tmp_path / "out")])


def moved(weight_map: dict[str, str]) -> dict[str, str]:
    """`weight_map` with its first tensor placed in another shard than the one that holds it."""
    name, shard = next(iter(weight_map.items()))
    return weight_map | {name: next(other for other in weight_map.values() if other != shard)}


@pytest.mark.parametrize(("change", "message"), [
    (lambda index: index | {"weight_map": {name: "../model.safetensors" for name in index["weight_map"]}},
     r"shard '\.\./model\.safetensors' is not a \.safetensors file beside the index"),
    (lambda index: index | {"weight_map": moved(index["weight_map"])},
     "its tensors are not those model.safetensors.index.json places in it"),
    (lambda index: {"metadata": {}}, "no weight_map object"),
])
def test_refuses_shards_the_index_does_not_describe(llama_folder, tmp_path, change, message):
    model = transformers.LlamaForCausalLM.from_pretrained(llama_folder)
    (llama_folder / "model.safetensors").unlink()
    model.save_pretrained(llama_folder, max_shard_size="40KB")
    edit_json(llama_folder / "model.safetensors.index.json", change)
    with pytest.raises(SystemExit, match=message):
        main(["llama", str(llama_folder), str(tmp_path / "out")])


def test_refuses_sharded_pytorch_bins(llama_folder, tmp_path):
    (llama_folder / "model.safetensors").rename(llama_folder / "pytorch_model-00001-of-00001.bin")
    (llama_folder / "pytorch_model.bin.index.json").write_text('{"weight_map": {}}')
    with pytest.raises(SystemExit, match=r"sharded pytorch_model\.bin weights .* are not read"):
        main(["llama", str(llama_folder), str(tmp_path / "out")])


def test_a_long_llama_prompt_is_cut_after_its_bos(converted):
    family, _, tokenizer, checkpoint = converted
    if family not in LLAMA_FAMILY:
        pytest.skip("the Llama family")
    text = " ".join(["Paris is the capital of France."] * (checkpoint.pass_len // 4))
    ids = checkpoint.encode(text)
    full = tokenizer(text).input_ids
    assert len(full) > checkpoint.pass_len and len(ids) == checkpoint.pass_len - 1  # room left to continue
    assert ids == full[:len(ids)]  # <s> (where the tokenizer adds it) first, then the pieces in order
    pieces, around = checkpoint.input_room()
    assert pieces == checkpoint.config.max_len - 1 - (family != "qwen2")

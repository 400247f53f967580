"""One model, three shapes: encoder-decoder, decoder-only (a causal language model) and encoder-only (a masked
language model), chosen by the config, with the same hook names where a part exists, and the loading policy's bounds
on the fields that choose them."""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from transformer import CheckpointError, Site, TransformerConfig, capture
from transformer.io.checkpoint import attention_values, expected_state, read_config
from transformer.model.model import Transformer

SMALL = dict(src_vocab_size=40, tgt_vocab_size=40, d_model=24, num_heads=3, d_ff=32, max_len=20, dropout=0.0)


def model_of(stacks: str, **changes) -> Transformer:
    layers = {"encoder-decoder": (2, 2), "decoder-only": (0, 3), "encoder-only": (3, 0)}[stacks]
    torch.manual_seed(0)
    config = TransformerConfig(**SMALL | dict(stacks=stacks, num_encoder_layers=layers[0],
                                              num_decoder_layers=layers[1]) | changes)
    return Transformer(config).eval()


def test_default_config_builds_the_model_it_always_has():
    config = TransformerConfig(**SMALL)
    assert (config.stacks, config.position_offset, config.type_vocab_size, config.embedding_norm) == \
        ("encoder-decoder", 0, 0, False)
    names = list(Transformer(config).state_dict())
    assert "decoder.layers.0.cross_attn.W_q.weight" in names
    assert not any("token_type" in name or "embed.norm" in name or name.startswith("head.") for name in names)


@pytest.mark.parametrize("stacks,kinds", [("encoder-decoder", ("encoder.self_attn", "decoder.self_attn",
                                                              "decoder.cross_attn")),
                                          ("decoder-only", ("decoder.self_attn",)),
                                          ("encoder-only", ("encoder.self_attn",))])
def test_each_shape_has_only_its_parts_under_the_same_hook_names(stacks, kinds):
    model = model_of(stacks)
    ids = torch.randint(4, 40, (2, 7))
    inputs = {"encoder-decoder": (ids, ids), "decoder-only": (None, ids), "encoder-only": (ids, None)}[stacks]
    with torch.no_grad(), capture(model) as record:
        logits = model(*inputs)
    assert logits.shape == (2, 7, 40)
    assert model.config.kinds == kinds
    assert {Site.parse(site).kind for site in record} == set(kinds)
    if "decoder.self_attn" in kinds:
        assert "decoder.layers.0.self_attn.hook_pattern" in record.hooks
    assert ("decoder.layers.0.cross_attn.hook_pattern" in record.hooks) == (stacks == "encoder-decoder")
    assert attention_values(model.config, 7, 7) == sum(
        model.config.layers_of(kind) for kind in kinds) * model.config.num_heads * 49


def test_decoder_only_is_causal_and_encoder_only_is_not():
    decoder, encoder = model_of("decoder-only"), model_of("encoder-only")
    ids = torch.randint(4, 40, (1, 8))
    changed = ids.clone()
    changed[0, -1] = 4 if ids[0, -1] != 4 else 5
    with torch.no_grad():
        torch.testing.assert_close(decoder(None, ids)[:, :-1], decoder(None, changed)[:, :-1])
        assert not torch.allclose(encoder(ids)[:, :-1], encoder(changed)[:, :-1])


def test_new_embedding_parts_compute_what_they_say():
    model = model_of("encoder-only", positional="learned", position_offset=2, type_vocab_size=2,
                     embedding_norm=True, scale_embedding=False, activation="gelu_new")
    embed = model.encoder.embed
    ids = torch.randint(4, 40, (1, 5))
    expected = F.layer_norm(embed.token.weight[ids] + embed.positional.embedding.weight[2:7]
                            + embed.token_type.weight[0], (24,), embed.norm.weight, embed.norm.bias)
    torch.testing.assert_close(embed(ids), expected)
    assert model.positional_table("src").shape == (20, 24)  # the offset's rows are not positions
    with pytest.raises(ValueError, match="no decoder"):
        model.positional_table("tgt")
    x = torch.linspace(-3, 3, 7)
    tanh_gelu = 0.5 * x * (1 + torch.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))
    torch.testing.assert_close(model.head.activation(x), tanh_gelu)


@pytest.mark.parametrize("changes,message", [
    (dict(stacks="decoder"), "stacks must be one of"),
    (dict(stacks="decoder-only"), "num_encoder_layers must be 0"),
    (dict(stacks="encoder-only", num_encoder_layers=2, num_decoder_layers=2), "num_decoder_layers must be 0"),
    (dict(stacks="decoder-only", num_encoder_layers=0, num_decoder_layers=0), "num_decoder_layers must be at least"),
    (dict(stacks="decoder-only", num_encoder_layers=0, tgt_vocab_size=41), "one vocabulary"),
    (dict(position_offset=2), "with learned positions"),
    (dict(positional="learned", position_offset=17), "position_offset must be an integer from 0 to 16, got 17"),
    (dict(positional="learned", position_offset=-1), "position_offset"),
    (dict(type_vocab_size=17), "type_vocab_size must be an integer from 0 to 16, got 17"),
    (dict(type_vocab_size=True), "must be an integer"),
    (dict(embedding_norm=1), "must be true or false"),
    (dict(activation="gelu_fast"), "activation must be one of"),
    (dict(eos_id=0), "eos_id must differ from pad_id"),
])
def test_config_refuses_what_no_shape_computes(changes, message):
    with pytest.raises(ValueError, match=message):
        TransformerConfig(**SMALL | changes)


def test_loading_policy_reads_and_bounds_the_new_fields(tmp_path):
    values = SMALL | dict(stacks="decoder-only", num_encoder_layers=0, num_decoder_layers=2, positional="learned",
                          position_offset=2, type_vocab_size=2, embedding_norm=True, eos_id=0, bos_id=0)
    (tmp_path / "config.json").write_text(json.dumps(values))
    config = read_config(tmp_path)
    assert config.stacks == "decoder-only" and config.eos_id == config.pad_id  # GPT-2 pads with its end token
    assert "decoder.embed.positional.embedding.weight" in expected_state(config, tmp_path / "config.json")
    (tmp_path / "config.json").write_text(json.dumps(values | dict(type_vocab_size=10 ** 9)))
    with pytest.raises(CheckpointError, match="type_vocab_size"):
        read_config(tmp_path)

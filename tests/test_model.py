"""The whole model against torch.nn.Transformer, masks, padding and shapes."""
import pytest
import torch
from torch import nn

from helpers import PAD, random_batch, small_config, small_model
from transformer import ATTENTION_KINDS, Transformer, TransformerConfig, capture, decoder_mask


def torch_reference(model: Transformer) -> nn.Transformer:
    """An nn.Transformer holding our weights (same layer structure, names differ)."""
    c = model.config
    reference = nn.Transformer(
        d_model=c.d_model, nhead=c.num_heads, num_encoder_layers=c.num_encoder_layers,
        num_decoder_layers=c.num_decoder_layers, dim_feedforward=c.d_ff, dropout=0.0, activation=c.activation,
        batch_first=True, norm_first=c.norm_first, layer_norm_eps=c.layer_norm_eps,
    ).eval()

    def copy_attention(theirs: nn.MultiheadAttention, ours) -> None:
        theirs.in_proj_weight.copy_(torch.cat([ours.W_q.weight, ours.W_k.weight, ours.W_v.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.W_q.bias, ours.W_k.bias, ours.W_v.bias]))
        theirs.out_proj.weight.copy_(ours.W_o.weight)
        theirs.out_proj.bias.copy_(ours.W_o.bias)

    def copy_module(theirs: nn.Module, ours: nn.Module) -> None:
        theirs.load_state_dict(ours.state_dict())

    with torch.no_grad():
        for theirs, ours in zip(reference.encoder.layers, model.encoder.layers):
            copy_attention(theirs.self_attn, ours.self_attn)
            copy_module(theirs.linear1, ours.feed_forward.linear1)
            copy_module(theirs.linear2, ours.feed_forward.linear2)
            copy_module(theirs.norm1, ours.attn_residual.norm)
            copy_module(theirs.norm2, ours.ff_residual.norm)
        for theirs, ours in zip(reference.decoder.layers, model.decoder.layers):
            copy_attention(theirs.self_attn, ours.self_attn)
            copy_attention(theirs.multihead_attn, ours.cross_attn)
            copy_module(theirs.linear1, ours.feed_forward.linear1)
            copy_module(theirs.linear2, ours.feed_forward.linear2)
            copy_module(theirs.norm1, ours.self_attn_residual.norm)
            copy_module(theirs.norm2, ours.cross_attn_residual.norm)
            copy_module(theirs.norm3, ours.ff_residual.norm)
        if c.norm_first:
            copy_module(reference.encoder.norm, model.encoder.norm)
            copy_module(reference.decoder.norm, model.decoder.norm)
    if not c.norm_first:  # nn.Transformer always adds a final LayerNorm; the post-LN paper model has none
        reference.encoder.norm = None
        reference.decoder.norm = None
    return reference


def reference_embedding(model: Transformer, ids: torch.Tensor, side: str) -> torch.Tensor:
    """The paper's input, computed here from scratch: the token's row of the embedding matrix times sqrt(d_model),
    plus PE(pos, 2i) = sin(pos / 10000^(2i / d_model)) and PE(pos, 2i + 1) = cos(the same)."""
    d_model = model.config.d_model
    weight = {"src": model.encoder, "tgt": model.decoder}[side].embed.token.weight
    position = torch.arange(ids.size(1), dtype=torch.float64)[:, None]  # (len, 1)
    pair = torch.arange(0, d_model, 2, dtype=torch.float64)  # 2i
    angle = position / 10000 ** (pair / d_model)  # (len, d_model / 2)
    encoding = torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)  # (len, d_model): sin, cos interleaved
    return weight[ids] * d_model ** 0.5 + encoding.float()


def test_embedding_is_scaled_by_sqrt_d_model_before_the_positions_are_added():
    model = small_model()
    src, tgt = random_batch(model.config, [7, 4], [5, 2])
    with torch.no_grad(), capture(model, "*.hook_embed") as record:
        model(src, tgt)
    torch.testing.assert_close(record.hooks["encoder.hook_embed"], reference_embedding(model, src, "src"))
    torch.testing.assert_close(record.hooks["decoder.hook_embed"], reference_embedding(model, tgt, "tgt"))


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_logits_match_torch_nn_transformer(norm_first, activation):
    model = small_model(norm_first=norm_first, activation=activation)
    reference = torch_reference(model)
    src, tgt = random_batch(model.config, [7, 4, 1], [5, 5, 2])
    with torch.no_grad():
        ours = model(src, tgt)
        hidden = reference(
            reference_embedding(model, src, "src"), reference_embedding(model, tgt, "tgt"),
            tgt_mask=nn.Transformer.generate_square_subsequent_mask(tgt.size(1), dtype=torch.bool),
            src_key_padding_mask=src == PAD, tgt_key_padding_mask=tgt == PAD, memory_key_padding_mask=src == PAD,
        )
        theirs = model.generator(hidden)
    real = tgt != PAD  # nn.Transformer's fast path leaves padded query rows undefined; compare real positions
    torch.testing.assert_close(ours[real], theirs[real], atol=1e-5, rtol=1e-5)


def test_padding_does_not_change_real_positions():
    model = small_model()
    src, tgt = random_batch(model.config, [6, 3], [5, 3])
    with torch.no_grad():
        batched = model(src, tgt)
        alone = model(src[1:, :3], tgt[1:, :3])
    torch.testing.assert_close(batched[1, :3], alone[0], atol=1e-5, rtol=0)


def test_decode_projects_only_the_positions_asked_for():
    # The gradient methods and patching read some positions' logits: the rest never reach the output projection.
    model = small_model()
    src, tgt = random_batch(model.config, [6, 3], [5, 5])
    with torch.no_grad():
        memory = model.encode(src)
        full = model.decode(tgt, memory, src)
        some = model.decode(tgt, memory, src, positions=slice(2, 4))
        last = model.decode(tgt, memory, src, positions=slice(-1, None))
    assert some.shape == (2, 2, model.config.tgt_vocab_size)
    torch.testing.assert_close(some, full[:, 2:4], atol=1e-5, rtol=0)
    torch.testing.assert_close(last, full[:, -1:], atol=1e-5, rtol=0)


def test_fully_padded_rows_are_finite():
    model = small_model()
    src, tgt = random_batch(model.config, [6, 1], [5, 1])
    src[1] = PAD  # an input that is nothing but padding
    with torch.no_grad():
        logits = model(src, tgt)
    assert torch.isfinite(logits).all()


def test_shapes_and_tied_embeddings():
    model = small_model(tie_output_embedding=True)
    src, tgt = random_batch(model.config, [5, 2], [4, 4])
    assert model(src, tgt).shape == (2, 4, model.config.tgt_vocab_size)
    assert model.generator.weight is model.decoder.embed.token.weight
    shared = small_model(src_vocab_size=41, share_embeddings=True)
    assert shared.encoder.embed.token.weight is shared.decoder.embed.token.weight


def test_learned_positions_and_too_long_input():
    model = small_model(positional="learned", max_len=8)
    assert model.positional_table("src").shape == (8, 32)
    assert "encoder.embed.positional.embedding.weight" in dict(model.named_parameters())  # learned, so trained
    src, tgt = random_batch(model.config, [9], [3])
    with pytest.raises(ValueError, match="max_len"):
        model(src, tgt)


def test_sinusoidal_table_values():
    model = small_model()
    table = model.positional_table("tgt")
    assert table[0, 0] == 0 and table[0, 1] == 1  # sin(0), cos(0)
    torch.testing.assert_close(table[3, 2], torch.sin(torch.tensor(3 / 10000 ** (2 / 32))))


def test_config_validation_and_json_round_trip(tmp_path):
    config = small_config(norm_first=True, positional="learned")
    config.save(tmp_path / "config.json")
    assert TransformerConfig.load(tmp_path / "config.json") == config
    with pytest.raises(ValueError, match="divisible"):
        small_config(d_model=30, num_heads=4)
    with pytest.raises(ValueError, match="positional"):
        small_config(positional="alibi")
    with pytest.raises(ValueError, match="rotary positions need a decoder-only model"):
        small_config(positional="rotary")
    with pytest.raises(ValueError, match=r"unknown field\(s\) 'colour'"):
        TransformerConfig.from_dict({**config.__dict__, "colour": "red"})


def test_layers_of_each_kind_come_from_its_stack():
    config = small_config(num_encoder_layers=3, num_decoder_layers=2)
    assert [config.layers_of(kind) for kind in ATTENTION_KINDS] == [3, 2, 2]
    with pytest.raises(KeyError, match="encoder.cross_attn"):
        config.layers_of("encoder.cross_attn")


def test_decoder_mask_rows_of_the_last_tokens():
    # Incremental decoding builds only its new queries' rows: they must be the full mask's last rows, i.e. PyTorch's
    # square subsequent mask (True = blocked there) inverted, with the padding key blocked.
    tgt = torch.tensor([[2, 5, 6, 7, 0]])  # trailing padding blocks that key for every query
    allowed = ~nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.bool) & (tgt != 0)[:, None, :]
    for last in (1, 2, 5):
        torch.testing.assert_close(decoder_mask(tgt, 0, last=last), allowed[:, None, -last:], atol=0, rtol=0)
    torch.testing.assert_close(decoder_mask(tgt, 0), allowed[:, None])

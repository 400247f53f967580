"""Attention sites: every spelling reads as one Site, and the record's accessors give each hook point of a site, shaped
as their docstrings say, equal to the same numbers computed by hand from the block's weights."""
from __future__ import annotations

import math

import pytest
import torch

from helpers import PAD, random_batch, small_model
from transformer import ATTENTION_KINDS, Site, ablate, capture
from transformer.model.positional import rotate
from transformer.model.sites import attention_name, parse, parse_head, parse_kind
from viz.conventions import KIND_LABELS, KIND_SYMBOLS, KIND_TABLE, KINDS

CROSS_1 = Site("decoder.cross_attn", 1)


@pytest.mark.parametrize("spelling", ["decoder.layers.1.cross_attn", "decoder.1.cross", "decoder.cross_attn.1",
                                      CROSS_1])
def test_every_spelling_of_a_site_reads_as_the_same_site(spelling):
    assert Site.parse(spelling) == CROSS_1
    assert attention_name(str(spelling)) == "decoder.layers.1.cross_attn" == str(CROSS_1) == CROSS_1.name
    assert CROSS_1.hook("q") == "decoder.layers.1.cross_attn.hook_q" and CROSS_1.layer_name == "decoder.layers.1"
    assert CROSS_1.sides == ("tgt", "src") and CROSS_1.stack == "decoder"


@pytest.mark.parametrize("spelling", ["decoder.layers.0.cross_attn:3", "decoder.0.cross:3", "decoder.cross_attn.0.3"])
def test_every_spelling_of_a_head_reads_as_the_same_head(spelling):
    """site:head (links, the ablation view's options) and kind.layer.head (the corpus command line)."""
    assert parse_head(spelling) == (Site("decoder.cross_attn", 0), 3)
    assert attention_name(spelling) == "decoder.layers.0.cross_attn:3"


@pytest.mark.parametrize(("spelling", "kind"), [
    ("decoder.cross_attn", "decoder.cross_attn"), ("decoder.cross", "decoder.cross_attn"),
    ("cross", "decoder.cross_attn"), ("encoder.self", "encoder.self_attn"), ("decoder.self_attn", "decoder.self_attn")])
def test_every_spelling_of_a_kind_reads_as_the_same_kind(spelling, kind):
    assert parse_kind(spelling) == attention_name(spelling) == kind
    assert parse(spelling) == (kind, None, None)


@pytest.mark.parametrize("text", ["encoder.cross_attn", "encoder.0.cross", "encoder.layers.0.cross_attn", "self",
                                  "decoder.layers.cross_attn", "decoder.layers.1", "decoder.1.cross\n",
                                  " decoder.1.cross", "decoder.1.cross.hook_z", "decoder.cross_attn:1",
                                  "decoder.1.cross.2", "decoder.-1.cross", "decoder.١.cross", "", "*.hook_q"])
def test_what_names_no_site_is_refused_and_left_as_it_is_in_a_link(text):
    with pytest.raises(ValueError, match="names no attention site"):
        parse(text)
    assert attention_name(text) == text  # a link keeps it, for the notice that refuses it


def test_a_site_a_kind_and_a_head_are_not_taken_for_one_another():
    with pytest.raises(ValueError, match="names a kind"):
        Site.parse("decoder.cross")
    with pytest.raises(ValueError, match="names a head"):
        Site.parse("decoder.0.cross:1")
    with pytest.raises(ValueError, match="names a site"):
        parse_kind("decoder.0.cross")
    with pytest.raises(ValueError, match="names no head"):
        parse_head("decoder.0.cross")
    for kind, layer in (("encoder.cross_attn", 0), ("decoder.cross_attn", -1), ("decoder.cross_attn", True)):
        with pytest.raises(ValueError):
            Site(kind, layer)


def test_every_site_reads_back_from_its_name_and_its_heads_from_theirs():
    for kind in ATTENTION_KINDS:
        for layer in (0, 1, 12):
            site = Site(kind, layer)
            assert Site.parse(site.name) == site and parse_head(f"{site}:{layer + 2}") == (site, layer + 2)


def test_one_table_names_and_marks_each_kind_for_the_figures():
    assert tuple(KIND_TABLE) == ATTENTION_KINDS  # viz's names of the kinds are the model's
    assert len(set(KIND_LABELS.values())) == len(set(KIND_SYMBOLS.values())) == len(ATTENTION_KINDS)
    assert KINDS == tuple(KIND_LABELS[kind] for kind in ATTENTION_KINDS)


def _heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(batch, length, heads * d_head) -> (batch, heads, length, d_head), by hand."""
    batch, length, width = x.shape
    return x.reshape(batch, length, heads, width // heads).permute(0, 2, 1, 3)


def test_the_records_accessors_equal_the_block_computed_by_hand():
    """Cross-attention of decoder layer 1 over a padded source: q, k, v from the block's input and W_q, W_k, W_v;
    scores before the mask (padded keys keep their q·k); pattern 0 there; z heads first; result positions first."""
    model = small_model()
    src, tgt = random_batch(model.config, [6, 3], [5, 4])
    with torch.no_grad(), capture(model, "*") as record:
        model(src, tgt)
    block, heads, d_head = model.get_submodule(CROSS_1.name), model.config.num_heads, model.config.d_head
    x, memory = record.hooks[f"{CROSS_1.layer_name}.hook_resid_mid"], record.hooks["encoder.hook_memory"]
    with torch.no_grad():
        q, k, v = _heads(block.W_q(x), heads), _heads(block.W_k(memory), heads), _heads(block.W_v(memory), heads)
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(d_head)
    allowed = (src != PAD)[:, None, None, :].expand_as(scores)
    pattern = torch.where(allowed, scores, -torch.inf).softmax(dim=-1)
    z = pattern @ v
    w_o = block.W_o.weight.detach()  # (d_model, heads * d_head)
    result = torch.stack([z[:, h] @ w_o[:, h * d_head:(h + 1) * d_head].T for h in range(heads)], dim=2)

    for spelling in (CROSS_1, "decoder.1.cross", "decoder.cross_attn.1"):
        for part, expected in (("q", q), ("k", k), ("v", v), ("scores", scores), ("pattern", pattern), ("z", z),
                               ("result", result)):
            found = getattr(record, part)(spelling)
            assert found is record.hooks[CROSS_1.hook(part)]
            torch.testing.assert_close(found, expected, atol=1e-5, rtol=1e-5)
    assert record.q(CROSS_1).shape == (2, heads, 5, d_head) and record.k(CROSS_1).shape == (2, heads, 6, d_head)
    assert record.z(CROSS_1).shape == (2, heads, 5, d_head)  # heads first
    assert record.result(CROSS_1).shape == (2, 5, heads, model.config.d_model)  # positions first
    assert record.mask(CROSS_1).shape == (2, 1, 5, 6) and torch.equal(record.mask(CROSS_1)[:, 0], allowed[:, 0])
    assert torch.isfinite(record.scores(CROSS_1)).all() and (record.pattern(CROSS_1)[~allowed] == 0).all()
    assert record[CROSS_1] is record.pattern("decoder.1.cross")


def test_q_and_k_are_rotated_and_the_scores_are_theirs_with_grouped_keys():
    model = small_model(positional="rotary", stacks="decoder-only", num_encoder_layers=0, num_kv_heads=2,
                        src_vocab_size=41)
    _, tgt = random_batch(model.config, [1], [7])
    site = Site("decoder.self_attn", 1)
    with torch.no_grad(), capture(model, "*") as record:
        model(None, tgt)
    rotation = model.decoder.rotary.rotation(0, 7)
    unrotated_q, unrotated_k = record.hooks[site.hook("q_unrotated")], record.hooks[site.hook("k_unrotated")]
    torch.testing.assert_close(record.q(site), rotate(unrotated_q, *rotation))
    torch.testing.assert_close(record.k(site), rotate(unrotated_k, *rotation))
    assert not torch.allclose(record.q(site), unrotated_q)
    assert record.k(site).shape == record.v(site).shape == (1, 2, 7, model.config.d_head)  # kv heads
    keys = record.k(site).repeat_interleave(2, dim=1)  # query head h reads key head h // 2
    torch.testing.assert_close(record.scores(site), record.q(site) @ keys.transpose(-2, -1)
                               / math.sqrt(model.config.d_head), atol=1e-5, rtol=1e-5)


def test_an_accessor_says_what_to_capture_when_its_hook_was_not_captured():
    model = small_model()
    src, tgt = random_batch(model.config, [4], [3])
    with torch.no_grad(), capture(model) as record:
        model(src, tgt)
    with pytest.raises(KeyError, match=r"hook_q was not captured; capture it with capture\(model, names="
                                       r"\['decoder.layers.1.cross_attn.hook_q'\]\) or names='\*'"):
        record.q("decoder.1.cross")
    with torch.no_grad(), capture(model, names=[CROSS_1.hook("q")]) as only_q:
        model(src, tgt)
    assert only_q.q(CROSS_1).shape == (1, model.config.num_heads, 3, model.config.d_head)  # the advice works
    with pytest.raises(KeyError, match=r"hook_pattern was not captured; capture it with capture\(model, "
                                       r"names=\['decoder.layers.1.cross_attn'\]\)"):
        only_q.pattern(CROSS_1)
    with pytest.raises(KeyError, match="this model has no decoder.layers.5.cross_attn.hook_z"):
        record.z(Site("decoder.cross_attn", 5))
    for key, why in (("decoder.cross", "names a kind"), ("decoder.0.cross:1", "names a head"),
                     ("encoder.cross", "not an attention site")):
        with pytest.raises(KeyError, match=why):
            record.z(key)
    assert "decoder.cross_attn.1" in record and "decoder.cross" not in record


def test_capture_and_ablate_take_a_site_in_any_spelling():
    model = small_model()
    src, tgt = random_batch(model.config, [5], [4])
    records = []
    for site in (Site("decoder.cross_attn", 0), "decoder.cross_attn.0", "decoder.0.cross"):
        with torch.no_grad(), ablate(model, {site: [1]}), capture(model, [site, "*.hook_z"]) as record:
            records.append((model(src, tgt), record))
    for logits, record in records[1:]:
        torch.testing.assert_close(logits, records[0][0])
        assert list(record) == ["decoder.layers.0.cross_attn"]
    assert (records[0][1].z("decoder.0.cross")[:, 1] == 0).all()

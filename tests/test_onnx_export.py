"""The browser's graph (transformer.io.onnx_export) run by onnxruntime on the CPU against PyTorch: its logits and every
attention pattern equal to `capture`'s on the same ids, at lengths other than the traced ones; its fp16 weights equal
to `fp16_rounded`'s; an export kept in the disk cache and read back, never re-exported."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from transformer import load_checkpoint
from transformer.io.disk_cache import DiskCache
from transformer.io.onnx_export import (
    TRACE_LENGTHS,
    cached_onnx,
    export_onnx,
    fp16_rounded,
    input_names,
    pattern_sites,
)
from transformer.model.capture import capture

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is in requirements-dev.txt")
CHECKPOINTS = ("eng-fra", "reverse", "induction")
SHIPPED = Path(__file__).parents[1] / "checkpoints"
# (source length, decoder length): one decoder token (the first greedy step), lengths around and past the traced
# ones, and the model's max_len
LENGTHS = ((3, 1), (TRACE_LENGTHS[0] + 4, 2), (12, 9), (25, 40))


@pytest.fixture(scope="module", params=CHECKPOINTS)
def model(request):
    return load_checkpoint(SHIPPED / request.param).model


def torch_run(model, src, tgt) -> list[np.ndarray]:
    """Logits and each site's pattern, as the app's capture records them."""
    with torch.no_grad(), capture(model) as record:
        logits = model(None, tgt) if model.encoder is None else model(src, tgt)
    return [logits.numpy(), *(record[site].numpy() for site in pattern_sites(model))]


def onnx_run(session, model, src, tgt) -> list[np.ndarray]:
    return session.run(None, {name: {"src": src, "tgt": tgt}[name].numpy() for name in input_names(model)})


def random_ids(model, src_len, tgt_len, seed):
    generator = torch.Generator().manual_seed(seed)
    src_len, tgt_len = min(src_len, model.config.max_len), min(tgt_len, model.config.max_len)
    src = torch.randint(4, model.config.src_vocab_size, (1, src_len), generator=generator)
    tgt = torch.randint(4, model.config.tgt_vocab_size, (1, tgt_len), generator=generator)
    tgt[0, 0] = model.config.bos_id
    return src, tgt


def largest_error(model, data: bytes, reference) -> float:
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    errors = []
    for seed, (src_len, tgt_len) in enumerate(LENGTHS):
        src, tgt = random_ids(model, src_len, tgt_len, seed)
        expected, found = torch_run(reference, src, tgt), onnx_run(session, model, src, tgt)
        assert [array.shape for array in found] == [array.shape for array in expected]
        errors += [float(np.abs(a - b).max()) for a, b in zip(found, expected, strict=True)]
    return max(errors)


def test_the_fp32_graph_gives_pytorchs_logits_and_every_pattern(model):
    assert largest_error(model, export_onnx(model, fp16=False), model) <= 1e-4


def test_the_fp16_graph_computes_with_the_fp16_rounded_weights(model):
    assert largest_error(model, export_onnx(model), fp16_rounded(model)) <= 1e-4


def test_every_site_is_an_output_and_the_weights_are_stored_in_fp16(model):
    import onnx

    graph = onnx.load_from_string(export_onnx(model)).graph
    assert [output.name for output in graph.output] == ["logits", *pattern_sites(model)]
    assert len(pattern_sites(model)) == sum(model.config.layers_of(kind) for kind in (
        "encoder.self_attn", "decoder.self_attn", "decoder.cross_attn"))
    stored = {onnx.TensorProto.DataType.Name(tensor.data_type) for tensor in graph.initializer
              if np.prod(tensor.dims) > 1000}
    assert stored == {"FLOAT16"}


def test_an_export_is_cached_under_its_weights_digest(tmp_path, monkeypatch):
    model = load_checkpoint(SHIPPED / "induction").model
    cache = DiskCache(tmp_path)
    first = cached_onnx(model, cache)
    monkeypatch.setattr("transformer.io.onnx_export.export_onnx", lambda model: pytest.fail("exported again"))
    assert cached_onnx(model, cache) == first
    other = fp16_rounded(model)
    with torch.no_grad():
        next(other.parameters()).add_(1.0)
    with pytest.raises(pytest.fail.Exception, match="exported again"):
        cached_onnx(other, cache)

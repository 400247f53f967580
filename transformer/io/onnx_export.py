"""A checkpoint's model as one ONNX graph a browser runs (ONNX Runtime Web): `forward(src, tgt) -> logits, patterns`,
every attention pattern the app captures (each site's `hook_pattern`, as `capture` records it) a named output, both
lengths dynamic; a decoder-only model's graph reads `tgt` alone. Exported by `torch.onnx`'s TorchScript tracer (the
hook points' per-call state is Python that a trace runs as written), its weights stored as float16 and cast to
float32 inside the graph (half the bytes; the arithmetic is float32's). `fp16_rounded` is the same model in PyTorch,
what the browser's numbers are checked against. Exports are kept in the disk cache, keyed on the weights' digest."""
from __future__ import annotations

import copy
import io
import warnings

import numpy as np
import torch
from torch import nn

from ..model.capture import capture
from ..model.hooks import hook_points
from ..model.model import Transformer
from .disk_cache import DiskCache, key_of, model_digest

EXPORT_VERSION = 1  # part of the cache key: raised whenever the exported graph changes
OPSET = 17  # ONNX Runtime Web 1.30 runs it
PATTERN = ".hook_pattern"
TRACE_LENGTHS = (5, 4)  # the source and decoder lengths traced: a decoder of 2 or more keeps its causal mask


def pattern_sites(model: Transformer) -> list[str]:
    """The attention sites whose patterns the graph outputs, in model order: 'encoder.layers.0.self_attn', ..."""
    return [name.removesuffix(PATTERN) for name in hook_points(model) if name.endswith(PATTERN)]


def input_names(model: Transformer) -> list[str]:
    return ["tgt"] if model.encoder is None else ["src", "tgt"]


class _WithPatterns(nn.Module):
    """The model's teacher-forced pass returning its logits and every site's pattern (batch, heads, q_len, k_len)."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model, self.sites = model, pattern_sites(model)

    def forward(self, *ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with capture(self.model, [site + PATTERN for site in self.sites]) as record:
            logits = self.model(None, *ids) if self.model.encoder is None else self.model(*ids)
        return (logits, *(record[site] for site in self.sites))  # a site's pattern


def export_onnx(model: Transformer, fp16: bool = True) -> bytes:
    """The model as ONNX bytes (see the module's docstring); `fp16`: weights stored as float16."""
    if model.decoder is None:
        raise ValueError("an encoder-only model decodes nothing: the browser runs translation and continuation")
    # Traced from the rounded weights, every tensor the graph keeps (a transposed weight, a folded constant) holds
    # what float16 stores exactly.
    wrapped = _WithPatterns(fp16_rounded(model) if fp16 else model).eval()
    lengths = dict(zip(["src", "tgt"], TRACE_LENGTHS))
    names = input_names(model)
    example = tuple(torch.full((1, lengths[name]), 4, dtype=torch.long) for name in names)
    outputs = ["logits", *wrapped.sites]
    axes = {name: {1: f"{name}_len"} for name in names}
    axes["logits"] = {1: "tgt_len"}
    for site in wrapped.sites:
        queries = "src_len" if site.startswith("encoder") else "tgt_len"
        axes[site] = {2: queries, 3: "tgt_len" if site.endswith("self_attn") and queries == "tgt_len" else "src_len"}
    buffer = io.BytesIO()
    # Traced with gradients on: attention then takes its out-of-place softmax (its in-place one has no ONNX form).
    with torch.enable_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on Python ints and the legacy exporter's deprecation
        torch.onnx.export(wrapped, example, buffer, dynamo=False, input_names=names, output_names=outputs,
                          dynamic_axes=axes, opset_version=OPSET)
    data = buffer.getvalue()
    return fp16_storage(data) if fp16 else data


def fp16_storage(data: bytes) -> bytes:
    """An ONNX graph's float32 initializers stored as float16, each cast back to float32 where the graph starts."""
    import onnx
    from onnx import helper, numpy_helper

    graph = onnx.load_from_string(data)
    casts, kept = [], []
    for tensor in graph.graph.initializer:
        if tensor.data_type != onnx.TensorProto.FLOAT:
            kept.append(tensor)
            continue
        half = numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float16), f"{tensor.name}.fp16")
        kept.append(half)
        casts.append(helper.make_node("Cast", [half.name], [tensor.name], to=onnx.TensorProto.FLOAT))
    del graph.graph.initializer[:]
    graph.graph.initializer.extend(kept)
    nodes = [*casts, *graph.graph.node]
    del graph.graph.node[:]
    graph.graph.node.extend(nodes)
    return graph.SerializeToString()


def fp16_rounded(model: Transformer) -> Transformer:
    """A copy of `model` whose every float weight and buffer is rounded to float16 and kept as float32: the numbers
    the fp16 graph computes with."""
    rounded = copy.deepcopy(model)
    with torch.no_grad():
        for tensor in [*rounded.parameters(), *rounded.buffers()]:
            if tensor.is_floating_point():
                tensor.copy_(tensor.half().float())
    return rounded


def cached_onnx(model: Transformer, cache: DiskCache | None = None) -> bytes:
    """export_onnx(model), once per set of weights: kept in the disk cache under the weights' digest."""
    cache = cache or DiskCache()
    key = key_of("onnx", EXPORT_VERSION, OPSET, torch.__version__, model_digest(model))
    found = cache.read(key)
    if found is not None and "onnx" in found[0]:
        return found[0]["onnx"].tobytes()
    data = export_onnx(model)
    cache.write(key, {"onnx": np.frombuffer(data, dtype=np.uint8)}, {"sites": pattern_sites(model)})
    return data

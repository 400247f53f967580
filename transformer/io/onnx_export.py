"""A checkpoint's model as one ONNX graph a browser runs (ONNX Runtime Web): `forward(src, tgt) -> logits, patterns`,
every attention pattern the app captures (each site's `hook_pattern`, as `capture` records it) a named output, both
lengths dynamic; a decoder-only model's graph reads `tgt` alone. Exported by `torch.onnx`'s TorchScript tracer (the
hook points' per-call state is Python that a trace runs as written), its weights stored as float16 and cast to
float32 inside the graph (half the bytes; the arithmetic is float32's). `fp16_rounded` is the same model in PyTorch,
what the browser's numbers are checked against. Exports are kept in the disk cache, keyed on the weights' digest.

`browser_model` is everything a page needs to run a checkpoint as the app does: the graph, its sentencepiece
tokenizers as tables a small script encodes with (ui/deck/live.js), and the config, card, word list and task notice
tables its decoding and notices read; or why this checkpoint cannot run in a browser."""
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
from .checkpoint import LoadedCheckpoint
from .disk_cache import DiskCache, key_of, model_digest
from .text import MAX_CHARS_PER_TOKEN, normalize
from .tokenizer import JsonTokenizer, Tokenizer, VocabTokenizer

EXPORT_VERSION = 1  # part of the cache key: raised whenever the exported graph changes
OPSET = 17  # ONNX Runtime Web 1.30 runs it
PATTERN = ".hook_pattern"
MAX_BROWSER_MODEL_BYTES = 24 * 2**20  # the fp16 graph a page may inline (eng-fra's is 16 MB): a laptop's tab budget
SENTENCEPIECE_TYPES = {2: "bpe", 4: "char"}  # the model types live.js encodes (sentencepiece's ModelType numbers)
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


class NotInBrowser(ValueError):
    """A checkpoint a page cannot run; the message says why, for the slide to show."""


def tokenizer_table(tokenizer: Tokenizer) -> dict:
    """A sentencepiece model as live.js encodes and decodes with it: its pieces and scores, its type, the special
    ids, whether it adds a dummy "▁" prefix, and `charmap`: each character of the Basic Multilingual Plane that the
    model's own normaliser (nmt_nfkc) changes after the app's normalize() has run, with what it becomes."""
    from sentencepiece import sentencepiece_model_pb2

    if isinstance(tokenizer, (VocabTokenizer, JsonTokenizer)):
        raise NotInBrowser("its tokenizer is a converted model's, which the page does not implement")
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(tokenizer._sp.serialized_model_proto())
    kind = SENTENCEPIECE_TYPES.get(proto.trainer_spec.model_type)
    if kind is None or proto.trainer_spec.byte_fallback or proto.normalizer_spec.name != "nmt_nfkc":
        raise NotInBrowser("its sentencepiece model is of a kind the page does not implement (BPE and char with "
                           "nmt_nfkc only)")
    if kind == "bpe" and any("\u2581" in piece.piece[1:] for piece in proto.pieces):
        raise NotInBrowser("its BPE pieces hold a ▁ after their start, which the page's word-by-word merging misses")
    normal, control, unknown = (sentencepiece_model_pb2.ModelProto.SentencePiece.Type.Value(name)
                                for name in ("NORMAL", "CONTROL", "UNKNOWN"))
    if {piece.type for piece in proto.pieces} - {normal, control, unknown}:
        raise NotInBrowser("its vocabulary has user-defined or unused pieces, which the page does not implement")
    prefix = "\u2581" if proto.normalizer_spec.add_dummy_prefix else ""
    charmap = {}
    for code in range(0x10000):
        char = chr(code)
        if 0xD800 <= code < 0xE000 or normalize(f"a{char}b") != f"a{char}b":
            continue  # a surrogate, or a character the app's normalize() itself changes (live.js does too)
        found = tokenizer._sp.normalize(f"a{char}b")
        if found != f"{prefix}a{char}b":
            charmap[char] = found[len(prefix) + 1:-1].replace("\u2581", " ")
    return {"type": kind, "pieces": [piece.piece for piece in proto.pieces],
            "scores": [piece.score for piece in proto.pieces],
            "control": [i for i, piece in enumerate(proto.pieces) if piece.type == control],
            "unk": tokenizer.unk_id, "dummy_prefix": proto.normalizer_spec.add_dummy_prefix, "charmap": charmap}


def browser_model(checkpoint: LoadedCheckpoint, cache: DiskCache | None = None, task_notices: dict | None = None
                  ) -> tuple[bytes, dict]:
    """(the fp16 graph, what the page needs besides) for `checkpoint`; NotInBrowser when a page cannot run it.
    task_notices: what live.js reads to give the task's own input notices (ui.passes.browser_model's)."""
    config, card = checkpoint.config, checkpoint.card
    if config.stacks == "encoder-only":
        raise NotInBrowser("it is an encoder-only model: the page runs translation and continuation only")
    if config.positional == "rotary" and config.rope_scaling != "none" or config.sliding_window:
        raise NotInBrowser("its positions are of a kind the page does not implement")
    src, tgt = tokenizer_table(checkpoint.src_tokenizer), tokenizer_table(checkpoint.tgt_tokenizer)
    data = cached_onnx(checkpoint.model, cache)
    if len(data) > MAX_BROWSER_MODEL_BYTES:
        raise NotInBrowser(f"its model is {len(data) / 2**20:.0f} MB in float16, more than the "
                           f"{MAX_BROWSER_MODEL_BYTES / 2**20:.0f} MB a page inlines")
    longest = card.training.get("longest_source_tokens")
    return data, {
        "name": checkpoint.name, "stacks": config.stacks, "max_len": config.max_len, "pass_len": checkpoint.pass_len,
        "max_chars": config.max_len * MAX_CHARS_PER_TOKEN, "num_heads": config.num_heads,
        "layers": {"encoder": config.num_encoder_layers, "decoder": config.num_decoder_layers},
        "bos": config.bos_id, "eos": config.eos_id, "pad": config.pad_id,
        "inputs": input_names(checkpoint.model), "sites": pattern_sites(checkpoint.model),
        "src": src, "tgt": tgt if tgt != src else "src",
        "source_words": sorted(checkpoint.source_words) if checkpoint.source_words is not None else None,
        "longest_source_tokens": longest if type(longest) is int else None,
        "joined": bool(card.training.get("joined_pairs") or card.training.get("phrase_pairs")),
        "decoding": dict(card.decoding), "task": card.task, "task_notices": task_notices or {},
    }

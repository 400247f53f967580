"""A converted Marian model of opus-mt-en-fr's shape beside eng-fra: `python -m benchmarks.marian [--smoke]`.

A real opus-mt model must stay usable on a laptop CPU. This builds a random MarianMTModel with opus-mt-en-fr's shape
(d_model 512, 6 + 6 layers, 8 heads, d_ff 2048, 59,514 shared pieces: ~75 M parameters), writes it with
`save_pretrained`, converts it, and measures both it and checkpoints/eng-fra, each in a fresh process (one thread, as
the app server): load time and peak memory, translating a 20-token sentence into 20 tokens with the capture of
every attention, switching the shown head (one heatmap), and the model view of the 6 x 8 encoder heads. Needs
transformers and safetensors (requirements-dev.txt); downloads nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OPUS_MT_EN_FR = dict(vocab_size=59514, d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
                     decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048,
                     max_position_embeddings=512, activation_function="swish", scale_embedding=True,
                     pad_token_id=59513, decoder_start_token_id=59513, eos_token_id=0, forced_eos_token_id=0,
                     share_encoder_decoder_embeddings=True, tie_word_embeddings=True)
SMOKE = dict(OPUS_MT_EN_FR, vocab_size=600, pad_token_id=599, decoder_start_token_id=599, d_model=32,
             encoder_ffn_dim=64, decoder_ffn_dim=64)
SENTENCE = ("The old lighthouse keeper walked slowly along the cold beach every morning before the sun rose "
            "over the quiet grey sea.")
TOKENS = 20


def write_marian_folder(folder: Path, shape: dict) -> None:
    """A random MarianMTModel of `shape` with its tokenizer files (a small sentencepiece model, padded out to the
    vocabulary size with pieces it never produces)."""
    import io

    import sentencepiece as spm
    import transformers

    folder.mkdir(parents=True)
    model = io.BytesIO()
    words = SENTENCE.split() * 4 + ["I am cold.", "Where is the station?"]
    spm.SentencePieceTrainer.train(sentence_iterator=iter(words), model_writer=model, vocab_size=60,
                                   hard_vocab_limit=False, num_threads=1, minloglevel=2)
    for name in ("source.spm", "target.spm"):
        (folder / name).write_bytes(model.getvalue())
    processor = spm.SentencePieceProcessor(model_proto=model.getvalue())
    pieces = [processor.id_to_piece(i) for i in range(3, processor.get_piece_size())]
    size = shape["vocab_size"]
    pieces += [f"▁filler{i}" for i in range(size - 3 - len(pieces))]
    vocab = {piece: i for i, piece in enumerate(["</s>", "<unk>", *pieces, "<pad>"])}
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({"source_lang": "en", "target_lang": "fr"}))
    transformers.MarianMTModel(transformers.MarianConfig(**shape)).save_pretrained(folder)


def worker(folder: str) -> dict:
    """Runs in a fresh process: the timings and peak memory of one checkpoint folder."""
    import numpy as np
    import torch

    import viz
    from transformer import load_checkpoint

    from .common import peak_rss_mb

    torch.set_num_threads(1)
    start = time.perf_counter()
    checkpoint = load_checkpoint(folder)
    load_s = time.perf_counter() - start
    with torch.no_grad():  # never end early: both models write exactly TOKENS tokens
        checkpoint.model.generator.bias[checkpoint.config.eos_id] = -1e4
    words = SENTENCE.split()
    text = " ".join(words[: next(n for n in range(1, len(words) + 1)
                                 if len(checkpoint.encode(" ".join(words[:n]))) > TOKENS)])
    timings = []
    for _ in range(3):
        start = time.perf_counter()
        translation = checkpoint.translate(text, max_len=TOKENS + 1)
        timings.append(time.perf_counter() - start)
    stack = translation.attention.stack("encoder.self_attn").numpy()  # (layers, heads, src_len, src_len)
    src = translation.src_tokens
    head, grid = [], []
    for _ in range(3):
        start = time.perf_counter()
        viz.head_heatmap(stack[-1, 1], src, src)
        head.append(time.perf_counter() - start)
        start = time.perf_counter()
        viz.model_view(stack, src, src)
        grid.append(time.perf_counter() - start)
    return {"parameters": checkpoint.model.num_parameters(), "load_s": load_s, "peak_rss_mb": peak_rss_mb(),
            "src_tokens": len(src), "output_tokens": len(translation.output_ids),
            "translate_s": float(np.median(timings)), "head_s": float(np.median(head)),
            "model_view_s": float(np.median(grid)), "layers_heads": f"{stack.shape[0]}×{stack.shape[1]}"}


def measure_in_fresh_process(folder: Path) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-m", "benchmarks.marian", "--worker", str(folder)], env=env,
                         capture_output=True, text=True, check=True, timeout=1200)
    return json.loads(out.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.marian", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="a tiny model: checks the script runs")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker)))
        return
    from transformer.io.convert import convert

    with tempfile.TemporaryDirectory() as workdir:
        hf, atlas = Path(workdir) / "hf", Path(workdir) / "opus-mt-en-fr-shape"
        start = time.perf_counter()
        write_marian_folder(hf, SMOKE if args.smoke else OPUS_MT_EN_FR)
        print(f"random MarianMTModel written in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        start = time.perf_counter()
        convert("marian", hf, atlas, log=lambda line: None)
        convert_s = time.perf_counter() - start
        rows = {"eng-fra": measure_in_fresh_process(Path(__file__).resolve().parent.parent / "checkpoints/eng-fra"),
                "opus-mt-en-fr shape": measure_in_fresh_process(atlas)}
    print(f"conversion: {convert_s:.1f} s\n")
    print("| | " + " | ".join(rows) + " |\n|---|" + "---:|" * len(rows))
    lines = [("parameters", "parameters", "{:,}"), ("load (load_checkpoint)", "load_s", "{:.2f} s"),
             ("peak memory of the process", "peak_rss_mb", "{:.0f} MB"),
             ("source tokens / output tokens", None, None),
             ("translate + capture every attention", "translate_s", "{:.2f} s"),
             ("switch head (one heatmap)", "head_s", "{:.3f} s"),
             ("model view of the encoder (layers × heads)", "model_view_s", "{:.3f} s")]
    for label, key, fmt in lines:
        if key is None:
            cells = [f"{row['src_tokens']} / {row['output_tokens']}" for row in rows.values()]
        else:
            cells = [fmt.format(row[key]) + (f" ({row['layers_heads']})" if key == "model_view_s" else "")
                     for row in rows.values()]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

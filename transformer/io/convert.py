"""Convert a pretrained model into an Atlas checkpoint folder:
`python -m transformer.convert {marian,gpt2,bert,bart,llama,qwen2,mistral} SRC_FOLDER OUT_FOLDER`

Each kind is a family of transformer/io/converters/ (its tokenizer files, its config mapping, its tensor names); this
module is the driver they share. SRC_FOLDER is a Hugging Face folder as `save_pretrained` writes it: config.json,
model.safetensors (or safetensors shards, model.safetensors.index.json; or pytorch_model.bin) and the family's
tokenizer: Marian's (opus-mt) source.spm, target.spm, vocab.json (and target_vocab.json for separate vocabularies) and
tokenizer_config.json; the others' tokenizer.json, kept and read with the `tokenizers` library. Marian is the
architecture this project implements (post-LN encoder-decoder, sinusoidal positions); GPT-2, Llama, Qwen2, Mistral
(decoder-only), BERT (encoder-only, masked LM) and BART (encoder-decoder) are the same model in another shape
(TransformerConfig.stacks and the fields the Llama family brought): one model, one set of hook names, every view
unchanged. `--from-hub NAME` downloads the folder first with huggingface_hub (only then imported; needs the internet).

SRC_FOLDER is read under the same loading policy as a checkpoint (transformer/io/safety.py): regular files only, each
under a size cap, JSON in bounded time, and the model's size worked out from config.json before anything is built.
Nothing is run from the folder: weights are read with safetensors, or from pytorch_model.bin only if its pickle is a
plain state dict of tensors. Anything that differs from what our model computes is refused with a message naming
the file and what differs. OUT_FOLDER is written beside its place and renamed into it (transformer.io.checkpoint's
commit_checkpoint); a checkpoint already there is replaced, whole, only with --replace.
"""
from __future__ import annotations

import argparse
import shlex
import shutil
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch

from .checkpoint import (
    CARD_FILE,
    CONFIG_FILE,
    WEIGHTS_FILE,
    CheckpointError,
    LoadedCheckpoint,
    ModelCard,
    build_model,
    check_replaceable,
    check_state,
    commit_checkpoint,
    expected_state,
    read_safetensors,
    read_torch_zip,
    remove_staging,
    save_weights,
    staging_folder,
    weights_entry,
    writer_lock,
)
from .converters import FAMILIES
from .converters.family import Tensors, read_json_object
from .safety import (
    MAX_CARD_BYTES,
    MAX_INDEX_BYTES,
    WEIGHTS_OVERHEAD_BYTES,
    read_bytes,
    read_json,
)

INDEX_FILE = "model.safetensors.index.json"  # sharded weights: which shard file holds each tensor
HUB_FILES = ["config.json", "generation_config.json", "model.safetensors", INDEX_FILE, "model-*.safetensors",
             "pytorch_model.bin", "source.spm", "target.spm", "vocab.json", "target_vocab.json",
             "tokenizer_config.json", "tokenizer.json", "README.md"]
# Buffers older transformers files store next to the weights: causal-mask tables (GPT-2), position ids (BERT),
# rotary frequencies (Llama).
IGNORED_BUFFERS = (".attn.bias", ".attn.masked_bias", "embeddings.position_ids", ".rotary_emb.inv_freq")


def read_weights(folder: Path, expected: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], Path]:
    """The tensors of model.safetensors, of the safetensors shards model.safetensors.index.json lists, or of
    pytorch_model.bin, and the file they came from. All of it may be at most twice the fp32 size of the model
    `expected` describes (a file may also hold copies of tied embeddings, Marian's the sinusoid tables), plus a
    little."""
    max_bytes = 8 * sum(tensor.numel() for tensor in expected.values()) + WEIGHTS_OVERHEAD_BYTES
    path = folder / "model.safetensors"
    if path.exists():
        return read_safetensors(path, folder, max_bytes), path
    if (folder / INDEX_FILE).exists():
        return read_shards(folder, max_bytes), folder / INDEX_FILE
    if (folder / "pytorch_model.bin.index.json").exists():
        raise CheckpointError(f"{folder}: sharded pytorch_model.bin weights (pytorch_model.bin.index.json) are not "
                              f"read; safetensors shards ({INDEX_FILE}) are")
    if (folder / "pytorch_model.bin").exists():
        return read_pytorch_bin(folder / "pytorch_model.bin", folder, max_bytes, len(expected)), \
            folder / "pytorch_model.bin"
    raise CheckpointError(f"{path}: file is missing (nor is there a {INDEX_FILE} or a pytorch_model.bin)")


def read_shards(folder: Path, max_bytes: int) -> dict[str, torch.Tensor]:
    """The tensors of the safetensors shards that model.safetensors.index.json's weight_map names (tensor -> shard),
    each shard a file beside the index read under the loading policy, all together at most `max_bytes` of tensors.
    Every tensor of a shard must be one the index places in that shard, and every one it places there must be in
    it: a tensor is never read from a file the index does not say."""
    index_path = folder / INDEX_FILE
    weight_map = read_json(index_path, folder, MAX_INDEX_BYTES)
    weight_map = weight_map.get("weight_map") if isinstance(weight_map, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(shard, str) for shard in weight_map.values()):
        raise CheckpointError(f"{index_path}: no weight_map object of tensor names and shard files")
    shards: dict[str, set[str]] = {}  # shard file -> the tensors the index places in it
    for name, shard in weight_map.items():
        shards.setdefault(shard, set()).add(name)
    tensors: dict[str, torch.Tensor] = {}
    read = 0  # bytes of tensors so far
    for shard, listed in sorted(shards.items()):
        if Path(shard).name != shard or not shard.endswith(".safetensors"):
            raise CheckpointError(f"{index_path}: shard {shard[:80]!r} is not a .safetensors file beside the index")
        found = read_safetensors(folder / shard, folder, max_bytes - read)
        if found.keys() != listed:
            differ = sorted(found.keys() ^ listed)
            raise CheckpointError(f"{folder / shard}: its tensors are not those {INDEX_FILE} places in it "
                                  f"({', '.join(differ[:3])}{' ...' if len(differ) > 3 else ''})")
        tensors |= found
        read += sum(tensor.nbytes for tensor in found.values())
    return tensors


def read_pytorch_bin(path: Path, folder: Path, max_bytes: int, tensors: int) -> dict[str, torch.Tensor]:
    """The state dict in a transformers pytorch_model.bin (a torch zip), read as a checkpoint's weights are: its
    pickle checked to be a plain state dict of tensors before torch reads it."""
    state = read_torch_zip(path, folder, max_bytes, tensors)
    if not isinstance(state, dict) or not all(isinstance(tensor, torch.Tensor) for tensor in state.values()):
        raise CheckpointError(f"{path}: expected a state dict (names -> tensors)")
    return dict(state)


def licence_of(folder: Path) -> str:
    """The `license:` of the model card's front matter (README.md), or "" when there is none."""
    readme = folder / "README.md"
    if not readme.is_file():
        return ""
    lines = read_bytes(readme, folder, MAX_CARD_BYTES).decode("utf-8", errors="replace").splitlines()
    if not lines or lines[0].strip() != "---":
        return ""
    for line in lines[1:]:
        if line.strip() == "---":
            break
        key, _, value = line.partition(":")
        if key.strip() == "license":
            return value.strip().strip("'\"")
    return ""


def convert(kind: str, src: Path, out: Path, command: str = "", origin: str = "", log=print,
            replace: bool = False) -> None:
    """Write the Atlas checkpoint folder `out` for the Hugging Face folder `src` of the family `kind` (FAMILIES, one
    module each in transformer/io/converters/): everything is read and checked first, then written beside `out` and
    renamed into place (an existing checkpoint only with `replace`)."""
    family, src, out = FAMILIES[kind], Path(src), Path(out)
    check_replaceable(out, replace, src)
    if not src.is_dir():
        raise CheckpointError(f"{src}: no such folder")
    log(f"reading {src / 'config.json'}")
    hf = read_json_object(src / "config.json", src)
    if hf.get("model_type") not in family.model_types:
        raise CheckpointError(f"{src / 'config.json'}: model_type is {hf.get('model_type')!r}, not "
                              f"{' or '.join(map(repr, family.model_types))}")
    if hf.get("architectures", [family.architecture]) != [family.architecture]:
        raise CheckpointError(f"{src / 'config.json'}: architectures is {hf.get('architectures')!r}, not "
                              f"[{family.architecture!r}]")
    log("reading the tokenizer")
    read = family.tokenizer(src)
    config = family.config(hf, read.tokenizer, src / "config.json")
    if read.tokenizer.vocab_size > config.tgt_vocab_size:
        raise CheckpointError(f"{read.tokenizer.path}: {read.tokenizer.vocab_size} tokens, more than config.json's "
                              f"vocab_size ({config.tgt_vocab_size})")
    expected = expected_state(config, src / "config.json")  # refuses a model too big before anything is built
    log("reading the weights")
    tensors, weights_path = read_weights(src, expected)
    state = family.state(config, Tensors(tensors, weights_path, IGNORED_BUFFERS))
    check_state(state, expected, weights_path)
    model = build_model(config, {name: tensor.float() for name, tensor in state.items()}, weights_path)
    origin = origin or str(src.resolve())
    languages = f", {read.languages}" if read.languages else ""
    card = ModelCard(
        name=out.name, task=family.task,
        description=f"A pretrained {family.architecture} ({config.stacks}{languages}) converted from {origin}: its "
                    "weights run in this project's own Transformer, checked equal to transformers'.",
        data=f"As documented by the original model ({origin}).", examples=list(read.examples or family.examples),
        machine=f"converted with torch {torch.__version__}", parameters=model.num_parameters(), source=origin,
        licence=licence_of(src) or "unknown: see the original model's card", conversion_command=command)
    write_checkpoint(out, model, card, read.files, replace, log)


def write_checkpoint(out: Path, model: torch.nn.Module, card: ModelCard, files: dict[str, bytes], replace: bool,
                     log=print) -> None:
    """Write the converted checkpoint beside `out`, check that it loads, and rename it into place."""
    with writer_lock(out):
        check_replaceable(out, replace)  # again: another writer may have finished there meanwhile
        staging = staging_folder(out, "converting")
        remove_staging(staging)
        try:
            log(f"writing {out}")
            write_folder(staging, model, card, files)
            log("checking that the folder loads")
            LoadedCheckpoint(staging)
            commit_checkpoint(staging, out)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    log(f"done: {out} ({model.num_parameters():,} parameters)")


def write_folder(folder: Path, model: torch.nn.Module, card: ModelCard, files: dict[str, bytes]) -> None:
    folder.mkdir()
    model.config.save(folder / CONFIG_FILE)
    save_weights(model, folder / WEIGHTS_FILE)
    for file, content in files.items():
        (folder / file).write_bytes(content)
    replace(card, weights=weights_entry(model)).save(folder / CARD_FILE)


def download(name: str) -> Path:
    """The files of hub model `name` that conversion reads, fetched with huggingface_hub (imported only here)."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise SystemExit("--from-hub needs huggingface_hub: pip install huggingface_hub") from None
    try:
        return Path(snapshot_download(name, allow_patterns=HUB_FILES))
    except Exception as error:  # offline, an unknown name, a refusal: the hub library's own exception types
        reason = (str(error).strip().splitlines() or [""])[0][:200]
        raise CheckpointError(f"{name}: could not be downloaded from the Hugging Face hub ({type(error).__name__}"
                              f"{': ' + reason if reason else ''}). Without a network, copy the model's folder "
                              "here and convert it as SRC_FOLDER") from None


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m transformer.convert", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=list(FAMILIES), help="the kind of model to convert")
    parser.add_argument("folders", nargs="+", metavar="SRC_FOLDER OUT_FOLDER",
                        help="the Hugging Face folder and the checkpoint folder to write (OUT_FOLDER alone with "
                             "--from-hub)")
    parser.add_argument("--from-hub", metavar="NAME", help="download NAME (e.g. Helsinki-NLP/opus-mt-en-fr) first")
    parser.add_argument("--replace", action="store_true",
                        help="replace the checkpoint already in OUT_FOLDER, whole (without it, one there is refused)")
    args = parser.parse_args(argv)
    if len(args.folders) != (1 if args.from_hub else 2):
        parser.error("give SRC_FOLDER OUT_FOLDER, or --from-hub NAME OUT_FOLDER")
    command = shlex.join(["python", "-m", "transformer.convert", *argv])
    try:
        # The output is checked before anything is downloaded.
        check_replaceable(Path(args.folders[-1]), args.replace, *([] if args.from_hub else [Path(args.folders[0])]))
        if args.from_hub:
            print(f"downloading {args.from_hub}")
            src, origin = download(args.from_hub), f"https://huggingface.co/{args.from_hub}"
        else:
            src, origin = Path(args.folders[0]), ""
        convert(args.kind, src, Path(args.folders[-1]), command, origin, replace=args.replace)
    except CheckpointError as error:
        raise SystemExit(f"error: {error}") from None


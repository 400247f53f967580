"""Weights as safetensors: the shipped checkpoints hold nothing else, every writer writes them (a tied weight stored
once, tied again on loading), a folder of torch zips (model.pt) still loads to the same model, and a safetensors file
that lies about its tensors is refused before the model is built."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from helpers import ROOT, small_model
from transformer import CheckpointError, checkpoint_status, load_checkpoint
from transformer.io.checkpoint import (
    CARD_FILE,
    SNAPSHOT_DIR,
    WEIGHTS_FILE,
    WEIGHTS_SUFFIX,
    expected_state,
    load_weights,
    read_config,
    save_weights,
    tied_names,
)

SHIPPED = ("dates", "eng-fra", "induction", "reverse", "reverse-1layer")
STORED_DTYPES = {"eng-fra": torch.float16, "induction": torch.float16}  # the others' final weights are fp32
TIED = ("decoder.embed.token.weight", "generator.weight")  # the tiny checkpoint's: one embedding, shared and tied


@pytest.fixture
def folder(tiny_checkpoint, tmp_path) -> Path:
    return shutil.copytree(tiny_checkpoint, tmp_path / "copy")


def test_every_shipped_checkpoint_and_snapshot_is_safetensors_and_loads():
    assert not list((ROOT / "checkpoints").rglob("*.pt"))
    for name in SHIPPED:
        folder = ROOT / "checkpoints" / name
        checkpoint = load_checkpoint(folder)
        stored = load_file(folder / WEIGHTS_FILE)
        assert {tensor.dtype for tensor in stored.values()} == {STORED_DTYPES.get(name, torch.float32)}, name
        assert checkpoint.card.weights == f"{WEIGHTS_FILE} (safetensors, {str(stored['generator.bias'].dtype)[6:]})"
        assert checkpoint.model.generator.weight is (checkpoint.model.decoder or checkpoint.model.encoder
                                                     ).embed.token.weight  # tied again, one tensor
        # Each weight is the file's under its name; a tied one, absent from the file, the embedding it is tied to.
        embedding = next(f"{stack}.embed.token.weight" for stack in ("decoder", "encoder")
                         if f"{stack}.embed.token.weight" in stored)
        for weight, tensor in checkpoint.model.state_dict().items():
            assert torch.equal(tensor, stored[weight if weight in stored else embedding].float()), (name, weight)
        assert sorted(path.name for path in (folder / SNAPSHOT_DIR).iterdir()) == [
            f"{snapshot}{WEIGHTS_SUFFIX}" for snapshot in checkpoint.snapshot_names()]
        for snapshot in checkpoint.snapshot_names():
            assert {t.dtype for t in load_file(folder / SNAPSHOT_DIR / f"{snapshot}{WEIGHTS_SUFFIX}").values()} == {
                torch.float16}, (name, snapshot)
            assert checkpoint.load_snapshot(snapshot).generator.bias.dtype == torch.float32


@pytest.mark.parametrize("name", SHIPPED)
def test_a_folder_of_torch_zips_loads_to_the_same_models(tmp_path, name):
    """The shipped folder written again as torch zips (model.pt and snapshots/NAME.pt, torch.save of each loaded
    state dict, tied weights sharing storage as torch stores them): listed as loadable, and every model gives
    logits equal to the safetensors one's, bit for bit, on the card's examples."""
    shipped = load_checkpoint(ROOT / "checkpoints" / name)
    folder = shutil.copytree(shipped.path, tmp_path / name, ignore=shutil.ignore_patterns(f"*{WEIGHTS_SUFFIX}"))
    torch.save(shipped.model.state_dict(), folder / "model.pt")
    for snapshot in shipped.snapshot_names():
        torch.save(shipped.load_snapshot(snapshot).state_dict(), folder / SNAPSHOT_DIR / f"{snapshot}.pt")
    assert dict(checkpoint_status(tmp_path)) == {name: ""}
    zipped = load_checkpoint(folder)
    pairs = [(shipped.model, zipped.model)] + [(shipped.load_snapshot(snapshot), zipped.load_snapshot(snapshot))
                                               for snapshot in shipped.snapshot_names()]
    for example in shipped.card.examples:
        translation = shipped.translate(example)  # the source, and the decoder input the card's decoding gives
        src, tgt = torch.tensor([translation.src_ids]), torch.tensor([translation.tgt_ids])
        with torch.no_grad():
            for ours, theirs in pairs:
                assert torch.equal(ours(src, tgt), theirs(src, tgt)), example


def test_a_folder_with_both_reads_the_safetensors(folder):
    torch.save({"generator.bias": torch.zeros(1)}, folder / "model.pt")  # would not load: it is not read
    assert load_checkpoint(folder).model.generator.bias.shape[0] > 1


def test_the_writers_write_safetensors_with_each_tied_weight_once(tiny_checkpoint, folder):
    """The trainer's final weights and snapshots (the tiny checkpoint is trained by the real command), and
    save_weights over a torch zip of the same name, which it replaces."""
    names = {path.name for path in tiny_checkpoint.rglob("*") if path.is_file()}
    assert WEIGHTS_FILE in names and not {name for name in names if name.endswith(".pt")}
    stored = load_file(tiny_checkpoint / WEIGHTS_FILE)
    assert "encoder.embed.token.weight" in stored and not set(TIED) & set(stored)
    assert json.loads((tiny_checkpoint / CARD_FILE).read_text())["weights"] == (
        f"{WEIGHTS_FILE} (safetensors, float32)")
    model = load_checkpoint(tiny_checkpoint).model
    (folder / "model.pt").write_bytes(b"an older file")
    (folder / WEIGHTS_FILE).unlink()
    save_weights(model, folder / WEIGHTS_FILE, half=True)
    assert not (folder / "model.pt").exists()
    half = load_file(folder / WEIGHTS_FILE)
    assert half.keys() == stored.keys() and {tensor.dtype for tensor in half.values()} == {torch.float16}
    reloaded = load_checkpoint(folder).model
    assert reloaded.generator.weight is reloaded.decoder.embed.token.weight is reloaded.encoder.embed.token.weight


def test_tied_names_follow_the_model():
    untied = small_model(tie_output_embedding=False, share_embeddings=False)
    assert tied_names(untied.state_dict(keep_vars=True)) == {}
    tied = small_model(tgt_vocab_size=37, tie_output_embedding=True, share_embeddings=True)
    assert tied_names(tied.state_dict(keep_vars=True)) == {name: "encoder.embed.token.weight" for name in TIED}
    assert tied_names(expected_state(tied.config, Path("config.json"))) == tied_names(tied.state_dict(keep_vars=True))


def rewritten(folder: Path, change) -> Path:
    """model.safetensors with its tensors edited by `change` (a dict, in place)."""
    state = load_file(folder / WEIGHTS_FILE)
    change(state)
    save_file(state, folder / WEIGHTS_FILE)
    return folder / WEIGHTS_FILE


def with_header(folder: Path, change) -> Path:
    """model.safetensors with its JSON header edited by `change` (a dict, in place) and its tensors' bytes kept."""
    path = folder / WEIGHTS_FILE
    data = path.read_bytes()
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + length])
    change(header)
    text = json.dumps(header).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + data[8 + length :])
    return path


@pytest.mark.parametrize(("plant", "message"), [
    (lambda f: with_header(f, lambda h: h["generator.bias"].update(shape=[4000, 4000])),
     r"model.safetensors: not a readable safetensors file \(SafetensorError"),
    (lambda f: with_header(f, lambda h: h["generator.bias"]["data_offsets"].__setitem__(1, 10**9)),
     r"model.safetensors: not a readable safetensors file"),
    (lambda f: with_header(f, lambda h: h["generator.bias"].update(dtype="I32")),
     r"model.safetensors: generator.bias is torch.int32, expected a float tensor"),
    (lambda f: rewritten(f, lambda s: s.update({"generator.weight": s["encoder.embed.token.weight"].clone()})),
     r"model.safetensors does not match config.json: missing \[\], unexpected \['generator.weight'\]"),
    (lambda f: rewritten(f, lambda s: s.pop("generator.bias")),
     r"model.safetensors does not match config.json: missing \['generator.bias'\]"),
    (lambda f: rewritten(f, lambda s: s["generator.bias"].fill_(float("nan"))),
     r"model.safetensors: generator.bias holds NaN or infinite values"),
    (lambda f: rewritten(f, lambda s: s.update({"generator.bias": s["generator.bias"][:-1].clone()})),
     r"model.safetensors does not match config.json: generator.bias has shape"),
], ids=["shape-beyond-its-bytes", "offset-beyond-the-file", "integer-dtype", "tied-weight-stored-twice",
        "tensor-missing", "nan", "wrong-shape"])
def test_a_safetensors_file_that_lies_is_refused(folder, plant, message):
    plant(folder)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(folder)


def test_a_safetensors_file_is_read_under_the_size_cap(folder):
    expected = expected_state(read_config(folder), folder)
    state = load_file(folder / WEIGHTS_FILE)
    save_file(state | {"padding": torch.zeros(5 << 20)}, folder / WEIGHTS_FILE)  # 20 MiB beyond the tensors
    with pytest.raises(CheckpointError, match=r"model.safetensors: [\d,]+ bytes, more than the [\d,]+ allowed"):
        load_weights(folder / WEIGHTS_FILE, folder, expected)

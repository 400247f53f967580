"""`python -m transformer.average`: the averaged weights, computed by hand from the two checkpoints; the later's
files and card kept, its scores dropped, the average recorded; mismatched checkpoints and an output over an input
refused with nothing written."""
from __future__ import annotations

import shutil

import pytest
import torch

from transformer import load_checkpoint
from transformer.io.checkpoint import WEIGHTS_FILE, save_weights
from transformer.training.average import main


@pytest.fixture(scope="module")
def later(tiny_checkpoint, tmp_path_factory):
    """tiny_checkpoint continued: the same files, every weight moved a little (as further training moves them)."""
    folder = tmp_path_factory.mktemp("later") / "later"
    shutil.copytree(tiny_checkpoint, folder)
    model = load_checkpoint(folder).model
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    save_weights(model, folder / WEIGHTS_FILE)
    return folder


def test_the_weights_are_the_share_of_each_and_the_card_says_so(later, tiny_checkpoint, tmp_path):
    out = tmp_path / "blend"
    main([str(later), str(tiny_checkpoint), "--share", "0.7", "--out", str(out)])
    blend, first, second = (load_checkpoint(path) for path in (out, later, tiny_checkpoint))
    mine, theirs = first.model.state_dict(), second.model.state_dict()
    for name, tensor in blend.model.state_dict().items():
        torch.testing.assert_close(tensor, 0.7 * mine[name] + 0.3 * theirs[name], rtol=0, atol=1e-6, msg=name)
    assert all(not torch.equal(mine[name], theirs[name]) for name, _ in first.model.named_parameters())
    assert blend.card.name == "blend"
    assert blend.card.training["averaged"] == {
        "share_of_later": 0.7, "later": str(later), "earlier": str(tiny_checkpoint),
        "command": f"python -m transformer.average {later} {tiny_checkpoint} --share 0.7 --out {out}"}
    assert not [name for name in blend.card.metrics if name.startswith("dev_") and name != "dev_pairs"]
    assert blend.card.history == first.card.history and blend.snapshot_names() == first.snapshot_names()
    for name in first.snapshot_names():
        for a, b in zip(blend.load_snapshot(name).parameters(), first.load_snapshot(name).parameters()):
            assert torch.equal(a, b)
    assert blend.source_words == first.source_words


def test_half_stores_float16(later, tiny_checkpoint, tmp_path):
    out = tmp_path / "half"
    main([str(later), str(tiny_checkpoint), "--share", "1", "--out", str(out), "--half"])
    blend = load_checkpoint(out)
    assert "float16" in blend.card.weights
    for a, b in zip(blend.model.parameters(), load_checkpoint(later).model.parameters()):
        torch.testing.assert_close(a, b.half().float(), rtol=0, atol=0)


@pytest.mark.parametrize("case", ["other model", "out over an input", "share over 1"])
def test_refused_with_nothing_written(later, tiny_checkpoint, tiny_twin, tmp_path, case, capsys):
    out = tmp_path / "blend"
    argv = {"other model": [str(later), str(tiny_twin), "--share", "0.5", "--out", str(out)],
            "out over an input": [str(later), str(tiny_checkpoint), "--share", "0.5", "--out", str(later),
                                  "--replace"],
            "share over 1": [str(later), str(tiny_checkpoint), "--share", "1.5", "--out", str(out)]}[case]
    before = sorted(path.name for path in later.iterdir())
    with pytest.raises(SystemExit) as raised:
        main(argv)
    assert raised.value.code == 2 and "error:" in capsys.readouterr().err
    assert not out.exists() and sorted(path.name for path in later.iterdir()) == before
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".blend")]

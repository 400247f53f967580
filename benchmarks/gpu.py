"""The model's share of Enter → 256-token model view on a GPU (`ATLAS_DEVICE=cuda`): greedy decoding of 256 tokens
and the teacher-forced pass with every attention captured, seconds on the CPU ÷ seconds on the GPU, side by side.
No rows where torch sees no GPU (CI, this project's 2-core machine)."""
from __future__ import annotations

import copy

import torch

from transformer import capture, greedy, load_checkpoint

from .common import Setup, result, side_by_side
from .fixtures import random_ids, wide_checkpoints

FIGURE = "GPU"


def measure(setup: Setup) -> list[dict]:
    if not torch.cuda.is_available():
        return []
    tokens, path = max(wide_checkpoints(setup).items())
    on_cpu = load_checkpoint(path).model  # ATLAS_DEVICE unset: the CPU
    on_gpu = copy.deepcopy(on_cpu).to("cuda")
    src, _ = random_ids(on_cpu.config, 1, tokens)

    def model_view_pass(model: torch.nn.Module) -> torch.Tensor:
        """What the app computes for the model view: the output, then its captured pass, records back on the CPU."""
        ids = src.to(next(model.parameters()).device)
        with torch.no_grad():
            output = greedy(model, ids, tokens + 1)
            with capture(model) as record:
                model(ids, output[:, :-1])
        weights = record.stack("decoder.cross_attn").cpu()  # (layers, heads, tgt_len, src_len), synchronises
        return output.cpu(), weights

    (cpu_out, cpu_weights), (gpu_out, gpu_weights) = model_view_pass(on_cpu), model_view_pass(on_gpu)
    assert torch.equal(cpu_out, gpu_out), "the GPU decoded other tokens"
    difference = float((cpu_weights - gpu_weights).abs().max())
    seconds = side_by_side({"cpu": lambda: model_view_pass(on_cpu), "gpu": lambda: model_view_pass(on_gpu)},
                           repeats=setup.repeats)
    return [result(FIGURE, f"{tokens}-token model view's model work (greedy + captured pass), CPU s ÷ GPU s",
                   seconds["cpu"] / seconds["gpu"], "×", cpu_s=seconds["cpu"], gpu_s=seconds["gpu"],
                   gpu=torch.cuda.get_device_name(), cpu_threads=torch.get_num_threads(),
                   max_weight_difference=difference)]

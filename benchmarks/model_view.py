"""Time and size of viz.model_view on random attention: `python -m benchmarks.model_view`.

The figure must stay usable at 256 tokens with 6 layers x 8 heads: its JSON (what the app ships to the browser)
has to stay under 5 MB.
"""
import numpy as np

from viz import model_view

from .common import Setup, result, side_by_side

FIGURE = "model view figure"
PAYLOAD_LIMIT_BYTES = 5_000_000


def random_stack(tokens, layers, heads, seed=0) -> np.ndarray:
    """Softmax-normalised attention (layers, heads, tokens, tokens) from Gaussian scores scaled by 3, so rows are
    peaked like trained heads rather than near-uniform."""
    scores = np.random.default_rng(seed).normal(scale=3.0, size=(layers, heads, tokens, tokens))
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return weights / weights.sum(axis=-1, keepdims=True)


def run(sizes=(32, 128, 256), layers=6, heads=8, repeats=3) -> list[dict]:
    """For each token count: median seconds of `repeats` model_view calls (after one warm-up) and JSON bytes."""
    stacks = {tokens: random_stack(tokens, layers, heads) for tokens in sizes}
    labels = {tokens: [f"t{i}" for i in range(tokens)] for tokens in sizes}
    draw = {tokens: lambda tokens=tokens: model_view(stacks[tokens], labels[tokens], labels[tokens])
            for tokens in sizes}
    seconds = side_by_side(draw, repeats)
    return [{"tokens": tokens, "layers": layers, "heads": heads, "seconds": seconds[tokens],
             "json_bytes": len(draw[tokens]().to_json())} for tokens in sizes]


def measure(setup: Setup) -> list[dict]:
    sizes = (8, 16) if setup.smoke else (32, 128, 256)
    rows = []
    for row in run(sizes, repeats=setup.repeats):
        longest = row["tokens"] == sizes[-1]
        rows.append(result(FIGURE, f"viz.model_view, {row['tokens']} tokens, 6×8 heads", row["seconds"], "s",
                           tokens=row["tokens"]))
        rows.append(result(FIGURE, f"its JSON, {row['tokens']} tokens, 6×8 heads", row["json_bytes"] / 1e6, "MB",
                           at_most=PAYLOAD_LIMIT_BYTES / 1e6 if longest else None, tokens=row["tokens"]))
    return rows


if __name__ == "__main__":
    print(f"{'tokens':>6} {'heads':>7} {'seconds':>8} {'JSON MB':>8}  under {PAYLOAD_LIMIT_BYTES / 1e6:.0f} MB")
    for row in run():
        print(f"{row['tokens']:>6} {row['layers']}x{row['heads']:<5} {row['seconds']:>8.3f} "
              f"{row['json_bytes'] / 1e6:>8.2f}  {row['json_bytes'] < PAYLOAD_LIMIT_BYTES}")

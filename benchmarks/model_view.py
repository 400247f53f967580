"""Time and size of viz.model_view on random attention: `python -m benchmarks.model_view`.

The figure must stay usable at 256 tokens with 6 layers x 8 heads: its JSON (what the app ships to the browser)
has to stay under 5 MB.
"""
import statistics
import time

import numpy as np

from viz import model_view

PAYLOAD_LIMIT_BYTES = 5_000_000


def random_stack(tokens, layers, heads, seed=0) -> np.ndarray:
    """Softmax-normalised attention (layers, heads, tokens, tokens) from Gaussian scores scaled by 3, so rows are
    peaked like trained heads rather than near-uniform."""
    scores = np.random.default_rng(seed).normal(scale=3.0, size=(layers, heads, tokens, tokens))
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return weights / weights.sum(axis=-1, keepdims=True)


def run(sizes=(32, 128, 256), layers=6, heads=8, repeats=3) -> list[dict]:
    """For each token count: median seconds of `repeats` model_view calls (after one warm-up) and JSON bytes."""
    results = []
    for tokens in sizes:
        stack = random_stack(tokens, layers, heads)
        labels = [f"t{i}" for i in range(tokens)]
        fig = model_view(stack, labels, labels)  # warm-up
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            fig = model_view(stack, labels, labels)
            seconds.append(time.perf_counter() - start)
        results.append({"tokens": tokens, "layers": layers, "heads": heads, "seconds": statistics.median(seconds),
                        "json_bytes": len(fig.to_json())})
    return results


if __name__ == "__main__":
    print(f"{'tokens':>6} {'heads':>7} {'seconds':>8} {'JSON MB':>8}  under {PAYLOAD_LIMIT_BYTES / 1e6:.0f} MB")
    for row in run():
        print(f"{row['tokens']:>6} {row['layers']}x{row['heads']:<5} {row['seconds']:>8.3f} "
              f"{row['json_bytes'] / 1e6:>8.2f}  {row['json_bytes'] < PAYLOAD_LIMIT_BYTES}")

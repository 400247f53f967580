"""What the scenarios' tables share."""
from __future__ import annotations

import numpy as np


def p95(values: list[float]) -> float:
    return float(np.percentile(values, 95)) if values else float("nan")


def served_by(result: dict) -> str:
    """How the app of a run was served: one process or K behind nginx, and which commit's app if not this one's."""
    where = "one process" if result["processes"] is None else f"{result['processes']} process(es) behind nginx"
    if result["code"]:
        where += f", the app as of commit {result['code']}"
    return where


def with_errors(lines: list[str], errors: list[str]) -> str:
    lines = lines + [f"  {error}" for error in errors[:10]]
    if len(errors) > 10:
        lines.append(f"  … and {len(errors) - 10} more (see --json)")
    return "\n".join(lines)

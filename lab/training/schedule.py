"""Learning-rate schedule: linear warmup, then cosine decay to a floor."""

import math


def warmup_cosine(step: int, warmup_steps: int, total_steps: int, min_ratio: float) -> float:
    """Multiplier of the peak learning rate at ``step`` (0-based).

    Rises linearly from ``1 / warmup_steps`` to 1 over ``warmup_steps`` steps, then follows half
    a cosine from 1 down to ``min_ratio`` at ``total_steps`` (Loshchilov & Hutter 2017, SGDR,
    eq. 5, without restarts).
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

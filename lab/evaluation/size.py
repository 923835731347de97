"""How big a run's model is: its trainable parameter count, rebuilt from the config its
``eval.json`` saved (on PyTorch's ``meta`` device: no memory, no weights read). Learned position
tables, T5 buckets and FIRE's MLP change it; a table of schemes shows it beside the scores."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import torch

from lab.common.config import ConfigError, config_from_dict
from model.transformer import Transformer


@lru_cache(maxsize=256)
def _count(saved: str) -> int | None:
    try:
        config = config_from_dict(json.loads(saved))
    except ConfigError:
        return None
    with torch.device("meta"):
        model = Transformer(config.model)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def parameter_count(result: dict[str, Any]) -> int | None:
    """The trainable parameters of the model a run trained (``sum(p.numel())`` over
    ``requires_grad`` tensors; buffers such as sinusoidal tables are not counted), or None when
    its saved ``config`` no longer builds a model (a hand-made or incompatible record)."""
    saved = result.get("config")
    if not isinstance(saved, dict) or "model" not in saved:
        return None
    return _count(json.dumps(saved, sort_keys=True, default=str))


def parameters_cell(runs: list[dict[str, Any]]) -> str:
    """``"150,528"``: the parameter count shared by ``runs``, ``"150,528-166,912"`` when they
    differ, ``"—"`` when none can be counted."""
    counts = sorted({c for r in runs if (c := parameter_count(r)) is not None})
    if not counts:
        return "—"
    return f"{counts[0]:,}" if len(counts) == 1 else f"{counts[0]:,}-{counts[-1]:,}"

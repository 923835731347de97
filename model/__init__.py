"""A from-scratch decoder-only transformer with swappable position schemes.

Public API: :class:`ModelConfig`, :class:`Transformer`, and the functions of
:mod:`model.position`.
"""

from model.config import ModelConfig
from model.transformer import Transformer

__all__ = ["ModelConfig", "Transformer"]

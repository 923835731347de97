"""Length-aware softmax: attention logits scaled by the log of how many keys a query sees.

Softmax over ``n`` keys flattens as ``n`` grows (its largest output tends to 0), so attention
that was sharp at the training length fades at longer ones. Multiplying query ``i``'s logits by
a factor that grows with ``log n_i`` keeps it sharp:

- ``logn``: ``z_ij * log n_i`` (Chiang & Cholak 2022, "Overcoming a Theoretical Limitation of
  Self-Attention", §5: log-length scaled attention; Su 2021's ``log_L n = log n / log L`` for a
  model trained at length ``L`` differs only by the constant ``1 / log L``, which a model trained
  with the scale absorbs into ``W_q``);
- ``ssmax``: Scalable-Softmax, ``z_ij * s_h log n_i`` with ``s_h`` a learned scalar per layer
  and head (Nakanishi 2025, "Scalable-Softmax Is Superior for Attention", arXiv 2501.19399,
  eq. 11: ``softmax(s log n z)``), initialised to 1, so that training starts from ``logn``.

``n_i`` is the number of keys query ``i`` may attend to under the model's mask
(:func:`visible_keys`): ``i + 1`` in a causal model. A per-query factor multiplies a row of
``q k^T``, so it is applied to the query (``q_i * scale_i``) before the position scheme's
``layer`` hook: SDPA and the blocked path run unchanged and see the same scaled logits. Every
term linear in the query is scaled (``q . k``, CoPE's ``q . e[p]`` and its gates); an additive
bias that does not come from the query (ALiBi, T5, KERPLE, FIRE) is not.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

SOFTMAX_SCALES = ("none", "logn", "ssmax")
"""Values of ``model.softmax_scale``; ``none`` is plain softmax, the default."""


def visible_keys(
    seq_len: int, causal: bool, prefix_len: int | None, device: torch.device
) -> Tensor:
    """How many keys each query may attend to under :func:`model.mask.blocked`'s rule.

    Causal: ``i + 1``. Bidirectional with a prefix of ``P`` tokens (a prefix LM):
    ``max(i + 1, P)`` (the prefix sees itself, later tokens the prefix and what precedes
    them). Bidirectional without a prefix: ``T``.

    Returns:
        float32 ``(T,)``, values in ``[1, T]``.
    """
    n = torch.arange(1, seq_len + 1, device=device, dtype=torch.float32)  # (T,)
    if causal:
        return n
    if prefix_len is None:
        return torch.full_like(n, float(seq_len))
    return n.clamp(min=float(prefix_len))


class SoftmaxScale(nn.Module):
    """One layer's length-aware scale of its queries (``logn`` or ``ssmax``, see the module).

    Attributes:
        kind: ``logn`` or ``ssmax``.
        ssmax_scale: ``ssmax`` only: the learned ``s``, float32 ``(H,)``, initialised to 1.
    """

    def __init__(self, kind: str, n_heads: int) -> None:
        super().__init__()
        if kind not in SOFTMAX_SCALES[1:]:
            raise ValueError(f"softmax scale {kind!r} is not one of logn, ssmax")
        self.kind = kind
        if kind == "ssmax":
            self.ssmax_scale = nn.Parameter(torch.ones(n_heads))

    def factor(
        self, seq_len: int, causal: bool, prefix_len: int | None, device: torch.device
    ) -> Tensor:
        """The factor of every query's logits: float32 ``(1, 1, T, 1)`` (``logn``) or
        ``(1, H, T, 1)`` (``ssmax``), ``0`` where a query sees one key (``log 1``)."""
        log_n = visible_keys(seq_len, causal, prefix_len, device).log()  # (T,)
        if self.kind == "logn":
            return log_n.view(1, 1, -1, 1)
        return self.ssmax_scale.view(1, -1, 1, 1) * log_n.view(1, 1, -1, 1)

    def forward(self, q: Tensor, causal: bool, prefix_len: int | None) -> Tensor:
        """Queries ``(B, H, T, Dh)`` with row ``i`` multiplied by its factor, in ``q``'s dtype."""
        return q * self.factor(q.shape[-2], causal, prefix_len, q.device).to(q.dtype)

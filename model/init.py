"""Initialisation choices on top of the engine's own init (Transformer(cfg, seed) is unchanged):
used by the trainers (training/train.py) and the classroom's small training runs
(classroom/gradients.py), so both start from the same weights for the same seed."""
from __future__ import annotations

import torch

from .transformer import Transformer


def scale_init(model: Transformer, emb_scale: float) -> None:
    """Rescale the token (and learned position) embeddings after the engine's N(0, 1) init.

    With tied weights the output logits are LN(x) @ E^T, so N(0, 1) embeddings start with logits of
    standard deviation ~sqrt(d_model) (a very confident random model). A smaller scale starts
    training near the uniform distribution. Transformer(cfg, seed) itself is unchanged."""
    with torch.no_grad():
        model.tok_emb.weight.mul_(emb_scale)
        if model.cfg.pos_encoding == "learned":
            model.pos_emb.weight.mul_(emb_scale)


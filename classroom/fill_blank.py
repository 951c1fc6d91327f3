"""Fill in the blank (issue 21 point 4): what a masked language model is for. Replace one token of
a sentence by the mask token, run the model bidirectionally, and read its guesses at that position.
Pure Python over model/."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

MASK_TOKENS = ("<mask>", "[MASK]")


def mask_id(vocab: Sequence[str]) -> int | None:
    """The vocabulary's mask token id, or None (a model not trained to fill blanks)."""
    for name in MASK_TOKENS:
        if name in vocab:
            return list(vocab).index(name)
    return None


@torch.no_grad()
def fill_in(model, ids: Sequence[int], position: int, mask: int, k: int = 5) -> dict:
    """ids with ids[position] replaced by `mask`, traced bidirectionally: the top-k tokens at that
    position with their probabilities, and where the true token ranks (1 = the model's first guess)."""
    ids = [int(i) for i in ids]
    if not 0 <= position < len(ids):
        raise ValueError(f"position must be in [0, {len(ids) - 1}], got {position}")
    true = ids[position]
    masked = ids.copy()
    masked[position] = int(mask)
    tr = model.trace(torch.tensor([masked]), causal=False)
    p = tr.probs[0, position].double().numpy()  # (V,)
    order = np.argsort(-p, kind="stable")
    return {"masked_ids": masked, "top_ids": order[:k], "top_p": p[order[:k]], "true_id": true,
            "true_p": float(p[true]), "true_rank": int(np.nonzero(order == true)[0][0]) + 1}

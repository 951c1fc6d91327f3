"""Batching for training. The padding itself is the engine's (model/batching.py: inference pads the
same way), imported here so training code and its callers keep one name for it.

encode_texts: sentences -> (N, T) ids and lengths. The training data of training.train and of the
classroom's small training runs (classroom/gradients.py)."""
from __future__ import annotations

from typing import Sequence

import torch

from model.batching import Batch, pad_batch
from model.tokenizer import Tokenizer

__all__ = ["Batch", "pad_batch", "encode_texts"]


def encode_texts(tok: Tokenizer, texts: Sequence[str], max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, T) long ids right-padded with <pad>, and (N,) lengths. Sentences longer than max_len
    are truncated."""
    if len(texts) == 0:
        raise ValueError("no training texts")
    seqs = [tok.encode(t).ids[:max_len] for t in texts]
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), tok.pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return ids, torch.tensor([len(s) for s in seqs], dtype=torch.long)

"""Padding (pure torch): sentences of different lengths -> ids (B, T) padded on the right and the
key_padding_mask the model takes (Transformer.trace(ids, key_padding_mask=...)). Inference (the
mask lab's batch run, ui/runs.py) and training (training/batching.py) both pad with this; the
masks it leads to, step by step, are classroom.mask_lab.mask_steps."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Batch:
    ids: torch.Tensor  # (B, T) long, padded on the right with pad_id
    key_padding_mask: torch.Tensor  # (B, T) bool, True = real token
    lengths: list[int]  # real tokens per sentence


def pad_batch(seqs: list[list[int]], pad_id: int, max_len: int | None = None) -> Batch:
    """Right-pad token id lists to a common length (the longest, cut to max_len)."""
    if not seqs or any(len(s) == 0 for s in seqs):
        raise ValueError("pad_batch needs at least one sequence and every sequence must have >= 1 token")
    seqs = [list(s)[:max_len] if max_len else list(s) for s in seqs]
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), int(pad_id), dtype=torch.long)
    kpm = torch.zeros(len(seqs), T, dtype=torch.bool)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = torch.tensor(s, dtype=torch.long)
        kpm[b, : len(s)] = True
    return Batch(ids=ids, key_padding_mask=kpm, lengths=[len(s) for s in seqs])

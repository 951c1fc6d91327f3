"""Batching (pure torch): sentences of different lengths -> ids (B, T) padded on the right.

pad_batch: token-id lists -> ids and the key_padding_mask the model takes. Used by the mask lab's
batch run (ui/compute.py); the masks it shows step by step are classroom.analysis.mask_steps.
encode_texts: sentences -> (N, T) ids and lengths. The training data of training.train and of the
classroom's small training runs (classroom/gradients.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from model.tokenizer import Tokenizer


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

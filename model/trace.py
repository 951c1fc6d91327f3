"""Typed traces of every intermediate of a forward pass.

Axis order is fixed: (batch B, head H, query Tq, key Tk). D = d_model, d_k = D / H.
Traces are produced under torch.no_grad() in eval mode, detached, on CPU. `trace.numpy()` gives
the same tree of frozen dataclasses with read-only numpy arrays in place of tensors (same field
names, same shapes): what pages, analyses and exports read, as typed attributes
(`tr.layers[0].attn.weights`). `flat_arrays` flattens either tree into the .npz export's keys
("layers.0.attn.weights"), taken from the field names.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Self

import numpy as np
import torch
from torch import Tensor


class TraceNode:
    """Base of every trace dataclass: `.numpy()` converts the whole tree."""

    def numpy(self) -> Self:
        """The same dataclass tree with read-only numpy arrays instead of tensors (floats, bools,
        None and strings unchanged). Safe to share between sessions: nothing can write to it."""
        return _to_numpy_tree(self)


def _to_numpy_tree(obj: Any) -> Any:
    if isinstance(obj, Tensor):
        arr = obj.detach().cpu().numpy()
        arr.flags.writeable = False
        return arr
    if isinstance(obj, np.ndarray):
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: _to_numpy_tree(getattr(obj, f.name))
                                           for f in dataclasses.fields(obj) if f.init})
    if isinstance(obj, tuple):
        return tuple(_to_numpy_tree(x) for x in obj)
    if isinstance(obj, list):
        return [_to_numpy_tree(x) for x in obj]
    return obj


@dataclass(frozen=True)
class AttentionTrace(TraceNode):
    q: Tensor  # (B, H, Tq, d_k)
    k: Tensor  # (B, H, Tk, d_k)
    v: Tensor  # (B, H, Tk, d_v)  d_v = cfg.d_value (d_k unless cfg.d_v is set)
    scores: Tensor  # (B, H, Tq, Tk)  q @ k^T, before scaling
    scale: float  # 1/sqrt(d_k), or 1.0 when scale_scores=False
    scaled: Tensor  # (B, H, Tq, Tk)  scores * scale
    allowed: Tensor  # bool, broadcastable to (B, H, Tq, Tk); True = may attend
    masked: Tensor  # (B, H, Tq, Tk)  scaled, -inf where not allowed
    weights: Tensor  # (B, H, Tq, Tk)  softmax rows (sum 1), all-zero on fully masked rows
    fully_masked: Tensor  # bool (B, H or 1, Tq): rows where nothing was allowed
    heads: Tensor  # (B, H, Tq, d_v)  weights @ v, the per-head outputs Z_j
    concat: Tensor | None = None  # (B, Tq, H*d_v)  heads side by side (None from bare attend)
    output: Tensor | None = None  # (B, Tq, D)  concat @ W_O^T + b_O (None from bare attend)


@dataclass(frozen=True)
class LayerNormTrace(TraceNode):
    input: Tensor  # (B, T, D)
    mean: Tensor  # (B, T, 1)
    var: Tensor  # (B, T, 1)  biased, as F.layer_norm
    normalized: Tensor  # (B, T, D)  (input - mean) / sqrt(var + eps), before gamma/beta
    output: Tensor  # (B, T, D)  normalized * gamma + beta
    gamma: Tensor | None = None  # (D,)  the learned scale (None: no scale)
    beta: Tensor | None = None  # (D,)  the learned shift (None: no shift)


@dataclass(frozen=True)
class FFNTrace(TraceNode):
    input: Tensor  # (B, T, D)
    hidden_pre: Tensor  # (B, T, d_ff)  x @ W_1^T + b_1
    hidden_post: Tensor  # (B, T, d_ff)  activation(hidden_pre)
    output: Tensor  # (B, T, D)  hidden_post @ W_2^T + b_2


@dataclass(frozen=True)
class EmbeddingTrace(TraceNode):
    token: Tensor  # (B, T, D)  rows of the token-embedding matrix
    position: Tensor  # (T, D)  sinusoidal or learned position vectors
    sum: Tensor  # (B, T, D)  what block 0 sees: raw_sum, or ln.output when the model has an
    #              embedding LayerNorm (BERT, cfg.emb_norm)
    token_type: Tensor | None = None  # (B, T, D)  token-type (segment) embedding rows; None
    #                                   unless cfg.type_vocab_size > 0 (BERT: sentence A / B)
    raw_sum: Tensor | None = None  # (B, T, D)  token + position (+ token_type) before the
    #                                embedding LayerNorm; None without one (then `sum` is that)
    ln: LayerNormTrace | None = None  # the embedding LayerNorm over raw_sum (cfg.emb_norm); None
    #                                   otherwise. ln.output is `sum`


@dataclass(frozen=True)
class BlockTrace(TraceNode):
    input: Tensor  # (B, T, D)  residual stream entering the block
    ln1: LayerNormTrace | None  # pre-LN: before attention; post-LN: after input + attention; None: use_norm False
    attn: AttentionTrace
    resid_mid: Tensor  # (B, T, D)  stream after the attention sublayer (post-LN: after ln1)
    ln2: LayerNormTrace | None  # pre-LN: before the FFN; post-LN: after resid_mid + FFN; None: use_norm False
    ffn: FFNTrace
    resid_out: Tensor  # (B, T, D)  stream leaving the block


@dataclass(frozen=True)
class ForwardTrace(TraceNode):
    ids: Tensor  # (B, T) long
    causal: bool
    key_padding_mask: Tensor | None  # (B, T) bool, True = real token
    embeddings: EmbeddingTrace
    layers: tuple[BlockTrace, ...]
    final_ln: LayerNormTrace | None  # pre-LN models (GPT-2); None for post-LN
    final: Tensor  # (B, T, D)  what the output layer sees (the last hidden states)
    logits: Tensor | None  # (B, T, V); None for a model without an output layer (cfg.output_head
    #                        False, e.g. MiniLM: an encoder that cannot predict words)
    probs: Tensor | None  # (B, T, V)  softmax(logits) over the vocabulary; None as logits
    token_type_ids: Tensor | None = None  # (B, T) long, the segment of each token (models with
    #                                       token types; zeros when trace() got none); else None


def flat_arrays(obj: Any, prefix: str = "") -> dict[str, np.ndarray]:
    """Flatten a trace (torch or numpy tree) into {"layers.0.attn.weights": array, ...}: the .npz
    export's keys, named after the trace fields (None fields are left out)."""
    out: dict[str, np.ndarray] = {}
    if obj is None:
        return out
    if isinstance(obj, Tensor):
        out[prefix] = obj.detach().cpu().numpy()
    elif isinstance(obj, np.ndarray):
        out[prefix] = obj
    elif isinstance(obj, (bool, int, float)):
        out[prefix] = np.asarray(obj)
    elif dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            out.update(flat_arrays(getattr(obj, f.name), f"{prefix}.{f.name}" if prefix else f.name))
    elif isinstance(obj, (list, tuple)):
        for i, item in enumerate(obj):
            out.update(flat_arrays(item, f"{prefix}.{i}" if prefix else str(i)))
    return out

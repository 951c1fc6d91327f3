"""Attention variants side by side (issue 20, point 2): one sentence, one seed, one small model per
variant, the heads of each.

Every variant is the one Transformer with one config option changed (model/config.py): position
schemes (sinusoidal, learned, rotary, ALiBi, none), a sliding window, multi-head / grouped-query /
multi-query attention, and Bahdanau's additive score. So that the pictures differ only by the
variant, every model starts from the same seeded weights: the base model's (sinusoidal, MHA)
parameters are copied into each variant; grouped K/V heads are the mean of their group's heads
(how Ainslie et al. 2023 turn an MHA checkpoint into GQA); a variant's own new parameters (learned
positions, the additive score's W_q, W_k, v) come from the same seed.

Pure Python over model/ (no streamlit, no plotly).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np
import torch

from model.config import ModelConfig
from model.transformer import Transformer

from .positional import order_test, shuffle_order

@dataclass(frozen=True)
class BaseShape:
    """The small architecture every variant shares: 4 heads of d_k = 8, one layer (the heads shown)."""
    d_model: int = 32
    n_heads: int = 4
    n_layers: int = 1
    d_ff: int = 64


BASE = BaseShape()
MAX_LEN = 256  # positions the learned table holds (the sidebar's sentence is cut to fewer)


@dataclass(frozen=True)
class Variant:
    key: str
    title: str
    changes: str  # what the variant changes in the computation
    why: str  # why models adopted it (and which)


VARIANTS: tuple[Variant, ...] = (
    Variant("sinusoidal", "Sinusoidal positions",
            "adds a fixed sin/cos vector for each position to the token embeddings (no parameters).",
            "The 2017 paper's choice: nothing to learn, defined for any position, and a fixed offset is a "
            "linear map of the vectors."),
    Variant("learned", "Learned positions",
            "adds one trained vector per position (a max_len × d_model table).",
            "GPT-2 and BERT: as simple as it gets and as good as sinusoidal in practice, but a position "
            "beyond max_len has no vector at all."),
    Variant("rotary", "Rotary (RoPE)",
            "adds nothing to the embeddings; rotates each pair of q and k dimensions by an angle "
            "proportional to the position, so q·k depends on the offset i − j only.",
            "Relative position inside the q·k product, no table: RoFormer, then Llama, Mistral, SmolLM2 and "
            "most open models since."),
    Variant("alibi", "ALiBi",
            "no position vector; adds −slope_h·|i − j| to head h's scores (slopes 2^(−8h/n) for n heads: "
            "1/4, 1/16, 1/64, 1/256 here; steep heads look near, gentle heads look far).",
            "Trained on short inputs, it extrapolates to longer ones (Press et al. 2022): BLOOM, MPT."),
    Variant("none", "No positions",
            "nothing tells the model where a word stands: attention is permutation-equivariant — shuffle "
            "the words and the weights move with them (measured below).",
            "Not a model choice but the reason every variant above exists; a causal mask alone brings some "
            "order back."),
    Variant("window", "Sliding window",
            "each query sees only keys within w positions (causal: i − w < j ≤ i, the last w tokens; "
            "bidirectional: |i − j| < w); the rest is masked.",
            "Bounds the KV cache to w tokens and the cost to T·w instead of T² (Longformer; Mistral 7B, "
            "w = 4096); stacked layers still reach L·w tokens back."),
    Variant("mha", "Multi-head (MHA)",
            "every query head has its own key and value head.",
            "The 2017 design (GPT-2, BERT): the most expressive, and the largest KV cache."),
    Variant("gqa", "Grouped-query (GQA)",
            "query heads share key/value heads in groups; heads in a group differ only by their queries.",
            "Shrinks the KV cache by n_heads / n_kv_heads at little quality cost: Llama 2 70B, Llama 3, "
            "Mistral, SmolLM2 (9 query, 3 K/V heads)."),
    Variant("mqa", "Multi-query (MQA)",
            "every query head reads the one key/value head.",
            "The smallest KV cache and the fastest decoding (Shazeer 2019; PaLM, Falcon); GQA is the "
            "compromise when quality suffers."),
    Variant("additive", "Additive (Bahdanau)",
            "scores a key with a small network, e_ij = v·tanh(W_q q_i + W_k k_j), instead of a dot product "
            "(no 1/√d_k).",
            "The first neural attention (Bahdanau et al. 2015, translation); replaced by the dot product "
            "(Luong 2015, the 2017 paper) because q·k for all pairs is one matrix multiply."),
)
BY_KEY = {v.key: v for v in VARIANTS}
POSITION_KEYS = ("sinusoidal", "learned", "rotary", "alibi", "none")


def variant_config(key: str, vocab_size: int, *, window: int | None = 3, n_kv_heads: int = 2) -> ModelConfig:
    """The base config (sinusoidal, MHA, dot product) with the one option of variant `key`.
    window and n_kv_heads are read by the "window" and "gqa" variants; ValueError (from the config)
    for a bad value, saying what to choose."""
    if key not in BY_KEY:
        raise ValueError(f"unknown variant {key!r}; choose from {list(BY_KEY)}")
    base = ModelConfig(vocab_size=vocab_size, max_len=MAX_LEN, **asdict(BASE))
    change = {"sinusoidal": {}, "learned": {"pos_encoding": "learned"}, "rotary": {"pos_encoding": "rope"},
              "alibi": {"pos_encoding": "none", "alibi": True}, "none": {"pos_encoding": "none"},
              "window": {"window": window}, "mha": {"n_kv_heads": base.n_heads},
              "gqa": {"n_kv_heads": n_kv_heads}, "mqa": {"n_kv_heads": 1},
              "additive": {"attn_score": "additive"}}[key]
    return base.replace(**change)


def build_variant(key: str, vocab_size: int, *, seed: int = 0, window: int | None = 3, n_kv_heads: int = 2
                  ) -> Transformer:
    """The variant's model: the base model's seeded weights copied in (see the module doc), its own
    extra parameters from the same seed. Eval mode, no gradients."""
    cfg = variant_config(key, vocab_size, window=window, n_kv_heads=n_kv_heads)
    base = Transformer(variant_config("sinusoidal", vocab_size), seed=seed)
    model = Transformer(cfg, seed=seed)
    own = model.state_dict()
    state = {}
    for name, t in base.state_dict().items():
        if name not in own:
            continue
        if own[name].shape != t.shape and name.endswith(("k_proj.weight", "k_proj.bias", "v_proj.weight", "v_proj.bias")):
            t = pool_kv_heads(t, cfg.n_heads, cfg.kv_heads)
        state[name] = t
    model.load_state_dict(state, strict=False)
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval()


def pool_kv_heads(w: torch.Tensor, n_heads: int, n_kv_heads: int) -> torch.Tensor:
    """K or V projection rows (H·d, ...) -> (H_kv·d, ...): each K/V head is the mean of the heads of
    its group (heads g·H/H_kv … (g+1)·H/H_kv − 1, the grouping the attention uses)."""
    group = n_heads // n_kv_heads
    d = w.shape[0] // n_heads
    return w.reshape(n_kv_heads, group, d, *w.shape[1:]).mean(1).reshape(n_kv_heads * d, *w.shape[1:])


@dataclass(frozen=True)
class VariantHeads:
    """Layer 0 of one sentence through one variant's model (numpy): the heads the page draws and
    what the variant records. T tokens, H query heads."""
    weights: np.ndarray  # (H, T, T) softmax rows of each query head
    allowed: np.ndarray  # (T, T) bool, True = may attend (causal mask, window band)
    kv_heads: int  # K/V heads of the model (H: multi-head, 1: multi-query, in between: grouped)
    kv_head: np.ndarray | None  # (H,) int: the K/V head each query head reads; None without grouping
    bias: np.ndarray | None  # (H, T, T) ALiBi's −slope_h·|i − j| added to the scores; None for other variants
    slopes: np.ndarray | None  # (H,) ALiBi's slope of each head; None for other variants
    energies: np.ndarray | None  # (H, T, T) additive score v·tanh(W_q q_i + W_k k_j); None for dot products
    finite: bool  # every weight is a finite number


def variant_heads(model: Transformer, ids: Sequence[int], causal: bool) -> VariantHeads:
    """Layer 0 of one sentence through `model` (a build_variant model)."""
    tr = model.trace(torch.tensor([list(ids)], dtype=torch.long), causal=causal).numpy()
    a = tr.layers[0].attn
    T = len(ids)
    allowed = np.broadcast_to(np.asarray(a.allowed, dtype=bool), (1, 1, T, T))[0, 0].copy()
    return VariantHeads(weights=np.asarray(a.weights[0]), allowed=allowed, kv_heads=model.cfg.kv_heads,
                        kv_head=None if a.kv_head is None else np.asarray(a.kv_head),
                        bias=None if a.bias is None else np.asarray(a.bias),
                        slopes=None if a.alibi_slopes is None else np.asarray(a.alibi_slopes),
                        energies=None if a.energies is None else np.asarray(a.energies[0]),
                        finite=bool(np.isfinite(a.weights).all()))


@dataclass(frozen=True)
class ShuffleGap:
    """The permutation test of one variant (classroom.positional.order_test, bidirectional)."""
    key: str  # the variant (a VARIANTS key)
    weight_gap: float  # max |W_shuffled − P W Pᵀ| over every layer and head (≈ 0: the weights only moved with the words)
    output_gap: float  # max |out_shuffled − P out| over the final hidden states


@dataclass(frozen=True)
class ShuffleTest:
    """One shuffle of the sentence, measured on several variants."""
    perm: np.ndarray  # (T,) int: the shuffled sentence is ids[perm]
    gaps: tuple[ShuffleGap, ...]  # one per variant, in the order the models were given

    def gap(self, key: str) -> ShuffleGap:
        """The gaps of variant `key` (KeyError if it was not measured)."""
        for g in self.gaps:
            if g.key == key:
                return g
        raise KeyError(key)


def shuffle_gaps(models: dict[str, Transformer], ids: Sequence[int], seed: int) -> ShuffleTest:
    """The permutation test (classroom.positional.order_test) on each model, bidirectional: shuffle
    the words with `seed`, and measure max |W_shuffled − P W Pᵀ| (0 to float rounding = the weights
    only moved with the words). Needs at least 2 tokens."""
    if len(ids) < 2:
        raise ValueError("shuffling needs at least 2 tokens; type a longer sentence")
    perm = shuffle_order(len(ids), seed)
    tests = {k: order_test(m, ids, perm, causal=False) for k, m in models.items()}
    return ShuffleTest(perm=perm, gaps=tuple(ShuffleGap(k, t.weight_gap, t.output_gap) for k, t in tests.items()))

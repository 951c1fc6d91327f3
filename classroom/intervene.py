"""What switching heads off does (issue 19): the prediction before and after, the change in later
layers' attention and in the hidden states, and every head ranked by how much the prediction
needs it. Pure Python over model.intervene."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from model.intervene import Intervention


@dataclass(frozen=True)
class Ablation:
    """One sentence traced clean and with some heads switched off (L layers, H heads, T tokens, V words)."""
    w_clean: np.ndarray  # (L, H, T, T) attention weights as trained
    w_ablated: np.ndarray  # (L, H, T, T) attention weights with the heads switched off
    hidden_change: np.ndarray  # (L, T) ‖h_ablated − h_clean‖ of each layer's output, per token
    p_clean: np.ndarray | None  # (V,) float64 next-token distribution at the last position; None without an output layer
    p_ablated: np.ndarray | None  # (V,) float64 the same with the heads switched off


def layer_weights(trace) -> np.ndarray:
    """(L, H, T, T) every layer's attention weights of sentence 0 of a trace (torch or numpy)."""
    return np.stack([np.asarray(lt.attn.weights[0]) for lt in trace.layers])


@torch.no_grad()
def compare(model, ids: list[int], heads: list[tuple[int, int]], *, causal: bool, mode: str = "zero") -> Ablation:
    """Clean and ablated traces of one sentence: weights both ways, the hidden-state change per
    layer output and token, and (models with an output layer) the next-token distributions at the
    last position."""
    x = torch.tensor([list(ids)])
    # one full trace alive at a time (SmolLM2 at 1,024 tokens: ~4.5 GB each): what is kept of the
    # clean one is taken out before the ablated one runs
    clean = model.trace(x, causal=causal)
    w_clean, resid = layer_weights(clean), [c.resid_out[0] for c in clean.layers]
    p_clean = None if clean.probs is None else clean.probs[0, -1].double().numpy()
    del clean
    abl = model.trace(x, causal=causal, ablate_heads=heads, ablation=mode)
    dh = np.stack([(a.resid_out[0] - c).norm(dim=-1).numpy() for a, c in zip(abl.layers, resid)])  # (L, T)
    return Ablation(w_clean=w_clean, w_ablated=layer_weights(abl), hidden_change=dh, p_clean=p_clean,
                    p_ablated=None if abl.probs is None else abl.probs[0, -1].double().numpy())


@dataclass(frozen=True)
class PredictionChange:
    """Two next-token distributions (V,) compared at the tokens either puts in its top k."""
    ids: list[int]  # (n,) the first's top k, then the second's not already listed (k ≤ n ≤ 2k)
    before: np.ndarray  # (n,) their probability in the first distribution
    after: np.ndarray  # (n,) their probability in the second
    top_before: int  # the first's most likely token
    top_after: int  # the second's most likely token
    p_top_before: float  # its probability in the first
    p_top_after: float  # the second's top token's probability in the second


def prediction_change(p_before: np.ndarray, p_after: np.ndarray, k: int = 5) -> PredictionChange:
    """The top k tokens of each distribution (V,) side by side, and the two top predictions."""
    ids = [int(i) for i in dict.fromkeys(list(np.argsort(-p_before)[:k]) + list(np.argsort(-p_after)[:k]))]
    top_b, top_a = int(np.argmax(p_before)), int(np.argmax(p_after))
    return PredictionChange(ids=ids, before=p_before[ids], after=p_after[ids], top_before=top_b, top_after=top_a,
                            p_top_before=p_before[top_b], p_top_after=p_after[top_a])


@dataclass(frozen=True)
class RankedHead:
    layer: int
    head: int
    score: float  # its importance (HeadImportance.score[layer, head])


@dataclass(frozen=True)
class HeadImportance:
    """Every head switched off alone, and what the prediction loses (L layers, H heads)."""
    score: np.ndarray  # (L, H) drop in log p(target) at the last position; encoders: mean ‖Δ last-layer output‖
    target: int | None  # the token whose log p is measured (the clean top prediction); None for encoders
    clean_logp: float | None  # log p(target) without any intervention; None for encoders

    def top(self, n: int = 10) -> list[RankedHead]:
        """The n most important heads, most important first."""
        H = self.score.shape[1]
        order = np.argsort(-self.score, axis=None)[:n]
        return [RankedHead(int(i // H), int(i % H), self.score[int(i // H), int(i % H)]) for i in order]


@torch.no_grad()
def head_importance(model, ids: list[int], *, causal: bool, target: int | None = None, mode: str = "zero",
                    batch: int = 32, progress: Callable[[float], None] | None = None) -> HeadImportance:
    """Ablate each head alone and measure what the prediction loses. Models with an output layer:
    the drop in log p(target) at the last position (target: the clean top prediction by default).
    Encoders (no output layer): the change ‖h_ablated − h_clean‖ of the last layer's output,
    averaged over tokens. Batched: `batch` copies of the sentence per pass, each with its own head
    switched off."""
    L, H = model.cfg.n_layers, model.cfg.n_heads
    x = torch.tensor([list(ids)])
    clean = model(x, causal=causal)  # (1, T, V) or (1, T, D)
    has_head = model.cfg.output_head
    if has_head:
        lp0 = torch.log_softmax(clean[0, -1].double(), -1)
        target = int(lp0.argmax()) if target is None else int(target)
    n = L * H
    score = np.zeros(n)
    for start in range(0, n, batch):
        idx = list(range(start, min(n, start + batch)))
        keep = torch.ones(len(idx), L, H)
        for r, i in enumerate(idx):
            keep[r, i // H, i % H] = 0.0
        out = model.run(x.expand(len(idx), -1), causal, None, record=False,
                        intervention=Intervention(keep=keep, mode=mode))
        if has_head:
            lp = torch.log_softmax(out[:, -1].double(), -1)[:, target]  # (b,)
            score[idx] = (lp0[target] - lp).numpy()
        else:
            score[idx] = (out - clean).norm(dim=-1).mean(-1).numpy()
        if progress:
            progress(min(1.0, (start + len(idx)) / n))
    return HeadImportance(score=score.reshape(L, H), target=target if has_head else None,
                          clean_logp=float(lp0[target]) if has_head else None)


@dataclass(frozen=True)
class RowEdit:
    """One attention row replaced by weights the user typed (T tokens, V words)."""
    error: str | None  # why the row was refused (model.intervene's message); None when it was applied
    row: np.ndarray | None  # (T,) the row as applied (renormalised)
    p_clean: np.ndarray | None  # (V,) float64 next-token distribution as trained; None without an output layer
    p_edited: np.ndarray | None  # (V,) float64 the same with the row edited
    hidden_change: float | None  # max over tokens of ‖final hidden state edited − as trained‖


@torch.no_grad()
def edit_row(model, ids: list[int], causal: bool, row: tuple) -> RowEdit:
    """One attention row replaced (model.intervene edit_rows; row = (layer, head, query, weights)):
    the next-token distributions as trained and edited, or the message saying why it was refused."""
    x = torch.tensor([list(ids)])
    clean = model.trace(x, causal=causal)  # one full trace alive at a time (compare)
    final, p_clean = clean.final, None if clean.probs is None else clean.probs[0, -1].double().numpy()
    del clean
    try:
        ed = model.trace(x, causal=causal, edit_rows=[row])
    except ValueError as e:
        return RowEdit(error=str(e), row=None, p_clean=None, p_edited=None, hidden_change=None)
    l, h, q, _ = row
    return RowEdit(error=None, row=ed.layers[l].attn.weights[0, h, q].numpy(), p_clean=p_clean,
                   p_edited=None if p_clean is None else ed.probs[0, -1].double().numpy(),
                   hidden_change=float((ed.final - final).norm(dim=-1).max()))


@torch.no_grad()
def flow_of(model, ids: list[int], causal: bool) -> np.ndarray:
    """attention_flow over the sentence's attention weights (T, T)."""
    return attention_flow(layer_weights(model.trace(torch.tensor([list(ids)]), causal=causal)))


def rollout(weights, residual: float = 0.5) -> np.ndarray:
    """Attention rollout (Abnar & Zuidema, 2020). weights (L, H, T, T), or a sequence of L arrays
    (H, T, T) (a trace's layers as they are: a long input's layers are never stacked into one
    array, 2.2 GB in float64 for SmolLM2 at 1,024 tokens): per layer, the heads' mean A_l, mixed
    with the residual path: Â_l = residual·I + (1 − residual)·A_l, each row renormalised; then
    R = Â_{L−1} · … · Â_1 · Â_0. Row i of R: how much each input token flows into position i's
    last-layer vector."""
    layers = list(weights) if isinstance(weights, (list, tuple)) else None
    if layers is None:
        w = np.asarray(weights, dtype=np.float64)
        if w.ndim != 4 or w.shape[-1] != w.shape[-2]:
            raise ValueError(f"weights must be (L, H, T, T); got {w.shape}")
        layers = list(w)
    elif not layers or any(np.ndim(x) != 3 or np.shape(x)[-1] != np.shape(x)[-2] or np.shape(x) != np.shape(layers[0])
                           for x in layers):
        raise ValueError("weights must be (L, H, T, T) or L arrays of one shape (H, T, T)")
    if not 0 <= residual <= 1:
        raise ValueError("residual must be in [0, 1]")
    T = np.shape(layers[0])[-1]
    R = np.eye(T)
    for wl in layers:
        A = residual * np.eye(T) + (1 - residual) * np.asarray(wl, dtype=np.float64).mean(0)  # (T, T)
        A = A / A.sum(-1, keepdims=True)
        R = A @ R
    return R


def attention_flow(weights: np.ndarray, residual: float = 0.5, max_tokens: int = 24) -> np.ndarray:
    """Attention flow (Abnar & Zuidema, 2020): the layers as a graph, token i of layer l + 1 linked
    to token j of layer l with capacity Â_l[i, j] (the head-averaged attention mixed with the
    residual path, as in rollout); F[i, j] = the maximum flow from output token i down to input
    token j. Unlike rollout's products, a flow is limited by the narrowest link of every path.
    Exact max-flow per pair (networkx); ValueError above max_tokens tokens (T² flows)."""
    import networkx as nx  # here, not at the top: ~0.3 s of imports paid only by the one page that asks for a flow
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 4 or w.shape[-1] != w.shape[-2]:
        raise ValueError(f"weights must be (L, H, T, T); got {w.shape}")
    L, _, T, _ = w.shape
    if T > max_tokens:
        raise ValueError(f"attention flow solves {T}² max-flow problems: at most {max_tokens} tokens here "
                         "(rollout has no limit)")
    g = nx.DiGraph()
    for l in range(L):
        A = residual * np.eye(T) + (1 - residual) * w[l].mean(0)
        A = A / A.sum(-1, keepdims=True)
        for i in range(T):
            for j in range(T):
                if A[i, j] > 0:
                    g.add_edge((l + 1, i), (l, j), capacity=float(A[i, j]))
    F = np.zeros((T, T))
    for i in range(T):
        for j in range(T):
            if g.has_node((L, i)) and g.has_node((0, j)):
                F[i, j] = nx.maximum_flow_value(g, (L, i), (0, j))
    return F

"""What switching heads off does (issue 19): the prediction before and after, the change in later
layers' attention and in the hidden states, and every head ranked by how much the prediction
needs it. Pure Python over model.intervene."""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from model.intervene import Intervention


@torch.no_grad()
def compare(model, ids: list[int], heads: list[tuple[int, int]], *, causal: bool, mode: str = "zero") -> dict:
    """Clean and ablated traces of one sentence: weights (L, H, T, T) both ways, the hidden-state
    change ‖h_ablated − h_clean‖ per layer output and token (L, T), and (models with an output
    layer) the next-token distributions at the last position."""
    x = torch.tensor([list(ids)])
    clean = model.trace(x, causal=causal)
    abl = model.trace(x, causal=causal, ablate_heads=heads, ablation=mode)
    w0 = np.stack([lt.attn.weights[0].numpy() for lt in clean.layers])
    w1 = np.stack([lt.attn.weights[0].numpy() for lt in abl.layers])
    dh = np.stack([(a.resid_out[0] - c.resid_out[0]).norm(dim=-1).numpy()
                   for a, c in zip(abl.layers, clean.layers)])  # (L, T)
    out = {"w_clean": w0, "w_ablated": w1, "hidden_change": dh, "p_clean": None, "p_ablated": None}
    if clean.probs is not None:
        out["p_clean"] = clean.probs[0, -1].double().numpy()
        out["p_ablated"] = abl.probs[0, -1].double().numpy()
    return out


@torch.no_grad()
def head_importance(model, ids: list[int], *, causal: bool, target: int | None = None, mode: str = "zero",
                    batch: int = 32, progress: Callable[[float], None] | None = None) -> dict:
    """Ablate each head alone and measure what the prediction loses. Models with an output layer:
    the drop in log p(target) at the last position (target: the clean top prediction by default).
    Encoders (no output layer): the change ‖h_ablated − h_clean‖ of the last layer's output,
    averaged over tokens. Batched: `batch` copies of the sentence per pass, each with its own head
    switched off. Returns {"score": (L, H), "target": id or None, "clean_logp": float or None}."""
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
    return {"score": score.reshape(L, H), "target": target if has_head else None,
            "clean_logp": float(lp0[target]) if has_head else None}


def rollout(weights: np.ndarray, residual: float = 0.5) -> np.ndarray:
    """Attention rollout (Abnar & Zuidema, 2020). weights (L, H, T, T): per layer, the heads'
    mean A_l, mixed with the residual path: Â_l = residual·I + (1 − residual)·A_l, each row
    renormalised; then R = Â_{L−1} · … · Â_1 · Â_0. Row i of R: how much each input token flows
    into position i's last-layer vector."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 4 or w.shape[-1] != w.shape[-2]:
        raise ValueError(f"weights must be (L, H, T, T); got {w.shape}")
    if not 0 <= residual <= 1:
        raise ValueError("residual must be in [0, 1]")
    T = w.shape[-1]
    R = np.eye(T)
    for l in range(w.shape[0]):
        A = residual * np.eye(T) + (1 - residual) * w[l].mean(0)  # (T, T)
        A = A / A.sum(-1, keepdims=True)
        R = A @ R
    return R


def attention_flow(weights: np.ndarray, residual: float = 0.5, max_tokens: int = 24) -> np.ndarray:
    """Attention flow (Abnar & Zuidema, 2020): the layers as a graph, token i of layer l + 1 linked
    to token j of layer l with capacity Â_l[i, j] (the head-averaged attention mixed with the
    residual path, as in rollout); F[i, j] = the maximum flow from output token i down to input
    token j. Unlike rollout's products, a flow is limited by the narrowest link of every path.
    Exact max-flow per pair (networkx); ValueError above max_tokens tokens (T² flows)."""
    import networkx as nx
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

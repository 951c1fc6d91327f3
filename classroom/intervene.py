"""What switching heads off does (issue 19): the prediction before and after, the change in later
layers' attention and in the hidden states, and every head ranked by how much the prediction
needs it. Pure Python over model.intervene."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from model.attention import causal_allowed
from model.hooks import PassContext
from model.intervene import Intervention
from model.layers import layer_rope_tables
from model.trace import ForwardTrace, output_logits


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
def compare(model, ids: list[int], heads: list[tuple[int, int]], *, causal: bool, mode: str = "zero",
            clean: ForwardTrace | None = None) -> Ablation:
    """Clean and ablated traces of one sentence: weights both ways, the hidden-state change per
    layer output and token, and (models with an output layer) the next-token distributions at the
    last position. clean: the sentence's trace (numpy or torch, B = 1, same mask) when the caller
    has it (the page's run): the clean side is read from it instead of traced again. The ablated
    pass starts at the first layer with a head switched off, from that layer's clean input: the
    layers before it compute exactly what the clean pass did (same inputs, no hook), so their
    weights are the clean ones and their change is 0."""
    if clean is None:
        clean = model.trace(torch.tensor([list(ids)]), causal=causal)
    L = model.cfg.n_layers
    w_clean = layer_weights(clean)
    w_abl, dh = w_clean.copy(), np.zeros(w_clean.shape[::3])  # (L, H, T, T), (L, T)
    has_head = model.cfg.output_head
    p_clean = np.asarray(clean.probs[0, -1], dtype=np.float64) if has_head else None
    p_abl = p_clean
    first = min((l for l, _ in heads), default=L)
    if first < L:
        run = _Pass(model, len(ids), causal)
        h = torch.as_tensor(np.array(clean.layers[first].input))  # (1, T, D) the clean input of that block
        out, blocks = run.blocks(h, first, Intervention(ablate=tuple(heads), mode=mode), record=True)
        for l, bt in zip(range(first, L), blocks):
            w_abl[l] = bt.attn.weights[0].numpy()
            dh[l] = (bt.resid_out[0] - torch.as_tensor(np.array(clean.layers[l].resid_out[0]))).norm(dim=-1).numpy()
        if has_head:  # the trace's own arithmetic: softmax(final @ W_outᵀ) over every row, float32
            p_abl = torch.softmax(output_logits(run.final_norm(out), model.output_matrix), -1)[0, -1].double().numpy()
    return Ablation(w_clean=w_clean, w_ablated=w_abl, hidden_change=dh, p_clean=p_clean, p_ablated=p_abl)


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


class _Pass:
    """A sentence of T tokens run block by block through the model's own modules, as
    Transformer.run's loop runs them (each Block with this pass's hooks, then the final norm), so
    that a pass can start at any layer from a recorded input: an intervention in layer l leaves the
    layers before it as they were. The arithmetic is run()'s (tests: equal to model.trace with the
    same heads switched off)."""

    def __init__(self, model, T: int, causal: bool):
        self.model, self.cfg = model, model.cfg
        self.allowed = causal_allowed(T) if causal else None  # (T, T) or None, as run() builds it
        self.rope = (layer_rope_tables(self.cfg, torch.arange(T))
                     if self.cfg.pos_encoding == "rope" else None)  # per layer: (T, d_k) x 2

    def ctx(self, intervention: Intervention | None, layer: int) -> PassContext | None:
        hooks = () if intervention is None else intervention.layer_hooks(layer, self.cfg.n_heads)
        return (PassContext(None if self.rope is None else self.rope[layer], hooks)
                if self.rope is not None or hooks else None)

    def blocks(self, h: torch.Tensor, start: int, intervention: Intervention | None = None,
               record: bool = False, stop: int | None = None) -> tuple[torch.Tensor, list]:
        """Blocks start … stop−1 (default: to the last) on h (B, T, D), the input of block `start`:
        the last one's output (B, T, D) and, record=True, each block's BlockTrace."""
        traces = []
        for i in range(start, self.cfg.n_layers if stop is None else stop):
            h, bt = self.model.blocks[i](h, self.allowed, record, ctx=self.ctx(intervention, i))
            traces.append(bt)
        return h, traces

    def final_norm(self, h: torch.Tensor) -> torch.Tensor:
        return h if self.model.ln_f is None else self.model.ln_f(h, False)[0]


class _Sweep(_Pass):
    """The head-importance sweep's passes: the clean input of every block, recorded once, and passes
    of several copies that start at a given block."""

    def __init__(self, model, ids: list[int], causal: bool):
        x = torch.tensor([list(ids)])
        model.check_ids(x)
        super().__init__(model, x.shape[1], causal)
        types = torch.zeros_like(x) if model.type_emb is not None else None
        h, _ = model.embed(x, types, record=False)  # (1, T, D)
        self.inputs = []  # (1, T, D) the clean input of every block
        for i in range(self.cfg.n_layers):
            self.inputs.append(h)
            h, _ = self.blocks(h, i, stop=i + 1)
        self.clean = self.score_output(h)

    def score_output(self, h: torch.Tensor) -> torch.Tensor:
        """After the last block: (B, V) logits at the last position, or (B, T, D) the last hidden
        states of a model without an output layer."""
        h = self.final_norm(h)
        if self.cfg.output_head:
            return output_logits(h[:, -1], self.model.output_matrix)  # (B, V): only the last row is scored
        return h

    def run_from(self, layer: int, rows: int, intervention: Intervention) -> torch.Tensor:
        """`rows` copies of the sentence from block `layer` on (each with its own heads switched off
        by `intervention.keep`, (rows, L, H)), starting from that block's clean input."""
        return self.score_output(self.blocks(self.inputs[layer].expand(rows, -1, -1), layer, intervention)[0])


@torch.no_grad()
def head_importance(model, ids: list[int], *, causal: bool, target: int | None = None, mode: str = "zero",
                    batch: int = 32, progress: Callable[[float], None] | None = None) -> HeadImportance:
    """Ablate each head alone and measure what the prediction loses. Models with an output layer:
    the drop in log p(target) at the last position (target: the clean top prediction by default).
    Encoders (no output layer): the change ‖h_ablated − h_clean‖ of the last layer's output,
    averaged over tokens. Batched: about `batch` copies of the sentence per pass, each with its own
    head switched off; a pass starts at the first layer whose heads it switches off, from the clean
    input of that layer (the layers before an ablated head compute what the clean pass did), and
    only the last position's logits are computed. SmolLM2, 10 tokens: about half the layer work
    and 1/10 of the output layer's, against a pass of all 30 layers per head
    (docs/benchmarks.md)."""
    L, H = model.cfg.n_layers, model.cfg.n_heads
    sweep = _Sweep(model, ids, causal)
    has_head = model.cfg.output_head
    if has_head:
        lp0 = torch.log_softmax(sweep.clean[0].double(), -1)
        target = int(lp0.argmax()) if target is None else int(target)
    score = np.zeros(L * H)
    per_pass = max(1, batch // H)  # whole layers per pass (all their heads), about `batch` rows
    done = 0
    for first in range(0, L, per_pass):
        layers = range(first, min(L, first + per_pass))
        idx = [l * H + h for l in layers for h in range(H)]
        keep = torch.ones(len(idx), L, H)
        for r, i in enumerate(idx):
            keep[r, i // H, i % H] = 0.0
        out = sweep.run_from(first, len(idx), Intervention(keep=keep, mode=mode))
        if has_head:
            lp = torch.log_softmax(out.double(), -1)[:, target]  # (b,)
            score[idx] = (lp0[target] - lp).numpy()
        else:
            score[idx] = (out - sweep.clean).norm(dim=-1).mean(-1).numpy()
        done += len(idx)
        if progress:
            progress(min(1.0, done / (L * H)))
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

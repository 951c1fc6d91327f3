"""Why did the model say that: each part's share of one logit (direct logit attribution),
activation patching (residual stream and heads), and attention weighted by what it moves.
Pure torch/numpy over the engine (never streamlit, plotly, ui/ or viz/); results are frozen
dataclasses whose fields say their shapes.

Public functions (checked from outside the tests, called exactly like this):

    from classroom.attribution import (logit_attribution, patch_residual, patch_heads,
                                       value_weighted_attention)
    logit_attribution(model, trace, target_id, position=-1)            -> LogitAttribution
    patch_residual(model, clean_ids, corrupt_ids, target_id, foil_id)  -> PatchResult, effect (layers, T)
    patch_heads(model, clean_ids, corrupt_ids, target_id, foil_id)     -> PatchResult, effect (layers, heads)
    value_weighted_attention(model, trace, layer)                      -> (heads, T, T)

Definitions (the page and the tests use these words):
  share        a part's vector in the residual stream at `position`, read through the final norm
               with its scale frozen at the final residual (LayerNorm: the part centred first;
               Gemma's RMSNorm: its (1 + w)) and dotted with the output row of the target. Norms
               between a sub-layer and the stream (Gemma 2's post-norms) are read the same way,
               their scale frozen at their own input. The final residual is the sum of the parts,
               so the shares add up to the logit (before any soft-cap).
  parts        `embed`: what block 0 sees (token + position embedding); `heads[l, h]`: query head h's
               output Z_h through its slice of W_O (the value bias flows through the weights, so it
               is inside); `mlps[l]`: the MLP's output without its bias; `other`: the attention and
               MLP output biases, the norms' shifts (beta) and the output bias.
  metric       logit(target) - logit(foil) at the last position, before any soft-cap.
  effect       (m_patched - m_corrupt) / (m_clean - m_corrupt): 1 = the clean run's metric,
               0 = the corrupted run's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from model.generate import CachedKV
from model.hooks import AttentionCall, AttentionHook, PassContext
from model.layers import layer_rope_tables
from model.trace import LayerNormTrace


@dataclass(frozen=True)
class LogitAttribution:
    """One logit split into the parts that wrote it (L layers, H query heads). The fields add up:
    embed + heads.sum() + mlps.sum() + other == logit (float rounding)."""
    embed: float  # the token (and position) embedding's share: what block 0 sees
    heads: np.ndarray  # (L, H) float64 each query head's output through its slice of W_O
    mlps: np.ndarray  # (L,) float64 each MLP's output, without its output bias
    other: float  # attention and MLP output biases, the norms' betas, the output bias
    logit: float  # the target's logit at `position` (before the soft-cap, for models that cap)


@dataclass(frozen=True)
class PatchResult:
    """Activation patching of a clean and a corrupted prompt (L layers; T tokens or H heads)."""
    effect: np.ndarray  # (L, T) patch_residual or (L, H) patch_heads: 0 = corrupted metric, 1 = clean
    clean_metric: float  # logit(target) - logit(foil) at the last position of the clean prompt
    corrupt_metric: float  # the same of the corrupted prompt
    target_id: int
    foil_id: int


# ----------------------------------------------------------------------------------- model checks

NO_OUTPUT = ("this model has no output layer: an encoder such as MiniLM turns text into vectors and "
             "scores no next token, so there is no logit to split or to patch. Pick a model that "
             "predicts the next token (SmolLM2, GPT-2, causal-lm)")


def check_output_layer(model) -> None:
    """ValueError unless the model is a Transformer with an output layer (the patching functions'
    condition)."""
    cfg = getattr(model, "cfg", None)
    if cfg is None or not hasattr(model, "blocks"):
        raise ValueError("attribution needs a decoder-style Transformer (model.Transformer), not "
                         f"a {type(model).__name__}")
    if not cfg.output_head:
        raise ValueError(NO_OUTPUT)


def why_not_attributable(model) -> str | None:
    """Why logit_attribution cannot split this model's logits into a sum of parts (None when it
    can): no output layer; a head that is not (a final norm, then) one linear map (a BERT
    masked-LM head: dense, GELU, norm, decoder); a residual stream that is normalised after every
    block (post-norm, the 2017 paper) or has no skip connections."""
    check = getattr(model, "cfg", None)
    if check is None or not hasattr(model, "blocks"):
        return f"attribution needs a decoder-style Transformer (model.Transformer), not a {type(model).__name__}"
    cfg = model.cfg
    if not cfg.output_head:
        return NO_OUTPUT
    if cfg.has_mlm_head:
        return ("this model's head is not a final norm followed by one linear map: its masked-LM head is a "
                "dense layer, a GELU, a norm and then the decoder, so a logit is not a sum of parts of the "
                "residual stream")
    if not cfg.residual:
        return "this model has no skip connections: its last hidden state is not a sum of the blocks' outputs"
    if cfg.use_norm and cfg.norm != "pre":
        return ("this model normalises the residual stream after every block (post-norm, as the 2017 paper): "
                "the last hidden state is not a sum of the blocks' outputs, so a logit does not split into "
                "their shares")
    return None


def _t(x) -> Tensor:
    """A trace field (torch tensor or numpy array) as a float64 torch tensor."""
    if isinstance(x, Tensor):
        return x.detach().to(torch.float64)
    return torch.from_numpy(np.array(x, dtype=np.float64, copy=True))


def _readout(norm, r: Tensor, pos: int) -> tuple[Tensor, float]:
    """A norm N (its trace: LayerNormTrace or NormTrace) whose output is read by the direction r
    (D,), linearised with its scale frozen at its recorded input at `pos`:
    N(a) . r = sum over parts c of (c . r_in) + const, r_in = gamma * rstd * r (centred for
    LayerNorm: mean(c) is taken out of each part), const = beta . r (LayerNorm's shift)."""
    if norm is None:  # no norm (cfg.use_norm False): the identity
        return r, 0.0
    if isinstance(norm, LayerNormTrace):
        rstd = norm.rstd if norm.rstd is not None else 1.0 / np.sqrt(np.asarray(norm.var) + norm.eps)
        s = float(_t(rstd)[0, pos, 0])
    else:  # RMSNorm: x / sqrt(mean(x^2) + eps)
        s = float(1.0 / torch.sqrt(_t(norm.mean_sq)[0, pos, 0] + float(norm.eps)))
    gamma = torch.ones_like(r) if norm.gamma is None else _t(norm.gamma)  # Gemma: the trace holds (1 + w)
    r_in = gamma * s * r  # (D,)
    const = 0.0
    if isinstance(norm, LayerNormTrace):
        r_in = r_in - r_in.mean()  # (c - mean(c)) . u == c . (u - mean(u))
        if norm.beta is not None:
            const = float(_t(norm.beta) @ r)
    return r_in, const


@torch.no_grad()
def logit_attribution(model, trace, target_id: int, position: int = -1) -> LogitAttribution:
    """Split the logit of `target_id` at `position` into the shares of the parts that wrote the
    residual stream (module docstring: share, parts). trace: model.trace(ids) of one sentence (or
    its numpy twin). ValueError for models whose logits are not a sum of such parts
    (why_not_attributable) and for a target or position out of range."""
    why = why_not_attributable(model)
    if why:
        raise ValueError(why)
    cfg = model.cfg
    if not getattr(trace, "complete", True) or trace.final is None:
        raise ValueError("the trace must hold every layer (a whole pass: no stop_after, no record_from)")
    if not 0 <= int(target_id) < cfg.vocab_size:
        raise ValueError(f"target_id must be a token id in 0 .. {cfg.vocab_size - 1}; got {target_id}")
    T = int(np.shape(trace.final)[1])
    if not -T <= int(position) < T:
        raise ValueError(f"position {position} is outside the sentence's {T} tokens")
    pos = int(position) % T
    w = model.output_matrix[int(target_id)].detach().to(torch.float64)  # (D,) the target's output row
    r, other = _readout(trace.final_ln, w, pos)  # the direction each part of the final residual is read by
    L, H = cfg.n_layers, cfg.n_heads
    heads = np.zeros((L, H))
    mlps = np.zeros(L)
    for l, (block, lt) in enumerate(zip(model.blocks, trace.layers)):
        r_a, c_a = _readout(lt.ln1_post, r, pos) if lt.ln1_post is not None else (r, 0.0)
        r_f, c_f = _readout(lt.ln2_post, r, pos) if lt.ln2_post is not None else (r, 0.0)
        other += c_a + c_f
        o = block.attn.o_proj
        wo = o.weight.detach().to(torch.float64)  # (D, H*d_v)
        z = _t(lt.attn.heads[0, :, pos])  # (H, d_v) what enters W_O (value bias included)
        per_head = (r_a @ wo).reshape(H, -1)  # (H, d_v): W_O^h's columns read by r_a
        heads[l] = (per_head * z).sum(-1).numpy()
        if o.bias is not None:
            other += float(o.bias.detach().to(torch.float64) @ r_a)
        f = _t(lt.ffn.output[0, pos])  # (D,)
        fc2 = block.ffn.fc2
        if fc2.bias is not None:
            b2 = fc2.bias.detach().to(torch.float64)
            f = f - b2
            other += float(b2 @ r_f)
        mlps[l] = float(f @ r_f)
    embed = float(_t(trace.embeddings.sum[0, pos]) @ r)
    logit = float(_t(trace.final[0, pos]) @ w)
    return LogitAttribution(embed=embed, heads=heads, mlps=mlps, other=float(other), logit=logit)


@torch.no_grad()
def value_weighted_attention(model, trace, layer: int) -> np.ndarray:
    """(H, T, T) float64: alpha[h, i, j] * ||v_j^h W_O^h||_2, the size of what head h moves from
    token j into token i (v with its bias; not renormalised). Grouped-query attention: query head
    h reads the values of K/V head kv_head[h]."""
    cfg = model.cfg
    if not 0 <= int(layer) < cfg.n_layers:
        raise ValueError(f"layer {layer}: this model has layers 0 .. {cfg.n_layers - 1}")
    at = trace.layers[int(layer)].attn
    wts = _t(at.weights[0])  # (H, T, T)
    v = _t(at.v[0])  # (H_kv, T, d_v)
    H = wts.shape[0]
    if v.shape[0] != H:
        kv = at.kv_head if at.kv_head is not None else torch.arange(H) // (H // v.shape[0])
        v = v[torch.as_tensor(np.asarray(kv), dtype=torch.long)]  # (H, T, d_v)
    wo = model.blocks[int(layer)].attn.o_proj.weight.detach().to(torch.float64)  # (D, H*d_v)
    wo_h = wo.reshape(wo.shape[0], H, -1).permute(1, 2, 0)  # (H, d_v, D)
    size = torch.linalg.vector_norm(v @ wo_h, dim=-1)  # (H, T) ||v_j^h W_O^h||
    return (wts * size[:, None, :]).numpy()


# ------------------------------------------------------------------------------------- patching

def _ids(ids, what: str) -> Tensor:
    """ids as a (1, T) long tensor: a list of ints, or a LongTensor (T,) or (1, T)."""
    if isinstance(ids, np.ndarray):
        ids = torch.from_numpy(ids)
    if isinstance(ids, Tensor):
        if ids.dtype not in (torch.long, torch.int32, torch.int64) or ids.dim() not in (1, 2) or (
                ids.dim() == 2 and ids.shape[0] != 1):
            raise ValueError(f"{what} must be a list of token ids or a LongTensor of shape (T,) or (1, T); "
                             f"got {tuple(ids.shape)} {ids.dtype}")
        return ids.reshape(1, -1).to(torch.long)
    try:
        out = torch.tensor([[int(i) for i in ids]], dtype=torch.long)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a list of token ids or a LongTensor of shape (T,) or (1, T)") from None
    if out.shape[1] == 0:
        raise ValueError(f"{what} is empty: give at least one token")
    return out


class _Blocks:
    """Blocks run from a recorded residual stream, as Transformer.run's loop runs them (each
    Block with this pass's rotary tables and hooks, then the final norm), for batches of copies
    of one sentence that start at any layer. With a causal mask a batch may also start at a row
    t0: rows before it are the recorded run's (`past`, a trace), whose keys and values are put in
    front of the new rows' (as a KV-cached step of model.generate does)."""

    def __init__(self, model, T: int, causal: bool, past=None):
        self.cfg, self.model, self.T, self.causal, self.past = model.cfg, model, T, causal, past
        self._tables: dict[int, tuple] = {}

    def tables(self, t0: int):
        """(allowed, rope) of rows t0 .. T-1 over keys 0 .. T-1, as Transformer.run builds them."""
        if t0 not in self._tables:
            cfg, T = self.cfg, self.T
            allowed = torch.ones(T - t0, T, dtype=torch.bool).tril(diagonal=t0) if self.causal else None
            # per layer (Gemma 3's local and global layers turn with different bases): (T - t0, d_k) x 2 each
            rope = layer_rope_tables(cfg, torch.arange(t0, T)) if cfg.pos_encoding == "rope" else None
            self._tables[t0] = (allowed, rope)
        return self._tables[t0]

    def run(self, x: Tensor, start: int, hooks: dict[int, AttentionHook] | None = None, t0: int = 0) -> Tensor:
        """Blocks start .. L-1 on x (B, T - t0, D), rows t0 .. T-1 of the stream entering block
        `start`; then the final norm (and a masked-LM head's transform): the last position's
        hidden state (B, D)."""
        if t0 and not self.causal:
            raise ValueError("rows before t0 are reused only under a causal mask")
        allowed, rope = self.tables(t0)
        B = x.shape[0]
        for i in range(start, self.cfg.n_layers):
            own: tuple = ()
            if t0:
                at = self.past.layers[i].attn
                k, v = at.k[:, :, :t0], at.v[:, :, :t0]  # (1, H_kv, t0, .) rotated keys, values
                own = (CachedKV(k.expand(B, -1, -1, -1), v.expand(B, -1, -1, -1)),)
            if hooks and i in hooks:
                own += (hooks[i],)
            ctx = PassContext(None if rope is None else rope[i], own) if rope is not None or own else None
            x, _ = self.model.blocks[i](x, allowed, False, ctx=ctx)
        x = x[:, -1:]  # (B, 1, D): norms act per position; only the last one is scored
        if self.model.ln_f is not None:
            x = self.model.ln_f(x, False)[0]
        return self.model.head_transform(x, record=False)[0][:, 0]  # (B, D)


class _SwapHeads(AttentionHook):
    """Batch row b's query head heads[b] gets `clean` (H, T, d_v)'s output for that head, at every
    position (at the heads point: what enters W_O)."""

    def __init__(self, which: Sequence[int], clean: Tensor):
        self.which, self.clean = torch.tensor(list(which)), clean

    def heads(self, z: Tensor, c: AttentionCall) -> Tensor:
        z = z.clone()  # (b, H, T_new, d_v): the last T_new rows
        z[torch.arange(len(self.which)), self.which] = self.clean[self.which, -z.shape[2]:].to(z.dtype)
        return z


@dataclass
class _Runs:
    """The clean and corrupted prompts traced once: their metrics, and what patching reuses."""
    clean: object
    corrupt: object
    w_diff: Tensor  # (D,) output row of target minus foil (the head transform's output space)
    bias_diff: float
    clean_metric: float
    corrupt_metric: float
    causal: bool


def _metric(h: Tensor, r: _Runs) -> Tensor:
    """logit(target) - logit(foil) of last-position hidden states h (B, D) (before any soft-cap)."""
    return h.to(torch.float64) @ r.w_diff + r.bias_diff


def _prepare(model, clean_ids, corrupt_ids, target_id: int, foil_id: int) -> _Runs:
    check_output_layer(model)
    cfg = model.cfg
    a, b = _ids(clean_ids, "clean_ids"), _ids(corrupt_ids, "corrupt_ids")
    if a.shape != b.shape:
        raise ValueError(f"the clean and corrupted prompts must have the same number of tokens (patching swaps "
                         f"position t for position t); got {a.shape[1]} and {b.shape[1]}. Change a word for a word "
                         "that is one token too")
    for name, i in (("target_id", target_id), ("foil_id", foil_id)):
        if not 0 <= int(i) < cfg.vocab_size:
            raise ValueError(f"{name} must be a token id in 0 .. {cfg.vocab_size - 1}; got {i}")
    if int(target_id) == int(foil_id):
        raise ValueError("the target and the foil are the same token: the metric logit(target) − logit(foil) is "
                         "then 0 on both prompts. Pick a foil the corrupted prompt prefers (e.g. the other name)")
    causal = not cfg.encoder
    clean, corrupt = model.trace(a, causal=causal), model.trace(b, causal=causal)
    w = model.output_matrix.detach()
    w_diff = (w[int(target_id)] - w[int(foil_id)]).to(torch.float64)  # (D,)
    bias_diff = 0.0
    if cfg.has_mlm_head:
        bias_diff = float(model.mlm_bias[int(target_id)] - model.mlm_bias[int(foil_id)])
    runs = _Runs(clean, corrupt, w_diff, bias_diff, 0.0, 0.0, causal)
    mc = float(_metric(_last_hidden(clean), runs)[0])
    mx = float(_metric(_last_hidden(corrupt), runs)[0])
    if abs(mc - mx) <= 1e-6 * max(1.0, abs(mc), abs(mx)):
        raise ValueError(f"the two prompts give the same metric (logit(target) − logit(foil) = {mc:.4g} on both), "
                         "so there is nothing to restore. Write a corrupted prompt that makes the model prefer the "
                         "foil: change the one word the answer depends on (swap the names, change the subject), "
                         "keeping the same number of tokens")
    runs.clean_metric, runs.corrupt_metric = mc, mx
    return runs


def _last_hidden(tr) -> Tensor:
    """The hidden state the output matrix scores at the last position (1, D)."""
    return (tr.final if tr.head is None else tr.head.output)[:, -1]


def _groups(todo: list[int], causal: bool, batch: int) -> list[list[int]]:
    """The patched positions of one layer in batches. Causal: runs of consecutive positions (about
    a quarter of them each), each batch computing the rows from its first position on; the rows
    between a batch's first position and a member's own are recomputed, which is cheaper than a
    pass per position (fewer, larger matrix products). Bidirectional: up to `batch` at a time."""
    if not todo:
        return []
    size = min(batch, max(1, -(-len(todo) // 4))) if causal else batch
    return [todo[i:i + size] for i in range(0, len(todo), size)]


def _effect(m: Tensor, r: _Runs) -> np.ndarray:
    return ((m - r.corrupt_metric) / (r.clean_metric - r.corrupt_metric)).numpy()


@torch.no_grad()
def patch_residual(model, clean_ids, corrupt_ids, target_id: int, foil_id: int, *,
                   batch: int = 64, progress: Callable[[float], None] | None = None) -> PatchResult:
    """effect (L, T): the corrupted prompt run with the residual stream entering block l at position
    t replaced by the clean run's (module docstring: metric, effect).

    Each patched run starts at block l from the corrupted run's recorded stream (the blocks before
    l compute what the corrupted run did) and runs only blocks l .. L-1, all positions of a layer in
    one batch. Two cases need no run, their result being exact by determinism: a stream whose row t
    is the same in both runs (patching changes nothing: 0; with a causal mask every position
    before the first differing token), and one whose other rows are the same in both runs
    (patching gives the clean stream: 1). progress(fraction done) after each layer; raising from
    it stops the work (the page's cancel button)."""
    r = _prepare(model, clean_ids, corrupt_ids, target_id, foil_id)
    L = model.cfg.n_layers
    T = r.clean.ids.shape[1]
    blocks = _Blocks(model, T, r.causal, past=r.corrupt)
    effect = np.zeros((L, T))
    for l in range(L):
        xc, xx = r.clean.layers[l].input, r.corrupt.layers[l].input  # (1, T, D)
        same = (xc[0] == xx[0]).all(-1)  # (T,) rows equal in both runs
        todo = [t for t in range(T) if not same[t]]
        if len(todo) == 1:  # the only differing row: the patched stream is the clean stream
            effect[l, todo[0]] = 1.0
            todo = []
        for ts in _groups(todo, r.causal, batch):
            t0 = ts[0] if r.causal else 0  # rows before the first patched one: the corrupted run's
            x = xx[:, t0:].expand(len(ts), -1, -1).clone()  # (b, T - t0, D)
            x[torch.arange(len(ts)), torch.tensor(ts) - t0] = xc[0, ts]
            effect[l, ts] = _effect(_metric(blocks.run(x, l, t0=t0), r), r)
        if progress:
            progress((l + 1) / L)
    return PatchResult(effect=effect, clean_metric=r.clean_metric, corrupt_metric=r.corrupt_metric,
                       target_id=int(target_id), foil_id=int(foil_id))


@torch.no_grad()
def patch_heads(model, clean_ids, corrupt_ids, target_id: int, foil_id: int, *,
                progress: Callable[[float], None] | None = None) -> PatchResult:
    """effect (L, H): the corrupted prompt run with query head h's output in block l (before W_O,
    at every position) replaced by the clean run's. Each layer's heads run as one batch from the
    corrupted run's recorded stream entering block l; a head whose output is the same in both
    runs is not run (0 exactly). progress as in patch_residual."""
    r = _prepare(model, clean_ids, corrupt_ids, target_id, foil_id)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    T = r.clean.ids.shape[1]
    blocks = _Blocks(model, T, r.causal, past=r.corrupt)
    effect = np.zeros((L, H))
    for l in range(L):
        zc, zx = r.clean.layers[l].attn.heads[0], r.corrupt.layers[l].attn.heads[0]  # (H, T, d_v)
        differ = (zc != zx).any(-1)  # (H, T) rows where head h's output differs
        todo = [h for h in range(H) if bool(differ[h].any())]
        if todo:
            # rows before the first that differs in any of them: the corrupted run's (causal mask)
            t0 = int(differ[todo].any(0).nonzero()[0]) if r.causal else 0
            x = r.corrupt.layers[l].input[:, t0:].expand(len(todo), -1, -1)  # (b, T - t0, D)
            m = _metric(blocks.run(x, l, {l: _SwapHeads(todo, zc)}, t0=t0), r)
            effect[l, todo] = _effect(m, r)
        if progress:
            progress((l + 1) / L)
    return PatchResult(effect=effect, clean_metric=r.clean_metric, corrupt_metric=r.corrupt_metric,
                       target_id=int(target_id), foil_id=int(foil_id))

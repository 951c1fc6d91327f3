"""Text generation, one step at a time, with a KV cache; and the sampling rules (pure functions).

    from model.generate import generate_step, next_token_probs, sample, kv_cache_bytes_per_token
    step = generate_step(model, torch.tensor([prompt_ids]))           # the whole prompt, traced
    while ...:
        probs = next_token_probs(step.logits[0], temperature=0.8, top_k=50, top_p=0.95)   # (V,)
        tid = sample(probs, generator)                                  # seeded torch.Generator
        step = generate_step(model, torch.tensor([[tid]]), step.cache)  # only the new token runs

A step runs only the new position(s) through the model: their queries attend over the cached keys
and values of every earlier position plus their own (rotary models: rotated by their absolute
position, past_length + i). The step's trace records every intermediate of the new rows: q
(B, H, T_new, d_k), k and v of the whole context (B, H_kv, T_ctx, d_k), scores and weights
(B, H, T_new, T_ctx); embeddings, norms, FFN and logits of the new rows only. Cached and uncached
runs give the same logits to float rounding (tests: within 1e-5).

The cache is immutable: each step returns a new KVCache (the old one stays valid, so a page can
step back or show the cache growing). Keys are stored after rotation, as HF does.

In the attention layer the cache is two hooks at its kv point (model.hooks), after the new keys
are rotated: CachedKV puts a layer's cached keys and values in front of the new ones; KVSink
collects every layer's full-context (k, v) of an untraced step, from which the next cache is made.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .config import ModelConfig
from .hooks import AttentionCall, AttentionHook
from .trace import ForwardTrace


@dataclass(frozen=True)
class KVCache:
    """The keys and values of every layer for the positions seen so far."""

    keys: tuple[Tensor, ...]  # per layer (B, H_kv, T_ctx, d_k), rotary models: rotated
    values: tuple[Tensor, ...]  # per layer (B, H_kv, T_ctx, d_v)

    @property
    def length(self) -> int:
        """Positions held (T_ctx): the next token sits at this position."""
        return int(self.keys[0].shape[2]) if self.keys else 0

    @property
    def nbytes(self) -> int:
        """Bytes of every cached key and value (float32: 4 per number)."""
        return sum(k.numel() * k.element_size() + v.numel() * v.element_size()
                   for k, v in zip(self.keys, self.values))

    @classmethod
    def from_trace(cls, tr: ForwardTrace) -> "KVCache":
        """The cache after a traced causal pass (torch trace): each layer's attn.k and attn.v,
        which cover the whole context."""
        if not tr.causal:
            raise ValueError("a KV cache continues a causal pass; this trace was bidirectional")
        return cls(tuple(lt.attn.k for lt in tr.layers), tuple(lt.attn.v for lt in tr.layers))


class CachedKV(AttentionHook):
    """One layer's cached keys (B, H_kv, T_past, d_k), rotated, and values (B, H_kv, T_past, d_v),
    put in front of the new positions' (kv point)."""

    def __init__(self, keys: Tensor, values: Tensor):
        self.keys, self.values = keys, values

    def kv(self, k: Tensor, v: Tensor, c: AttentionCall) -> tuple[Tensor, Tensor]:
        return torch.cat([self.keys, k], dim=2), torch.cat([self.values, v], dim=2)  # (B, H_kv, T_ctx, .)


class KVSink(AttentionHook):
    """Appends each layer's full-context (k, v) to `out`, in layer order (kv point, after CachedKV)."""

    def __init__(self, out: list):
        self.out = out

    def kv(self, k: Tensor, v: Tensor, c: AttentionCall) -> tuple[Tensor, Tensor]:
        self.out.append((k, v))
        return k, v


@dataclass(frozen=True)
class Step:
    logits: Tensor  # (B, T_new, V) for the new positions; logits[:, -1] predicts the next token
    cache: KVCache  # after this step: past + T_new positions
    trace: ForwardTrace | None  # every intermediate of the new rows (record=True), else None


@torch.no_grad()
def generate_step(model, ids: Tensor, cache: KVCache | None = None, *, record: bool = True) -> Step:
    """Run the new token ids (B, T_new) after `cache` (None: they are the start of the text).
    record=True: Step.trace holds the trace of the new rows; record=False: logits and cache only
    (the same arithmetic, nothing kept: the fast path for long generations)."""
    if not model.cfg.output_head:
        raise ValueError("this model has no output layer (an encoder such as MiniLM): it cannot generate")
    if record:  # the trace's k and v cover the whole context: they are the next cache
        tr = model.trace(ids, causal=True, past=cache)
        return Step(logits=tr.logits, cache=KVCache.from_trace(tr), trace=tr)
    sink: list = []  # each layer's full-context (k, v), appended by the attention
    logits = model.run(ids, True, None, record=False, past=cache, kv_sink=sink)
    return Step(logits=logits, cache=KVCache(tuple(k for k, _ in sink), tuple(v for _, v in sink)), trace=None)


def kv_cache_bytes_per_token(cfg: ModelConfig, bytes_per_number: int = 4) -> dict[str, int]:
    """Bytes the KV cache grows by per token: 2 (K and V) x layers x kv_heads x d_head x 4 B
    ("gqa": this model), and what the same model would need with one K/V head per query head
    ("mha"). SmolLM2-135M: 46,080 vs 138,240 (3 vs 9 K/V heads: a third)."""
    d_v = getattr(cfg, "d_v", None) or cfg.d_k  # value width (d_k unless the config sets d_v)
    per_head = (cfg.d_k + d_v) * bytes_per_number
    return {"gqa": cfg.n_layers * cfg.kv_heads * per_head, "mha": cfg.n_layers * cfg.n_heads * per_head}


# ---- sampling: pure functions of a logits row ---------------------------------------------------

def next_token_probs(logits: Tensor, *, temperature: float = 1.0, top_k: int | None = None,
                     top_p: float | None = None) -> Tensor:
    """The distribution the next token is drawn from, (V,) float32 summing to 1, from one logits
    row (V,): softmax(logits / temperature), then only the top_k most likely tokens, then only the
    smallest set of most likely tokens whose probability reaches top_p (the token that crosses
    top_p is kept; at least one token always is), renormalised. temperature 0: greedy (all the
    mass on the argmax). Ties keep the lower token id first, as torch.sort(stable=True)."""
    if logits.dim() != 1:
        raise ValueError(f"logits must be one row (V,), got shape {tuple(logits.shape)}")
    if not (isinstance(temperature, (int, float)) and temperature >= 0):
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be a positive integer or None, got {top_k!r}")
    if top_p is not None and not (isinstance(top_p, (int, float)) and 0 < top_p <= 1):
        raise ValueError(f"top_p must be in (0, 1] or None, got {top_p!r}")
    logits = logits.detach().to(torch.float32)
    V = logits.shape[0]
    if temperature == 0:
        out = torch.zeros(V)
        out[int(torch.argmax(logits))] = 1.0
        return out
    probs = torch.softmax(logits / temperature, dim=-1)
    order = torch.sort(probs, descending=True, stable=True).indices  # most likely first
    keep = torch.ones(V, dtype=torch.bool)
    if top_k is not None and top_k < V:
        keep[order[top_k:]] = False
    if top_p is not None and top_p < 1:
        sorted_p = probs[order] * keep[order]
        before = torch.cumsum(sorted_p, 0) - sorted_p  # mass of the more likely tokens
        drop = before >= top_p * float(sorted_p.sum())
        drop[0] = False  # the most likely token always stays
        keep[order[drop]] = False
    probs = probs * keep
    return probs / probs.sum()


def greedy(logits: Tensor) -> int:
    """The most likely token of a logits row (V,) (the lowest id among ties)."""
    return int(torch.argmax(logits))


def sample(probs: Tensor, generator: torch.Generator | None = None) -> int:
    """One token id drawn from `probs` (V,) (e.g. next_token_probs). Seeded generator: the same
    draws on every run; a one-hot distribution always gives its token."""
    if probs.dim() != 1:
        raise ValueError(f"probs must be one row (V,), got shape {tuple(probs.shape)}")
    return int(torch.multinomial(probs, 1, generator=generator))


@dataclass(frozen=True)
class Generation:
    ids: list[int]  # the new tokens
    logprobs: list[float]  # log p(x_t | x_<t) of each new token under the model (temperature 1)
    logits: list[Tensor]  # (V,) the logits row each token was chosen from


@torch.no_grad()
def generate(model, prompt_ids: list[int], max_new_tokens: int, *, use_cache: bool = True,
             temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
             seed: int | None = 0, eos_id: int | None = None) -> Generation:
    """Up to max_new_tokens tokens after prompt_ids (stops after eos_id). use_cache False runs the
    whole text again at every step (what the KV cache saves). Nothing is traced (record=False)."""
    if not prompt_ids:
        raise ValueError("the prompt must hold at least one token")
    g = None if seed is None else torch.Generator().manual_seed(int(seed))
    ids = list(prompt_ids)
    out, lps, rows = [], [], []
    step = generate_step(model, torch.tensor([ids]), None, record=False)
    for i in range(max_new_tokens):
        row = step.logits[0, -1]  # (V,)
        probs = next_token_probs(row, temperature=temperature, top_k=top_k, top_p=top_p)
        tid = greedy(row) if temperature == 0 else sample(probs, g)
        out.append(tid)
        lps.append(float(torch.log_softmax(row, -1)[tid]))
        rows.append(row)
        ids.append(tid)
        if (eos_id is not None and tid == eos_id) or i == max_new_tokens - 1:
            break
        if use_cache:
            step = generate_step(model, torch.tensor([[tid]]), step.cache, record=False)
        else:
            step = generate_step(model, torch.tensor([ids]), None, record=False)
    return Generation(ids=out, logprobs=lps, logits=rows)

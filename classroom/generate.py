"""Generation step by step for the Generate page (issue 18 point 5): a session that holds the
prompt, the KV cache and one record per generated token. Pure Python over model.generate.

    gen = Session.start(model, prompt_ids, settings)   # runs the prompt once (traced)
    gen = gen.step(model)                               # picks a token, runs only it (KV cache)

Each record keeps what the page shows for that step: the top-k of the distribution the token was
drawn from, the token, its probability under the model (temperature 1) and under the sampling
rule, the new token's attention over the context in every layer and head, and the cache's size.
Sessions are immutable (a step returns a new one): a page can keep them in session state and
several sessions share one read-only model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from model.generate import KVCache, generate_step, greedy, kv_cache_bytes_per_token, next_token_probs

STRATEGIES = ("greedy", "sample")


@dataclass(frozen=True)
class Settings:
    strategy: str = "greedy"  # "greedy" | "sample"
    temperature: float = 1.0  # sampling only
    top_k: int | None = None  # sampling only: keep the k most likely tokens
    top_p: float | None = None  # sampling only: keep the smallest set reaching this mass
    seed: int = 0

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")

    def distribution(self, logits: torch.Tensor) -> torch.Tensor:
        """The distribution the next token is drawn from, (V,) (greedy: all mass on the argmax)."""
        if self.strategy == "greedy":
            return next_token_probs(logits, temperature=0)
        return next_token_probs(logits, temperature=self.temperature, top_k=self.top_k, top_p=self.top_p)


@dataclass(frozen=True)
class Record:
    token: int  # the chosen id
    p_model: float  # p(x_t | x_<t) under the model (softmax of the logits, temperature 1)
    p_rule: float  # its probability under the sampling rule (greedy: 1)
    top_ids: np.ndarray  # (k,) the model's most likely next tokens at this step
    top_p: np.ndarray  # (k,) their model probabilities
    attention: np.ndarray  # (L, H, T_ctx) the new token's attention over the context, once it is fed in
    cache_bytes: int  # KV cache after feeding the token
    context: int  # positions in the cache after feeding the token

    @property
    def logp(self) -> float:
        return math.log(max(self.p_model, 1e-300))


@dataclass(frozen=True)
class Session:
    prompt: tuple[int, ...]
    settings: Settings
    records: tuple[Record, ...]
    logits: torch.Tensor  # (V,) the model's logits for the next token
    cache: KVCache
    prompt_attention: np.ndarray  # (L, H, T_prompt) the prompt's last token over the prompt
    rng_state: torch.Tensor = field(repr=False)  # the seeded generator's state (reproducible draws)

    @classmethod
    def start(cls, model, prompt_ids: list[int], settings: Settings) -> "Session":
        if not prompt_ids:
            raise ValueError("the prompt must hold at least one token")
        st = generate_step(model, torch.tensor([list(prompt_ids)]), None, record=True)
        att = np.stack([lt.attn.weights[0, :, -1].numpy() for lt in st.trace.layers])  # (L, H, T)
        g = torch.Generator().manual_seed(int(settings.seed))
        return cls(prompt=tuple(int(i) for i in prompt_ids), settings=settings, records=(),
                   logits=st.logits[0, -1].clone(), cache=st.cache, prompt_attention=att, rng_state=g.get_state())

    @property
    def ids(self) -> list[int]:
        return list(self.prompt) + [r.token for r in self.records]

    def next_distribution(self) -> torch.Tensor:
        """(V,) what the next token will be drawn from."""
        return self.settings.distribution(self.logits)

    def model_probs(self) -> torch.Tensor:
        """(V,) the model's own next-token distribution (softmax, temperature 1)."""
        return torch.softmax(self.logits.to(torch.float64), -1)

    def choose(self) -> int:
        """The next token under the settings (greedy: argmax; sample: a seeded draw)."""
        if self.settings.strategy == "greedy":
            return greedy(self.logits)
        g = torch.Generator()
        g.set_state(self.rng_state)
        return int(torch.multinomial(self.next_distribution(), 1, generator=g))

    def step(self, model, *, k: int = 10) -> "Session":
        """Choose the next token, feed only it through the model (the cache holds the rest)."""
        rule = self.next_distribution()
        g = torch.Generator()
        g.set_state(self.rng_state)
        tid = greedy(self.logits) if self.settings.strategy == "greedy" else int(torch.multinomial(rule, 1, generator=g))
        probs = self.model_probs()
        top = torch.topk(probs, min(k, probs.shape[0]))
        st = generate_step(model, torch.tensor([[tid]]), self.cache, record=True)
        att = np.stack([lt.attn.weights[0, :, -1].numpy() for lt in st.trace.layers])  # (L, H, T_ctx)
        rec = Record(token=tid, p_model=float(probs[tid]), p_rule=float(rule[tid]), top_ids=top.indices.numpy(),
                     top_p=top.values.numpy(), attention=att, cache_bytes=st.cache.nbytes, context=st.cache.length)
        return replace(self, records=self.records + (rec,), logits=st.logits[0, -1].clone(), cache=st.cache,
                       rng_state=g.get_state())

    def uncached_logits(self, model) -> torch.Tensor:
        """(V,) the next-token logits from running the whole text again (no cache): the check that
        the cache changes nothing."""
        with torch.no_grad():
            return model.trace(torch.tensor([self.ids]), causal=True).logits[0, -1]

    def tempered_probs(self) -> torch.Tensor:
        """(V,) the distribution after the temperature and before top-k and top-p: softmax(logits /
        temperature) (model.generate.next_token_probs without the cuts). Greedy: the model's own
        (temperature 1; greedy then keeps only the argmax)."""
        if self.settings.strategy == "greedy":
            return next_token_probs(self.logits, temperature=1.0)
        return next_token_probs(self.logits, temperature=self.settings.temperature)

    def next_token(self, k: int = 10) -> "NextToken":
        """The k most likely next tokens under the model, through each stage of the sampling rule:
        the model's distribution, after the temperature, and after top-k and top-p (renormalised)."""
        probs = self.model_probs().numpy()
        tempered = self.tempered_probs().double().numpy()
        rule = self.next_distribution().double().numpy()
        top = np.argsort(-probs, kind="stable")[:k]
        keep = rule > 0
        rank = np.empty(len(tempered), dtype=np.int64)  # each token's place in the tempered order (0 = most likely)
        rank[np.argsort(-tempered, kind="stable")] = np.arange(len(tempered))
        s = self.settings

        def why(i: int) -> str:
            if keep[i]:
                return ""
            if s.strategy == "greedy":
                return "greedy"
            return "top-k" if s.top_k is not None and rank[i] >= s.top_k else "top-p"

        return NextToken(top_ids=top, p_model=probs[top], p_rule=rule[top], kept=int(keep.sum()),
                         vocab_size=len(probs), p_tempered=tempered[top], kept_mask=keep[top],
                         dropped_by=[why(int(i)) for i in top], kept_mass=float(tempered[keep].sum()))

    def factorisation(self) -> list["Factor"]:
        """p(x_gen | prompt) = Π p(x_t | x_<t) token by token, with the running sum of log p."""
        rows, total = [], 0.0
        for i, r in enumerate(self.records):
            total += r.logp
            rows.append(Factor(step=i + 1, token=r.token, p=r.p_model, logp=r.logp, logp_so_far=total,
                               p_so_far=math.exp(total)))
        return rows


@dataclass(frozen=True)
class NextToken:
    """The distribution the next token comes from, at the top k of the model's own (V tokens), stage
    by stage: the model (temperature 1) -> ÷ temperature -> top-k and top-p cut -> renormalised."""
    top_ids: np.ndarray  # (k,) int: the model's k most likely next tokens, most likely first
    p_model: np.ndarray  # (k,) float64: their probability under the model (softmax, temperature 1)
    p_rule: np.ndarray  # (k,) their probability under the sampling rule (renormalised; greedy: 1 on the argmax)
    kept: int  # how many of the V tokens the rule leaves a chance (p_rule > 0)
    vocab_size: int  # V
    p_tempered: np.ndarray | None = None  # (k,) float64: softmax(logits / temperature), before the cuts (greedy: p_model)
    kept_mask: np.ndarray | None = None  # (k,) bool: still possible after top-k and top-p (the kept set)
    dropped_by: list[str] = field(default_factory=list)  # (k,) "" (kept), "top-k", "top-p" or "greedy"
    kept_mass: float = 1.0  # the kept set's mass under the tempered distribution, before renormalising


@dataclass(frozen=True)
class Factor:
    """One generated token's factor of p(x_gen | prompt) = Π p(x_t | x_<t)."""
    step: int  # 1 for the first generated token
    token: int  # its id
    p: float  # p(x_t | x_<t) under the model (temperature 1)
    logp: float  # natural log of p
    logp_so_far: float  # Σ log p over steps 1 … step
    p_so_far: float  # exp(logp_so_far): the probability of the generated text so far


@dataclass(frozen=True)
class CacheGrowth:
    """Bytes of the KV cache at each context length n_prompt … n_prompt + n_new (N lengths)."""
    context: np.ndarray  # (N,) int: positions in the cache
    this_model: np.ndarray  # (N,) int: bytes for this model (its K/V heads)
    without_gqa: np.ndarray  # (N,) int: bytes with one K/V head per query head
    bytes_per_token: int  # 2 × L × kv_heads × d_head × 4 B: what each position adds for this model
    bytes_per_token_without_gqa: int  # the same with n_heads K/V heads


def cache_growth(cfg, n_prompt: int, n_new: int) -> CacheGrowth:
    """Bytes of the KV cache at each context length n_prompt … n_prompt + n_new, for this model
    and for the same model without grouped-query attention (2 × L × kv_heads × d_head × 4 B per
    token; model.generate.kv_cache_bytes_per_token)."""
    per = kv_cache_bytes_per_token(cfg)
    T = np.arange(n_prompt, n_prompt + n_new + 1)
    return CacheGrowth(context=T, this_model=T * per["gqa"], without_gqa=T * per["mha"],
                       bytes_per_token=per["gqa"], bytes_per_token_without_gqa=per["mha"])

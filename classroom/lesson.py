"""Lesson mode: one attention computation (layer 0 of the current run) step by step, with
predict-then-reveal questions drawn from the lecture notes' self-assessment sections (000: Q1–Q7,
001: Q1–Q5) and answered with the live numbers. Pure: numpy arrays in, dataclasses out.

Input `trace` is a ForwardTrace as numpy (ForwardTrace.numpy(), batch axis first, B = 1).
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from labels import md_escape, token_label
from model.attention import attend
from model.trace import ForwardTrace

from .architecture import Architecture
from .ffn_output import sequence_logprob
from .worked_examples import softmax_from_scores

STEP_KEYS = ("embeddings", "qkv", "scores", "scale", "mask", "softmax", "weighted", "concat", "output")


@dataclass(frozen=True)
class Question:
    id: str
    source: str  # which self-assessment question of the notes it comes from
    prompt: str  # markdown
    kind: str  # "choice" | "number"
    answer: str | float
    explanation: str  # markdown, with the live numbers
    options: tuple[str, ...] = ()
    tolerance: float = 0.0
    lo: float = 0.0  # number inputs: range
    hi: float = 1e9
    step: float = 1.0
    keep_order: bool = False  # token choices stay in sentence order

    def __post_init__(self) -> None:
        if self.kind == "choice":
            if not self.keep_order:
                object.__setattr__(self, "options", _mix(self.options, self.id))
            if str(self.answer) not in self.options:
                raise ValueError(f"question {self.id}: the answer is not among the options")

    def check(self, given) -> bool:
        if given is None:
            return False
        if self.kind == "number":
            try:
                return abs(float(given) - float(self.answer)) <= self.tolerance + 1e-9
            except (TypeError, ValueError):
                return False
        return str(given) == str(self.answer)


@dataclass(frozen=True)
class LessonStep:
    key: str
    title: str
    formula: str  # LaTeX
    text: str  # markdown with the live numbers
    matrix: np.ndarray | None = None  # what to show (2-D)
    rows: tuple[str, ...] = ()
    cols: tuple[str, ...] = ()
    heatmap: bool = False  # token x token matrix (weights-like) -> heatmap
    allowed: np.ndarray | None = None  # for heatmaps: grey where masked
    zrange: tuple[float, float] | None = None
    questions: tuple[Question, ...] = field(default_factory=tuple)


def _mix(options: Sequence[str], seed: str) -> tuple[str, ...]:
    """A fixed, answer-independent order (so the right answer is not always first)."""
    return tuple(sorted(dict.fromkeys(options), key=lambda o: hashlib.sha256((seed + o).encode()).hexdigest()))


def _f(x: float, nd: int = 3) -> str:
    if np.isneginf(x):
        return "−∞"
    return f"{x:.{nd}f}"


def _vec(v: Sequence[float], nd: int = 3, limit: int = 6) -> str:
    v = list(v)
    s = ", ".join(_f(float(x), nd) for x in v[:limit])
    return "[" + s + (", …" if len(v) > limit else "") + "]"


def answer_context(source, ids: Sequence[int], causal: bool, head: int, query: int) -> str:
    """A short digest of everything a lesson question's answer depends on: the model (its source,
    any hashable value), the token ids, the mask, the head and the query row. The page keys each
    question's widgets and revealed state by it, so a pick made for one head (or sentence, or query)
    is never graded against another's answer."""
    raw = repr((source, tuple(int(i) for i in ids), bool(causal), int(head), int(query)))
    return hashlib.sha256(raw.encode()).hexdigest()[:10]


def factorization_live(trace: ForwardTrace, labels: Sequence[str], n: int = 3) -> str:
    """Notes 001 Q1, live: the auto-regressive factors p(x_t | x_<t) of the sentence, from the
    model's own next-token probabilities (ffn_output.sequence_logprob), as markdown."""
    if trace.probs is None or len(trace.ids[0]) < 2:
        return ""
    f = sequence_logprob(trace.probs[0], trace.ids[0])
    lab = [md_escape(str(x)) for x in labels]
    terms = " · ".join(f"p({lab[t + 1]} | {lab[0]}…{lab[t]}) = {f.p[t]:.4f}" for t in range(min(n, len(f.p))))
    more = " · …" if len(f.p) > n else ""
    causal = "" if trace.causal else " (this run is bidirectional, so these are not true next-token factors)"
    return (f"Live, on your sentence{causal}: {terms}{more}; the product of all {len(f.p)} factors gives "
            f"log p(x) = {f.total_logp:.3f}.")


def value_width_live() -> str:
    """Notes 001 Q4, live: attend (the engine's attention) run on Q 10 × 64, K 10 × 64, V 10 × 128
    (seeded random numbers); reports the shapes it returns and what it says to a K of the wrong width."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(10, w, generator=g) for w in (64, 64, 128))
    tr = attend(q, k, v)
    try:
        attend(q, torch.randn(10, 128, generator=g), v)
        err = "no error"
    except ValueError as e:
        err = str(e)
    return (f"Live: the model's attention function on Q {tuple(q.shape)}, K {tuple(k.shape)}, V {tuple(v.shape)} "
            f"returns weights {tuple(tr.weights.shape)} and Z {tuple(tr.heads.shape)}; with K 10 × 128 it "
            f"refuses: “{md_escape(err)}”.")


def tok(i: int, labels: Sequence[str]) -> str:
    return token_label(i, labels[i])


def _dims(n: int, p: str) -> tuple[str, ...]:
    return tuple(f"{p}{j}" for j in range(n))


@dataclass(frozen=True, eq=False)
class Focus:
    """What every lesson step reads: one head of one layer's attention, followed from one query
    row (numpy, batch index 0 taken)."""
    trace: ForwardTrace  # the whole run (numpy): the factorisation question reads its probs
    labels: tuple[str, ...]  # the tokens as typed
    causal: bool
    norm: str  # "pre" | "post"
    arch: Architecture | None  # the model in words (classroom.architecture.describe); None: say only pre/post
    head: int
    kv: int  # the K/V head this query head reads (= head without grouped-query attention)
    i: int  # the query row followed (0..T-1)
    T: int  # tokens
    H: int  # heads
    d_k: int  # width of a query and a key
    d_v: int  # width of a value
    D: int  # d_model (the width of X and of the attention output)
    toks: tuple[str, ...]  # (T,) "j:token" labels for tables and charts
    mtoks: tuple[str, ...]  # (T,) the same, markdown-escaped (inside text and radio options)
    emb_tok: np.ndarray  # (T, D) token embeddings
    emb_pos: np.ndarray  # (T, D) position vectors
    emb_sum: np.ndarray  # (T, D) X = token + position
    q: np.ndarray  # (T, d_k) this head's queries
    k: np.ndarray  # (T, d_k) keys of K/V head `kv`
    v: np.ndarray  # (T, d_v) values of K/V head `kv`
    scores: np.ndarray  # (T, T) q·k, before scaling
    scale: float  # 1/√d_k, or 1.0 when the model does not scale
    scaled: np.ndarray  # (T, T) scores × scale
    masked: np.ndarray  # (T, T) scaled, −∞ where not allowed
    allowed: np.ndarray  # (T, T) bool, True = may attend
    w_all: np.ndarray  # (H, T, T) softmax weights of every head
    heads: np.ndarray  # (T, d_v) this head's output Z = A V
    concat: np.ndarray  # (T, H·d_v) the heads side by side
    out: np.ndarray  # (T, D) concat · W_O

    @property
    def w(self) -> np.ndarray:
        """(T, T) this head's weights."""
        return self.w_all[self.head]

    @property
    def tq(self) -> str:
        """The followed query token, markdown-escaped."""
        return self.mtoks[self.i]

    @property
    def hs(self) -> str:
        return f"head {self.head}"


def focus(trace: ForwardTrace, labels: Sequence[str], *, causal: bool, norm: str = "pre", head: int = 0,
          query: int | None = None, layer: int = 0, arch: Architecture | None = None) -> Focus:
    """Layer `layer`'s attention for head `head`, seen from query position `query` (default: the
    last token, which sees the most context). ValueError for a head or query out of range."""
    attn, emb = trace.layers[layer].attn, trace.embeddings  # numpy, B = 1
    w_all = attn.weights[0]  # (H, T, T)
    H, T, _ = w_all.shape
    if not 0 <= head < H:
        raise ValueError(f"head must be in 0..{H - 1}")
    i = T - 1 if query is None else int(query)
    if not 0 <= i < T:
        raise ValueError(f"query must be in 0..{T - 1}")
    labels = tuple(str(x) for x in labels)
    toks = tuple(tok(j, labels) for j in range(T))
    kv = head if attn.kv_head is None else int(attn.kv_head[head])  # grouped-query: the shared K/V head
    return Focus(
        trace=trace, labels=labels, causal=causal, norm=norm, arch=arch, head=head, kv=kv, i=i, T=T, H=H,
        d_k=attn.q.shape[-1], d_v=attn.v.shape[-1], D=emb.sum.shape[-1], toks=toks,
        mtoks=tuple(md_escape(t) for t in toks),
        emb_tok=emb.token[0], emb_pos=emb.position, emb_sum=emb.sum[0],
        q=attn.q[0, head], k=attn.k[0, kv], v=attn.v[0, kv],
        scores=attn.scores[0, head], scale=float(attn.scale), scaled=attn.scaled[0, head],
        masked=attn.masked[0, head],
        allowed=np.broadcast_to(np.asarray(attn.allowed, dtype=bool), attn.weights.shape)[0, head],
        w_all=w_all, heads=attn.heads[0, head], concat=attn.concat[0], out=attn.output[0])


def build_lesson(trace: ForwardTrace, labels: Sequence[str], *, n_heads: int, causal: bool,
                 norm: str = "pre", head: int = 0, query: int | None = None, layer: int = 0,
                 arch: Architecture | None = None) -> list[LessonStep]:
    """Every step of layer `layer`'s attention for head `head`, seen from query position `query`
    (default: the last token, which sees the most context): one LessonStep per STEP_KEYS entry.
    arch: the model in words (positions, norm, W_O's shape); None keeps the generic wording."""
    f = focus(trace, labels, causal=causal, norm=norm, head=head, query=query, layer=layer, arch=arch)
    return [build(f) for build in STEP_BUILDERS]


# ----------------------------------------------------------------------------- the nine steps
def embeddings_step(f: Focus) -> LessonStep:
    T, D, i = f.T, f.D, f.i
    if f.arch is not None and f.arch.norm.kind != "none":
        n = f.arch.norm
        ln_note = (f"This model is **{n.short}**: attention reads {n.name}(X), the normalised rows." if f.norm == "pre"
                   else f"This model is **{n.short}**: attention reads X itself.")
    elif f.arch is not None:
        ln_note = "This model has no norms: attention reads X itself."
    else:
        ln_note = ("This model is **pre-LN** (GPT-2): attention reads LN(X), the layer-normalised rows."
                   if f.norm == "pre" else "This model is **post-LN** (2017 paper): attention reads X itself.")
    added = f.arch is None or f.arch.positions.added
    emb_ln = f.arch is not None and "LayerNorm" in f.arch.positions.input_x
    if not added:
        row = (f"its token embedding; this model adds no position vector ({f.arch.positions.name} positions"
               + (": they turn q and k in every head)" if f.arch.positions.kind == "rope" else ")")
               + f". Token {f.tq}: X row = {_vec(f.emb_sum[i])}. ")
        formula = r"X = E_{\text{token}} \in \mathbb{R}^{T \times d_{model}}"
    else:
        row = (f"its token embedding plus its position vector" + (" (and token type), then LayerNorm" if emb_ln else "")
               + f". Token {f.tq}: token {_vec(f.emb_tok[i])} + position {_vec(f.emb_pos[i])}"
               + (" … after LayerNorm" if emb_ln else "") + f" = {_vec(f.emb_sum[i])}. ")
        formula = (r"X = \mathrm{LN}(E_{\text{token}} + PE + E_{\text{type}}) \in \mathbb{R}^{T \times d_{model}}" if emb_ln
                   else r"X = E_{\text{token}} + PE \in \mathbb{R}^{T \times d_{model}}")
    q_shape = Question(
        "x_shape", "the lecture on transformers for autoregressive models, self-assessment question 2",
        f"Your sentence has **{T} tokens** and this model has **d_model = {D}**. What is the shape of the input matrix X?",
        "choice", f"{T} × {D}",
        f"X is T × d_model = **{T} × {D}**: one row per token, one column per embedding dimension "
        f"(the notes' example: 10 tokens with d_m = 512 give 10 × 512).",
        options=tuple(dict.fromkeys([f"{T} × {D}", f"{D} × {T}", f"{T} × {T}", f"{D} × {D}", f"{T} × {f.d_k}"])))
    q_method = Question(
        "method_arch", "the lecture on transformers for autoregressive models, self-assessment question 1",
        "Auto-regressive modelling and the Transformer: which is the *methodology* and which the *architecture*?",
        "choice", "auto-regression is the methodology; the Transformer is the architecture",
        "Auto-regression is the **methodology**: p(x) = Π p(x_t | x_<t). The Transformer is the **architecture** "
        f"(a network) that computes each p(x_t | x_<t) — here from the {T} × {D} matrix X. "
        + factorization_live(f.trace, f.labels),
        options=("auto-regression is the methodology; the Transformer is the architecture",
                 "the Transformer is the methodology; auto-regression is the architecture",
                 "both are architectures", "both are methodologies"))
    return LessonStep(
        "embeddings", "1 · Embeddings: the data matrix X", formula,
        f"Each of the **{T}** tokens becomes a row of length d_model = **{D}**: " + row + ln_note,
        f.emb_sum, f.toks, _dims(D, "x"), questions=(q_shape, q_method))


def qkv_step(f: Focus) -> LessonStep:
    T, D, H, d_k, d_v, i = f.T, f.D, f.H, f.d_k, f.d_v, f.i
    q_dk = Question(
        "d_k", "the lecture on causal masking and multi-head attention, self-assessment question 4",
        f"This model has d_model = **{D}** and h = **{H}** heads. How many dimensions does each head's query "
        "(and key, and value) vector have?", "number", float(d_k),
        (f"d_k = d_model / h = {D} / {H} = **{d_k}** (the notes: 512 / 8 = 64)." if H * d_k == D else
         f"d_k = **{d_k}**: this model sets its head width itself (head_dim), so it is not d_model / h = "
         f"{D / H:g} (the notes' rule, 512 / 8 = 64, holds for most models).")
        + (" Usually d_v = d_k too." if d_v == d_k else f" This model's values are {d_v} wide (d_v ≠ d_k)."),
        lo=0, hi=4096, step=1)
    q_kshape = Question(
        "k_shape", "the lecture on transformers for autoregressive models, self-assessment question 4",
        "Q has shape 10 × 64 and V has shape 10 × 128. What are the shapes of K and of the output Z = softmax(QKᵀ/√d_k)V?",
        "choice", "K: 10 × 64, Z: 10 × 128",
        "K must have the same width as Q (d_k = 64, so QKᵀ is defined) and as many rows as V (10): **10 × 64**. "
        f"Z = A V is (10 × 10)(10 × 128) = **10 × 128**. Here, per head: Q and K are {T} × {d_k}, V is {T} × {d_v}, "
        f"so Z is {T} × {d_v}. " + value_width_live(),
        options=("K: 10 × 64, Z: 10 × 128", "K: 10 × 128, Z: 10 × 64", "K: 64 × 10, Z: 10 × 10", "K: 10 × 64, Z: 10 × 64"))
    return LessonStep(
        "qkv", f"2 · Queries, keys, values ({f.hs})", r"Q_j = X W^Q_j,\quad K_j = X W^K_j,\quad V_j = X W^V_j",
        f"Three learned projections turn every row of X into a query (what it looks for), a key (what it offers) "
        f"and a value (what it passes on). Each head gets its own {d_k}-dimensional slice"
        + (f" of Q; keys and values are shared by groups of query heads (grouped-query attention): {f.hs} reads "
           f"K/V head {f.kv}. " if f.kv != f.head or (f.arch is not None and f.arch.gqa) else ". ") +
        f"Token {f.tq}: q = {_vec(f.q[i])}, k = {_vec(f.k[i])}, v = {_vec(f.v[i])}. The table shows Q of {f.hs}.",
        f.q, f.toks, _dims(d_k, "q"), questions=(q_dk, q_kshape))


def scores_step(f: Focus) -> LessonStep:
    T, i, scores, tq = f.T, f.i, f.scores, f.tq
    j_best = int(np.argmax(scores[i]))
    q_best = Question(
        "argmax_score", "the lecture on autoregressive transformers (QKᵀ: the relevance of token j to token i)",
        f"Which key gets the **highest raw score** q·k from query **{tq}** ({f.hs})?",
        "choice", f.mtoks[j_best],
        f"Row {tq} of QKᵀ is {_vec(scores[i], 2, 12)}: the largest is **{f.mtoks[j_best]}** "
        f"({_f(scores[i, j_best], 3)}). Raw scores exist for *every* pair, future tokens included — "
        "the mask is applied later.", options=f.mtoks, keep_order=True)
    return LessonStep(
        "scores", f"3 · Scores QKᵀ ({f.hs})", r"S = Q K^\top,\quad S_{ij} = q_i \cdot k_j",
        f"Every query is compared with every key by a dot product: a {T} × {T} matrix ({T * T} numbers — it grows "
        f"with the square of the length). Row {tq}: {_vec(scores[i], 2, 8)}.",
        scores, f.toks, f.toks, heatmap=True, zrange=None, questions=(q_best,))


def scale_step(f: Focus) -> LessonStep:
    i, d_k, scale, tq = f.i, f.d_k, f.scale, f.tq
    unscaled_w = softmax_from_scores(f.scores[i][None], f.allowed[i][None])[0]
    scaled_w = f.w[i]
    flat = "flatter (less peaked)"
    if scale != 1.0:
        expl = (f"Dividing by √d_k = √{d_k} = {math.sqrt(d_k):.3f} shrinks the scores, so the softmax is **flatter**: "
                f"without scaling the largest weight of row {tq} would be {_f(unscaled_w.max())}; with scaling it is "
                f"{_f(scaled_w.max())}. Without it, dot products grow with d_k (their variance is ∝ d_k) and the "
                "softmax saturates: tiny gradients (the lecture's question 3 and its [6, 4] example: [0.88, 0.12] vs [0.73, 0.27]).")
    else:
        expl = ("This model was built with scaling **off** (scale = 1), so nothing changes here; with scaling the "
                "softmax would be **flatter**. Without it dot products grow with d_k and the softmax saturates.")
    q_scale = Question(
        "scale_effect", "the lecture on transformers for autoregressive models, self-assessment question 3",
        f"The scores are divided by √d_k = √{d_k}. Compared with no scaling, the softmax of row {tq} becomes …",
        "choice", flat, expl, options=("more peaked", flat, "exactly the same"))
    return LessonStep(
        "scale", f"4 · Scale by 1/√d_k ({f.hs})", rf"\frac{{S}}{{\sqrt{{d_k}}}} = S \times {scale:.4f}",
        f"d_k = {d_k}, so every score is multiplied by {scale:.4f}. Row {tq}: {_vec(f.scaled[i], 3, 8)}.",
        f.scaled, f.toks, f.toks, heatmap=True, questions=(q_scale,))


def mask_step(f: Focus) -> LessonStep:
    T, i, allowed, causal, tq = f.T, f.i, f.allowed, f.causal, f.tq
    n_masked = int((~allowed).sum())
    n_causal = T * (T - 1) // 2
    q_count = Question(
        "mask_count", "the lecture on causal masking and multi-head attention, self-assessment question 2",
        f"In a causal mask M for your **{T}** tokens, how many entries are −∞?", "number", float(n_causal),
        f"Everything above the diagonal (j > i): T(T−1)/2 = {T}·{T - 1}/2 = **{n_causal}**. For length 3: "
        r"$M = \begin{pmatrix}0&-\infty&-\infty\\0&0&-\infty\\0&0&0\end{pmatrix}$ — 3 entries; adding M before the "
        "softmax makes e^(−∞) = 0, so future tokens get weight 0." +
        ("" if causal else f" (This run is **bidirectional**: its mask has {n_masked} masked entries; switch the "
                           "sidebar's Mask to causal to see M.)"), lo=0, hi=1e6, step=1)
    why = "it would let a token see the future tokens it must predict"
    q_why = Question(
        "why_causal", "the lectures on causal masking (question 1) and on autoregressive transformers (question 5)",
        "Why can't a language model that predicts the next token use plain (unmasked) attention?",
        "choice", why,
        "Plain attention lets token i attend to tokens j > i — the very tokens it is trained to predict "
        "(\"looking into the future\"). The causal mask adds −∞ to those scores, so their weights are exactly 0 "
        "and p(x_t | x_<t) only uses the past." +
        (f" In this run row {tq} may attend to {int(allowed[i].sum())} of {T} keys." if causal else ""),
        options=(why, "it is too slow for long sentences", "softmax cannot handle negative scores",
                 "the values would not sum to one"))
    return LessonStep(
        "mask", "5 · Mask", r"M_{ij} = \begin{cases}0 & j \le i\\ -\infty & j > i\end{cases},\qquad \frac{S}{\sqrt{d_k}} + M",
        ("**Causal** run: " if causal else "**Bidirectional** run (no mask, M = 0): ") +
        f"{n_masked} of {T * T} cells are masked (grey). Masked scores of row {tq}: {_vec(f.masked[i], 3, 8)}.",
        np.where(allowed, f.masked, np.nan), f.toks, f.toks, heatmap=True, allowed=allowed,
        questions=(q_count, q_why))


def softmax_step(f: Focus) -> LessonStep:
    i, w, tq = f.i, f.w, f.tq
    self_w = float(w[i, i])
    q_self = Question(
        "self_weight", "the lecture on autoregressive transformers (softmax rows) — predict, then check",
        f"What attention weight does **{tq}** put on **itself** ({f.hs}). Within 0.10 counts as right.",
        "number", round(self_w, 4),
        f"The weight is **{self_w:.4f}**. The whole row is {_vec(w[i], 3, 12)} and sums to "
        f"{w[i].sum():.4f}: softmax makes every (not fully masked) row a probability distribution.",
        tolerance=0.10, lo=0.0, hi=1.0, step=0.01)
    return LessonStep(
        "softmax", f"6 · Softmax, row by row ({f.hs})", r"A_{ij} = \frac{e^{m_{ij}}}{\sum_{j'} e^{m_{ij'}}}",
        f"Each row becomes weights between 0 and 1 that sum to 1; masked cells become exactly 0. "
        f"Row {tq}: {_vec(w[i], 3, 8)}.", w, f.toks, f.toks, heatmap=True, allowed=f.allowed, zrange=(0.0, 1.0),
        questions=(q_self,))


def weighted_step(f: Focus) -> LessonStep:
    i, w, v, heads, tq = f.i, f.w, f.v, f.heads, f.tq
    top = np.argsort(-w[i])[:3]
    terms = " + ".join(f"{w[i, j]:.3f}·{v[j, 0]:.3f}" for j in top)
    q_avg = Question(
        "weighted_of", "the lecture on autoregressive transformers (Z = AV)",
        f"The output row z for {tq} is a weighted average of which vectors?", "choice", "the value vectors",
        f"Of the **value** vectors: z_i = Σ_j A_ij v_j. First coordinate for {tq}: the biggest terms are {terms} "
        f"(+ the rest) = **{heads[i, 0]:.4f}**.",
        options=("the query vectors", "the key vectors", "the value vectors", "the raw scores"))
    return LessonStep(
        "weighted", f"7 · Weighted sum of values ({f.hs})", r"Z_j = A V_j,\qquad z_i = \sum_{j} A_{ij} v_j",
        f"Each token's new vector mixes the value vectors with its weights. z({tq}) = {_vec(heads[i])}.",
        heads, f.toks, _dims(f.d_v, "z"), questions=(q_avg,))


def output_softmax_live(f: Focus) -> str:
    """Notes 000 Q7, live: the model's own output distribution at the followed token (trace.probs)."""
    if f.trace.probs is None:
        return (" This model has no output layer (an encoder): its last hidden states go to a task head instead, "
                "so there is no next-token softmax to show.")
    p = np.asarray(f.trace.probs[0, f.i], dtype=np.float64)  # (V,)
    return (f" Live, at {f.tq}: the softmax over this model's |V| = {p.size:,} logits gives probabilities between "
            f"{p.min():.2e} and {p.max():.4f} (its top choice), summing to {p.sum():.4f}.")


def heads_differ(f: Focus) -> str:
    """Evidence that heads attend differently, from the live weights: the followed head against
    another head at a query where their strongest keys differ (the followed query when they differ
    there, else the first such query); if every head picks the same strongest key for every query,
    says so and compares how much weight they put there."""
    H, T, w, head = f.H, f.T, f.w_all, f.head
    if H == 1:
        return "This model has a single head, so there is nothing to compare."
    top = np.argmax(np.where(np.isfinite(w), w, -np.inf), axis=-1)  # (H, T) strongest key per head and query
    others = [(head + d) % H for d in range(1, H)]
    for queries in ([f.i], range(T)):  # prefer the followed query
        for q in queries:
            for o in others:
                if top[o, q] != top[head, q]:
                    at_q = "" if q == f.i else f" (from {f.tq} both pick {f.mtoks[int(top[head, f.i])]}, so look at another query)"
                    return (f"Here, from **{f.mtoks[q]}**, head {head} puts its largest weight on "
                            f"**{f.mtoks[int(top[head, q])]}** ({w[head, q, top[head, q]]:.2f}) while head {o} puts "
                            f"its largest on **{f.mtoks[int(top[o, q])]}** ({w[o, q, top[o, q]]:.2f}){at_q}. Over "
                            f"the {T} queries, head {head} and head {o} pick different strongest keys for "
                            f"{int((top[head] != top[o]).sum())}.")
    o = others[0]
    gap = float(np.abs(w[head] - w[o]).max())
    return (f"In this layer every head picks the same strongest key for every query of your sentence (often the first "
            f"token); they still differ in how they spread the rest: head {head} and head {o} differ by up to "
            f"{gap:.2f} in some weight. Try a longer sentence or a trained model.")


def concat_step(f: Focus) -> LessonStep:
    T, H, d_v, i, head, tq = f.T, f.H, f.d_v, f.i, f.head, f.tq
    q_width = Question(
        "concat_width", "the lecture on causal masking and multi-head attention, self-assessment question 5",
        f"Each of the **{H}** heads outputs a {T} × {d_v} matrix Z_j. How many columns does Concat(Z_1, …, Z_{H}) have?",
        "number", float(H * d_v), f"h · d_v = {H} · {d_v} = **{H * d_v}**"
        + (" = d_model" if H * d_v == f.D else f" (d_model is {f.D}: W_O maps {H * d_v} back to {f.D})")
        + ": the heads sit side by side.",
        lo=0, hi=1e6, step=1)
    motive = "different heads can attend to different relationships at once"
    q_why_heads = Question(
        "why_heads", "the lecture on causal masking and multi-head attention, self-assessment question 3",
        "What is the main reason for several heads instead of one big one?", "choice", motive,
        "Each head has its own W_Q, W_K, W_V, so it can learn its own pattern (syntax, nearby words, long-range "
        "links…). " + heads_differ(f),
        options=(motive, "it needs fewer parameters than one head", "it removes the need for a mask",
                 "it makes the softmax unnecessary"))
    return LessonStep(
        "concat", "8 · Concatenate the heads", r"Z_c = \mathrm{Concat}(Z_1, \dots, Z_h) \in \mathbb{R}^{T \times h d_v}",
        f"The {H} head outputs ({T} × {d_v} each) are placed side by side: {T} × {H * d_v}.",
        f.concat, f.toks, _dims(f.concat.shape[1], "c"), questions=(q_width, q_why_heads))


def output_step(f: Focus) -> LessonStep:
    T, D = f.T, f.D
    q_out = Question(
        "out_shape", "the lecture on causal masking and multi-head attention, self-assessment question 5",
        "After concatenation, the block multiplies by W_O. What is the shape of the result for your sentence?",
        "choice", f"{T} × {D}",
        f"W_O is {f.H * f.d_v} × {D}, so ({T} × {f.H * f.d_v})({f.H * f.d_v} × {D}) = **{T} × {D}** — the same "
        "shape as X, so it can be added to "
        "the residual stream and the next block can take it.",
        options=tuple(dict.fromkeys([f"{T} × {D}", f"{T} × {f.d_k}", f"{D} × {D}", f"{T} × {T}"])))
    pw = "the same small network is applied to each token separately"
    q_ffn = Question(
        "position_wise", "the lecture on causal masking and multi-head attention, self-assessment question 6",
        "Next comes the feed-forward layer, applied \"position-wise\". What does that mean?", "choice", pw,
        f"The same {'W_1, W_2' if f.arch is None else f.arch.activation.matrices.split(' (')[0].replace(' and ', ', ')} "
        "act on every row independently"
        + ("" if f.arch is None else f" (here {f.arch.activation.name}: {f.arch.activation.matrices})")
        + "; it does not mix tokens — mixing across positions is attention's job (the step you just finished).",
        options=(pw, "it looks at the positions of the tokens", "it mixes information across tokens",
                 "it has one set of weights per position"))
    q_final = Question(
        "output_layer", "the lecture on causal masking and multi-head attention, self-assessment question 7",
        "At the very end, the output layer turns each row into scores over the vocabulary. Which function makes "
        "them a probability distribution?", "choice", "softmax",
        "A linear layer gives |V| logits per position and **softmax** turns them into probabilities that sum to 1 "
        "(the next-token distribution)." + output_softmax_live(f), options=("ReLU", "softmax", "layer norm", "argmax"))
    return LessonStep(
        "output", "9 · Output projection W_O",
        r"\mathrm{MultiHead}(X) = Z_c\, W_O,\quad W_O \in \mathbb{R}^{"
        + (r"d_{model} \times d_{model}" if f.H * f.d_v == D else r"h d_v \times d_{model}") + "}",
        f"W_O mixes the heads' outputs back into one {D}-dimensional vector per token. Row {f.tq}: {_vec(f.out[f.i])}.",
        f.out, f.toks, _dims(f.out.shape[1], "o"), questions=(q_out, q_ffn, q_final))


# One builder per step, in the order of STEP_KEYS (the lesson page's steps 1..9).
STEP_BUILDERS = (embeddings_step, qkv_step, scores_step, scale_step, mask_step, softmax_step, weighted_step,
                 concat_step, output_step)


def head_share_question(heads: np.ndarray, target: str, *, n_options: int = 4) -> Question:
    """"Which head writes most of *target*?" from a logit attribution (classroom.attribution:
    `heads` (L, H), each head's share of the target's logit). The options are the n_options heads
    with the largest shares in size (the one with the largest positive share among them), as
    "L{layer} H{head}" in a fixed order; the explanation gives their shares."""
    s = np.asarray(heads, dtype=np.float64)
    if s.ndim != 2 or s.size < 2:
        raise ValueError(f"heads must be (layers, heads) with at least two heads, got shape {s.shape}")
    H = s.shape[1]
    best = int(np.argmax(s))
    by_size = [int(i) for i in np.argsort(-np.abs(s), axis=None)]
    picked = [best] + [i for i in by_size if i != best][: max(1, n_options - 1)]
    name = [f"L{i // H} H{i % H}" for i in picked]
    word = md_escape(target)
    expl = ("Each head's share of the logit (its output read through the frozen final norm and the output row of "
            f"“{word}”): " + ", ".join(f"{n} {s.flat[i]:+.2f}" for n, i in zip(name, picked))
            + f". The largest is **{name[0]}**; heads with a negative share push “{word}” down.")
    return Question("head_share", "Why this token? (direct logit attribution)",
                    f"Which head writes most of **“{word}”** (the largest share of its logit)?",
                    "choice", name[0], expl, options=tuple(name))

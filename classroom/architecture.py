"""The current model in words (issue 34 point 1): every sentence, table and title of the app that
names an architectural fact — the shapes of W_Q, W_K, W_V, W_O (grouped-query attention
included), which linear maps carry a bias, the norm (LayerNorm with γ and β, RMSNorm with γ only,
pre or post, a final norm), how positions enter (added to X, or rotating q and k), the FFN's
activation, ε and where its value comes from, the parameter formula of every part — is produced
here from a ModelConfig, never written for one family. Pages read `describe(cfg)` and
`param_formulas(cfg)`; nothing here is Streamlit-aware.

Conventions: matrices are written as the lecture notes write them, input × output (Q = X W_Q, so
W_Q is d_model × h·d_k); the engine stores nn.Linear weights the other way round (out × in).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from model.config import GATED, ModelConfig, param_breakdown




def _biases(cfg: ModelConfig) -> tuple[bool, bool, bool]:
    """(W_Q/W_K/W_V, W_O, FFN) have biases: the families' split (Qwen2: q/k/v only), else `bias`."""
    return cfg.bias_qkv, cfg.bias_out, cfg.bias_ffn


def _n(x: int) -> str:
    """An integer with thousands separators (49,152)."""
    return f"{x:,}"


@dataclass(frozen=True)
class Matrix:
    """One weight matrix of attention, in the notes' orientation (input × output)."""
    name: str  # "W_K"
    rows: int  # input width (d_model for W_Q, W_K, W_V; h·d_v for W_O)
    cols: int  # output width
    formula: str  # the shape in symbols, e.g. "d_model × h_kv·d_k"
    bias: bool  # whether a bias vector (cols,) is added after it

    @property
    def shape(self) -> str:
        """"576 × 192"."""
        return f"{self.rows} × {self.cols}"


@dataclass(frozen=True)
class NormFacts:
    """The model's normalisation layers."""
    kind: str  # "layernorm" | "rmsnorm" | "none" (use_norm False)
    name: str  # "LayerNorm" | "RMSNorm" | "no norm"
    params: str  # "γ and β" | "γ only" | "none"
    has_beta: bool  # a learned shift β (LayerNorm); RMSNorm has none
    formula: str  # y = … with ε, e.g. "y = γ · (x − μ) / √(σ² + ε) + β"
    eps: float  # the model's ε
    eps_note: str  # "ε = 1e-12, read from …": its value and where it comes from
    placement: str  # "pre" | "post"
    short: str  # "pre-LN", "pre-RMSNorm", "post-LN", "no norm"
    placement_text: str  # one sentence on where the norms sit in a block
    final: bool  # a final norm before the output layer
    per_layer: int  # norms inside each block (2)


@dataclass(frozen=True)
class PositionFacts:
    """How the model knows word order."""
    kind: str  # cfg.pos_encoding: "sinusoidal" | "learned" | "rope" | "none"
    name: str  # "sinusoidal", "learned", "rotary (RoPE)", "none"
    added: bool  # a position vector is added to the token embedding (sinusoidal, learned)
    input_x: str  # what block 0 reads, e.g. "token embedding + position"
    input_short: str  # the same in a few words, for a table cell: "token + position", "token only"
    sentence: str  # how positions enter, one or two sentences


@dataclass(frozen=True)
class ActivationFacts:
    """The FFN of every block."""
    name: str  # "GELU", "ReLU", "SwiGLU"
    gated: bool  # a gated unit (SwiGLU): three matrices instead of two
    ffn_formula: str  # "FFN(x) = GELU(x W₁ + b₁) W₂ + b₂" (the 2017 paper's order; biases only when present)
    hidden: str  # what the hidden activations are, e.g. "after GELU", "SiLU(x W_gate) ⊙ (x W_up)"
    matrices: str  # "W₁ (d_model × d_ff) and W₂ (d_ff × d_model)"
    bias: bool  # the FFN's linear maps have biases


@dataclass(frozen=True)
class Architecture:
    """A ModelConfig described in words and shapes (describe)."""
    stack: str  # "decoder-only" | "encoder-only"
    stack_text: str  # the stack in words, incl. that it drops cross-attention
    d_model: int
    n_heads: int  # query heads h
    kv_heads: int  # key/value heads (h without grouped-query attention)
    d_k: int  # query/key width per head
    d_v: int  # value width per head
    n_layers: int
    d_ff: int
    vocab_size: int
    w_q: Matrix
    w_k: Matrix
    w_v: Matrix
    w_o: Matrix
    score: str  # "QKᵀ / √d_k" or "QKᵀ" (scaling off)
    norm: NormFacts
    positions: PositionFacts
    activation: ActivationFacts
    output: str  # "logits = h · Eᵀ (tied to the embedding)", "… W_outᵀ", or "no output layer"
    details: tuple[str, ...]  # the family's own numeric details in words (soft-caps, scales, q/k norms, …); () for most
    summary: str  # one line: "d_model 576 · 9 query heads, 3 K/V heads · 30 layers · rotary · pre-RMSNorm · …"

    @property
    def d_k_text(self) -> str:
        """Where d_k comes from: "d_k = d_model / h = 576 / 9 = 64", or the model's own head width
        when it is not d_model / h (Qwen3, Gemma 2: "d_k = 128, the model's head_dim (d_model / h = 96)")."""
        if self.n_heads * self.d_k == self.d_model:
            return f"d_k = d_model / h = {self.d_model} / {self.n_heads} = {self.d_k}"
        return (f"d_k = {self.d_k}, the model's own head width (head_dim; d_model / h would be "
                f"{self.d_model / self.n_heads:g})")

    @property
    def d_k_markdown(self) -> str:
        """d_k_text with the value in bold (markdown)."""
        if self.n_heads * self.d_k == self.d_model:
            return f"d_k = d_model / h = {self.d_model} / {self.n_heads} = **{self.d_k}**"
        return self.d_k_text.replace(f"d_k = {self.d_k},", f"d_k = **{self.d_k}**,", 1)

    @property
    def gqa(self) -> bool:
        """Grouped-query attention: fewer K/V heads than query heads."""
        return self.kv_heads < self.n_heads

    @property
    def output_formula(self) -> str:
        """The attention output in symbols: "concat · W_O + b_O" or "concat · W_O"."""
        return "concat · W_O" + (" + b_O" if self.w_o.bias else "")

    @property
    def biases(self) -> str:
        """Which linear maps carry biases, in words."""
        qkv, o, ffn = self.w_q.bias, self.w_o.bias, self.activation.bias
        if qkv and o and ffn:
            return "every linear map has a bias"
        if not (qkv or o or ffn):
            return "no linear map has a bias"
        parts = [name for name, b in (("W_Q, W_K, W_V", qkv), ("W_O", o), ("the FFN", ffn)) if b]
        return "biases on " + ", ".join(parts) + " only"


def eps_note(cfg: ModelConfig, source: str = "") -> str:
    """ε with its provenance. `source`: where a loaded model's value was read ("SmolLM2-135M's
    GGUF (llama.attention.layer_norm_rms_epsilon)"); "" for a model built in this app, whose ε is
    the config's default (PyTorch's nn.LayerNorm default, 1e-5) unless the config set another."""
    eps = cfg.ln_eps
    if source:
        return f"ε = {eps:g}, read from {source}."
    if eps == 1e-5:
        return f"ε = {eps:g}: the default of models built in this app, the same as PyTorch's nn.LayerNorm."
    return f"ε = {eps:g}, set in this model's configuration (PyTorch's nn.LayerNorm default is 1e-5)."


def _norm(cfg: ModelConfig, eps_source: str) -> NormFacts:
    note = eps_note(cfg, eps_source)
    if not cfg.use_norm:
        return NormFacts("none", "no norm", "none", False, "y = x (no normalisation)", cfg.ln_eps,
                         "This model has no norms (ε unused).", cfg.norm, "no norm",
                         "This model has no norms: each block is x + Attn(x), then + FFN(·).", False, 0)
    if cfg.norm_kind == "rmsnorm":
        kind, name, params, beta = "rmsnorm", "RMSNorm", "γ only", False
        formula = "y = γ · x / √(mean(x²) + ε)"
        if cfg.norm_unit_offset:  # Gemma: the stored weights are offsets from 1
            params, formula = "γ only, stored as γ − 1", "y = (1 + w) · x / √(mean(x²) + ε)"
        tag = "RMSNorm"
    else:
        kind, name, params, beta = "layernorm", "LayerNorm", "γ and β", True
        formula = "y = γ · (x − μ) / √(σ² + ε) + β"
        tag = "LN"
    N = name
    sandwich = bool(cfg.sandwich_norm)
    if sandwich:  # Gemma 2: a norm before and after each sublayer
        text = (f"pre-{tag} with sandwich norms: x + {N}(Attn({N}(x))), then + {N}(FFN({N}(·))) — a norm before "
                "and after each sublayer" + (f", and a final {N} before the output layer." if cfg.final_norm else "."))
        return NormFacts(kind, name, params, beta, formula, cfg.ln_eps, note, cfg.norm, f"sandwich-{tag}", text,
                         bool(cfg.final_norm), 4)
    if cfg.norm == "pre":
        text = (f"pre-{tag}: x + Attn({N}(x)), then + FFN({N}(·))"
                + (f", and a final {N} before the output layer" if cfg.final_norm else "")
                + ": the stream itself is never normalized, so its norm can grow with depth.")
    else:
        text = (f"post-{tag}: {N}(x + Attn(x)), then {N}(· + FFN(·)): the stream is renormalized after every "
                "sublayer" + (f", and a final {N} follows the last block." if cfg.final_norm else "."))
    return NormFacts(kind, name, params, beta, formula, cfg.ln_eps, note, cfg.norm, f"{cfg.norm}-{tag}", text,
                     bool(cfg.final_norm), 2)


def _positions(cfg: ModelConfig) -> PositionFacts:
    scale = cfg.emb_scale
    emb = "token embedding" if scale is None else f"token embedding × {scale:.4g} (√d_model)"
    extra = (" + token type" if cfg.type_vocab_size else "")
    ln = ", then LayerNorm" if cfg.emb_norm else ""
    short_added = "LN(token + position + type)" if cfg.emb_norm and cfg.type_vocab_size else \
        ("LN(token + position)" if cfg.emb_norm else "token + position")
    if cfg.pos_encoding == "sinusoidal":
        return PositionFacts("sinusoidal", "sinusoidal", True, f"{emb} + position{extra}{ln}", short_added,
                             "A sinusoidal vector is added to each token embedding: PE(pos, 2i) = sin(pos / 10000^(2i/d)), "
                             "PE(pos, 2i+1) = cos(pos / 10000^(2i/d)) — computed, no parameters.")
    if cfg.pos_encoding == "learned":
        off = int(cfg.pos_offset)
        return PositionFacts("learned", "learned", True, f"{emb} + position{extra}{ln}", short_added,
                             f"A learned vector is added to each token embedding: one trained row per position "
                             f"(a {cfg.max_len + off} × {cfg.d_model} table"
                             + (f"; position p reads row p + {off}" if off else "")
                             + f"; no position beyond {cfg.max_len}).")
    if cfg.pos_encoding == "rope":
        return PositionFacts("rope", "rotary (RoPE)", False,
                             f"{emb}{extra}{ln} only; rotary positions turn q and k", "token only: rotary",
                             "Nothing is added to the token embeddings: in every head each query and key is rotated by "
                             f"an angle that grows with its position (rotary positions, {rope_words(cfg)}), so "
                             "scores depend on relative positions.")
    return PositionFacts("none", "none", False, f"{emb}{extra}{ln} (no positions)", "token only: no positions",
                         "This model has no positional encoding: attention alone cannot tell word order "
                         "(only a causal mask leaks some).")


def _rescaled(cfg: ModelConfig) -> str:
    if cfg.rope_llama3 is not None:
        return ", with Llama 3.1's rescaling of the slow pairs"
    if cfg.rope_freq_factors is not None:
        return ", each pair's frequency divided by its own factor"
    if cfg.rope_linear is not None:
        return f", every frequency divided by {cfg.rope_linear:g} (linear scaling)"
    return ""


def rope_words(cfg: ModelConfig) -> str:
    """The model's rotary bases, from its config: one θ for every layer, or (Gemma 3) one for its
    sliding-window layers and another for its global ones."""
    if cfg.rope_local_theta is None:
        return f"θ = {cfg.rope_theta:,.0f} here{_rescaled(cfg)}"
    glob = [i for i in range(cfg.n_layers) if cfg.layer_window(i) is None]
    local = cfg.n_layers - len(glob)
    return (f"θ = {cfg.rope_theta:,.0f} on the {len(glob)} global layer{'s' if len(glob) != 1 else ''} "
            f"({', '.join(map(str, glob))}){_rescaled(cfg)}, and {cfg.rope_local_theta:,.0f} on the {local} "
            f"sliding-window layers")


def _activation(cfg: ModelConfig) -> ActivationFacts:
    b = _biases(cfg)[2]
    b2 = " + b₂" if b else ""
    if cfg.activation in GATED:
        gate, name = ("SiLU", "SwiGLU") if cfg.activation == "swiglu" else ("GELU", "GeGLU")
        bg, bu = (" + b_gate", " + b_up") if b else ("", "")
        return ActivationFacts(name, True, f"FFN(x) = ({gate}(x W_gate{bg}) ⊙ (x W_up{bu})) W₂{b2}",
                               f"{gate}(x W_gate) ⊙ (x W_up)",
                               "W_gate and W_up (d_model × d_ff each) and W₂ (d_ff × d_model)", b)
    name = {"gelu": "GELU", "relu": "ReLU", "gelu_tanh": "GELU (tanh approximation)"}.get(cfg.activation, cfg.activation)
    sym = {"gelu_tanh": "GELU_tanh"}.get(cfg.activation, name)
    return ActivationFacts(name, False, f"FFN(x) = {sym}(x W₁{' + b₁' if b else ''}) W₂{b2}", f"after {name}",
                           "W₁ (d_model × d_ff) and W₂ (d_ff × d_model)", b)


def _matrices(cfg: ModelConfig) -> tuple[Matrix, Matrix, Matrix, Matrix]:
    D, H, kv, dk, dv = cfg.d_model, cfg.n_heads, cfg.kv_heads, cfg.d_k, cfg.d_value
    hk = "h_kv" if kv != H else "h"
    bq, bo, _ = _biases(cfg)
    return (Matrix("W_Q", D, H * dk, "d_model × h·d_k", bq),
            Matrix("W_K", D, kv * dk, f"d_model × {hk}·d_k", bq),
            Matrix("W_V", D, kv * dv, f"d_model × {hk}·d_v", bq),
            Matrix("W_O", H * dv, D, "h·d_v × d_model", bo))


def describe(cfg: ModelConfig, *, eps_source: str = "") -> Architecture:
    """The model of `cfg` in words and shapes. eps_source: where a loaded model's ε was read
    (see eps_note); "" for models built in this app."""
    wq, wk, wv, wo = _matrices(cfg)
    norm, pos, act = _norm(cfg, eps_source), _positions(cfg), _activation(cfg)
    encoder = (bool(cfg.encoder) or not cfg.output_head or cfg.type_vocab_size > 0
               or bool(cfg.mlm_head))
    if encoder:
        stack = "encoder-only"
        stack_text = ("An encoder-only stack (BERT's family): each block is self-attention over the whole sentence and "
                      "an FFN. There is no cross-attention (no second sequence to attend to) and no decoder.")
    else:
        stack = "decoder-only"
        stack_text = ("A decoder-only stack (GPT's family): each block is masked self-attention and an FFN. The 2017 "
                      "decoder's middle sublayer, cross-attention over an encoder's output, is dropped: there is no "
                      "encoder, so the queries have nothing else to read.")
    if not cfg.output_head:
        output = "no output layer (an encoder: the last hidden states go to a task head or pooling)"
    elif cfg.mlm_head:
        output = ("a masked-LM head: a d_model × d_model layer, its activation and a LayerNorm, then logits = h · Eᵀ + b "
                  "(fill in the blank)")
    elif cfg.tie_weights:
        output = "logits = h · Eᵀ (the output layer is tied to the token embedding E)"
    else:
        output = "logits = h · W_outᵀ (its own output matrix, V × d_model)"
    details = _details(cfg)
    heads = (f"{cfg.n_heads} query heads, {cfg.kv_heads} K/V head{'s' if cfg.kv_heads > 1 else ''}"
             if cfg.kv_heads != cfg.n_heads
             else f"{cfg.n_heads} heads")
    summary = (f"d_model {cfg.d_model} · {heads} · {cfg.n_layers} layers · {pos.name} positions · {norm.short} · "
               f"{act.name} · {_bias_word(cfg)} · vocab {_n(cfg.vocab_size)}")
    return Architecture(stack=stack, stack_text=stack_text, d_model=cfg.d_model, n_heads=cfg.n_heads,
                        kv_heads=cfg.kv_heads, d_k=cfg.d_k, d_v=cfg.d_value, n_layers=cfg.n_layers, d_ff=cfg.d_ff,
                        vocab_size=cfg.vocab_size, w_q=wq, w_k=wk, w_v=wv, w_o=wo,
                        score=_score(cfg), norm=norm, positions=pos, activation=act, output=output,
                        details=details, summary=summary)


def _bias_word(cfg: ModelConfig) -> str:
    bq, bo, bf = _biases(cfg)
    if bq and bo and bf:
        return "biases"
    if not (bq or bo or bf):
        return "no biases"
    return "biases on " + ", ".join(n for n, b in (("q/k/v", bq), ("W_O", bo), ("FFN", bf)) if b)


def _score(cfg: ModelConfig) -> str:
    """How a query scores a key, in symbols: "QKᵀ / √d_k", "QKᵀ" (scaling off), or a family's factor."""
    scale = cfg.attn_scale
    if scale is not None:
        return f"QKᵀ × {scale:.4g}"
    return "QKᵀ / √d_k" if cfg.scale_scores else "QKᵀ"


def layer_ranges(layers: Sequence[int]) -> str:
    """"0–4, 6–10, 12–16" for (0, 1, 2, 3, 4, 6, ...): runs of consecutive layers joined by an en dash."""
    runs: list[list[int]] = []
    for i in sorted(layers):
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}–{r[-1]}" for r in runs)


def global_layers(cfg: ModelConfig) -> tuple[int, ...]:
    """The layers without a window (every layer when the model has none)."""
    return tuple(i for i in range(cfg.n_layers) if cfg.layer_window(i) is None)


def window_sentence(cfg: ModelConfig) -> str:
    """Which layers slide and which see everything, from the config: "Sliding-window attention in
    layers 0–4, 6–10, 12–16 (a query sees itself and the 511 keys before it); layers 5, 11, 17 are
    global (every earlier key)." """
    w = cfg.window
    local = [i for i in range(cfg.n_layers) if cfg.layer_window(i) is not None]
    glob = global_layers(cfg)
    span = f"a query sees itself and the {w - 1:,} key{'s' if w != 2 else ''} before it"
    if not glob:
        return f"Sliding-window attention in every layer ({span})."
    where = ("layer " if len(local) == 1 else "layers ") + layer_ranges(local)
    g = ("layer " if len(glob) == 1 else "layers ") + ", ".join(map(str, glob))
    return (f"Sliding-window attention in {where} ({span}); {g} {'is' if len(glob) == 1 else 'are'} global "
            "(every earlier key).")


def layer_span(cfg: ModelConfig, layer: int) -> str:
    """One layer's reach in words: "Layer 5 is global: a query sees every earlier key." /
    "Layer 3 is a sliding-window layer: a query sees itself and the 511 keys before it." ("" for a
    model without a window)."""
    if cfg.window is None:
        return ""
    w = cfg.layer_window(layer)
    if w is None:
        return f"Layer {layer} is global: a query sees every earlier key."
    return f"Layer {layer} is a sliding-window layer: a query sees itself and the {w - 1:,} keys before it."


def _details(cfg: ModelConfig) -> tuple[str, ...]:
    """The family's numeric details beyond the 2017 design, one sentence each (none for the
    models built here)."""
    out = []
    if cfg.family == "gpt2":
        out.append("GPT-2 stores W_Q, W_K, W_V (one fused matrix), W_O and the FFN as Conv1D layers: input × output, "
                   "the notes' orientation; they are plain linear maps x W + b.")
    if cfg.attn_scale is not None:
        if abs(cfg.attn_scale - cfg.d_k ** -0.5) < 1e-12:
            out.append(f"Scores are multiplied by query_pre_attn_scalar^−1/2 = {cfg.attn_scale:.4g} "
                       f"(here equal to 1/√d_k, d_k = {cfg.d_k}).")
        else:
            out.append(f"Scores are multiplied by {cfg.attn_scale:.4g}, not 1/√d_k = {cfg.d_k ** -0.5:.4g} "
                       "(query_pre_attn_scalar^−1/2).")
    if cfg.qk_norm:
        gamma = "(1 + γ)" if cfg.norm_unit_offset else "γ"
        out.append(f"Each head's q and k are RMS-normalised (scaled by {gamma}, {cfg.d_k} weights each) before the "
                   "rotation (QK-norm).")
    if cfg.attn_softcap is not None:
        c = cfg.attn_softcap
        out.append(f"Scores are soft-capped before the mask: s → {c:g}·tanh(s / {c:g}), so none exceeds ±{c:g} (Gemma 2).")
    if cfg.final_softcap is not None:
        c = cfg.final_softcap
        out.append(f"Logits are soft-capped: z → {c:g}·tanh(z / {c:g}) (Gemma 2).")
    if cfg.emb_scale is not None:
        out.append(f"The token embedding is multiplied by {cfg.emb_scale:.4g} ≈ √d_model before block 0 (Gemma).")
    if cfg.window is not None:
        out.append(window_sentence(cfg))
    if cfg.pos_encoding == "rope" and cfg.rope_local_theta is not None and cfg.window is not None:
        out.append(f"Rotary bases differ by layer type: θ = {cfg.rope_local_theta:,.0f} in the sliding-window "
                   f"layers, θ = {cfg.rope_theta:,.0f} in the global ones"
                   + (f" (their positions divided by {cfg.rope_linear:g})" if cfg.rope_linear else "") + ".")
    if cfg.rope_llama3 is not None:
        f, lo, hi, orig = cfg.rope_llama3
        out.append(f"Rotary frequencies rescaled for long context (Llama 3: factor {f:g}, trained at {orig:,} tokens).")
    return tuple(out)


# ------------------------------------------------------------------------------------------------
# Parameter formulas per part, each a sum of terms whose counts add up to model.config's count
# (the tests check the sum for every model), so a formula cannot drift from the config.
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Term:
    """One term of a parameter formula: `coef` times a monomial worth `unit` parameters."""
    coef: int  # how many times, e.g. 4 for "4 d_model²"
    symbol: str  # the monomial, e.g. "d_model²", "d_model·h_kv·d_k"
    unit: int  # its value for this config, e.g. 576 * 576

    @property
    def text(self) -> str:
        return self.symbol if self.coef == 1 else f"{self.coef} {self.symbol}"


@dataclass(frozen=True)
class PartFormula:
    """The parameter count of one part (model.config.param_breakdown's key) in symbols."""
    part: str  # "attention", "ffn", …
    formula: str  # "L × (2 d_model² + 2 d_model·h_kv·d_k)  [W_Q, W_O: …; no biases]"
    count: int  # what the formula evaluates to for this config (= param_breakdown(cfg)[part])


def _sum(terms: list[Term]) -> tuple[str, int]:
    """Like terms merged (same symbol), in order of first appearance; their text and value."""
    merged: dict[str, Term] = {}
    for t in terms:
        if t.symbol in merged:
            m = merged[t.symbol]
            merged[t.symbol] = Term(m.coef + t.coef, m.symbol, m.unit)
        else:
            merged[t.symbol] = t
    return " + ".join(t.text for t in merged.values()), sum(t.coef * t.unit for t in merged.values())


def _attention_terms(cfg: ModelConfig) -> tuple[list[Term], list[Term]]:
    """Per layer: (weight terms, bias terms) of W_Q, W_K, W_V, W_O."""
    D, H, kv, dk, dv = cfg.d_model, cfg.n_heads, cfg.kv_heads, cfg.d_k, cfg.d_value

    def width(heads: int, d: int, hs: str, ds: str) -> tuple[str, int]:
        return ("d_model", D) if heads * d == D else (f"{hs}·{ds}", heads * d)

    hk = "h" if kv == H else "h_kv"
    ds = "d_k" if dv == dk else "d_v"  # the same symbol when the widths agree, so like terms merge
    q, k, v, o = width(H, dk, "h", "d_k"), width(kv, dk, hk, "d_k"), width(kv, dv, hk, ds), width(H, dv, "h", ds)

    def mat(w: tuple[str, int]) -> Term:
        return Term(1, "d_model²", D * D) if w[0] == "d_model" else Term(1, f"d_model·{w[0]}", D * w[1])

    weights = [mat(q), mat(k), mat(v), mat(o)]
    bq, bo, _ = _biases(cfg)
    biases = ([Term(1, w[0], w[1]) for w in (q, k, v)] if bq else []) + ([Term(1, "d_model", D)] if bo else [])
    if cfg.attn_score == "additive":
        weights.append(Term(1, "h (2 d_k² + d_k)", H * (2 * dk * dk + dk)))
    return weights, biases


def param_formulas(cfg: ModelConfig) -> list[PartFormula]:
    """The formula of every part of model.config.param_breakdown(cfg), in its order."""
    D, L = cfg.d_model, cfg.n_layers
    out: dict[str, PartFormula] = {}
    parts = param_breakdown(cfg)

    def put(part: str, formula: str, count: int) -> None:
        out[part] = PartFormula(part, formula, count)

    put("token_embedding", "V × d_model", cfg.vocab_size * D)
    if cfg.pos_encoding == "learned":
        off = int(cfg.pos_offset)
        put("position_embedding", "max_len × d_model (a learned table)" if not off else
            f"(max_len + {off}) × d_model (a learned table; rows from {off} on are used)", (cfg.max_len + off) * D)
    else:
        put("position_embedding", {"sinusoidal": "0: sinusoidal positions are computed by a formula",
                                   "rope": "0: rotary positions turn q and k, no table",
                                   "none": "0: no positions"}[cfg.pos_encoding], 0)

    w, b = _attention_terms(cfg)
    wt, wc = _sum(w)
    bt, bc = _sum(b) if b else ("", 0)
    names = ("W_Q, W_K, W_V, W_O" if len({t.symbol for t in w[:4]}) == 1 else
             "; ".join(f"{m.name}: {m.formula}" for m in _matrices(cfg)))
    bq, bo, bf = _biases(cfg)
    note = f"[{names}" + (" + biases]" if bq and bo else "; biases on W_Q, W_K, W_V]" if bq else
                          "; a bias on W_O]" if bo else "; no biases]")
    put("attention", f"L × ({wt}{' + ' + bt if bt else ''})  {note}", L * (wc + bc))

    F = cfg.d_ff
    n_mats = 3 if cfg.activation in GATED else 2
    ffn_w = Term(n_mats, "d_model·d_ff", D * F)
    ffn_b = ([Term(n_mats - 1, "d_ff", F), Term(1, "d_model", D)] if bf else [])
    ft, fc = _sum([ffn_w, *ffn_b])
    mats = "W_gate, W_up, W₂" if n_mats == 3 else "W₁, W₂"
    put("ffn", f"L × ({ft})  [{mats}" + (" + biases]" if bf else "; no biases]"), L * fc)

    if cfg.use_norm:
        per = (2 * D, "2 d_model", "γ, β") if cfg.norm_kind == "layernorm" else (D, "d_model", "γ")
        name = "LayerNorm" if cfg.norm_kind == "layernorm" else "RMSNorm"
        k = 4 if cfg.sandwich_norm else 2  # Gemma 2: a norm after each sublayer too
        f = f"L × {k} × {per[1]} ({per[2]})" + (f" + {per[1]} (the final {name})" if cfg.final_norm else "")
        put("layer_norm", f, L * k * per[0] + (per[0] if cfg.final_norm else 0))
    else:
        put("layer_norm", "0: no norms", 0)

    if not cfg.output_head:
        put("output", "0: no output layer", 0)
    elif cfg.tie_weights:
        put("output", "0: tied to the token embedding (logits = h · Eᵀ)", 0)
    else:
        put("output", "V × d_model (its own output matrix)", cfg.vocab_size * D)
    if "token_type_embedding" in parts:
        put("token_type_embedding", "type_vocab × d_model", cfg.type_vocab_size * D)
    if "embedding_norm" in parts:
        put("embedding_norm", "2 d_model (γ, β)" if cfg.norm_kind == "layernorm" else "d_model (γ)",
            2 * D if cfg.norm_kind == "layernorm" else D)
    if "qk_norm" in parts:
        put("qk_norm", "L × 2 × d_k (γ of the q and k RMSNorms)", L * 2 * cfg.d_k)
    if "mlm_head" in parts:
        put("mlm_head", "d_model² + d_model + 2 d_model + V (dense W, b; LayerNorm γ, β; the logits' bias)",
            D * D + D + 2 * D + cfg.vocab_size)
    missing = set(parts) - set(out)
    if missing:  # a part model.config counts that has no formula here yet: say so, never guess
        for part in sorted(missing):
            put(part, "(no formula yet)", parts[part])
    return [out[k] for k in parts]


def window_here(cfg: ModelConfig, T: int, fresh_window: int | None = None) -> str:
    """The model on screen's own sliding window beside a teaching one (the variants page's fresh
    weights, the mask lab's masks), from its config, for an input of T tokens: which layers slide,
    how many keys they keep, and whether the window cuts anything at this length."""
    if cfg.window is None:
        return ""
    w = cfg.window
    cut = (f"At {T:,} tokens it removes nothing (no query has more than {w - 1:,} keys before it); from "
           f"{w + 1:,} tokens on, a local layer's query {w:,} (counting from 0) is the first that no longer sees "
           "token 0." if T <= w else
           f"At {T:,} tokens it removes keys: in a local layer query i sees keys i − {w - 1:,} … i, so the last "
           f"query sees {w:,} of the {T:,}.")
    fresh = "" if fresh_window is None else f" The fresh-weights window here is w = {fresh_window:,}, to make the band visible on a short sentence."
    return f"The model on screen slides too, with w = {w:,}. {window_sentence(cfg)} {cut}{fresh}"

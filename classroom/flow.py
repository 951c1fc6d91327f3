"""The end-to-end flow of one forward pass (issue 19 point 6): every stage from token ids to
probabilities with the real tensor shapes of the current model and sentence, in the order the
model computes them (pre-LN or post-LN, with or without a final norm or output layer), each with
the page that explains it. Pure Python over a (numpy) ForwardTrace."""
from __future__ import annotations

from dataclasses import dataclass

from .architecture import describe


@dataclass(frozen=True)
class Stage:
    """One step of the forward pass, as the flow diagram draws it."""
    name: str  # what the step is ("block 0 · softmax weights")
    shape: tuple[int, ...]  # the tensor it hands on, without the batch axis, e.g. (H, T, T)
    page: str  # url path of the page that explains it ("heads", "ffn-output", …)
    what: str  # one line on what it computes
    absent: bool = False  # a sublayer the 2017 design has and this model drops (drawn dashed, passes x on)


def _shape(a) -> tuple[int, ...]:
    return tuple(int(x) for x in a.shape)


def stages(tr, cfg) -> list[Stage]:
    """The stages of one forward pass in the model's order, layer 0 in full; the other layers
    repeat it (one stage says so)."""
    out = _input_stages(tr, cfg) + _block_stages(tr, cfg)
    if cfg.n_layers > 1:
        out.append(Stage(f"blocks 1 … {cfg.n_layers - 1}: the same", _shape(tr.layers[-1].resid_out)[1:],
                         "overview", f"{cfg.n_layers - 1} more blocks, each with its own weights"))
    return out + _output_stages(tr, cfg)


def _norm_name(cfg) -> str:
    return "RMSNorm" if cfg.norm_kind == "rmsnorm" else "LayerNorm"


def _input_stages(tr, cfg) -> list[Stage]:
    """Token ids to what block 0 reads: embeddings, positions, token types, BERT's embedding norm."""
    emb = tr.embeddings
    T = _shape(tr.ids)[1]
    out = [Stage("token ids", (T,), "heads", "the tokenizer's output, one id per token"),
           Stage("token embeddings", _shape(emb.token)[1:], "ffn-output", "a row of the embedding matrix E per token")]
    if emb.scale is not None:  # Gemma: the embedding times sqrt(d_model)
        out.append(Stage(f"× {emb.scale:.4g} (√d_model)", _shape(emb.token)[1:], "positional",
                         "Gemma scales the token embedding before block 0"))
    if cfg.pos_encoding in ("sinusoidal", "learned"):
        out.append(Stage(f"+ {cfg.pos_encoding} positions", _shape(emb.position), "positional",
                         "a position vector added to each token's row"))
    if emb.token_type is not None:
        out.append(Stage("+ token types", _shape(emb.token_type)[1:], "mask-lab", "sentence A or B (BERT)"))
    if emb.ln is not None:
        out.append(Stage("embedding LayerNorm", _shape(emb.ln.output)[1:], "layer-norm",
                         "BERT normalises the sum before block 0"))
    return out


def _attention_stages(tr, cfg) -> list[Stage]:
    """Block 0's attention: Q, K, V, the masked scores, the weights, the heads, W_O."""
    at = tr.layers[0].attn
    qkv = (f"Q {_shape(at.q)[1:]}, K and V {_shape(at.k)[1:]}" if _shape(at.k) == _shape(at.v)
           else f"Q {_shape(at.q)[1:]}, K {_shape(at.k)[1:]}, V {_shape(at.v)[1:]}")
    return [Stage("block 0 · attention: Q, K, V", _shape(at.q)[1:], "multi-head",
                  qkv + (": K/V heads shared" if at.kv_head is not None else "")
                  + ("; q and k RMS-normalised" if cfg.qk_norm else "")
                  + ("; rotary turns q, k" if cfg.pos_encoding == "rope" else "")),
            Stage(f"block 0 · scores {describe(cfg).score}, masked", _shape(at.scaled)[1:], "scaling",
                  "one T × T score matrix per head"
                  + (f", soft-capped to ±{cfg.attn_softcap:g}" if cfg.attn_softcap is not None else "")
                  + (" (causal mask)" if tr.causal else "")),
            Stage("block 0 · softmax weights", _shape(at.weights)[1:], "heads", "each row sums to 1"),
            Stage("block 0 · Z = weights · V, concat", _shape(at.concat)[1:], "multi-head", "the heads side by side"),
            Stage("block 0 · × W_O", _shape(at.output)[1:], "multi-head", "back to d_model")]


def _block_stages(tr, cfg) -> list[Stage]:
    """Block 0 in the model's order: pre-LN norms before each sublayer, post-LN after each residual add."""
    b0 = tr.layers[0]
    attn = _attention_stages(tr, cfg)
    act = describe(cfg).activation
    ffn = [Stage("block 0 · FFN hidden", _shape(b0.ffn.hidden_post)[1:], "ffn-output",
                 (f"{act.name}: a gated unit, three linear maps" if act.gated else
                  f"{act.name} between two linear maps") + ", each position alone"),
           Stage("block 0 · FFN output", _shape(b0.ffn.output)[1:], "ffn-output", "back to d_model")]

    def ln(which: str) -> list[Stage]:
        t = getattr(b0, which)
        return [] if t is None else [Stage(f"block 0 · {_norm_name(cfg)} ({which})", _shape(t.output)[1:],
                                           "layer-norm", "each token's vector rescaled")]

    def post(which: str) -> list[Stage]:  # Gemma 2's sandwich norm on a sublayer's output
        t = getattr(b0, which)
        return [] if t is None else [Stage(f"block 0 · {_norm_name(cfg)} ({which})", _shape(t.output)[1:],
                                           "layer-norm", "the sublayer's output rescaled, before the add")]

    def add(what: str) -> list[Stage]:
        return [Stage(f"block 0 · add residual ({what})", _shape(b0.resid_mid)[1:], "layer-norm",
                      "x + sublayer(x): the residual stream")]

    # A decoder-only stack drops the 2017 decoder's middle sublayer (cross-attention over an encoder's
    # output): drawn where it would sit, dashed, passing the stream on unchanged.
    cross = ([Stage("block 0 · cross-attention: none", _shape(b0.resid_mid)[1:], "encoder-decoder",
                    "decoder-only: no encoder, so the 2017 decoder's cross-attention is dropped", absent=True)]
             if describe(cfg).stack == "decoder-only" else [])
    if cfg.norm == "pre":
        return (ln("ln1") + attn + post("ln1_post") + add("attention") + cross + ln("ln2") + ffn + post("ln2_post")
                + add("FFN"))
    return attn + add("attention") + ln("ln1") + cross + ffn + add("FFN") + ln("ln2")


def _output_stages(tr, cfg) -> list[Stage]:
    """After the last block: the final norm, then logits and probabilities (or an encoder's hidden states)."""
    out = []
    if tr.final_ln is not None:
        out.append(Stage(f"final {_norm_name(cfg)}", _shape(tr.final_ln.output)[1:], "layer-norm",
                         "before the output layer"))
    if cfg.output_head:  # shapes only: the logits themselves are computed on first read (not here)
        t_v = (_shape(tr.final)[1], cfg.vocab_size)  # (T, V)
        if cfg.mlm_head:  # the BERT family's masked-LM head before the output matrix
            out.append(Stage("masked-LM head", _shape(tr.final)[1:], "ffn-output",
                             "dense d_model × d_model, activation, LayerNorm"))
        out.append(Stage("logits = h · Eᵀ" + (" + b" if cfg.mlm_head else "") if cfg.tie_weights else "logits = h · W_outᵀ",
                         t_v, "ffn-output", "a score per vocabulary token"
                         + (f", soft-capped to ±{cfg.final_softcap:g}" if cfg.final_softcap is not None else "")))
        out.append(Stage("softmax → probabilities", t_v, "generate", "the next-token distribution at every position"))
    else:
        out.append(Stage("last hidden states (no output layer)", _shape(tr.final)[1:], "ffn-output",
                         "an encoder: vectors for a task head or pooling, no word prediction"))
    return out


def pages_in_order(rows: list[Stage]) -> dict[str, list[str]]:
    """{page: the names of its stages}, pages in the order they first appear."""
    out: dict[str, list[str]] = {}
    for r in rows:
        out.setdefault(r.page, []).append(r.name)
    return out

"""The end-to-end flow of one forward pass (issue 19 point 6): every stage from token ids to
probabilities with the real tensor shapes of the current model and sentence, in the order the
model computes them (pre-LN or post-LN, with or without a final norm or output layer), each with
the page that explains it. Pure Python over a (numpy) ForwardTrace."""
from __future__ import annotations


def _shape(a) -> tuple[int, ...]:
    return tuple(int(x) for x in a.shape)


def stages(tr, cfg) -> list[dict]:
    """[{"name", "shape" (without the batch axis), "page" (url path), "what"}] for layer 0 in full;
    the other layers repeat it (one row says so)."""
    emb, b0 = tr.embeddings, tr.layers[0]
    T = _shape(tr.ids)[1]
    out = [dict(name="token ids", shape=(T,), page="heads", what="the tokenizer's output, one id per token")]
    out.append(dict(name="token embeddings", shape=_shape(emb.token)[1:], page="ffn-output",
                    what="a row of the embedding matrix E per token"))
    if cfg.pos_encoding in ("sinusoidal", "learned"):
        out.append(dict(name=f"+ {cfg.pos_encoding} positions", shape=_shape(emb.position), page="positional",
                        what="a position vector added to each token's row"))
    if emb.token_type is not None:
        out.append(dict(name="+ token types", shape=_shape(emb.token_type)[1:], page="mask-lab",
                        what="sentence A or B (BERT)"))
    if emb.ln is not None:
        out.append(dict(name="embedding LayerNorm", shape=_shape(emb.ln.output)[1:], page="layer-norm",
                        what="BERT normalises the sum before block 0"))
    at = b0.attn
    qkv = (f"Q {_shape(at.q)[1:]}, K and V {_shape(at.k)[1:]}" if _shape(at.k) == _shape(at.v)
           else f"Q {_shape(at.q)[1:]}, K {_shape(at.k)[1:]}, V {_shape(at.v)[1:]}")
    attn = [dict(name="block 0 · attention: Q, K, V", shape=_shape(at.q)[1:], page="multi-head",
                 what=qkv + (": K/V heads shared" if at.kv_head is not None else "")
                 + ("; rotary turns q, k" if cfg.pos_encoding == "rope" else "")),
            dict(name="block 0 · scores QKᵀ/√d_k, masked", shape=_shape(at.scaled)[1:], page="scaling",
                 what="one T × T score matrix per head" + (" (causal mask)" if tr.causal else "")),
            dict(name="block 0 · softmax weights", shape=_shape(at.weights)[1:], page="heads",
                 what="each row sums to 1"),
            dict(name="block 0 · Z = weights · V, concat", shape=_shape(at.concat)[1:], page="multi-head",
                 what="the heads side by side"),
            dict(name="block 0 · × W_O", shape=_shape(at.output)[1:], page="multi-head", what="back to d_model")]
    ffn = [dict(name="block 0 · FFN hidden", shape=_shape(b0.ffn.hidden_post)[1:], page="ffn-output",
                what=f"{cfg.activation} between two linear maps, each position alone"),
           dict(name="block 0 · FFN output", shape=_shape(b0.ffn.output)[1:], page="ffn-output", what="back to d_model")]
    norm_name = "RMSNorm" if cfg.norm_kind == "rmsnorm" else "LayerNorm"
    def ln(which):
        t = getattr(b0, which)
        return [] if t is None else [dict(name=f"block 0 · {norm_name} ({which})", shape=_shape(t.output)[1:],
                                         page="layer-norm", what="each token's vector rescaled")]
    add = lambda what: dict(name=f"block 0 · add residual ({what})", shape=_shape(b0.resid_mid)[1:],  # noqa: E731
                            page="layer-norm", what="x + sublayer(x): the residual stream")
    if cfg.norm == "pre":
        out += ln("ln1") + attn + [add("attention")] + ln("ln2") + ffn + [add("FFN")]
    else:
        out += attn + [add("attention")] + ln("ln1") + ffn + [add("FFN")] + ln("ln2")
    if cfg.n_layers > 1:
        out.append(dict(name=f"blocks 1 … {cfg.n_layers - 1}: the same", shape=_shape(tr.layers[-1].resid_out)[1:],
                        page="overview", what=f"{cfg.n_layers - 1} more blocks, each with its own weights"))
    if tr.final_ln is not None:
        out.append(dict(name=f"final {norm_name}", shape=_shape(tr.final_ln.output)[1:], page="layer-norm",
                        what="before the output layer"))
    if cfg.output_head:  # shapes only: the logits themselves are computed on first read (not here)
        t_v = (_shape(tr.final)[1], cfg.vocab_size)  # (T, V)
        out.append(dict(name="logits = h · Eᵀ" if cfg.tie_weights else "logits = h · W_outᵀ",
                        shape=t_v, page="ffn-output", what="a score per vocabulary token"))
        out.append(dict(name="softmax → probabilities", shape=t_v, page="generate",
                        what="the next-token distribution at every position"))
    else:
        out.append(dict(name="last hidden states (no output layer)", shape=_shape(tr.final)[1:], page="ffn-output",
                        what="an encoder: vectors for a task head or pooling, no word prediction"))
    return out

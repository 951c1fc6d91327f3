"""Seq2SeqTransformer: the 2017 encoder–decoder, every intermediate traced.

encoder: token + position embeddings -> N Blocks with *bidirectional* self-attention (source
         padding keys masked) -> (final LN, pre-LN models) = the "memory" (B, T_src, D)
decoder: token + position embeddings -> N DecoderBlocks, each
         causal self-attention -> cross-attention (queries from the decoder, keys/values from
         the encoder memory, source padding keys masked) -> FFN
         -> (final LN, pre-LN models) -> output layer (tied to the shared embedding by default)

Source and target share one (joint) vocabulary and one embedding matrix, so a checkpoint stores
one tokenizer. Every attention goes through `model.attention.attend` (via MultiHeadAttention).
One code path: `trace` records, `forward` runs the same `run` with record=False.
Masks: allowed (bool, True = may attend) is the source of truth; padded *query* rows are not
masked (their outputs are ignored by the loss), exactly like nn.Transformer.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .attention import causal_allowed, combine, padding_allowed
from .config import ModelConfig
from .layers import Block, FeedForward, MultiHeadAttention, make_norm
from .trace import AttentionTrace, BlockTrace, EmbeddingTrace, FFNTrace, LayerNormTrace, TraceNode
from .transformer import TokenModel, init_weights


# ----------------------------------------------------------------------------- traces
@dataclass(frozen=True)
class DecoderBlockTrace(TraceNode):
    input: Tensor  # (B, T_tgt, D)  residual stream entering the block
    ln1: LayerNormTrace  # pre-LN: before self-attention; post-LN: after input + self-attention
    self_attn: AttentionTrace  # causal: weights (B, H, T_tgt, T_tgt)
    resid_mid: Tensor  # (B, T_tgt, D)  stream after the self-attention sublayer
    ln2: LayerNormTrace  # pre-LN: before cross-attention; post-LN: after resid_mid + cross-attention
    cross_attn: AttentionTrace  # q from decoder, k/v from memory: weights (B, H, T_tgt, T_src)
    resid_cross: Tensor  # (B, T_tgt, D)  stream after the cross-attention sublayer
    ln3: LayerNormTrace  # pre-LN: before the FFN; post-LN: after resid_cross + FFN
    ffn: FFNTrace
    resid_out: Tensor  # (B, T_tgt, D)  stream leaving the block


@dataclass(frozen=True)
class EncoderTrace(TraceNode):
    ids: Tensor  # (B, T_src) long
    padding_mask: Tensor | None  # (B, T_src) bool, True = real token
    embeddings: EmbeddingTrace  # token (B, T_src, D), position (T_src, D), sum (B, T_src, D)
    layers: tuple[BlockTrace, ...]  # .attn weights (B, H, T_src, T_src), bidirectional
    final_ln: LayerNormTrace | None  # pre-LN models; None for post-LN
    output: Tensor  # (B, T_src, D)  the memory the decoder's cross-attention reads


@dataclass(frozen=True)
class DecoderTrace(TraceNode):
    ids: Tensor  # (B, T_tgt) long  (decoder input: <bos> y_1 ... y_{T-1})
    padding_mask: Tensor | None  # (B, T_tgt) bool, True = real token
    embeddings: EmbeddingTrace  # token (B, T_tgt, D), position (T_tgt, D), sum (B, T_tgt, D)
    layers: tuple[DecoderBlockTrace, ...]
    final_ln: LayerNormTrace | None  # pre-LN models; None for post-LN
    final: Tensor  # (B, T_tgt, D)  what the output layer sees


@dataclass(frozen=True)
class Seq2SeqTrace(TraceNode):
    encoder: EncoderTrace
    decoder: DecoderTrace
    logits: Tensor  # (B, T_tgt, V)  row i scores the token that follows decoder input i
    probs: Tensor  # (B, T_tgt, V)  softmax(logits)


# ----------------------------------------------------------------------------- blocks
class DecoderBlock(nn.Module):
    """pre-LN:  x + SelfAttn(LN1(x)) -> + CrossAttn(LN2(.), memory) -> + FFN(LN3(.))
    post-LN: LN1(x + SelfAttn(x)) -> LN2(. + CrossAttn(., memory)) -> LN3(. + FFN(.))
    Same arithmetic as nn.TransformerDecoderLayer(norm_first=pre, dropout=0)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.pre = cfg.norm == "pre"
        self.ln1 = make_norm(cfg)
        self.self_attn = MultiHeadAttention(cfg)
        self.ln2 = make_norm(cfg)
        self.cross_attn = MultiHeadAttention(cfg, cross=True)  # keys from the memory: no positional variants
        self.ln3 = make_norm(cfg)
        self.ffn = FeedForward(cfg)

    def forward(self, x: Tensor, memory: Tensor, self_allowed: Tensor | None,
                cross_allowed: Tensor | None, record: bool = True
                ) -> tuple[Tensor, DecoderBlockTrace | None]:
        if self.pre:
            h, ln1 = self.ln1(x, record)  # (B, Tt, D)
            a, sa = self.self_attn(h, allowed=self_allowed, record=record)  # (B, Tt, D)
            mid = x + a
            h2, ln2 = self.ln2(mid, record)
            c, ca = self.cross_attn(h2, x_kv=memory, allowed=cross_allowed, record=record)  # (B, Tt, D)
            cross = mid + c
            h3, ln3 = self.ln3(cross, record)
            f, ft = self.ffn(h3, record)
            out = cross + f  # (B, Tt, D)
        else:
            a, sa = self.self_attn(x, allowed=self_allowed, record=record)
            mid, ln1 = self.ln1(x + a, record)  # (B, Tt, D)
            c, ca = self.cross_attn(mid, x_kv=memory, allowed=cross_allowed, record=record)
            cross, ln2 = self.ln2(mid + c, record)
            f, ft = self.ffn(cross, record)
            out, ln3 = self.ln3(cross + f, record)  # (B, Tt, D)
        if not record:
            return out, None
        return out, DecoderBlockTrace(input=x, ln1=ln1, self_attn=sa, resid_mid=mid, ln2=ln2,
                                      cross_attn=ca, resid_cross=cross, ln3=ln3, ffn=ft,
                                      resid_out=out)


# ----------------------------------------------------------------------------- model
class Seq2SeqTransformer(TokenModel):
    """Encoder–decoder with cfg.n_layers encoder blocks and cfg.n_layers decoder blocks.
    Embeddings, output layer and id checks are Transformer's (TokenModel); source and target
    share them. Same cfg + seed -> identical weights in any process (init_weights)."""

    def __init__(self, cfg: ModelConfig, seed: int = 0):
        super().__init__()
        if isinstance(cfg, ModelConfig) and cfg.pos_encoding == "rope":
            raise ValueError("rotary positions (pos_encoding='rope') are supported by the decoder-only "
                             "Transformer; choose 'sinusoidal' or 'learned' for Seq2SeqTransformer")
        self._build_token_io(cfg)  # tok_emb shared by source and target
        self.enc_blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.enc_ln_f = make_norm(cfg) if cfg.final_norm else None
        self.dec_blocks = nn.ModuleList(DecoderBlock(cfg) for _ in range(cfg.n_layers))
        self.dec_ln_f = make_norm(cfg) if cfg.final_norm else None
        self._build_output(cfg)
        init_weights(self, seed)
        self.eval()

    def encode(self, src_ids: Tensor, src_padding_mask: Tensor | None = None, record: bool = True):
        """memory (B, T_src, D), and an EncoderTrace when record=True (else None)."""
        self.check_ids(src_ids, src_padding_mask, "src_ids")
        x, emb = self.embed(src_ids)
        allowed = padding_allowed(src_padding_mask) if src_padding_mask is not None else None  # (B,1,Ts,Ts)
        layers = []
        for block in self.enc_blocks:
            x, bt = block(x, allowed, record)  # (B, Ts, D)
            layers.append(bt)
        final_ln = None
        if self.enc_ln_f is not None:
            x, final_ln = self.enc_ln_f(x, record)
        if not record:
            return x, None
        return x, EncoderTrace(ids=src_ids, padding_mask=src_padding_mask, embeddings=emb,
                               layers=tuple(layers), final_ln=final_ln, output=x)

    def decode(self, memory: Tensor, tgt_ids: Tensor, src_padding_mask: Tensor | None = None,
               tgt_padding_mask: Tensor | None = None, record: bool = True):
        """logits (B, T_tgt, V), and a DecoderTrace when record=True (else None)."""
        self.check_ids(tgt_ids, tgt_padding_mask, "tgt_ids")
        if memory.shape[0] != tgt_ids.shape[0]:
            raise ValueError(f"source batch {memory.shape[0]} != target batch {tgt_ids.shape[0]}")
        x, emb = self.embed(tgt_ids)
        Tt, Ts = tgt_ids.shape[1], memory.shape[1]
        self_allowed = combine(causal_allowed(Tt),
                               padding_allowed(tgt_padding_mask) if tgt_padding_mask is not None else None)
        cross_allowed = None  # (B, 1, Tt, Ts): every decoder query may read every real source key
        if src_padding_mask is not None:
            cross_allowed = src_padding_mask[:, None, None, :].expand(-1, 1, Tt, Ts)
        layers = []
        for block in self.dec_blocks:
            x, bt = block(x, memory, self_allowed, cross_allowed, record)  # (B, Tt, D)
            layers.append(bt)
        final_ln = None
        if self.dec_ln_f is not None:
            x, final_ln = self.dec_ln_f(x, record)
        logits = x @ self.output_matrix.T  # (B, Tt, V)
        if not record:
            return logits, None
        return logits, DecoderTrace(ids=tgt_ids, padding_mask=tgt_padding_mask, embeddings=emb,
                                    layers=tuple(layers), final_ln=final_ln, final=x)

    def run(self, src_ids: Tensor, tgt_ids: Tensor, src_padding_mask: Tensor | None,
            tgt_padding_mask: Tensor | None, record: bool):
        memory, enc = self.encode(src_ids, src_padding_mask, record)
        logits, dec = self.decode(memory, tgt_ids, src_padding_mask, tgt_padding_mask, record)
        if not record:
            return logits
        return Seq2SeqTrace(encoder=enc, decoder=dec, logits=logits, probs=torch.softmax(logits, dim=-1))

    def forward(self, src_ids: Tensor, tgt_ids: Tensor, src_padding_mask: Tensor | None = None,
                tgt_padding_mask: Tensor | None = None) -> Tensor:
        """Logits (B, T_tgt, V); the same arithmetic as trace() with nothing recorded."""
        return self.run(src_ids, tgt_ids, src_padding_mask, tgt_padding_mask, record=False)

    @torch.no_grad()
    def trace(self, src_ids: Tensor, tgt_ids: Tensor, src_padding_mask: Tensor | None = None,
              tgt_padding_mask: Tensor | None = None) -> Seq2SeqTrace:
        """Every intermediate of one encoder–decoder pass (eval mode, no grad)."""
        was_training = self.training
        self.eval()
        try:
            return self.run(src_ids, tgt_ids, src_padding_mask, tgt_padding_mask, record=True)
        finally:
            self.train(was_training)


# ----------------------------------------------------------------------------- greedy decoding
@dataclass(frozen=True)
class DecodeStep:
    """One greedy step: the decoder saw `input_ids` and chose `token_id` from the last row."""
    input_ids: Tensor  # (1, t+1) long: <bos> y_1 .. y_t
    token_id: int  # argmax of the last row of probs
    prob: float  # its probability
    cross_attn: Tensor  # (L, H, T_src): every layer's cross-attention row for the new token
    self_attn: Tensor  # (L, H, t+1): every layer's causal self-attention row for the new token
    trace: Seq2SeqTrace  # the full trace of this step


@dataclass(frozen=True)
class DecodeResult:
    src_ids: Tensor  # (1, T_src)
    ids: list[int]  # generated tokens (without <bos>; ends with <eos> if it was produced)
    steps: tuple[DecodeStep, ...]  # one per generated token
    trace: Seq2SeqTrace  # full trace of (src, <bos> + ids[:-1]): row i produced ids[i]
    finished: bool  # True if <eos> was produced within max_len


@torch.no_grad()
def greedy_decode(s2s: Seq2SeqTransformer, src_ids: Tensor, max_len: int, bos_id: int,
                  eos_id: int) -> DecodeResult:
    """Greedy decoding of ONE source sentence (src_ids (1, T_src) or (T_src,)), keeping the full
    trace of every step. Because the decoder is causal, step t's rows equal row t of the final
    trace (a test checks this)."""
    if src_ids.dim() == 1:
        src_ids = src_ids[None]
    if src_ids.shape[0] != 1:
        raise ValueError("greedy_decode traces one sentence: src_ids must be (1, T_src)")
    max_len = int(min(max_len, s2s.cfg.max_len))
    if max_len < 1:
        raise ValueError("max_len must be >= 1")
    ids: list[int] = []
    steps: list[DecodeStep] = []
    for _ in range(max_len):
        inp = torch.tensor([[bos_id] + ids], dtype=torch.long)  # (1, t+1)
        tr = s2s.trace(src_ids, inp)
        p = tr.probs[0, -1]  # (V,)
        nxt = int(p.argmax())
        steps.append(DecodeStep(
            input_ids=inp, token_id=nxt, prob=float(p[nxt]),
            cross_attn=torch.stack([lt.cross_attn.weights[0, :, -1] for lt in tr.decoder.layers]),
            self_attn=torch.stack([lt.self_attn.weights[0, :, -1] for lt in tr.decoder.layers]),
            trace=tr))
        ids.append(nxt)
        if nxt == eos_id:
            break
    return DecodeResult(src_ids=src_ids, ids=ids, steps=tuple(steps), trace=steps[-1].trace,
                        finished=ids[-1] == eos_id)


@torch.no_grad()
def greedy_ids(s2s: Seq2SeqTransformer, src_ids: Tensor, src_padding_mask: Tensor | None,
               max_len: int, bos_id: int, eos_id: int) -> list[list[int]]:
    """Batched greedy decoding without traces (evaluation). Returns each row's tokens up to and
    excluding <eos>. The encoder runs once; the decoder reruns on the growing prefix."""
    was = s2s.training
    s2s.eval()
    try:
        memory, _ = s2s.encode(src_ids, src_padding_mask, record=False)
        B = src_ids.shape[0]
        out = torch.full((B, 1), bos_id, dtype=torch.long)
        done = torch.zeros(B, dtype=torch.bool)
        for _ in range(min(max_len, s2s.cfg.max_len)):
            logits, _ = s2s.decode(memory, out, src_padding_mask, None, record=False)
            nxt = logits[:, -1].argmax(-1)  # (B,)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == eos_id
            if bool(done.all()):
                break
    finally:
        s2s.train(was)
    res = []
    for row in out[:, 1:].tolist():
        res.append(row[: row.index(eos_id)] if eos_id in row else row)
    return res

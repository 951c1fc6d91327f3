"""The RNN encoder–decoder with additive attention (Bahdanau, Cho & Bengio 2015; notes 004), the
model cross-attention grew out of. Pure torch, small enough to train in a minute on one core.

    encoder   a bidirectional GRU reads the source: annotation h_j = [→h_j ; ←h_j]      (B, T_in, d_enc)
    decoder   a GRU cell; at step i, from its previous state s_{i-1}:
                e_ij  = vᵀ tanh(W_q s_{i-1} + W_k h_j)          energies         (notes: a(s_{i-1}, h_j))
                α_ij  = softmax_j(e_ij)                          alignment (rows sum to 1)
                c_i   = Σ_j α_ij h_j                             context vector   (notes eq. 5)
                s_i   = GRU([emb(y_{i-1}); c_i], s_{i-1})
                p(y_i | y_<i, x) = softmax(W_o [s_i; c_i; emb(y_{i-1})])
Before attention, the decoder saw one fixed vector for the whole sentence (the encoder's last
state): a bottleneck that made long sentences translate badly. Here every output word gets its
own context c_i.

One code path: `forward` (training), `trace` (teacher-forced, every intermediate) and `greedy`
all run `_step`. Checkpoints: config.json + model.safetensors (never pickle), `save_rnn` /
`load_rnn`.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .attention import masked_softmax
from .checkpoint import tensor_problems
from .tokenizer import Tokenizer
from .trace import AdditiveAttentionTrace, RNNSeq2SeqTrace

KIND = "rnn-seq2seq"  # config.json "kind": not a Transformer (the sidebar's model list skips it)


@dataclass(frozen=True)
class RNNConfig:
    vocab_size: int
    d_emb: int = 32  # word embeddings (encoder and decoder each have their own table)
    d_enc: int = 32  # encoder GRU state per direction; annotations h_j have 2 * d_enc (bidirectional)
    d_dec: int = 64  # decoder GRU state s_i
    d_attn: int = 48  # size of the additive-attention hidden layer (W_q s, W_k h, v)
    bidirectional: bool = True
    attention: bool = True  # False: the encoder–decoder before attention (Cho et al. 2014, Sutskever et al.
    #                         2014): one fixed context for every output word, the encoder's final states
    #                         c = [→h_last ; ←h_first]: the bottleneck attention removed. No W_q, W_k, v.

    def __post_init__(self) -> None:
        for f in fields(self):
            val = getattr(self, f.name)
            if f.type in ("int", int) and (not isinstance(val, int) or isinstance(val, bool) or val < 1):
                raise ValueError(f"RNNConfig.{f.name} must be a positive integer, got {val!r}")
            if f.type in ("bool", bool) and not isinstance(val, bool):
                raise ValueError(f"RNNConfig.{f.name} must be True or False, got {val!r}")

    @property
    def d_annot(self) -> int:
        return self.d_enc * (2 if self.bidirectional else 1)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "RNNConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown RNNConfig fields: {sorted(unknown)}")
        return cls(**d)


class RNNSeq2Seq(nn.Module):
    def __init__(self, cfg: RNNConfig, seed: int = 0):
        super().__init__()
        self.cfg = cfg
        g = torch.random.fork_rng()
        with g:
            torch.manual_seed(seed)
            self.src_emb = nn.Embedding(cfg.vocab_size, cfg.d_emb)
            self.tgt_emb = nn.Embedding(cfg.vocab_size, cfg.d_emb)
            self.encoder = nn.GRU(cfg.d_emb, cfg.d_enc, batch_first=True, bidirectional=cfg.bidirectional)
            self.init = nn.Linear(cfg.d_annot, cfg.d_dec)  # s_0 = tanh(W_init mean_j h_j)
            if cfg.attention:
                self.w_q = nn.Linear(cfg.d_dec, cfg.d_attn)  # W_q s_{i-1} (+ bias)
                self.w_k = nn.Linear(cfg.d_annot, cfg.d_attn, bias=False)  # W_k h_j
                self.v = nn.Linear(cfg.d_attn, 1, bias=False)  # vᵀ
            self.cell = nn.GRUCell(cfg.d_emb + cfg.d_annot, cfg.d_dec)
            self.out = nn.Linear(cfg.d_dec + cfg.d_annot + cfg.d_emb, cfg.vocab_size)

    # ------------------------------------------------------------------ encoder
    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """src (B, T_in) long, src_mask (B, T_in) bool (True = real word; None = all real) ->
        (annotations h (B, T_in, d_annot), allowed (B, 1, T_in) bool, s_0 (B, d_dec)). Padding is
        packed away so the backward GRU starts at each sentence's own last word."""
        B, T = src.shape
        if src_mask is None:
            src_mask = torch.ones(B, T, dtype=torch.bool)
        lengths = src_mask.sum(1)
        if bool((lengths < 1).any()):
            raise ValueError("every source sentence needs at least one word")
        packed = pack_padded_sequence(self.src_emb(src), lengths.cpu(), batch_first=True, enforce_sorted=False)
        h, _ = self.encoder(packed)
        h, _ = pad_packed_sequence(h, batch_first=True, total_length=T)  # (B, T_in, d_annot), 0 at padding
        mean = h.sum(1) / lengths[:, None].to(h.dtype)  # (B, d_annot) over the real words
        return h, src_mask[:, None, :], torch.tanh(self.init(mean))

    # ------------------------------------------------------------------ one decoder step
    def fixed_context(self, h: Tensor, allowed: Tensor) -> Tensor:
        """The one context of the encoder–decoder without attention: the forward GRU's state after
        the last real word and the backward GRU's state after the first, side by side (B, d_annot).
        h (B, T_in, d_annot), allowed (B, 1, T_in)."""
        last = allowed[:, 0].sum(1) - 1  # (B,) index of each sentence's last real word
        fwd = h[torch.arange(h.shape[0]), last, : self.cfg.d_enc]  # (B, d_enc)
        if not self.cfg.bidirectional:
            return fwd
        return torch.cat([fwd, h[:, 0, self.cfg.d_enc:]], -1)  # (B, 2 d_enc)

    def _keys(self, h: Tensor, allowed: Tensor) -> Tensor:
        """What every decoder step reads of the encoder: W_k h_j (B, T_in, d_attn) with attention,
        the fixed context (B, d_annot) without."""
        return self.w_k(h) if self.cfg.attention else self.fixed_context(h, allowed)

    def _step(self, y_prev: Tensor, s_prev: Tensor, h: Tensor, key_proj: Tensor, allowed: Tensor):
        """y_prev (B,) long, s_prev (B, d_dec), h (B, T_in, d_annot), key_proj (B, T_in, d_attn)
        (without attention: the fixed context (B, d_annot)) -> (s_i, logits (B, V), query_proj
        (B, d_attn), energies (B, T_in), weights, context). Without attention the context is the
        same at every step and query_proj, energies and weights are zeros (no attention network)."""
        if self.cfg.attention:
            query_proj = self.w_q(s_prev)  # (B, d_attn)
            # Additive attention energies, computed here (model.attention's `additive` is the -inf/0
            # form of a mask, not this): e_ij = vᵀ tanh(W_q s_{i-1} + W_k h_j).
            energies = self.v(torch.tanh(query_proj[:, None, :] + key_proj))[..., 0]  # (B, T_in)
            masked, weights, _ = masked_softmax(energies[:, None, :], allowed)  # the one masked softmax
            masked, weights = masked[:, 0], weights[:, 0]  # (B, T_in) each
            context = (weights[:, :, None] * h).sum(1)  # (B, d_annot)  c_i = Σ_j α_ij h_j
        else:
            context = key_proj  # (B, d_annot): the fixed context, the same for every i
            query_proj = s_prev.new_zeros(s_prev.shape[0], self.cfg.d_attn)
            masked = weights = h.new_zeros(h.shape[0], h.shape[1])  # (B, T_in)
        e = self.tgt_emb(y_prev)  # (B, d_emb)
        s = self.cell(torch.cat([e, context], -1), s_prev)  # (B, d_dec)
        logits = self.out(torch.cat([s, context, e], -1))  # (B, V)
        return s, logits, query_proj, masked, weights, context

    def _run(self, src: Tensor, tgt_in: Tensor, src_mask: Tensor | None):
        h, allowed, s = self.encode(src, src_mask)
        key_proj = self._keys(h, allowed)  # (B, T_in, d_attn) once per sentence; without attention the context
        s0 = s
        rec = {k: [] for k in ("s", "logits", "q", "e", "w", "c")}
        for i in range(tgt_in.shape[1]):
            s, logits, q, e, w, c = self._step(tgt_in[:, i], s, h, key_proj, allowed)
            for k, x in zip(rec, (s, logits, q, e, w, c)):
                rec[k].append(x)
        st = {k: torch.stack(v, 1) for k, v in rec.items()}
        return h, allowed, s0, key_proj, st

    def forward(self, src: Tensor, tgt_in: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """Teacher-forced logits (B, T_out, V)."""
        return self._run(src, tgt_in, src_mask)[-1]["logits"]

    @torch.no_grad()
    def trace(self, src: Tensor, tgt_in: Tensor, src_mask: Tensor | None = None) -> RNNSeq2SeqTrace:
        was = self.training
        self.eval()
        try:
            h, allowed, s0, key_proj, st = self._run(src, tgt_in, src_mask)
        finally:
            self.train(was)
        attn = AdditiveAttentionTrace(query_proj=st["q"], key_proj=key_proj, energies=st["e"], allowed=allowed,
                                      weights=st["w"], context=st["c"])
        return RNNSeq2SeqTrace(src_ids=src, tgt_in=tgt_in, annotations=h, init_state=s0, states=st["s"],
                               attn=attn, logits=st["logits"], probs=torch.softmax(st["logits"], -1))

    @torch.no_grad()
    def greedy(self, src: Tensor, src_mask: Tensor | None, max_len: int, bos_id: int, eos_id: int) -> list[list[int]]:
        """Greedy decoding of a batch: per sentence the produced ids, up to and including <eos>."""
        was = self.training
        self.eval()
        try:
            h, allowed, s = self.encode(src, src_mask)
            key_proj = self._keys(h, allowed)
            y = torch.full((src.shape[0],), bos_id, dtype=torch.long)
            outs: list[list[int]] = [[] for _ in range(src.shape[0])]
            done = torch.zeros(src.shape[0], dtype=torch.bool)
            for _ in range(max_len):
                s, logits, *_ = self._step(y, s, h, key_proj, allowed)
                y = logits.argmax(-1)
                for b in range(len(outs)):
                    if not done[b]:
                        outs[b].append(int(y[b]))
                done |= y == eos_id
                if bool(done.all()):
                    break
        finally:
            self.train(was)
        return outs


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------------- checkpoints (safetensors)
def save_rnn(model: RNNSeq2Seq, tok: Tokenizer, path: str | Path, extra: dict | None = None) -> Path:
    """Directory `path` with config.json (kind, config, vocabulary, extra) and model.safetensors."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    meta = {"format_version": 1, "kind": KIND, "config": model.cfg.to_dict(), "tokenizer": tok.to_dict()}
    if extra:
        meta["extra"] = extra
    (path / "config.json").write_text(json.dumps(meta, indent=1))
    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, str(path / "model.safetensors"),
              metadata={"kind": KIND})
    return path


def load_rnn(path: str | Path) -> tuple[RNNSeq2Seq, Tokenizer, dict]:
    """(model in eval mode, tokenizer, extra) from a save_rnn directory; ValueError says what does
    not match (kind, vocabulary size, tensor names or shapes)."""
    path = Path(path)
    if not (path / "config.json").is_file() or not (path / "model.safetensors").is_file():
        raise ValueError(f"{path} needs config.json and model.safetensors")
    meta = json.loads((path / "config.json").read_text())
    if meta.get("kind") != KIND:
        raise ValueError(f"{path} is a {meta.get('kind', 'transformer')!r} checkpoint, not {KIND!r}")
    cfg = RNNConfig.from_dict(meta["config"])
    tok = Tokenizer.from_dict(meta["tokenizer"])
    if len(tok) != cfg.vocab_size:
        raise ValueError(f"tokenizer has {len(tok)} entries but config.vocab_size is {cfg.vocab_size}")
    model = RNNSeq2Seq(cfg)
    tensors = load_file(str(path / "model.safetensors"))
    problems = tensor_problems(model.state_dict(), tensors)
    if problems:
        raise ValueError("checkpoint does not match its config: " + "; ".join(problems[:6]))
    model.load_state_dict(tensors, strict=True)
    return model.eval(), tok, meta.get("extra", {}) or {}


__all__ = ["RNNConfig", "RNNSeq2Seq", "save_rnn", "load_rnn", "param_count"]

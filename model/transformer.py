"""Transformer: token + position (+ token-type) embeddings -> (embedding LN) -> N blocks ->
(final LN) -> output layer (or none: an encoder such as BERT/MiniLM ends at its hidden states).

`trace` returns a ForwardTrace of every intermediate; `forward` runs the same code with
recording off and returns logits. The mask is an argument (causal or not, key padding), never a
property of the weights, so the same weights run causal or bidirectional.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from .attention import causal_allowed, combine, padding_allowed
from .config import ModelConfig
from .generate import CachedKV, KVCache, KVSink
from .hooks import AttentionHook, PassContext
from .intervene import Intervention
from .layers import ACTIVATION_FNS, Block, LayerNorm, RMSNorm, layer_rope_tables, make_norm, sinusoidal_table
from .trace import EmbeddingTrace, ForwardTrace, HeadTrace, WeightRef, output_logits


def init_weights(module: nn.Module, seed: int) -> None:
    """Deterministic init from `seed` (independent of torch's global RNG): embeddings N(0, 1),
    linear weights N(0, 1/fan_in) (variance-preserving), biases 0, LayerNorm gamma 1, beta 0."""
    g = torch.Generator().manual_seed(int(seed))
    with torch.no_grad():
        for name, p in module.named_parameters():  # fixed order -> same weights in any process
            if p.dim() == 1:
                p.zero_()  # biases and LayerNorm beta (gamma is set to 1 below)
            elif "emb" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
        for m in module.modules():
            if isinstance(m, (LayerNorm, RMSNorm)):
                m.weight.fill_(0.0 if getattr(m, "unit_offset", False) else 1.0)  # Gemma's (1 + w): w = 0


def _embedding(n: int, d: int) -> nn.Embedding:
    """nn.Embedding(n, d) without torch's own random fill: init_weights (or the loaded weights)
    sets every row. On the meta device torch's fill would import torch._dynamo (seconds, once)."""
    return nn.Embedding(n, d, _weight=torch.empty(n, d))


class TokenModel(nn.Module):
    """What Transformer and Seq2SeqTransformer share: the token embedding, the position vectors,
    BERT's token-type embedding and embedding LayerNorm (when the config asks for them), the
    output layer (tied, its own matrix, or none) and the validation of token ids. Parameter names
    (tok_emb, pos_emb, type_emb, emb_ln, lm_head) are the checkpoint format."""

    cfg: ModelConfig

    def _build_token_io(self, cfg: ModelConfig) -> None:
        """Create tok_emb (V, D), pos_emb (max_len, D) or the sinusoidal table, then (BERT only)
        type_emb (type_vocab_size, D) and emb_ln. The BERT pieces come after the others, so the
        parameter order (and the seeded init) of every other model is unchanged."""
        if not isinstance(cfg, ModelConfig):
            raise ValueError(f"{type(self).__name__} needs a ModelConfig")
        self.cfg = cfg
        self.tok_emb = _embedding(cfg.vocab_size, cfg.d_model)  # (V, D)
        if cfg.pos_encoding == "learned":
            self.pos_emb = _embedding(cfg.max_len + cfg.pos_offset, cfg.d_model)  # (max_len (+ offset), D)
        elif cfg.pos_encoding == "sinusoidal":
            self.register_buffer("pe_table", sinusoidal_table(cfg.max_len, cfg.d_model), persistent=False)
        # "rope": no table; positions rotate q and k inside the attention (layers.rope_tables)
        self.type_emb = _embedding(cfg.type_vocab_size, cfg.d_model) if cfg.type_vocab_size else None
        self.emb_ln = make_norm(cfg) if cfg.emb_norm else None

    def _build_output(self, cfg: ModelConfig) -> None:
        """The output layer, registered last so parameter order (and seeded init) is unchanged.
        None when tied (the embedding scores the vocabulary) or when cfg.output_head is False."""
        own = cfg.output_head and not cfg.tie_weights
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False) if own else None
        if cfg.has_mlm_head:  # the BERT family's masked-LM head: dense, activation, LayerNorm, + a logit bias
            self.mlm_dense = nn.Linear(cfg.d_model, cfg.d_model)  # (D, D) + (D,)
            self.mlm_ln = LayerNorm(cfg.d_model, cfg.ln_eps)
            self.mlm_bias = nn.Parameter(torch.zeros(cfg.vocab_size))  # (V,)

    def head_transform(self, x: Tensor, record: bool = True) -> tuple[Tensor, HeadTrace | None]:
        """The masked-LM head's transform (cfg.mlm_head) of the last hidden states x (B, T, D):
        LayerNorm(act(x W^T + b)), what the output matrix then scores; x itself without one."""
        if not self.cfg.has_mlm_head:
            return x, None
        dense = self.mlm_dense(x)  # (B, T, D)
        act = ACTIVATION_FNS[self.cfg.activation](dense)  # (B, T, D)
        out, ln = self.mlm_ln(act, record)  # (B, T, D)
        return out, (HeadTrace(input=x, dense=dense, act=act, ln=ln, output=out) if record else None)

    def logits_of(self, x: Tensor) -> Tensor:
        """Logits (B, T, V) of the last hidden states x (B, T, D): the masked-LM head (if any),
        the output matrix, its bias, the final soft-capping (output_logits). What forward returns."""
        h, _ = self.head_transform(x, record=False)
        return output_logits(h, self.output_matrix, self.mlm_bias if self.cfg.has_mlm_head else None,
                             self.cfg.final_softcap)

    @property
    def output_matrix(self) -> Tensor:
        """(V, D): the matrix whose rows score each vocabulary entry (the embedding when tied).
        A model without an output layer (cfg.output_head False) has none: ValueError."""
        if not self.cfg.output_head:
            raise ValueError("this model has no output layer (cfg.output_head is False: an encoder "
                             "such as MiniLM produces hidden states, not next-token scores)")
        return self.tok_emb.weight if self.lm_head is None else self.lm_head.weight

    def position_table(self, T: int, start: int = 0) -> Tensor:
        """(T, D) position vectors for positions start..start+T-1. Rotary models add no position
        vector (they rotate q and k): zeros, so that `sum = token + position` still holds."""
        if self.cfg.pos_encoding == "learned":
            start += self.cfg.pos_offset  # RoBERTa: row p + padding_idx + 1 for position p
            return self.pos_emb.weight[start:start + T]
        if self.cfg.pos_encoding in ("rope", "none"):  # no position vector (rope rotates q and k)
            return self.tok_emb.weight.new_zeros(T, self.cfg.d_model)
        return self.pe_table[start:start + T]

    def embed(self, ids: Tensor, token_type_ids: Tensor | None = None, record: bool = True, start: int = 0
              ) -> tuple[Tensor, EmbeddingTrace]:
        """x = token + position (B, T, D), and its trace. With token types (BERT) the sum is
        token + type + position (in that order, as BERT adds them); with an embedding LayerNorm
        x is LN(that sum) and the trace keeps the raw sum beside it. token_type_ids None: zeros.
        start: the position of the first row (a KV-cached step). Rotary models: x = token.
        Gemma (cfg.emb_scale): x = token * sqrt(d_model) (a float32 factor, as transformers'
        scaled embedding), `raw_sum` the unscaled rows and `scale` the factor."""
        tok = self.tok_emb(ids)  # (B, T, D)
        pos = self.position_table(ids.shape[1], start)  # (T, D)
        typ = None
        if self.cfg.pos_encoding == "rope" and self.type_emb is None:
            raw = tok  # nothing added: the position enters as a rotation of q and k
        elif self.type_emb is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(ids)
            typ = self.type_emb(token_type_ids)  # (B, T, D)
            raw = tok + typ + pos  # (B, T, D)
        else:
            raw = tok + pos  # (B, T, D)
        x, ln = (raw, None) if self.emb_ln is None else self.emb_ln(raw, record)  # (B, T, D)
        scale = self.cfg.emb_scale
        if scale is not None:  # Gemma: what block 0 sees is scaled (float32 factor, as HF multiplies)
            x = x * torch.tensor(scale, dtype=x.dtype)  # (B, T, D)
        return x, EmbeddingTrace(token=tok, position=pos, sum=x, token_type=typ,
                                 raw_sum=None if self.emb_ln is None and scale is None else raw, ln=ln,
                                 scale=scale)

    def check_ids(self, ids: Tensor, key_padding_mask: Tensor | None = None, what: str = "ids",
                  token_type_ids: Tensor | None = None) -> None:
        """ValueError saying what to fix unless ids is a long (B, T) tensor of valid token ids
        within max_len, key_padding_mask (if any) a bool mask of the same shape, and
        token_type_ids (if any) a long tensor of that shape with values < cfg.type_vocab_size."""
        if not isinstance(ids, Tensor) or ids.dtype != torch.long:
            raise ValueError(f"{what} must be a torch.long tensor of shape (B, T); use torch.tensor(ids, dtype=torch.long)")
        if ids.dim() != 2 or ids.shape[1] == 0 or ids.shape[0] == 0:
            raise ValueError(f"{what} must have shape (B, T) with B, T >= 1; got {tuple(ids.shape)} (add a batch axis with ids[None])")
        if ids.shape[1] > self.cfg.max_len:
            raise ValueError(f"{what}: sequence length {ids.shape[1]} exceeds max_len={self.cfg.max_len}; truncate the input to {self.cfg.max_len} tokens")
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= self.cfg.vocab_size:
            raise ValueError(f"{what}: token ids must be in [0, {self.cfg.vocab_size - 1}]; got values in [{lo}, {hi}]")
        if key_padding_mask is not None:
            if key_padding_mask.dtype != torch.bool or key_padding_mask.shape != ids.shape:
                mask = "key_padding_mask" if what == "ids" else f"the padding mask of {what}"
                raise ValueError(f"{mask} must be bool with the shape of {what} {tuple(ids.shape)} (True = real token)")
        if token_type_ids is not None:
            n = self.cfg.type_vocab_size
            if n == 0:
                raise ValueError("token_type_ids given, but this model has no token-type embeddings "
                                 "(cfg.type_vocab_size is 0); leave token_type_ids out")
            if (not isinstance(token_type_ids, Tensor) or token_type_ids.dtype != torch.long
                    or token_type_ids.shape != ids.shape):
                raise ValueError(f"token_type_ids must be a torch.long tensor with the shape of {what} "
                                 f"{tuple(ids.shape)} (0 = sentence A, 1 = sentence B)")
            lo, hi = int(token_type_ids.min()), int(token_type_ids.max())
            if lo < 0 or hi >= n:
                raise ValueError(f"token_type_ids must be in [0, {n - 1}]; got values in [{lo}, {hi}]")

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


class Transformer(TokenModel):
    def __init__(self, cfg: ModelConfig, seed: int = 0, *, init: bool = True):
        """init=False skips the seeded initialisation: for weights that are loaded right after
        (model.pretrained builds on the meta device and assigns the file's tensors)."""
        super().__init__()
        self._build_token_io(cfg)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.ln_f = make_norm(cfg) if cfg.final_norm else None
        self._build_output(cfg)
        if init:
            init_weights(self, seed)
        self.eval()

    def run(self, ids: Tensor, causal: bool, key_padding_mask: Tensor | None, record: bool,
            mask_padded_queries: bool = False, token_type_ids: Tensor | None = None,
            past: KVCache | None = None, kv_sink: list | None = None,
            intervention: Intervention | None = None, stop_after: int | None = None,
            record_from: int = 0):
        """The one forward pass. stop_after (record only): run blocks 0 .. stop_after and stop
        there (a view of one layer needs nothing above it: the blocks below are the same ops on the
        same inputs, so the trace's layers are bit for bit the whole pass's first ones).
        record_from: blocks before it run without recording (their slots in the trace's layers are
        None; the same ops either way, so what is recorded is the whole pass's, bit for bit). intervention (model.intervene): heads switched off or attention
        rows edited for this pass only. past: a KVCache (model.generate) holding the keys and values of the
        positions before `ids`, which are then the new positions only. kv_sink: a list that
        receives each layer's full-context (k, v), from which the caller builds the next cache.
        All three reach the attention layers as this pass's hooks (model.hooks), in a PassContext
        per layer with the rotary tables of the pass's positions."""
        self.check_ids(ids, key_padding_mask, token_type_ids=token_type_ids)
        n_layers = self.cfg.n_layers
        if stop_after is not None:
            if not record or kv_sink is not None:
                raise ValueError("stop_after is for a trace (record=True, no kv_sink): logits need every layer")
            if not 0 <= int(stop_after) < n_layers:
                raise ValueError(f"stop_after={stop_after}: this model has layers 0 .. {n_layers - 1}")
            stop_after = None if int(stop_after) == n_layers - 1 else int(stop_after)  # the last layer: the whole pass
        record_from = int(record_from)
        if record_from and (not record or not 0 <= record_from <= (n_layers - 1 if stop_after is None else stop_after)):
            raise ValueError(f"record_from={record_from}: a layer of this trace (0 .. "
                             f"{n_layers - 1 if stop_after is None else stop_after}) to record from")
        B, T = ids.shape
        start = 0
        if past is not None:
            start = self._check_past(past, ids, key_padding_mask, token_type_ids)
        if self.type_emb is not None and token_type_ids is None:
            token_type_ids = torch.zeros_like(ids)  # (B, T): every token in sentence A
        x, emb = self.embed(ids, token_type_ids, record, start)  # (B, T, D)
        if past is None:
            allowed = combine(causal_allowed(T) if causal else None,
                              padding_allowed(key_padding_mask, mask_queries=mask_padded_queries)
                              if key_padding_mask is not None else None)  # (T,T) or (B,1,T,T) or None
        else:  # new row i sits at position start + i: it may see keys 0 .. start + i
            allowed = (torch.ones(T, start + T, dtype=torch.bool).tril(diagonal=start) if causal
                       else None)  # (T, start + T)
        positions = None
        rope = None
        if self.cfg.pos_encoding == "rope" or past is not None:
            positions = torch.arange(start, start + T)  # (T,)
        if self.cfg.pos_encoding == "rope":
            rope = layer_rope_tables(self.cfg, positions)  # per layer: (T, d_k) x 2
        if intervention is not None:
            intervention.check(self.cfg.n_layers, self.cfg.n_heads)
        sink = () if kv_sink is None else (KVSink(kv_sink),)
        layer_traces = []
        for i, block in enumerate(self.blocks):
            # this pass's hooks for layer i (model.hooks), in order: its KV cache, the sink, interventions
            hooks: tuple[AttentionHook, ...] = sink if past is None else (CachedKV(past.keys[i], past.values[i]),) + sink
            if intervention is not None:
                hooks += intervention.layer_hooks(i, self.cfg.n_heads)
            ctx = PassContext(None if rope is None else rope[i], hooks) if rope is not None or hooks else None
            x, bt = block(x, allowed, record and i >= record_from, ctx=ctx)  # (B, T, D)
            layer_traces.append(bt)  # None: run, not recorded (record_from)
            if i == stop_after:  # a partial trace: no final norm, no output layer
                return ForwardTrace(ids=ids, causal=causal, key_padding_mask=key_padding_mask, embeddings=emb,
                                    layers=tuple(layer_traces), final_ln=None, final=None, logits=None,
                                    token_type_ids=token_type_ids, positions=positions,
                                    past_length=None if past is None else start, stopped_after=i,
                                    recorded_from=record_from)
        final_ln = None
        if self.ln_f is not None:
            x, final_ln = self.ln_f(x, record)  # (B, T, D)
        if not record:
            return self.logits_of(x) if self.cfg.output_head else x  # (B, T, V), or (B, T, D)
        logits, out_w, out_b, head = None, None, None, None
        if self.cfg.output_head:
            h, head = self.head_transform(x)  # (B, T, D): x itself without a masked-LM head
            w = self.output_matrix  # (V, D)
            bias = self.mlm_bias if self.cfg.has_mlm_head else None  # (V,)
            if w.requires_grad or (bias is not None and bias.requires_grad):  # may still change (training)
                logits = output_logits(h, w, bias, self.cfg.final_softcap)  # (B, T, V)
            else:  # frozen (the app's models): the same ops on first read (trace.derived)
                out_w = WeightRef(w)
                out_b = None if bias is None else WeightRef(bias)
        return ForwardTrace(ids=ids, causal=causal, key_padding_mask=key_padding_mask,
                            embeddings=emb,
                            layers=tuple(layer_traces), final_ln=final_ln, final=x,
                            logits=logits,  # probs = softmax(logits): computed on first read (trace.derived)
                            token_type_ids=token_type_ids, positions=positions,
                            past_length=None if past is None else start, output_weight=out_w,
                            head=head, output_bias=out_b, logit_softcap=self.cfg.final_softcap,
                            recorded_from=record_from)

    def _check_past(self, past: KVCache, ids: Tensor, key_padding_mask: Tensor | None,
                    token_type_ids: Tensor | None) -> int:
        """The cache's length, after ValueErrors saying what does not fit: its layers, batch and
        head shapes, the total length against max_len, and options a cached step does not take."""
        if key_padding_mask is not None or token_type_ids is not None:
            raise ValueError("a cached step (past=...) takes no key_padding_mask or token_type_ids; "
                             "run the whole sequence without a cache instead")
        cfg = self.cfg
        if len(past.keys) != cfg.n_layers or len(past.values) != cfg.n_layers:
            raise ValueError(f"the KV cache has {len(past.keys)} layers; this model has {cfg.n_layers}. "
                             "Use the cache this model returned")
        n = past.length
        want = (ids.shape[0], cfg.kv_heads, n, cfg.d_k)
        for k, v in zip(past.keys, past.values):
            if tuple(k.shape) != want or tuple(v.shape[:3]) != want[:3]:
                raise ValueError(f"KV cache tensors have shape {tuple(k.shape)}; this model and batch "
                                 f"need {want} (B, H_kv, T_past, d_k). Use the cache this model returned")
        if n + ids.shape[1] > cfg.max_len:
            raise ValueError(f"the cache holds {n} tokens and {ids.shape[1]} more exceed max_len="
                             f"{cfg.max_len}; start again from a shorter context")
        return n

    def forward(self, ids: Tensor, *, causal: bool = True, key_padding_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None) -> Tensor:
        """Logits (B, T, V); the same arithmetic as trace() with nothing recorded. A model without
        an output layer (cfg.output_head False) returns its last hidden states (B, T, D)."""
        return self.run(ids, causal, key_padding_mask, record=False, token_type_ids=token_type_ids)

    @torch.no_grad()
    def trace(self, ids: Tensor, *, causal: bool = True, key_padding_mask: Tensor | None = None,
              mask_padded_queries: bool = False, token_type_ids: Tensor | None = None,
              past: KVCache | None = None, ablate_heads=None, ablation: str = "zero",
              edit_rows=None, intervention: Intervention | None = None,
              stop_after: int | None = None, record_from: int = 0) -> ForwardTrace:
        """Every intermediate of one forward pass (eval mode, no grad). token_type_ids (B, T)
        long: the segment of each token, for models with token types (BERT); None = zeros.
        past: a KVCache (model.generate) of the positions before `ids`; the trace then holds the
        new rows only (q, scores, weights (B, H, T_new, past + T_new)) and k, v the whole context.
        model.generate.generate_step returns the trace and the next cache together.
        ablate_heads [(layer, head), ...]: those heads' outputs Z_h are zeroed at every position
        (ablation="mean": replaced by their mean over the sentence); edit_rows [(layer, head, query,
        weights), ...]: attention rows replaced (renormalised). See model.intervene; the model
        itself is never changed. stop_after: trace layers 0 .. stop_after only (a page showing one
        layer; ForwardTrace.stopped_after says so, and final, final_ln and logits are None); the
        last layer's index gives the whole pass. record_from: layers before it are run, not
        recorded (None in `layers`; ForwardTrace.recorded_from): with stop_after=l too, the trace
        of layer l alone (the heads page: one layer of SmolLM2's 30 kept, not every one below it)."""
        if intervention is None and (ablate_heads or edit_rows):
            intervention = Intervention(ablate=tuple(ablate_heads or ()), mode=ablation,
                                        edit_rows=tuple(edit_rows or ()))
        was_training = self.training
        if was_training:  # eval()/train() walk every module: only when there is something to switch
            self.eval()
        try:
            return self.run(ids, causal, key_padding_mask, record=True, mask_padded_queries=mask_padded_queries,
                            token_type_ids=token_type_ids, past=past, intervention=intervention,
                            stop_after=stop_after, record_from=record_from)
        finally:
            if was_training:
                self.train(True)

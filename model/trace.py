"""Typed traces of every intermediate of a forward pass.

Axis order is fixed: (batch B, head H, query Tq, key Tk). D = d_model, d_k = D / H.
Traces are produced under torch.no_grad() in eval mode, detached, on CPU. `trace.numpy()` gives
the same tree of frozen dataclasses with read-only numpy arrays in place of tensors (same field
names, same shapes): what pages, analyses and exports read, as typed attributes
(`tr.layers[0].attn.weights`). `flat_arrays` flattens either tree into the .npz export's keys
("layers.0.attn.weights"), taken from the field names.
"""
from __future__ import annotations

import dataclasses
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Self

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor


class TraceNode:
    """Base of every trace dataclass: `.numpy()` converts the whole tree."""

    def numpy(self) -> Self:
        """The same dataclass tree with read-only numpy arrays instead of tensors (floats, bools,
        None and strings unchanged). Safe to share between sessions: nothing can write to it."""
        return _to_numpy_tree(self)


def _to_numpy_tree(obj: Any) -> Any:
    if isinstance(obj, Tensor):
        arr = (obj.detach() if obj.requires_grad else obj).cpu().numpy()
        arr.flags.writeable = False
        return arr
    if isinstance(obj, TraceNode):
        # A trace node holds its fields in its __dict__ (a derived field in its slot, None until
        # read): the same node with each value converted, without dataclasses.replace's __init__
        # call per node (a SmolLM2 trace has ~250 nodes; this took a tenth of a rerun under load)
        new = object.__new__(type(obj))
        new.__dict__.update({k: _to_numpy_tree(v) for k, v in obj.__dict__.items()})
        return new
    if isinstance(obj, (np.ndarray, str, int, float, bool, WeightRef)) or obj is None:
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: _to_numpy_tree(stored(obj, f.name))
                                           for f in dataclasses.fields(obj) if f.init})
    if isinstance(obj, tuple):
        return tuple(_to_numpy_tree(x) for x in obj)
    if isinstance(obj, list):
        return [_to_numpy_tree(x) for x in obj]
    return obj


def stored(obj: Any, name: str) -> Any:
    """A field's value as stored: a `derived` field not read yet stays None (the numpy tree then
    computes it on first read, from its numpy inputs, with the same op) instead of being computed
    here."""
    d = getattr(type(obj), "__dict__", {}).get(name)
    if isinstance(d, derived):
        return obj.__dict__.get(d.slot)
    return getattr(obj, name)


class derived:
    """A trace field that may be left out (None) when the trace is made and is then computed on
    first read from the trace's other fields, exactly as the forward pass would have computed it
    (the same op on the same inputs, elementwise or row by row: the same values bit for bit), and
    kept. Use it as the field's default: `probs: Tensor | None = derived(_probs)`; required=True
    keeps the field without a default (it must be passed, None meaning "compute on first read").
    It stays a dataclass field (same name, typed attribute, in `dataclasses.fields`, `.numpy()`,
    `flat_arrays`); passing a value stores that value. What it saves is the forward's time and
    memory for values that many readers never look at (each trace keeps every intermediate)."""

    def __init__(self, compute, *, required: bool = False):
        self.compute, self.required = compute, required

    def __set_name__(self, owner, name: str) -> None:
        self.slot = "_" + name

    def __get__(self, obj, owner=None):
        if obj is None:
            if self.required:
                raise AttributeError(self.slot[1:])  # dataclasses: no default value
            return None  # the dataclass default: left out = computed on first read
        value = obj.__dict__.get(self.slot)
        if value is None:
            value = self.compute(obj)
            obj.__dict__[self.slot] = value  # frozen: only this cache is written, once
            watcher = _WATCHERS.get(id(obj))
            if watcher is not None and watcher[0]() is obj and value is not None:
                watcher[1](value)
        return value

    def __set__(self, obj, value) -> None:
        obj.__dict__[self.slot] = value


def derived_slots(cls: type) -> tuple[str, ...]:
    """The __dict__ keys where a trace class keeps its derived fields once computed."""
    slots = _SLOTS.get(cls)
    if slots is None:
        slots = _SLOTS[cls] = tuple(d.slot for c in reversed(cls.__mro__) for d in vars(c).values()
                                     if isinstance(d, derived))
    return slots


_SLOTS: dict[type, tuple[str, ...]] = {}
_WATCHERS: dict[int, tuple[weakref.ref, Callable[[Any], None]]] = {}


def on_derived(node: Any, callback: Callable[[Any], None]) -> None:
    """Call callback(value) each time a derived field of `node` is computed on first read (in the
    thread that read it): ui/budget_cache.py counts a cached trace's bytes as they grow. One
    callback per node (the last one set); it goes with the node."""
    key = id(node)

    def gone(ref: weakref.ref) -> None:
        if _WATCHERS.get(key, (None,))[0] is ref:
            _WATCHERS.pop(key, None)

    _WATCHERS[key] = (weakref.ref(node, gone), callback)


# _torch_op reads read-only numpy arrays through torch.from_numpy (the same memory, no copy): torch
# warns that it cannot protect such memory; the ops here only read it. Silenced for this module only.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable", module=r"model\.trace")


def _torch_op(fn, *xs):
    """fn over tensors (no grad); numpy arrays in (a numpy tree made without the field) ->
    a read-only numpy array out."""
    if any(isinstance(x, np.ndarray) for x in xs):
        arr = _torch_op(fn, *(torch.from_numpy(x) if isinstance(x, np.ndarray) else x for x in xs)).numpy()
        arr.flags.writeable = False
        return arr
    with torch.no_grad():
        return fn(*xs)


class WeightRef:
    """A model weight that a trace computes a field from on first read (the output matrix, for the
    logits): the model's own tensor (detached, not a copy) and its in-place version counter when
    the trace was made. Not a trace value: `.numpy()` keeps it as it is, and `flat_arrays` (the
    .npz export) and ui.budget_cache's byte count skip it (the model's memory, not the trace's).
    Reading the field after the weight was changed in place raises instead of mixing weights."""

    __slots__ = ("tensor", "version")

    def __init__(self, tensor: Tensor):
        self.tensor = tensor.detach()  # shares the version counter with the parameter
        self.version = tensor._version

    def get(self) -> Tensor:
        if self.tensor._version != self.version:
            raise RuntimeError("the model's weights were changed in place after this trace was made; "
                               "trace the sentence again to read its logits")
        return self.tensor

    def __repr__(self) -> str:
        return f"WeightRef({tuple(self.tensor.shape)})"

    def __deepcopy__(self, memo) -> "WeightRef":  # a reference to the model's weights, never a copy
        return self  # (dataclasses.asdict and copy.deepcopy of a trace)


def output_logits(final, w, bias=None, softcap: float | None = None):
    """The output layer: final (..., T, D) @ W_out^T (V, D) -> logits (..., T, V), + bias (V,)
    (the BERT family's masked-LM head), then cap * tanh(logits / cap) (Gemma 2's final
    soft-capping, transformers' order: / cap, tanh, * cap). The one function Transformer.run and
    the trace's logits on first read both use (the same values, bit for bit)."""
    z = final @ w.T  # (..., T, V)
    if bias is not None:
        z = z + bias
    if softcap is not None:
        z = torch.tanh(z / softcap) * softcap
    return z


def _logits(tr: "ForwardTrace"):
    """The output layer on the recorded last hidden states (`final`, or the masked-LM head's
    output `head.output`), as Transformer.run computes it (the same ops on the same tensors: the
    same values bit for bit). None for a model without an output layer (no output_weight) and
    for a partial trace (stopped_after)."""
    if tr.output_weight is None:  # (also a partial trace: stopped_after)
        return None
    x = tr.final if tr.head is None else tr.head.output
    bias = None if tr.output_bias is None else tr.output_bias.get()
    return _torch_op(lambda f, w, *b: output_logits(f, w, b[0] if b else None, tr.logit_softcap),
                     x, tr.output_weight.get(), *(() if bias is None else (bias,)))


def _probs(tr: "ForwardTrace"):
    """softmax(logits) over the vocabulary, as Transformer.run computed it before (None without logits)."""
    return None if tr.logits is None else _torch_op(lambda z: torch.softmax(z, dim=-1), tr.logits)


def kv_for_heads(kv, kv_head):
    """K or V (..., H_kv, T, d) -> (..., H, T, d): the K/V head each query head reads (kv_head
    (H,) long; None = one per query head, returned as is). A copy, as HF's repeat_kv."""
    return kv if kv_head is None else kv.index_select(-3, kv_head)


def _scores(tr: "AttentionTrace"):
    """q @ k^T: the same matmul on the same q and (per query head) k that attend multiplied."""
    return _torch_op(lambda q, k: q @ k.transpose(-2, -1), tr.q,
                     kv_for_heads(torch.as_tensor(tr.k), None if tr.kv_head is None else torch.as_tensor(tr.kv_head)))


def _scaled(tr: "AttentionTrace"):
    """scores * scale (attend multiplies the same way; the product it fed the softmax is not kept)."""
    return _torch_op(lambda s: s * tr.scale, tr.scores)


def _masked(tr: "AttentionTrace"):
    """Left out when no bias was added (attend masked its scaled scores in place, masked_fill_):
    scaled with -inf where not allowed, by torch.where (the same values)."""
    return _torch_op(lambda x, a: torch.where(a, x, float("-inf")), tr.scaled, tr.allowed)


def _ln_normalized(tr: "LayerNormTrace"):
    """F.layer_norm(input) without gamma/beta: (x - mean) * rstd by the same kernel, row by row."""
    return _torch_op(lambda x: F.layer_norm(x, x.shape[-1:], None, None, tr.eps), tr.input)


def _ln_var(tr: "LayerNormTrace"):
    """The biased variance F.layer_norm used, from the rstd = 1/sqrt(var + eps) its kernel returned:
    1/rstd^2 - eps (to float rounding; clamped at 0 after rounding). No pass over the values."""
    return _torch_op(lambda r: (1.0 / (r * r) - tr.eps).clamp_min(0.0), tr.rstd)


def _rms_normalized(tr: "NormTrace"):
    """x * rsqrt(mean_sq + eps), RMSNorm's own two ops on the recorded mean_sq."""
    return _torch_op(lambda x, ms: x * torch.rsqrt(ms + tr.eps), tr.input, tr.mean_sq)


@dataclass(frozen=True)
class AttentionTrace(TraceNode):
    q: Tensor  # (B, H, Tq, d_k)  (rotated, with rotary positions)
    k: Tensor  # (B, H, Tk, d_k); grouped-query attention: (B, H_kv, Tk, d_k), see kv_head
    v: Tensor  # (B, H, Tk, d_v); grouped-query attention: (B, H_kv, Tk, d_v). d_v = cfg.d_value
    scores: Tensor = derived(_scores, required=True)  # (B, H, Tq, Tk)  q @ k^T, before scaling; None when
    #                                                  made: computed on first read (trace.derived)
    scale: float  # 1/sqrt(d_k), or 1.0 when scale_scores=False
    scaled: Tensor = derived(_scaled, required=True)  # (B, H, Tq, Tk)  scores * scale; None when made:
    #                                                  computed on first read (trace.derived)
    allowed: Tensor  # bool, broadcastable to (B, H, Tq, Tk); True = may attend
    masked: Tensor = derived(_masked, required=True)  # (B, H, Tq, Tk)  scaled (+ bias, soft-capped),
    #                                                  -inf where not allowed; None when made (no bias,
    #                                                  no cap): computed on first read
    weights: Tensor  # (B, H, Tq, Tk)  softmax rows (sum 1), all-zero on fully masked rows
    fully_masked: Tensor  # bool (B, H or 1, Tq): rows where nothing was allowed
    heads: Tensor  # (B, H, Tq, d_v)  weights @ v, the per-head outputs Z_j
    concat: Tensor | None = None  # (B, Tq, H*d_v)  heads side by side (None from bare attend)
    output: Tensor | None = None  # (B, Tq, D)  concat @ W_O^T + b_O (None from bare attend)
    # Grouped-query attention (cfg.n_kv_heads < n_heads): query head h reads K/V head kv_head[h]
    # = h // (H / H_kv) (HF's repeat_kv / repeat_interleave). None without GQA (head h reads h).
    kv_head: Tensor | None = None  # (H,) long
    # Interventions (model.intervene): which heads' outputs were replaced (zero or their mean);
    # `heads` then holds what entered W_O. None when nothing was changed in this layer.
    ablated: Tensor | None = None  # bool (B or 1, H)
    # Rotary positions (cfg.pos_encoding "rope"): q and k above are rotated; these are before.
    q_pre_rope: Tensor | None = None  # (B, H, Tq, d_k)
    k_pre_rope: Tensor | None = None  # (B, H_kv, T_new, d_k): the keys computed in this pass. With a
    #                                   KV cache (model.generate) the cached keys are stored rotated,
    #                                   so this covers only the new positions (the last T_new of Tk)
    # Attention variants; None when the option is off:
    bias: Tensor | None = None  # (H, Tq, Tk)  added to `scaled` before the mask (ALiBi:
    #                             -slope_h·|i - j|); masked = scaled + bias, -inf where not allowed
    alibi_slopes: Tensor | None = None  # (H,)  ALiBi's slope of each head (attention.alibi_slopes)
    band: Tensor | None = None  # (Tq, Tk) bool  sliding window |i - j| < cfg.window (already
    #                             AND-ed into `allowed`)
    energies: Tensor | None = None  # (B, H, Tq, Tk)  additive (Bahdanau) attention:
    #                                 v_h·tanh(q W_q + k W_k); `scores` is the same tensor, scale 1
    # Pretrained families; None when the option is off:
    q_pre_norm: Tensor | None = None  # (B, H, Tq, d_k)  Qwen3 (cfg.qk_norm): q before its RMSNorm
    k_pre_norm: Tensor | None = None  # (B, H_kv, T_new, d_k)  k before its RMSNorm
    softcap: float | None = None  # Gemma 2 (cfg.attn_softcap): masked = cap·tanh(scaled / cap),
    #                               -inf where not allowed


@dataclass(frozen=True)
class LayerNormTrace(TraceNode):
    """Made by model.layers.layer_norm (the one layer norm): output from F.layer_norm, mean and
    biased variance recorded beside it."""
    input: Tensor  # (B, T, D)
    mean: Tensor  # (B, T, 1)
    var: Tensor = derived(_ln_var, required=True)  # (B, T, 1)  biased, as F.layer_norm; None when made:
    #                                   computed on first read from rstd
    normalized: Tensor = derived(_ln_normalized, required=True)  # (B, T, D)  (input - mean) / sqrt(var + eps),
    #                                   before gamma/beta; None when made: computed on first read
    output: Tensor  # (B, T, D)  normalized * gamma + beta
    gamma: Tensor | None = None  # (D,)  the learned scale (None: no scale)
    beta: Tensor | None = None  # (D,)  the learned shift (None: no shift)
    eps: float | None = None  # inside the square root (needed to compute `normalized` on first read)
    rstd: Tensor | None = None  # (B, T, 1)  1 / sqrt(var + eps), as the kernel returned it (gives `var`)


@dataclass(frozen=True)
class NormTrace(TraceNode):
    """RMSNorm (cfg.norm_kind "rmsnorm", Llama/SmolLM2): no mean is subtracted, no shift added.
    Stands where a LayerNormTrace stands (BlockTrace.ln1/ln2, ForwardTrace.final_ln); tell them
    apart with isinstance (or `kind`)."""

    input: Tensor  # (B, T, D)
    mean_sq: Tensor  # (B, T, 1)  mean of x^2 over D
    normalized: Tensor = derived(_rms_normalized, required=True)  # (B, T, D)  x / sqrt(mean_sq + eps), before
    #                                   gamma; None when made: computed on first read
    output: Tensor  # (B, T, D)  gamma * normalized
    gamma: Tensor | None = None  # (D,)  the learned scale (Gemma, cfg.norm_unit_offset: 1 + the stored weight)
    kind: str = "rmsnorm"
    eps: float | None = None  # inside the square root (needed to compute `normalized` on first read)


@dataclass(frozen=True)
class FFNTrace(TraceNode):
    input: Tensor  # (B, T, D)
    hidden_pre: Tensor  # (B, T, d_ff)  x @ W_1^T + b_1; SwiGLU: the gate x @ W_gate^T (= `gate`)
    hidden_post: Tensor  # (B, T, d_ff)  activation(hidden_pre); SwiGLU: silu(gate) * up
    output: Tensor  # (B, T, D)  hidden_post @ W_2^T + b_2
    # SwiGLU only (cfg.activation "swiglu"); None otherwise:
    gate: Tensor | None = None  # (B, T, d_ff)  x @ W_gate^T (the same tensor as hidden_pre)
    up: Tensor | None = None  # (B, T, d_ff)  x @ W_up^T (W_up is fc1)


@dataclass(frozen=True)
class EmbeddingTrace(TraceNode):
    token: Tensor  # (B, T, D)  rows of the token-embedding matrix
    position: Tensor  # (T, D)  sinusoidal or learned position vectors; zeros with rotary
    #                   positions (pos_encoding "rope" adds nothing here: it rotates q and k)
    sum: Tensor  # (B, T, D)  what block 0 sees: raw_sum, or ln.output when the model has an
    #              embedding LayerNorm (BERT, cfg.emb_norm)
    token_type: Tensor | None = None  # (B, T, D)  token-type (segment) embedding rows; None
    #                                   unless cfg.type_vocab_size > 0 (BERT: sentence A / B)
    raw_sum: Tensor | None = None  # (B, T, D)  token + position (+ token_type) before the
    #                                embedding LayerNorm; None without one (then `sum` is that)
    ln: LayerNormTrace | None = None  # the embedding LayerNorm over raw_sum (cfg.emb_norm); None
    #                                   otherwise. ln.output is `sum`
    scale: float | None = None  # Gemma (cfg.emb_scale): sum = raw_sum * scale (sqrt(d_model)); raw_sum
    #                             is then the unscaled token rows. None = no scale


@dataclass(frozen=True)
class BlockTrace(TraceNode):
    input: Tensor  # (B, T, D)  residual stream entering the block
    ln1: LayerNormTrace | NormTrace | None  # pre-LN: before attention; post-LN: after input + attention; None: use_norm False
    attn: AttentionTrace
    resid_mid: Tensor  # (B, T, D)  stream after the attention sublayer (post-LN: after ln1)
    ln2: LayerNormTrace | NormTrace | None  # pre-LN: before the FFN; post-LN: after resid_mid + FFN; None: use_norm False
    ffn: FFNTrace
    resid_out: Tensor  # (B, T, D)  stream leaving the block
    # Gemma 2 (cfg.sandwich_norm): the norms on each sublayer's output, before the residual add
    # (resid_mid = input + ln1_post.output, resid_out = resid_mid + ln2_post.output); else None
    ln1_post: NormTrace | LayerNormTrace | None = None
    ln2_post: NormTrace | LayerNormTrace | None = None


@dataclass(frozen=True)
class HeadTrace(TraceNode):
    """The BERT family's masked-LM head (cfg.mlm_head), between the last hidden states and the
    output matrix: output = LayerNorm(act(final W^T + b)); logits = output E^T + bias."""
    input: Tensor  # (B, T, D)  the last hidden states (ForwardTrace.final)
    dense: Tensor  # (B, T, D)  input @ W^T + b
    act: Tensor  # (B, T, D)  activation(dense) (GELU)
    ln: LayerNormTrace  # over act
    output: Tensor  # (B, T, D)  ln.output: what the output matrix scores


@dataclass(frozen=True)
class ForwardTrace(TraceNode):
    ids: Tensor  # (B, T) long
    causal: bool
    key_padding_mask: Tensor | None  # (B, T) bool, True = real token
    embeddings: EmbeddingTrace
    layers: tuple[BlockTrace | None, ...]  # one per layer run; None before recorded_from (run, not recorded)
    final_ln: LayerNormTrace | NormTrace | None  # pre-LN models (GPT-2); None for post-LN
    final: Tensor | None  # (B, T, D)  what the output layer sees (the last hidden states); None
    #                       in a partial trace (stopped_after)
    logits: Tensor | None = derived(_logits, required=True)  # (B, T, V)  final @ W_out^T (+ the
    #                        masked-LM head, bias, soft-capping: output_logits); None for a
    #                        model without an output layer (cfg.output_head False, e.g. MiniLM: an
    #                        encoder that cannot predict words). A model with frozen weights (every
    #                        model the app shows) leaves it to first read (trace.derived): a fifth of
    #                        SmolLM2's forward, and no page about attention reads it
    probs: Tensor | None = derived(_probs)  # (B, T, V)  softmax(logits) over the vocabulary; None as
    #                                        logits. Computed on first read (model.trace leaves it out)
    token_type_ids: Tensor | None = None  # (B, T) long, the segment of each token (models with
    #                                       token types; zeros when trace() got none); else None
    positions: Tensor | None = None  # (T,) long, the position of each row: past_length .. past_length
    #                                  + T - 1. Set for rotary models and cached steps; None = 0 .. T-1
    past_length: int | None = None  # tokens already in the KV cache (model.generate): the rows
    #                                 here are the new ones, attending over past_length + T keys.
    #                                 None without a cache
    output_weight: WeightRef | None = None  # (V, D) the output matrix `logits` is computed from on
    #                                         first read (the model's own tensor, not a copy); None
    #                                         when the forward computed the logits, or without an
    #                                         output layer
    head: HeadTrace | None = None  # the masked-LM head (cfg.mlm_head: BERT, RoBERTa, DistilBERT
    #                                with their MLM head): logits score head.output, not `final`
    output_bias: WeightRef | None = None  # (V,) added to the logits (the masked-LM head's bias)
    logit_softcap: float | None = None  # Gemma 2 (cfg.final_softcap): logits = cap·tanh(z / cap)
    stopped_after: int | None = None  # a partial trace (Transformer.trace(stop_after=l)): the pass
    #                                   ran layers 0 .. l only, so `layers` holds those (bit for bit
    #                                   the whole pass's) and final, final_ln, logits are None.
    #                                   None = the whole pass
    recorded_from: int = 0  # Transformer.trace(record_from=l): layers 0 .. l-1 ran unrecorded (None
    #                         in `layers`); 0 = every layer run is recorded

    @property
    def complete(self) -> bool:
        """Does the trace hold every layer (not a partial trace: stopped_after, recorded_from)?"""
        return self.stopped_after is None and not self.recorded_from


def flat_arrays(obj: Any, prefix: str = "") -> dict[str, np.ndarray]:
    """Flatten a trace (torch or numpy tree) into {"layers.0.attn.weights": array, ...}: the .npz
    export's keys, named after the trace fields (None fields are left out)."""
    out: dict[str, np.ndarray] = {}
    if obj is None:
        return out
    if isinstance(obj, Tensor):
        out[prefix] = obj.detach().cpu().numpy()
    elif isinstance(obj, np.ndarray):
        out[prefix] = obj
    elif isinstance(obj, (bool, int, float)):
        out[prefix] = np.asarray(obj)
    elif dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            out.update(flat_arrays(getattr(obj, f.name), f"{prefix}.{f.name}" if prefix else f.name))
    elif isinstance(obj, (list, tuple)):
        for i, item in enumerate(obj):
            out.update(flat_arrays(item, f"{prefix}.{i}" if prefix else str(i)))
    return out


@dataclass(frozen=True)
class AdditiveAttentionTrace(TraceNode):
    """Additive (Bahdanau) attention of the RNN encoder–decoder (model.rnn): the decoder's previous
    state s_{i-1} scores every encoder annotation h_j with e_ij = v^T tanh(W_q s_{i-1} + W_k h_j)."""
    query_proj: Tensor  # (B, T_out, d_attn)  W_q s_{i-1} (+ b_q)
    key_proj: Tensor  # (B, T_in, d_attn)  W_k h_j: computed once per source sentence
    energies: Tensor  # (B, T_out, T_in)  e_ij = v^T tanh(W_q s_{i-1} + W_k h_j), -inf where not allowed
    allowed: Tensor  # bool (B, 1, T_in)  True = a real source word (padding is not allowed)
    weights: Tensor  # (B, T_out, T_in)  alpha_ij = softmax_j(e_ij): the alignment; rows sum to 1
    context: Tensor  # (B, T_out, d_enc)  c_i = sum_j alpha_ij h_j


@dataclass(frozen=True)
class RNNSeq2SeqTrace(TraceNode):
    """One teacher-forced pass of the RNN encoder–decoder (model.rnn.RNNSeq2Seq.trace)."""
    src_ids: Tensor  # (B, T_in) long
    tgt_in: Tensor  # (B, T_out) long: <bos> y_1 .. y_{T_out-1}, the decoder's inputs
    annotations: Tensor  # (B, T_in, d_enc)  h_j: forward and backward GRU states side by side
    init_state: Tensor  # (B, d_dec)  s_0 = tanh(W_init mean_j h_j)
    states: Tensor  # (B, T_out, d_dec)  s_i after reading y_{i-1} and c_i
    attn: AdditiveAttentionTrace
    logits: Tensor  # (B, T_out, V)  from [s_i; c_i; embedding of y_{i-1}]
    probs: Tensor  # (B, T_out, V)


def first_nonfinite(trace: ForwardTrace) -> str | None:
    """Where a trace first holds a non-finite value (inf or NaN), in the order the forward computes
    it: "the embeddings", "layer 3's attention", "layer 3's feed-forward", "the final norm"; None
    when every recorded value is finite. Reads stored fields only (nothing derived is computed);
    masked scores (-inf by design) are not read. Weights of 3e38 load (they are finite) and
    overflow here: a page says where instead of drawing NaN."""
    def bad(x) -> bool:
        if x is None:
            return False
        a = x.detach().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
        return a.dtype.kind == "f" and not bool(np.isfinite(a).all())

    if bad(trace.embeddings.sum):
        return "the embeddings"
    for l, block in enumerate(trace.layers):
        if block is None:
            continue
        if bad(block.attn.q) or bad(block.attn.k) or bad(block.attn.weights) or bad(block.attn.output) \
                or bad(block.resid_mid):
            return f"layer {l}'s attention"
        if bad(block.ffn.output) or bad(block.resid_out):
            return f"layer {l}'s feed-forward"
    if trace.final_ln is not None and bad(trace.final_ln.output):
        return "the final norm"
    if bad(trace.final):
        return "the last hidden states"
    return None

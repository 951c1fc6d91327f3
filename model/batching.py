"""Padding (pure torch): sentences of different lengths -> ids (B, T) padded on the right and the
key_padding_mask the model takes (Transformer.trace(ids, key_padding_mask=...)). Inference (the
mask lab's batch run, ui/runs.py) and training (training/batching.py) both pad with this; the
masks it leads to, step by step, are classroom.mask_lab.mask_steps."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .trace import derived_slots


@dataclass(frozen=True)
class Batch:
    ids: torch.Tensor  # (B, T) long, padded on the right with pad_id
    key_padding_mask: torch.Tensor  # (B, T) bool, True = real token
    lengths: list[int]  # real tokens per sentence


def pad_batch(seqs: list[list[int]], pad_id: int, max_len: int | None = None) -> Batch:
    """Right-pad token id lists to a common length (the longest, cut to max_len)."""
    if not seqs or any(len(s) == 0 for s in seqs):
        raise ValueError("pad_batch needs at least one sequence and every sequence must have >= 1 token")
    seqs = [list(s)[:max_len] if max_len else list(s) for s in seqs]
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), int(pad_id), dtype=torch.long)
    kpm = torch.zeros(len(seqs), T, dtype=torch.bool)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = torch.tensor(s, dtype=torch.long)
        kpm[b, : len(s)] = True
    return Batch(ids=ids, key_padding_mask=kpm, lengths=[len(s) for s in seqs])


# ---- one sentence's trace out of a batched trace (model.batcher: sessions traced together) ----
#
# A sentence padded on the right and traced in a batch with key_padding_mask gives, in its own row
# and its first n positions, what its own forward gives: its keys never include padding (the mask),
# its positions are 0 .. n-1 (right padding: rotary and learned positions are the sentence's own),
# and every other op works row by row. `unbatch` cuts that row out of every field, as a copy (so
# the batch's memory goes when the batch does), and rebuilds the fields that describe the single
# pass rather than the batch (the mask `allowed` and `fully_masked`, key_padding_mask None).
#
# How each field is cut, by its documented shape: "B" is the batch axis (row b kept, as B = 1),
# "T" a token axis (first n kept), "." an axis kept whole; "=" a value kept as it is (scalars, the
# model's own tensors, constants of the config); "none" a field that must be None (what a batched
# trace never holds: interventions, and the variants model.batcher does not batch); "kpm" becomes
# None; "allowed" and "fully_masked" are rebuilt. A field with no rule stops unbatch (ValueError),
# so a new trace field is never cut by a guess.
CUTS: dict[str, dict[str, str]] = {
    "ForwardTrace": dict(ids="BT", causal="=", key_padding_mask="kpm", embeddings="node", layers="node",
                         final_ln="node", final="BT.", logits="BT.", probs="BT.", token_type_ids="BT",
                         positions="T", past_length="none", output_weight="=", head="node", output_bias="=",
                         logit_softcap="=", stopped_after="=", recorded_from="="),
    "EmbeddingTrace": dict(token="BT.", position="T.", sum="BT.", token_type="BT.", raw_sum="BT.", ln="node",
                           scale="="),
    "BlockTrace": dict(input="BT.", ln1="node", attn="node", resid_mid="BT.", ln2="node", ffn="node",
                       resid_out="BT.", ln1_post="node", ln2_post="node"),
    "LayerNormTrace": dict(input="BT.", mean="BT.", var="BT.", normalized="BT.", output="BT.", gamma="=",
                           beta="=", eps="=", rstd="BT."),
    "NormTrace": dict(input="BT.", mean_sq="BT.", normalized="BT.", output="BT.", gamma="=", kind="=", eps="="),
    "FFNTrace": dict(input="BT.", hidden_pre="BT.", hidden_post="BT.", output="BT.", gate="BT.", up="BT."),
    "AttentionTrace": dict(q="B.T.", k="B.T.", v="B.T.", scores="B.TT", scale="=", scaled="B.TT",
                           allowed="allowed", masked="B.TT", weights="B.TT", fully_masked="fully_masked",
                           heads="B.T.", concat="BT.", output="BT.", kv_head="=", ablated="none",
                           q_pre_rope="B.T.", k_pre_rope="B.T.", bias="none", alibi_slopes="none",
                           band="none", energies="none",
                           q_pre_norm="B.T.", k_pre_norm="B.T.", softcap="="),
    "HeadTrace": dict(input="BT.", dense="BT.", act="BT.", ln="node", output="BT."),
}


def single_mask(n: int, causal: bool) -> torch.Tensor:
    """(n, n) bool: the `allowed` an unpadded sentence's own pass records (Transformer.run):
    the causal mask, or everything allowed (what attend records when given no mask)."""
    return torch.ones(n, n, dtype=torch.bool).tril() if causal else torch.ones(n, n, dtype=torch.bool)


def unbatch(tr, row: int, n: int):
    """Row `row` of a batched ForwardTrace (right-padded, traced with key_padding_mask, no
    interventions, no KV cache) as the trace of that sentence alone: its n real tokens, every field
    cut by CUTS and copied (a tensor that several fields share is copied once and still shared);
    derived fields not read yet stay to be computed on first read, from the cut fields."""
    if tr.past_length is not None:
        raise ValueError("unbatch takes a trace of whole sentences (no KV cache)")
    B, T = tr.ids.shape
    if not (0 <= row < B and 1 <= n <= T):
        raise ValueError(f"row {row} / length {n} outside the batch's {B} rows x {T} tokens")
    if tr.key_padding_mask is not None and not bool(tr.key_padding_mask[row, :n].all()):
        raise ValueError(f"row {row} has padding inside its first {n} tokens (right padding expected)")
    memo: dict[tuple[int, str], torch.Tensor] = {}
    indices: dict[str, tuple[slice, ...]] = {}
    allowed = single_mask(n, bool(tr.causal))  # (n, n), one tensor for every layer, as in a single pass
    no_rows = torch.zeros(n, dtype=torch.bool)  # (n,): fully_masked, expanded to (1, H, n) per layer

    def cut(x, spec: str):
        if spec == "=" or x is None:
            return x
        if spec == "none":
            raise ValueError("a batched trace with interventions, a KV cache or attention biases is not unbatched")
        if spec == "kpm":
            return None
        key = (id(x), spec)
        if key not in memo:
            index = indices.get(spec)
            if index is None:  # the same few specs for every field of a trace: built once per cut
                index = indices[spec] = tuple(slice(row, row + 1) if c == "B" else slice(0, n) if c == "T"
                                              else slice(None) for c in spec)
            if x.dim() != len(spec):
                raise ValueError(f"a field of shape {tuple(x.shape)} does not have the axes {spec!r}")
            # a tensor of its own per field (torch's allocator aligns it as a forward's output): one
            # buffer for all fields was no faster here, and a field at an unaligned offset makes the
            # matmul of a derived field (q @ k^T on first read) take another path and differ in the last bit
            memo[key] = x[index].clone(memory_format=torch.contiguous_format)
        return memo[key]

    def node(obj):
        if isinstance(obj, tuple):
            return tuple(node(o) for o in obj)
        if obj is None:
            return None
        cls = type(obj)
        rules = CUTS.get(cls.__name__)
        if rules is None:
            raise ValueError(f"no rule to unbatch a {cls.__name__}")
        # the node's stored values (a derived field in its slot, None until read), each cut by the
        # rule of its field; the new node gets them the same way (no __init__ per node)
        slots = {s: s[1:] for s in derived_slots(cls)}
        new = object.__new__(cls)
        d = new.__dict__
        for k, value in obj.__dict__.items():
            name = slots.get(k, k)
            spec = rules.get(name)
            if spec is None:
                raise ValueError(f"no rule to unbatch {cls.__name__}.{name} (add it to model.batching.CUTS)")
            if spec == "node":
                d[k] = node(value)
            elif spec == "allowed":
                d[k] = allowed
            elif spec == "fully_masked":  # no row of a sentence's own pass is fully masked
                d[k] = no_rows.expand(1, value.shape[1], n)
            else:
                d[k] = cut(value, spec)
        return new

    return node(tr)


def same_bits(a, b) -> bool:
    """Whether two traces (or any trees of trace nodes, tuples and tensors) hold the same values bit
    for bit: every stored field, derived ones already computed included; tensors of one shape and
    dtype with the same bytes (NaN payloads and the sign of zero too), other values equal."""
    if a is b:  # the model's own tensors that every trace holds (output weights, norm gammas)
        return True
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        return torch.equal(a.detach().reshape(-1).contiguous().view(torch.uint8),
                           b.detach().reshape(-1).contiguous().view(torch.uint8))
    if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(same_bits(x, y) for x, y in zip(a, b))
    if hasattr(a, "__dataclass_fields__") or hasattr(b, "__dataclass_fields__"):
        if type(a) is not type(b):
            return False
        da, db = vars(a), vars(b)
        return da.keys() == db.keys() and all(same_bits(da[k], db[k]) for k in da)
    return a == b

"""model.batching.unbatch: a sentence's trace cut out of a batched trace is the trace of its own
forward, every field (derived ones included), every family the engine has: toy causal and
bidirectional (sinusoidal), learned positions with post-LN, Llama-style (RMSNorm, SwiGLU, rotary
positions, grouped-query attention) and BERT-style (embedding LayerNorm, token types, no output
layer). Padded batches (the short sentence in the middle) to PAD_BOUND of each field's scale (the
largest |value|, at least 1: the padded row's softmax and attention products sum over more keys, in
another order); batches of one length, as the batcher makes them by default, bit for bit. The cut is a copy: nothing of the batch stays alive."""
import threading

import numpy as np
import pytest
import torch

from model import ModelConfig, Transformer
from model.batcher import PAD_BOUND, ExactBatching, TraceBatcher, batchable
from model.batching import CUTS, pad_batch, same_bits, unbatch
from model.trace import flat_arrays

FAMILIES = {
    "toy": dict(vocab_size=40, d_model=16, n_heads=4, n_layers=2, max_len=32),
    "toy-64": dict(vocab_size=40, d_model=64, n_heads=4, n_layers=2, max_len=32, d_ff=128),  # the app's default's shape
    "learned-post-ln": dict(vocab_size=40, d_model=16, n_heads=2, n_layers=2, max_len=32,
                            pos_encoding="learned", norm="post", activation="relu"),
    "llama": dict(vocab_size=40, d_model=32, n_heads=4, n_kv_heads=2, n_layers=2, max_len=32,
                  pos_encoding="rope", norm_kind="rmsnorm", activation="swiglu", bias=False,
                  tie_weights=False, d_ff=64),
    "bert": dict(vocab_size=40, d_model=16, n_heads=4, n_layers=2, max_len=32, pos_encoding="learned",
                 norm="post", emb_norm=True, type_vocab_size=2, output_head=False),
    # the pretrained families' options (issue 32): Qwen3's q/k norms and own head width, Llama 3.1's
    # rotary divisors; Gemma 2 without its window (sandwich norms, embedding scale, GeGLU, both
    # soft-caps, unit-offset norms); RoBERTa's masked-LM head (HeadTrace, logit bias, position offset)
    "qwen3": dict(vocab_size=40, d_model=32, n_heads=4, n_kv_heads=2, n_layers=2, max_len=32, d_head=16,
                  qk_norm=True, pos_encoding="rope", norm_kind="rmsnorm", activation="swiglu", bias=False,
                  tie_weights=False, d_ff=64, rope_freq_factors=(1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0, 8.0)),
    "gemma2": dict(vocab_size=40, d_model=32, n_heads=4, n_kv_heads=2, n_layers=2, max_len=32, d_head=16,
                   pos_encoding="rope", norm_kind="rmsnorm", activation="geglu", bias=False, d_ff=64,
                   sandwich_norm=True, emb_scale=32 ** 0.5, norm_unit_offset=True, attn_softcap=3.0,
                   final_softcap=4.0, attn_scale=0.3),
    "roberta-mlm": dict(vocab_size=40, d_model=16, n_heads=4, n_layers=2, max_len=32, pos_encoding="learned",
                        norm="post", emb_norm=True, type_vocab_size=1, mlm_head=True, pos_offset=2),
}
CASES = [(f, c) for f in FAMILIES for c in (True, False)]
SENTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14], [15, 16, 17, 18, 19]]  # the shortest in the middle


def model_of(family: str) -> Transformer:
    return Transformer(ModelConfig(**FAMILIES[family]), seed=7)


def every_field(tr) -> dict[str, np.ndarray]:
    """Every field of a trace as arrays, derived fields read (flat_arrays reads each attribute)."""
    return flat_arrays(tr)


def assert_same_trace(got, want, exact: bool, tol: float = PAD_BOUND) -> None:
    a, b = every_field(got), every_field(want)
    assert a.keys() == b.keys(), sorted(set(a) ^ set(b))
    for k in b:
        assert a[k].shape == b[k].shape and a[k].dtype == b[k].dtype, (k, a[k].shape, b[k].shape, a[k].dtype)
        if exact:
            assert np.array_equal(a[k], b[k], equal_nan=True), k
        elif a[k].dtype.kind == "f":  # to tol of the field's scale (-inf where masked: equal)
            finite = np.isfinite(b[k])
            scale = max(1.0, float(np.abs(b[k][finite]).max())) if finite.any() else 1.0
            np.testing.assert_allclose(a[k], b[k], rtol=0, atol=tol * scale, err_msg=k)
        else:
            assert np.array_equal(a[k], b[k]), k
    # plain attributes too: the mask kind, the scale, no KV cache
    assert (got.causal, got.past_length, got.key_padding_mask) == (want.causal, want.past_length, None)
    assert [lt.attn.scale for lt in got.layers] == [lt.attn.scale for lt in want.layers]


@pytest.mark.parametrize("family,causal", CASES)
def test_padded_batch_gives_each_sentence_its_own_trace(family, causal):
    m = model_of(family)
    b = pad_batch(SENTS, pad_id=0)
    assert b.ids.shape == (3, 7) and not bool(b.key_padding_mask.all())  # padding: rows 1 and 2
    tb = m.trace(b.ids, causal=causal, key_padding_mask=b.key_padding_mask)
    for row, s in enumerate(SENTS):
        u = unbatch(tb, row, len(s))
        alone = m.trace(torch.tensor([s]), causal=causal)
        assert u.ids.tolist() == [s]  # its own sentence, not a neighbour's
        assert_same_trace(u, alone, exact=False)


@pytest.fixture
def one_thread():
    """The app's one torch thread (ui/runtime.py)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("family,causal", CASES)
@pytest.mark.parametrize("T", [5, 7, 12])
def test_batch_of_one_length_is_within_the_pad_bound_and_exact_where_measured(family, causal, T, one_thread):
    """A batch of one length, unpadded (what exact batching runs): each row within PAD_BOUND of its
    own forward on any CPU; and where ExactBatching's measurement of this very shape says the rows
    are the same bits, they are (same_bits agrees with a field-by-field comparison)."""
    m = model_of(family)
    g = torch.Generator().manual_seed(T)
    ids = torch.randint(1, 40, (4, T), generator=g)
    tb = m.trace(ids, causal=causal)
    rows = [(unbatch(tb, row, T), m.trace(ids[row:row + 1], causal=causal)) for row in range(4)]
    for got, alone in rows:
        assert_same_trace(got, alone, exact=False, tol=PAD_BOUND)
    identical = all(np.array_equal(a, b, equal_nan=True) for got, alone in rows
                    for a, b in zip(every_field(got).values(), every_field(alone).values()))
    assert all(same_bits(got, alone) for got, alone in rows) == identical


class MovesTheLastBit(Transformer):
    """A model whose batched forward differs from each row's own forward in one bit of one attention
    weight, as some CPUs' kernels do for some shapes (`when`: which (rows, tokens) it does it at)."""

    def __init__(self, when=lambda rows, n: True):
        super().__init__(ModelConfig(**FAMILIES["llama"]), seed=7)
        self.when = when
        self.calls: list[tuple[int, int]] = []

    def trace(self, ids, **kw):
        tr = super().trace(ids, **kw)
        self.calls.append(tuple(ids.shape))
        if ids.shape[0] > 1 and self.when(*ids.shape):
            w = next(layer for layer in tr.layers if layer is not None).attn.weights
            w[-1, 0, -1, 0] = torch.nextafter(w[-1, 0, -1, 0], torch.tensor(2.0))  # the last row's, one ulp
        return tr


def test_exact_batching_refuses_a_model_whose_batch_moves_the_last_bit():
    """Measured at first use, not decided by shape rules: a batch that moves one bit of one field
    of one row and the model is traced alone; the request's trace is its own forward's."""
    m = MovesTheLastBit()
    assert batchable(m)  # structurally it could share a forward
    b = TraceBatcher(slots=1)
    tr = b.trace(m, [5, 6, 7, 8, 9])
    assert b.exactness.verdict(m) is False and b.forwards == 0
    assert same_bits(tr, Transformer.trace(m, torch.tensor([[5, 6, 7, 8, 9]])))
    padded = TraceBatcher(slots=1, pad=True)  # pad mode does not measure: its bound is PAD_BOUND
    padded.trace(m, [5, 6, 7, 8, 9])
    assert padded.exactness.verdict(m) is None


class ProbePassed(ExactBatching):
    """The first-use probe passed (as on a CPU whose kernels batch the probe's shapes bit for bit)."""

    def _probe(self, model, causal):
        return True


def test_a_shape_the_probe_missed_is_checked_before_anyone_gets_it():
    """The probe's shapes batch bit for bit, a class's shape does not: its first batch is checked row
    by row against each row's own forward, each caller gets its own forward's trace, and the model is
    traced alone from then on."""
    m = MovesTheLastBit(when=lambda rows, n: (rows, n) == (2, 6))
    b = TraceBatcher(slots=1)
    b.exactness = ProbePassed()  # whatever this CPU's kernels do at the probe's shapes
    assert b.exactness.usable(m, True) and b.exactness.verdict(m) is True
    sents = [[1, 2, 3, 4, 5, 6], [5, 6, 7, 8, 9, 10], [9, 8, 7, 6, 5, 4]]
    out = [None] * 3
    hold, first_forward = threading.Event(), threading.Event()
    orig = m.trace

    def held(ids, **kw):  # the first forward waits until the two others have queued behind it
        if not first_forward.is_set():
            first_forward.set()
            assert hold.wait(30)
        return orig(ids, **kw)

    m.trace = held

    def go(i):
        out[i] = b.trace(m, sents[i])

    ts = [threading.Thread(target=go, args=(i,)) for i in range(3)]
    ts[0].start()
    assert first_forward.wait(30)
    ts[1].start()
    ts[2].start()
    for _ in range(30_000):  # both wait for the slot
        with b._lock:
            if sum(len(q.pending) for q in b._queues.values()) == 2:
                break
        threading.Event().wait(0.001)
    hold.set()
    for t in ts:
        t.join(60)
    m.trace = orig
    assert (2, 6) in m.calls  # the two queued sentences shared a forward
    for s, tr in zip(sents, out):
        assert same_bits(tr, Transformer.trace(m, torch.tensor([s]))), s
    assert b.exactness.verdict(m) is False and b.checks >= 1
    before = b.forwards
    b.trace(m, [1, 2, 3, 4, 5])  # alone from now on
    assert b.forwards == before


def test_a_change_of_thread_settings_measures_again(one_thread):
    m = model_of("llama")
    b = TraceBatcher(slots=1)
    b.trace(m, [5, 6, 7, 8, 9])
    assert b.exactness.verdict(m) is not None
    torch.set_num_threads(2)
    assert b.exactness.verdict(m) is None  # not measured with two threads yet
    b.trace(m, [5, 6, 7, 8, 9])
    assert b.exactness.verdict(m) is not None


def test_same_bits_sees_one_bit_anywhere():
    m = model_of("llama")
    a, c = m.trace(torch.tensor([[5, 6, 7, 8]])), m.trace(torch.tensor([[5, 6, 7, 8]]))
    assert same_bits(a, c)
    c.layers[1].ffn.hidden_pre[0, 3, 5] = torch.nextafter(c.layers[1].ffn.hidden_pre[0, 3, 5], torch.tensor(1e9))
    assert not same_bits(a, c)
    z = m.trace(torch.tensor([[5, 6, 7, 8]]))
    z.logits[0, 0, 0] = -z.logits[0, 0, 0] if z.logits[0, 0, 0] != 0 else -0.0  # a sign (or -0.0) only
    assert not same_bits(a, z)


def test_a_derived_field_read_on_the_batch_is_cut_too():
    m = model_of("toy")
    b = pad_batch(SENTS, pad_id=0)
    tb = m.trace(b.ids, key_padding_mask=b.key_padding_mask)
    tb.probs, tb.layers[0].attn.scores, tb.layers[1].ln1.normalized  # noqa: B018  read before the cut
    u = unbatch(tb, 1, 3)
    assert u.__dict__["_probs"] is not None and tuple(u.__dict__["_probs"].shape) == (1, 3, 40)
    assert_same_trace(u, m.trace(torch.tensor([SENTS[1]])), exact=False)


def storages(tr) -> set[int]:
    """The data pointers of the storages of every tensor a trace holds."""
    out = set()
    stack = [tr]
    while stack:
        o = stack.pop()
        if isinstance(o, torch.Tensor):
            out.add(o.untyped_storage().data_ptr())
        elif isinstance(o, tuple):
            stack.extend(o)
        elif hasattr(o, "__dataclass_fields__"):
            stack.extend(vars(o).values())
    return out


def test_the_cut_is_a_copy_that_keeps_nothing_of_the_batch():
    m = model_of("llama")
    b = pad_batch(SENTS, pad_id=0)
    tb = m.trace(b.ids, key_padding_mask=b.key_padding_mask)
    u = unbatch(tb, 0, 7)  # the longest row: its slices of (B, T, .) fields are contiguous views
    # the model's own tensors (norm gammas) and the config's constant kv_head index are shared by
    # every trace by design; nothing else may be
    model_owned = {p.untyped_storage().data_ptr() for p in m.parameters()}
    model_owned.add(tb.layers[0].attn.kv_head.untyped_storage().data_ptr())
    shared = (storages(u) & storages(tb)) - model_owned
    assert shared == set(), "the cut trace shares memory with the batch"
    # fields that share one tensor in the batch (a block's input is the previous block's output)
    # still share one copy
    assert u.layers[1].input is u.layers[0].resid_out and u.layers[0].ffn.gate is u.layers[0].ffn.hidden_pre


def test_refuses_what_it_cannot_cut():
    m = model_of("toy")
    tb = m.trace(torch.tensor([[5, 6, 7, 8]] * 2))
    with pytest.raises(ValueError, match="outside the batch"):
        unbatch(tb, 2, 4)
    b = pad_batch([[5, 6], [7, 8, 9]], pad_id=0)
    padded = m.trace(b.ids, key_padding_mask=b.key_padding_mask)
    with pytest.raises(ValueError, match="padding inside"):
        unbatch(padded, 0, 3)
    ablated = m.trace(torch.tensor([[5, 6, 7, 8]] * 2), ablate_heads=[(0, 1)])
    with pytest.raises(ValueError, match="interventions"):
        unbatch(ablated, 0, 4)
    alibi = Transformer(ModelConfig(**FAMILIES["toy"], alibi=True, pos_encoding="none"), seed=1)
    assert not batchable(alibi) and batchable(m) and batchable(model_of("llama"))
    with pytest.raises(ValueError, match="attention biases"):
        unbatch(alibi.trace(torch.tensor([[5, 6, 7, 8]] * 2)), 0, 4)


def test_every_trace_field_has_a_rule():
    """A field added to a trace class must say how it is cut (else unbatch refuses the trace and
    the batcher traces alone): the rules name exactly the classes' fields."""
    import dataclasses

    from model import trace as T
    for cls in (T.ForwardTrace, T.EmbeddingTrace, T.BlockTrace, T.LayerNormTrace, T.NormTrace, T.FFNTrace,
                T.AttentionTrace, T.HeadTrace):
        assert set(CUTS[cls.__name__]) == {f.name for f in dataclasses.fields(cls)}, cls.__name__


def test_which_families_share_a_forward():
    """Rotary positions, Qwen3's q/k norms and Gemma 2's soft-cap work row by row: they may share a
    forward (exact batching then also needs this machine's measurement); a window never (traced
    alone: unbatch has no rule for its band)."""
    for family in ("qwen3", "llama", "roberta-mlm", "gemma2", "toy", "bert"):
        assert batchable(model_of(family)), family
    windowed = Transformer(ModelConfig(**{**FAMILIES["gemma2"], "window": 3, "window_layers": (0,)}), seed=1)
    assert not batchable(windowed)


def test_batchable_exact_is_the_measurement():
    assert batchable(MovesTheLastBit()) and not batchable(MovesTheLastBit(), exact=True)
    m = model_of("llama")
    b = TraceBatcher(slots=1)
    assert batchable(m, exact=True) == b.exactness.usable(m, True)  # the same measurement, this CPU

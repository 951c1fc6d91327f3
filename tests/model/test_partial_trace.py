"""Partial traces (the heads page shows one layer): Transformer.trace(stop_after=l) runs layers
0 .. l only, record_from=l runs the layers below l without keeping them. What is kept is bit for
bit the whole pass's, every family the engine has; the trace says what it is (stopped_after,
recorded_from, complete) and has no final norm, last hidden states or logits when it stopped; the
last layer's index runs the whole pass; batched partial traces (model.batcher) are the single ones."""
import threading

import numpy as np
import pytest
import torch

from model import ModelConfig, Transformer
from model.batcher import TraceBatcher
from model.trace import flat_arrays
from tests.model.test_batch_trace import FAMILIES

IDS = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12]])


def three_layers(family: str) -> Transformer:
    return Transformer(ModelConfig(**{**FAMILIES[family], "n_layers": 3}), seed=11)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("stop", [0, 1])
def test_partial_layers_are_the_whole_pass_first_ones(family, causal, stop):
    m = three_layers(family)
    whole, part = flat_arrays(m.trace(IDS, causal=causal)), m.trace(IDS, causal=causal, stop_after=stop)
    assert part.stopped_after == stop and not part.complete and len(part.layers) == stop + 1
    assert part.final is None and part.final_ln is None and part.logits is None and part.probs is None
    got = flat_arrays(part)
    layer_keys = [k for k in whole if k.startswith("layers.") and int(k.split(".")[1]) <= stop]
    assert layer_keys and set(layer_keys) <= set(got)
    assert not any(k.startswith(f"layers.{stop + 1}.") or k.startswith("final") for k in got)
    for k in layer_keys + [k for k in whole if k.startswith("embeddings.")]:
        assert np.array_equal(got[k], whole[k], equal_nan=True), k


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("layer", [1, 2])
def test_one_layer_alone_is_the_whole_pass_layer(family, layer):
    m = three_layers(family)
    whole = flat_arrays(m.trace(IDS))
    one = m.trace(IDS, stop_after=layer, record_from=layer)
    assert one.recorded_from == layer and not one.complete and one.layers[:layer] == (None,) * layer
    assert one.stopped_after == (None if layer == 2 else layer) and len(one.layers) == layer + 1
    got = flat_arrays(one)
    assert not any(k.startswith("layers.") and int(k.split(".")[1]) != layer for k in got)
    kept = [k for k in whole if k.startswith(f"layers.{layer}.")
            or (layer == 2 and (k.startswith("final") or k in ("logits", "probs")))]
    assert kept and set(kept) <= set(got)
    for k in kept:
        assert np.array_equal(got[k], whole[k], equal_nan=True), k
    with pytest.raises(ValueError, match="record_from"):
        m.trace(IDS, stop_after=0, record_from=1)


def test_the_last_layer_gives_the_whole_trace_and_bad_layers_say_so():
    m = three_layers("llama")
    whole, last = flat_arrays(m.trace(IDS)), m.trace(IDS, stop_after=2)
    assert last.stopped_after is None and last.complete and last.logits is not None
    got = flat_arrays(last)
    assert got.keys() == whole.keys() and all(np.array_equal(got[k], whole[k], equal_nan=True) for k in whole)
    for bad in (3, -1):
        with pytest.raises(ValueError, match="layers 0 .. 2"):
            m.trace(IDS, stop_after=bad)
    numpy = m.trace(IDS, stop_after=0).numpy()
    assert numpy.stopped_after == 0 and len(numpy.layers) == 1


@pytest.fixture
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # exact batching needs the app's one torch thread (model.batcher)
    yield
    torch.set_num_threads(n)


def test_batched_partial_traces_are_the_single_ones(one_thread):
    """Sessions asking for the same layer share a forward; each gets its own sentence's partial
    trace, the same bits as alone (exact batching: one length, SmolLM2's shapes in small)."""
    m = Transformer(ModelConfig(vocab_size=40, d_model=64, n_heads=4, n_kv_heads=2, n_layers=3, max_len=32,
                                pos_encoding="rope", norm_kind="rmsnorm", activation="swiglu", bias=False,
                                tie_weights=False, d_ff=128), seed=3)
    sents = [[5, 6, 7, 8, 9], [9, 8, 7, 6, 5], [1, 2, 3, 4, 5], [7, 7, 7, 7, 7]]
    batcher = TraceBatcher(slots=1, max_rows=8)
    out: list = [None] * len(sents)
    gate = threading.Barrier(len(sents))

    def go(i):
        gate.wait()
        out[i] = batcher.trace(m, sents[i], True, stop_after=1, record_from=1)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(sents))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for s, tr in zip(sents, out):
        alone = flat_arrays(m.trace(torch.tensor([s]), stop_after=1, record_from=1))
        got = flat_arrays(tr)
        assert tr.stopped_after == 1 and tr.layers[0] is None and got.keys() == alone.keys()
        assert all(np.array_equal(got[k], alone[k], equal_nan=True) for k in alone)

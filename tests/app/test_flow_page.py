"""The whole-model flow page (issue 19 point 6): the stages and shapes of the current model,
read from the engine's trace here, in the model's own order."""
import torch

from classroom.flow import pages_in_order, stages
from model.checkpoint import load_checkpoint
from model.pretrained import PRETRAINED
from tests.helpers import ROOT, app_test, errors


def open_flow(**params):
    at = app_test(default_timeout=180)
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    at.switch_page("pages/flow.py").run()
    assert not errors(at) and not at.error
    return at


def test_the_flow_shows_the_real_shapes_in_order():
    at = open_flow()
    table = next(d.value for d in at.dataframe) if at.dataframe else None
    model, tok = load_checkpoint(ROOT / "checkpoints" / "causal-lm")
    ids = tok.encode(at.session_state["text"]).ids
    tr = model.trace(torch.tensor([ids]))
    T, D, H, V = len(ids), model.cfg.d_model, model.cfg.n_heads, model.cfg.vocab_size
    rows = stages(tr.numpy(), model.cfg)
    names = [r.name for r in rows]
    assert names[0] == "token ids" and names[-1] == "softmax → probabilities"
    assert names.index("block 0 · LayerNorm (ln1)") < names.index("block 0 · attention: Q, K, V")  # pre-LN
    shape = {r.name: r.shape for r in rows}
    assert shape["block 0 · softmax weights"] == (H, T, T)
    assert shape["logits = h · Eᵀ"] == (T, V) and shape["token embeddings"] == (T, D)
    assert shape["block 0 · FFN hidden"] == (T, model.cfg.d_ff)
    links = [p.proto.page for p in at.get("page_link")]
    assert any("ffn-output" in l for l in links) and any("multi-head" in l for l in links)
    assert table is None or len(table) == len(rows)
    groups = pages_in_order(rows)  # one link per page, in the order the pages first appear
    assert list(groups)[:3] == ["heads", "ffn-output", "positional"]
    assert [p.proto.label for p in at.get("page_link")] == [", ".join(n) for n in groups.values()]
    assert sum(map(len, groups.values())) == len(rows)


def test_an_encoder_stops_at_its_hidden_states():
    if not PRETRAINED["minilm-l6"].installed():
        return
    at = open_flow(src="minilm-l6")
    flat = " ".join(str(e.value) for e in at.caption)
    assert "post-LN" in flat

"""Issue 34 point 3: GPT-2 small is buildable with fresh weights from the sidebar (d_model 768,
12 heads, 12 layers, context 1,024): the preset sets the widgets, the model built has those shapes,
the length slider reaches 1,024, and the pages state the GPT-2 facts from its config."""
from __future__ import annotations

from classroom.multi_head import param_rows
from model.config import PRESETS, param_count
from tests.helpers import all_text, app_test, errors
from ui import state


def gpt2_app():
    at = app_test(default_timeout=300)
    at.query_params["src"] = state.FRESH
    at.run()
    at.sidebar.button(key="preset_gpt2").click().run()
    assert not errors(at), errors(at)
    return at


def test_gpt2_small_preset_builds_gpt2_shapes():
    at = gpt2_app()
    s, g = at.session_state, PRESETS["gpt2-small"]
    assert (s["d"], s["h"], s["L"], s["pe"], s["norm"], s["act"], s["dv"], s["ctx"]) == \
        (g.d_model, g.n_heads, g.n_layers, g.pos_encoding, g.norm, g.activation, 0, g.max_len) == \
        (768, 12, 12, "learned", "pre", "gelu", 0, 1024)
    assert at.sidebar.slider(key="T").max == 1024  # the context reaches GPT-2's 1,024 tokens
    at.sidebar.slider(key="T").set_value(1024).run()
    assert at.session_state["T"] == 1024 and not errors(at)
    q = {k: (v[0] if isinstance(v, list) else v) for k, v in dict(at.query_params).items()}
    assert (q["d"], q["h"], q["L"], q["ctx"], q["pe"]) == ("768", "12", "12", "1024", "learned")
    at.switch_page("pages/multi-head.py").run()
    assert not errors(at), errors(at)
    shape = at.dataframe[0].value
    assert shape.loc["W_Q, W_K, W_V (each)", "shape"] == "768 × 768"
    assert shape.loc["W_Q, W_K, W_V (each)", "bias"] == "+ bias (768)"
    # the parameter count of the model on screen: GPT-2 small's, except the toy vocabulary's embedding
    text = all_text(at)
    params = next(d.value for d in at.dataframe if "formula" in d.value.columns and "token_embedding" in d.value.index)
    V = int(params.loc["token_embedding", "parameters"]) // 768
    mine = g.replace(vocab_size=int(V))
    assert f"**{param_count(mine):,}** parameters" in text
    assert param_count(mine) == param_count(g) - (g.vocab_size - V) * 768
    formulas = {r.part: r.formula for r in param_rows(mine)}
    assert formulas["position_embedding"].startswith("max_len × d_model")

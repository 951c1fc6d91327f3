"""The Heads-as-experts page (issue 22 point 7): every head of the real models scored on the
built-in sentences; the grid and the top-10 table show classroom.experts' numbers."""
from __future__ import annotations

import numpy as np
import pytest

from classroom import experts
from model.pretrained import load_pretrained
from tests.helpers import app_test, decode, errors, figures

PAGE = "pages/experts.py"


def open_page(**params):
    at = app_test(default_timeout=120)
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    at.switch_page(PAGE).run()
    assert not errors(at), errors(at)
    assert not at.error, [e.value for e in at.error]
    return at


@pytest.mark.parametrize("name,causal", [("minilm-l6", False), ("smollm2-135m", True)])
def test_the_page_scores_every_head_of_a_real_model(name, causal):
    try:
        model, tok = load_pretrained(name)
    except ModuleNotFoundError as e:
        pytest.skip(str(e))
    at = open_page(ex_model=name, ex_task="verb → subject")
    want = experts.find_experts(model, tok, "verb → subject", causal=causal)
    grid = next(f for f in figures(at) if "Mean attention weight" in str(f["layout"]["title"]))
    np.testing.assert_allclose(decode(grid["data"][0]["z"]), want.score, atol=1e-6)
    table = next(d.value for d in at.dataframe if "hit rate" in d.value.columns)
    best = want.top(1)[0]
    l, h = best.layer, best.head
    assert (table.iloc[0]["layer"], table.iloc[0]["head"]) == (l, h)
    assert table.iloc[0]["score"] == pytest.approx(best.score)
    assert table.iloc[0]["hit rate"] == pytest.approx(best.hit_rate)
    assert table.iloc[0]["far score"] == pytest.approx(want.far[l, h])
    sentences = next(d.value for d in at.dataframe if "tokens back" in d.value.columns)
    assert list(sentences.columns) == ["sentence", "query", "target", "tokens back", "weight"]
    np.testing.assert_allclose(sentences["weight"], want.per_sentence[:, l, h], atol=1e-6)
    assert f"layer {l}, head {h}" in " ".join(m.value for m in at.markdown)
    assert at.selectbox(key="ex_head").value == f"L{l} H{h}"


@pytest.mark.parametrize("src", ["minilm-l6", "causal-lm"])
def test_no_switch_to_advice_for_the_model_already_chosen(src):
    """Issue 34: with MiniLM already chosen in the sidebar the page told the user to switch the model
    box to MiniLM-L6. With the model chosen it points to Attention heads instead; with another model
    it still says which model to pick."""
    from model.pretrained import PRETRAINED
    if not PRETRAINED["minilm-l6"].installed():
        pytest.skip("SKIPPED LOUDLY: MiniLM is not installed")
    at = open_page(src=src, ex_model="minilm-l6")
    caps = " ".join(c.value for c in at.caption)
    if src == "minilm-l6":
        assert "Switch the Model box" not in caps and "The sidebar already runs MiniLM" in caps
    else:
        assert "Switch the Model box in the sidebar to MiniLM" in caps

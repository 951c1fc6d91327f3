"""The code view on the heads, scaling and model-view pages (issue 33): it showed attend(), a
wrapper that only builds the trace. It shows the lines the attention layer runs: the per-head
q, k, v, then q kᵀ, the scaling, the mask and the softmax, read from the running source, with the
file's own line numbers."""
from __future__ import annotations

import inspect
import re

import pytest

from tests.helpers import ROOT, app_test, errors
from ui.show import CODE_KEY

MUST = {
    "q kᵀ": "scores = q @ k.transpose(-2, -1)",
    "the scaling": "scale = 1.0 / math.sqrt(d_k)",
    "the scaled scores": "scaled = scores.mul_(scale)",
    "the mask": 'torch.where(allowed, x, float("-inf"))',
    "the softmax": "torch.softmax(masked, dim=-1)",
    "the per-head queries": "q = self.split(self.q_proj(x_q))",
    "the weighted values": "heads = weights @ v",
}


def test_the_layer_runs_the_function_shown():
    """What the view excerpts is what the model calls (not a copy, not a wrapper)."""
    from model import layers
    assert "attend_fields(" in inspect.getsource(layers.MultiHeadAttention.forward)


@pytest.mark.parametrize("page", ["pages/heads.py", "pages/scaling.py", "pages/model-view.py"])
def test_code_view_shows_qk_scaling_mask_softmax(page):
    at = app_test()
    at.run()
    at.switch_page(page).run()
    at.session_state[CODE_KEY] = True
    at.run()
    assert not errors(at), errors(at)
    box = next(e for e in at.expander if e.label.startswith("The code"))
    code = "\n".join(c.value for c in box.code)
    missing = [what for what, line in MUST.items() if line not in code]
    assert not missing, (page, missing)
    assert "return AttentionTrace(**attend_fields(" not in code  # not the wrapper
    # each caption names the file and the lines; those lines of the file are the code shown
    for cap, block in zip([c.value for c in box.caption], [c.value for c in box.code]):
        m = re.search(r"· (\S+), lines? (\d+)(?:–(\d+))?", cap)
        assert m, cap
        path, a, b = m.group(1), int(m.group(2)), int(m.group(3) or 0)
        rows = (ROOT / path).read_text().splitlines()
        first = block.splitlines()[0].strip()
        assert rows[a - 1].strip() == first, (cap, rows[a - 1], first)
        if b:
            assert rows[b - 1].strip() == block.splitlines()[-1].strip(), cap
            assert b - a + 1 == len(block.splitlines()), cap


def test_an_excerpt_whose_marker_is_gone_says_so():
    from ui.show import Lines, excerpt
    with pytest.raises(ValueError, match="no line containing"):
        excerpt(Lines("model.attention.attend_fields", "this line is not there", "heads = weights @ v"))

"""AppTest of the tiled-attention page: the score heatmap equals q k^T / sqrt(d_k) of the sidebar
run computed here with the checkpoint directly; the step slider walks the tiles until the output so
far equals the final one; tile 0 and tiles larger than T give messages, never exceptions or NaN."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from model.checkpoint import CHECKPOINT_DIR, load_checkpoint
from tests.helpers import app_test, decode, errors, figures

torch.set_num_threads(1)
PAGE = "pages/flash.py"
SCORES, STATS, OUTPUT, MEMORY = range(4)


@pytest.fixture(scope="module")
def reference():
    """q, k, v of layer 0 head 0 for the default sidebar sentence, from the checkpoint (not the app)."""
    from ui.state import DEFAULT_TEXT
    model, tok = load_checkpoint(CHECKPOINT_DIR / "causal-lm")
    ids = tok.encode(DEFAULT_TEXT).ids
    tr = model.trace(torch.tensor([ids]), causal=True)
    a = tr.layers[0].attn
    return a.q[0, 0].double(), a.k[0, 0].double(), a.v[0, 0].double(), len(ids)


def start(**widgets):
    at = app_test()
    at.run()
    at.switch_page(PAGE).run()
    for key, value in widgets.items():
        at.number_input(key=key).set_value(value).run() if key == "flash_tile" else \
            at.slider(key=key).set_value(value).run()
    assert not errors(at), errors(at)
    return at


def test_scores_steps_and_last_step_equal_plain_attention(reference):
    from ui import flash as flash_ui
    assert flash_ui.measurements().wait(64, timeout=600) is not None  # the server's background measurement
    q, k, v, T = reference
    at = start(flash_tile=3)
    assert not at.error
    figs = figures(at)
    assert len(figs) == 4
    z = decode(figs[SCORES]["data"][0]["z"])
    s = (q @ k.T / math.sqrt(q.shape[-1])).numpy()
    causal = np.tril(np.ones((T, T), dtype=bool))
    assert np.allclose(z[causal], s[causal], atol=1e-4)
    assert np.isnan(z[~causal]).all()  # masked cells blank, never a number
    assert figs[SCORES]["layout"]["plot_bgcolor"] == "#d9d9d9"  # ... and grey, as the caption says (issue 33)
    # current tile outlined: keys 0..2
    rects = [sh for sh in figs[SCORES]["layout"]["shapes"] if sh["line"].get("width") == 4]
    assert (rects[0]["x0"], rects[0]["x1"]) == (-0.5, 2.5)
    # running max after step 1 = max over the first 3 keys (allowed ones) of each query
    m = decode(figs[STATS]["data"][0]["y"])
    expect = np.where(causal[:, :3], s[:, :3], -np.inf).max(1)
    assert np.allclose(m, expect, atol=1e-4)
    assert at.slider(key="flash_step").max == math.ceil(T / 3)
    # the last step: everything read, the output so far is the final one = plain attention
    at.slider(key="flash_step").set_value(math.ceil(T / 3)).run()
    assert not errors(at)
    figs = figures(at)
    so_far, final = (decode(t["z"]) for t in figs[OUTPUT]["data"])
    s = (q @ k.T / math.sqrt(q.shape[-1])).masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    plain = (torch.softmax(s, -1) @ v).numpy()
    assert np.allclose(final, plain, atol=1e-5) and np.array_equal(so_far, final)
    assert any("equals plain attention" in x.value for x in at.success)
    mem = figs[MEMORY]["data"]
    plain_mb, tiled_mb = decode(mem[0]["y"]), decode(mem[1]["y"])
    assert tiled_mb[-1] < plain_mb[-1] / 5  # T = 4096: the tiled loop needs far less
    assert plain_mb[-1] >= 4096 * 4096 * 4 / 2**20  # at least the T x T float32 scores


def test_tile_zero_and_too_large():
    at = start(flash_tile=0)
    assert at.error and "at least 1" in at.error[0].value
    assert figures(at) == []  # the page stops after the message
    at.number_input(key="flash_tile").set_value(500).run()
    assert not errors(at) and not at.error
    assert any("clamped" in i.value for i in at.info)
    assert not [s for s in at.slider if s.key == "flash_step"]  # one tile: no step slider
    z = decode(figures(at)[OUTPUT]["data"][0]["z"])
    assert np.isfinite(z).all()


def test_the_step_slider_takes_the_link_and_stays_in_range():
    """ui.state.step_slider: a link's step is used when the walk has it; one beyond the last step
    falls back to step 1 with a notice; after a change that leaves one step, there is no slider."""
    at = app_test()
    at.query_params.update({"flash_tile": "3", "flash_step": "2"})
    at.run()
    at.switch_page(PAGE).run()
    assert not errors(at) and at.slider(key="flash_step").value == 2
    assert "Step 2/" in str(figures(at)[SCORES]["layout"]["title"])
    at = app_test()
    at.query_params.update({"flash_tile": "3", "flash_step": "99"})
    at.run()
    at.switch_page(PAGE).run()
    assert not errors(at) and at.slider(key="flash_step").value == 1
    assert any("flash_step" in w.value and "not available" in w.value for w in at.warning)
    at.number_input(key="flash_tile").set_value(500).run()
    assert not [s for s in at.slider if s.key == "flash_step"] and at.session_state["flash_step"] == 1


def test_memory_chart_is_measured_in_the_background_and_joins_when_done(monkeypatch):
    """Issue 33 item 2: the first visit waited 9–11 s (loaded machine) for the peak-memory
    measurement. Now the page is drawn at once with a note, the measurement runs once per server
    in a background thread, and the chart (in MiB, the app's unit) comes when it is done."""
    import threading

    from ui import flash as flash_ui
    gate, started = threading.Event(), []
    real = flash_ui.flash.memory_curve  # classroom.flash.memory_curve

    def held(tile):  # the measurement waits until the test has seen the page without its chart
        started.append(tile)
        gate.wait(60)
        return real(tile, lengths=(64, 128, 256))
    reg = flash_ui.MemoryMeasurements()
    monkeypatch.setattr(flash_ui.flash, "memory_curve", held)
    monkeypatch.setattr(flash_ui, "measurements", lambda: reg)
    try:
        at = start()
        assert any("Measuring the peak memory" in i.value for i in at.info)
        titles = [str(f["layout"]["title"]) for f in figures(at)]
        assert not [t for t in titles if "Peak memory" in t] and [t for t in titles if "Step 1/" in t]
    finally:
        gate.set()
    assert reg.wait(64, timeout=60) is not None and started == [64]
    at.run()
    assert not errors(at)
    chart = next(f for f in figures(at) if "Peak memory" in str(f["layout"]["title"]))
    assert chart["layout"]["yaxis"]["title"]["text"] == "MiB"
    np.testing.assert_array_equal(decode(chart["data"][0]["x"]), [64, 128, 256])
    assert not any("Measuring the peak memory" in i.value for i in at.info)
    at.run()
    assert started == [64]  # once per server, not once per run

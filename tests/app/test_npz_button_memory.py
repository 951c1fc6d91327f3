"""The .npz button does not keep a session's trace alive (issue 31, memory): Streamlit keeps a
download button's callable with the session until its next run, and a callable that held the run
kept one trace per session after the shared cache had let it go (100 sessions typing into SmolLM2:
~25 MB each). The button holds the run weakly and, once it is gone, traces its tokens again: the
same file."""
import gc
import io
import json
import weakref

import numpy as np

from model.config import ModelConfig
from ui import models, runs, show, state


def fresh_source() -> models.ModelSource:
    cfg = ModelConfig(vocab_size=len(models.fresh_tokenizer()), d_model=64, n_heads=4, n_layers=2, max_len=state.T_MAX)
    return models.ModelSource("fresh", "fresh", json.dumps(cfg.to_dict(), sort_keys=True), 0)


def test_the_npz_button_holds_the_run_weakly_and_gives_the_same_file(monkeypatch):
    made = {}
    monkeypatch.setattr(show.st, "download_button", lambda label, data, **kw: made.setdefault("data", data))
    src = fresh_source()
    run = runs._run(src, "the cat sat on the mat", True, 64)  # not through the shared cache
    want = np.load(io.BytesIO(show.trace_npz(run.trace, **run.export_extras())))
    show.download_npz(run)
    first = np.load(io.BytesIO(made["data"]()))  # clicked while the run lives
    gone = weakref.ref(run)
    del run
    gc.collect()
    assert gone() is None, "the button's callable keeps the run (and its trace) alive"
    again = np.load(io.BytesIO(made["data"]()))  # clicked after: traced again
    assert set(first.files) == set(again.files) == set(want.files)
    for k in want.files:
        assert np.array_equal(first[k], want[k]) and np.array_equal(again[k], want[k]), k

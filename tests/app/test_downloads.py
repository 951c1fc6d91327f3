"""Deferred downloads (issue 33): a download button given a callable runs it when clicked, on a
server thread, after the page script has ended. The heads page's "CSV of these numbers" did
nothing (NameError: the page had deleted `w` by then); the overview's worked only because `table`
was assigned further down. Here every deferred download of every page is run twice: when it is
registered (the page's values at that point) and after the run ended (when a click runs it); both
must succeed and give the same bytes."""
from __future__ import annotations

import pytest

from tests.helpers import app_pages, app_test, errors

PAGES = app_pages()


@pytest.fixture
def deferred(monkeypatch):
    """Every deferred download registered during a run: (file name, callable, bytes made at once)."""
    from streamlit.runtime.media_file_manager import MediaFileManager
    seen: list[tuple[str, object, object]] = []
    original = MediaFileManager.add_deferred

    def add_deferred(self, data_callable, mimetype, coordinates, file_name=None, **kwargs):
        try:
            now = data_callable()
        except Exception as exc:  # noqa: BLE001  (recorded: the test reports it)
            now = exc
        seen.append((file_name, data_callable, now))
        return original(self, data_callable, mimetype, coordinates, file_name=file_name, **kwargs)

    monkeypatch.setattr(MediaFileManager, "add_deferred", add_deferred)
    return seen


def _bytes(x) -> bytes:
    return x.encode() if isinstance(x, str) else bytes(x)


def check(seen) -> list[str]:
    bad = []
    for name, make, now in seen:
        try:
            later = make()  # the click, after the script run ended
        except Exception as exc:  # noqa: BLE001
            later = exc
        if isinstance(now, Exception) or isinstance(later, Exception):
            bad.append(f"{name}: during the run {now!r:.80}, clicked afterwards {later!r:.80}")
        elif _bytes(now) != _bytes(later):
            bad.append(f"{name}: the click gives other numbers than the page showed")
        elif not _bytes(later):
            bad.append(f"{name}: empty file")
    return bad


# (page, {session key: value} set before the run): the states that draw more downloads
STATES = [(p, {}) for p in PAGES] + [
    ("pages/heads.py", {"detail": True}),
    ("pages/intervene.py", {"iv_heads": ["L0 H1"]}),
    ("pages/model-view.py", {"mv_tok": 2}),
]


@pytest.mark.parametrize("page, extra", STATES, ids=[f"{p}{'+' + ','.join(e) if e else ''}" for p, e in STATES])
def test_every_deferred_download_works_when_clicked(deferred, page, extra):
    at = app_test(default_timeout=120)
    at.run()
    at.switch_page(page).run()
    for k, v in extra.items():
        at.session_state[k] = v
    deferred.clear()
    at.run()
    assert not errors(at), errors(at)
    assert check(deferred) == []


def test_the_heads_grid_csv_holds_the_grids_weights(deferred):
    """The heads page's CSV: one row per (head, query, key), the weights of the layer shown."""
    import io

    import numpy as np
    import pandas as pd

    from tests.helpers import decode, figures
    at = app_test()
    at.query_params["layer"] = "1"
    deferred.clear()
    at.run()
    name, make, _ = next(d for d in deferred if d[0] == "layer1_heads.csv")
    t = pd.read_csv(io.BytesIO(_bytes(make())))
    assert list(t.columns[1:]) == ["layer", "head", "query", "key", "weight"] and set(t.layer) == {1}
    H = t["head"].nunique()
    fig = figures(at)[0]
    z = [decode(tr["z"]) for tr in fig["data"] if tr.get("type") == "heatmap"][:H]
    T = z[0].shape[0]
    w = t.weight.to_numpy().reshape(H, T, T)
    shown = np.stack(z).astype(float)
    drawn = ~np.isnan(shown)  # masked cells are blank in the chart (0 in the CSV)
    assert drawn.sum() > H * T and np.allclose(shown[drawn], w[drawn], atol=1e-3)
    assert np.allclose(w.sum(-1), 1, atol=1e-4)

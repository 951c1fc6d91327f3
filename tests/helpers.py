"""Shared test helpers: decode Plotly figure data from AppTest, drive AppTest."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def app_pages() -> list[str]:
    """Page files listed in app.PAGES that exist (app.py is read, not imported: importing it would
    run Streamlit). One reader of app.py for the tests and the benchmarks: benchmarks/soak.py."""
    from benchmarks.soak import app_constant
    return [entry[1] for entry in app_constant("PAGES") if (ROOT / entry[1]).exists()]


def decode(value):
    """A Plotly data array as numpy: typed arrays arrive as {"dtype", "bdata", "shape"}."""
    if isinstance(value, dict) and "bdata" in value:
        arr = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        shape = value.get("shape")
        if shape is not None:
            shape = [int(s) for s in (shape.split(",") if isinstance(shape, str) else shape)]
            arr = arr.reshape(shape)
        return arr
    return np.asarray(value, dtype=float) if value is not None else None


def figures(at) -> list[dict]:
    """Every plotly chart of an AppTest run as its JSON spec."""
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def traces(at, index: int) -> list[dict]:
    return figures(at)[index]["data"]


def _use_navigation_in_apptest() -> None:
    """AppTest resets PagesManager.uses_pages_directory before every run, and because this app
    has a pages/ folder the flag becomes True: from the second run on, AppTest then runs the page
    script alone (MPA v1) without app.py, so the shared sidebar vanishes and its widget state is
    dropped. app.py uses st.navigation (MPA v2), which the real server records by setting the flag
    to False; do the same here."""
    from streamlit.runtime.pages_manager import PagesManager
    if getattr(PagesManager, "_attention_lab_v2", False):
        return
    original = PagesManager.__init__

    def init(self, main_script_path, *args, **kwargs):
        original(self, main_script_path, *args, **kwargs)
        if Path(main_script_path).resolve() == (ROOT / "app.py").resolve():
            PagesManager.uses_pages_directory = False

    PagesManager.__init__ = init
    PagesManager._attention_lab_v2 = True


def app_test(default_timeout: int = 60):
    from streamlit.testing.v1 import AppTest
    _use_navigation_in_apptest()
    return AppTest.from_file(str(ROOT / "app.py"), default_timeout=default_timeout)


def errors(at) -> list[str]:
    return [str(e.value) for e in at.exception]


def fig_titled(at, title_start: str) -> dict:
    """The first figure of the run whose title starts with title_start."""
    found = [f for f in figures(at) if ((f["layout"].get("title") or {}).get("text") or "").startswith(title_start)]
    assert found, f"no figure titled {title_start!r}; have {[(f['layout'].get('title') or {}).get('text') for f in figures(at)]}"
    return found[0]


def axis_prop(layout, name: str, prop: str):
    """An axis property as Plotly draws it: the axis's own value, else the figure template's for
    every axis of its letter (viz.common.hoist_shared moves what all axes of a grid share there).
    layout: a figure's layout (go.Layout) or a spec's layout dict."""
    if not isinstance(layout, dict):
        layout = layout.to_plotly_json()
    own = (layout.get(name) or {}).get(prop)
    if own is not None:
        return own
    return (((layout.get("template") or {}).get("layout") or {}).get(name[0] + "axis") or {}).get(prop)


def open_page(page: str, **query):
    at = app_test()
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    at.switch_page(page).run()
    assert not errors(at), errors(at)
    return at


def all_text(at) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption]
    parts += [x.value for x in (*at.info, *at.warning, *at.success, *at.error)]
    parts += [h.value for h in (*at.title, *at.header, *at.subheader)]
    return "\n".join(str(p) for p in parts)


def assert_scaled_close(got, want, rel: float = 1e-5, msg: str = "") -> None:
    """Float32 parity that holds on any CPU: |got - want| <= rel * (max(1, max |want|) + |want|).
    Kernels (AVX2, AVX-512, AMX; one thread or several) sum in different orders, so float32 results
    move by a few ulps of the largest value a computation saw; an absolute 1e-5 on logits of 20
    is 2 ulps. The largest |value| (at least 1) sets the scale, plus rel of each value itself."""
    import torch
    g = got.detach().double() if isinstance(got, torch.Tensor) else torch.as_tensor(np.asarray(got, dtype=np.float64))
    w = want.detach().double() if isinstance(want, torch.Tensor) else torch.as_tensor(np.asarray(want, dtype=np.float64))
    assert g.shape == w.shape, f"{msg}: shape {tuple(g.shape)} != {tuple(w.shape)}"
    finite = torch.isfinite(w)
    assert torch.equal(finite, torch.isfinite(g)) and torch.equal(g[~finite], w[~finite]), f"{msg}: non-finite values differ"
    scale = max(1.0, float(w[finite].abs().max())) if finite.any() else 1.0
    diff = (g[finite] - w[finite]).abs()
    bound = rel * (scale + w[finite].abs())
    if not bool((diff <= bound).all()):
        i = int(torch.argmax(diff - bound))
        raise AssertionError(f"{msg}: |difference| {float(diff[i]):.3g} over the bound {float(bound[i]):.3g} "
                             f"(rel {rel:g} of the scale {scale:.4g}); want {float(w[finite][i]):.6g}")

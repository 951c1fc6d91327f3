"""benchmarks/stclient.py sends what the browser sends.

Regression for the soak's 25 errors at reruns 250-274 (the cost page): the client modelled
st.select_slider ("Plot sequence lengths up to") as a numeric slider and sent a
double_array_value, while Streamlit registers select sliders as "string_array_value" (the shown
option texts). The server then failed on every later rerun of that page with
"TypeError: must be real number, not str" -- a harness bug, never seen in a browser or AppTest.
Also: on the mask lab a selectbox is labelled "Sentence" too; set_widget("Sentence", ...) must keep
typing into the sidebar's text area (drawn first), not into that selectbox.
"""
from __future__ import annotations

import asyncio

import pytest
from streamlit.proto.Slider_pb2 import Slider

from benchmarks.stclient import StClient, widget_state_of
from deploy.server import Server


def run_async(coro):
    """asyncio.run in a fresh thread (as tests/load/test_load_small.py: the sync Playwright
    fixtures may keep an event loop running in the main thread in a whole-suite run)."""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(1) as ex:
        return ex.submit(asyncio.run, coro).result()


def _select_slider(default: list[int], raw: list[str] | None = None) -> Slider:
    w = Slider(id="$$ID-x-cost_tmax", label="Plot sequence lengths up to", type=Slider.SELECT_SLIDER,
               data_type=Slider.INT, min=0, max=3, step=1)
    w.options[:] = ["256", "1024", "4096", "16384"]
    w.default[:] = default
    if raw is not None:
        w.raw_value[:] = raw
        w.set_value = True
    return w


def test_select_slider_state_is_the_option_text():
    ws = widget_state_of("slider", _select_slider([2]))
    assert ws.WhichOneof("value") == "string_array_value"
    assert list(ws.string_array_value.data) == ["4096"]  # options[default index 2]
    ws = widget_state_of("slider", _select_slider([2], raw=["1024"]))  # value set by the server
    assert list(ws.string_array_value.data) == ["1024"]


def test_numeric_slider_state_is_unchanged():
    w = Slider(id="$$ID-y-L", label="Layers", type=Slider.SLIDER, data_type=Slider.INT, min=1, max=6, step=1)
    w.default[:] = [2]
    ws = widget_state_of("slider", w)
    assert ws.WhichOneof("value") == "double_array_value" and list(ws.double_array_value.data) == [2.0]


@pytest.mark.e2e
def test_cost_and_mask_lab_reruns_against_the_server():
    async def drive(url: str) -> None:
        async with StClient(url, page="cost") as c:
            r = await c.rerun()
            assert r.ok, r.exceptions
            wid, etype = c.widgets["Plot sequence lengths up to"]
            assert etype == "slider" and c.widget_values[wid].WhichOneof("value") == "string_array_value"
            for i in range(3):  # every rerun of the cost page sends the select slider's state back
                r = await c.set_widget("Sentence", f"the cat sat on the mat {i} .")
                assert r.ok and not r.exceptions, (i, r.exceptions, r.status)
            r = await c.set_widget("Plot sequence lengths up to", "1024")
            assert r.ok and not r.exceptions, r.exceptions
            assert list(c.widget_values[wid].string_array_value.data) == ["1024"]
            r = await c.goto("mask-lab")
            assert r.ok, r.exceptions
            assert c.widgets["Sentence"][1] == "text_input"  # not the mask lab's "Sentence" selectbox
            r = await c.set_widget("Sentence", "a dog ran to the park .")
            assert r.ok and not r.exceptions, r.exceptions
            text_id = c.widgets["Sentence"][0]
            assert c.widget_values[text_id].string_value == "a dog ran to the park ."

    # error details shown, so a failure names the server's exception
    with Server("app.py", extra=["--client.showErrorDetails", "full"]) as s:
        run_async(drive(s.url))

"""Shared test helpers: decode Plotly figure data from AppTest, drive AppTest."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


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


def app_test(default_timeout: int = 60):
    from streamlit.testing.v1 import AppTest
    return AppTest.from_file(str(ROOT / "app.py"), default_timeout=default_timeout)


def errors(at) -> list[str]:
    return [str(e.value) for e in at.exception]

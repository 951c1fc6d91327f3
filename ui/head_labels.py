"""The head labels of a run (model.patterns.label_heads), one layer at a time, computed once per
traced layer and shared by every session and page while the trace is cached.

Labelling reads every weight of a layer in float64: ~0.08 s for a layer of MiniLM at 512 tokens,
~0.3 s for a layer of SmolLM2 at 1,024 (9.4M weights), more on a cold first pass. The overview
labels the layers it shows and the heads page one layer on every rerun; a rerun (another layer
group, a widget, a theme) now reads them from here instead (issue 33: long inputs).

The labels are keyed by the weights array itself (its identity, while it lives): the shared traces
(ui.runs.TRACES) are read-only, so the same array always holds the same weights, and its labels go
when the trace is evicted and the array is freed. A run made another way (a test that plants a
pattern in a copy) has other arrays and gets its own labels."""
from __future__ import annotations

import threading
import weakref

import numpy as np

from model.patterns import HeadPattern, label_heads

_LABELS: dict[tuple[int, bytes | None, bytes | None], list[HeadPattern]] = {}
_LOCK = threading.Lock()


def _forget(key: tuple[int, bytes | None, bytes | None]) -> None:
    with _LOCK:
        _LABELS.pop(key, None)


def layer_labels(run, layer: int, hide: np.ndarray | None = None) -> list[HeadPattern]:
    """One HeadPattern per head of `layer` of the run (exactly label_heads of that layer's weights
    and the run's special keys; hide: bool (T,), the sink's keys when the sink is hidden, as
    label_heads(..., hide=hide): ui.circuits.labels_of)."""
    w = run.trace.layers[layer].attn.weights  # (1, H, T, T), read-only
    special = run.special_keys
    hide = None if hide is None else np.asarray(hide, dtype=bool)
    key = (id(w), None if special is None else special.tobytes(), None if hide is None else hide.tobytes())
    with _LOCK:
        hit = _LABELS.get(key)
    if hit is None:
        hit = label_heads(w[0], special, hide=hide)
        with _LOCK:
            if key not in _LABELS:
                weakref.finalize(w, _forget, key)  # the array freed: its id may be reused
            _LABELS[key] = hit
    return list(hit)

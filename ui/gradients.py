"""Cached compute for the Gradients page (classroom/gradients.py): the softmax experiment (cache_data)
and the training comparison, computed once per server process with a progress bar fed by the
training loop, then kept (a later visit or rerun is instant)."""
from __future__ import annotations

import threading

import streamlit as st

from classroom import gradients

STEPS = 150  # per run; four runs of a 6-layer d_model 32 model


@st.cache_data(max_entries=4, show_spinner=False)
def softmax_experiment(seed: int = 0) -> gradients.SoftmaxGradients:
    return gradients.softmax_gradient_experiment(seed=seed)


@st.cache_resource
def _runs_store() -> dict:
    """(steps, seed) -> list[RunResult]: shared by every session, read-only."""
    return {}


_lock = threading.Lock()


def training_runs(steps: int = STEPS, seed: int = 0) -> list[gradients.RunResult]:
    """The four training runs (gradients.residual_norm_comparison). The first call in a process
    trains them (seconds) with a progress bar; later calls return the stored result."""
    store, key = _runs_store(), (steps, seed)
    if key not in store:
        bar = st.progress(0.0, text="Training four tiny models (6 layers, d_model 32) on the built-in corpus…")
        shown = [0]

        def progress(f: float) -> None:  # at most ~50 updates
            if int(f * 50) > shown[0]:
                shown[0] = int(f * 50)
                bar.progress(min(f, 1.0), text=f"Training four tiny models… {f:.0%}")

        with _lock:  # one session trains, others wait for its result
            if key not in store:
                store[key] = gradients.residual_norm_comparison(steps=steps, seed=seed, progress=progress)
        bar.empty()
    return store[key]

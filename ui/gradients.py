"""Cached compute for the Gradients page (classroom/gradients.py): the softmax experiment for the
student's d_k and number of keys (cache_data), and the depth experiment for the student's depth,
runs and steps, trained in a background thread owned by a cache_resource registry (the page polls it
with a fragment and shows the progress; a finished result is kept, so a later visit is instant)."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

import streamlit as st

from classroom import gradients

STEPS = 150  # per run, by default; four runs of a 6-layer d_model 32 model
STEP_CHOICES = [50, 100, 150, 300]
DEPTHS = list(range(1, 13))  # 1 … 12 layers
DEFAULT_DEPTH = 6
DK_CHOICES = [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
KEY_CHOICES = [4, 8, 16, 32, 64]
MAX_JOBS = 12  # finished depth experiments kept per server process (each a few kB of curves)


@st.cache_data(max_entries=16, show_spinner="Measuring softmax gradients…")
def softmax_experiment(d_ks: tuple[int, ...] = gradients.DK_GRID, n_keys: int = 16,
                       seed: int = 0) -> gradients.SoftmaxGradients:
    return gradients.softmax_gradient_experiment(d_ks=d_ks, n_keys=n_keys, seed=seed)


@dataclass
class RunsJob:
    """One depth experiment: its settings, its progress and, when done, its runs (or an error)."""
    depth: int
    variants: tuple[str, ...]
    steps: int
    seed: int
    progress: float = 0.0  # 0 … 1
    runs: list[gradients.RunResult] | None = None
    error: str | None = None
    done: threading.Event = field(default_factory=threading.Event)


@st.cache_resource
def _jobs() -> dict:
    """(depth, variants, steps, seed) -> RunsJob: shared by every session, read-only once done."""
    return {}


_lock = threading.Lock()


def _train(job: RunsJob) -> None:
    def progress(f: float) -> None:
        job.progress = min(f, 1.0)

    try:
        job.runs = gradients.residual_norm_comparison(
            steps=job.steps, n_layers=job.depth, seed=job.seed,
            variants={name: gradients.VARIANTS[name] for name in job.variants}, progress=progress)
    except Exception as e:  # shown on the page, never a traceback
        job.error = f"{type(e).__name__}: {e}"
    finally:
        job.done.set()


def runs_job(depth: int = DEFAULT_DEPTH, variants: tuple[str, ...] = tuple(gradients.VARIANTS),
             steps: int = STEPS, seed: int = 0) -> RunsJob:
    """The depth experiment for these settings: started in a background thread on first request
    (one per setting in this process; a second session asking for it joins the same job)."""
    key = (int(depth), tuple(variants), int(steps), int(seed))
    jobs = _jobs()
    with _lock:
        job = jobs.get(key)
        if job is None or job.error:
            finished = [k for k, j in jobs.items() if j.done.is_set()]
            for k in finished[: max(0, len(jobs) - MAX_JOBS + 1)]:  # oldest finished first
                del jobs[k]
            job = jobs[key] = RunsJob(*key)
            threading.Thread(target=_train, args=(job,), daemon=True, name=f"gradients-{key}").start()
    return job


def training_runs(steps: int = STEPS, seed: int = 0, depth: int = DEFAULT_DEPTH,
                  variants: tuple[str, ...] = tuple(gradients.VARIANTS)) -> list[gradients.RunResult]:
    """The runs of a depth experiment, waiting for them (tests, and callers that need them now)."""
    job = runs_job(depth, variants, steps, seed)
    job.done.wait()
    if job.error:
        raise RuntimeError(job.error)
    return job.runs

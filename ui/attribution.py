"""Cached calls and background work for the "Why this token?" page (classroom/attribution.py on the
sidebar's model): the prompts' runs, each part's share of a logit, value-weighted attention, and
activation patching in a background thread with a progress bar and a cancel button.

Patching costs seconds on SmolLM2 (benchmarks/bench_attribution.py), so it never runs inside a
page script (a rerun would interrupt it): a process-wide registry (st.cache_resource) runs each
(model, prompts, target, foil) once in a daemon thread, shared by every session that asks for
the same thing (a lecture hall on one pair computes it once), at most MAX_RUNNING at a time; the
page polls with a fragment. Results are kept server-wide, the RESULTS most recent."""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import streamlit as st

from classroom import attribution
from classroom.attribution import LogitAttribution, PatchResult

from .models import ModelSource, get_model
from .runs import Run, get_run

MAX_TOKENS = 64  # the prompts are cut here (patching is L × T passes of the blocks above each layer)
MAX_RUNNING = 2  # patching jobs at a time on the whole server
# Work (parameters x layers x tokens) below which patching runs inside the page's own run: the toy
# models (about 3e6: milliseconds) draw their maps in the first paint; SmolLM2 (6e10) and fresh
# GPT-2 small run in the background thread.
INLINE_WORK = 1e9
RESULTS = 16  # finished (residual, heads) results kept

# The ready pairs: (clean, corrupted, what the pair tests). Each pair has the same number of tokens on
# SmolLM2 (tests/app/test_attribution_page.py checks), and the model's answers differ.
PAIRS = {
    "Names (indirect object)": ("When Mary and John went to the store, John gave a drink to",
                                "When John and Mary went to the store, Mary gave a drink to",
                                "Who receives the drink? The clean prompt says Mary, the corrupted one (names swapped) "
                                "John: which positions and heads carry the name that was not repeated?"),
    "Induction (repeated random words)": ("planet violin copper garden mirror. planet violin copper garden",
                                          "planet violin copper garden mirror. bread summer pencil island",
                                          "The clean prompt repeats a random sequence, so the next word can be copied "
                                          "from the first copy; the corrupted one continues with fresh words."),
    "Fact (subject swapped)": ("The Eiffel Tower is located in the city of",
                               "The Colosseum is located in the city of",
                               "The same sentence about another landmark: where does the model look up the city?"),
}
CUSTOM = "Your own"


def prompt_run(source: ModelSource, text: str) -> Run:
    """The (cached, shared) causal run of a prompt (ui.runs.get_run), cut to MAX_TOKENS tokens."""
    return get_run(source, text, True, MAX_TOKENS)


@st.cache_data(max_entries=32, show_spinner=False)
def shares(source: ModelSource, text: str, target: int, position: int = -1) -> LogitAttribution:
    """classroom.attribution.logit_attribution of the target at `position` of the prompt's run."""
    model, _ = get_model(source)
    return attribution.logit_attribution(model, prompt_run(source, text).trace, int(target), int(position))


@st.cache_data(max_entries=32, show_spinner=False)
def value_weighted(source: ModelSource, text: str, layer: int) -> np.ndarray:
    """(H, T, T) classroom.attribution.value_weighted_attention of one layer of the prompt's run."""
    model, _ = get_model(source)
    return attribution.value_weighted_attention(model, prompt_run(source, text).trace, int(layer))


def why_not(source: ModelSource) -> str | None:
    """Why this model's logits do not split into shares (None when they do)."""
    model, _ = get_model(source)
    return attribution.why_not_attributable(model)


def top_candidates(run: Run, k: int = 10) -> tuple[list[int], np.ndarray]:
    """(the k most likely next tokens after the prompt, their probabilities), from the model's logits."""
    p = np.asarray(run.trace.probs[0, -1], dtype=np.float64)  # (V,)
    ids = np.argsort(-p)[:k]
    return [int(i) for i in ids], p[ids]


def head_shares_rows(att: LogitAttribution, k: int) -> list[tuple[str, float]]:
    """(name, share) of the bars: the embedding, every layer's MLP, the k heads with the largest
    shares in size, and everything else (biases, norm shifts)."""
    L, H = att.heads.shape
    flat = np.argsort(-np.abs(att.heads), axis=None)[:k]
    rows = [("embedding", att.embed)] + [(f"MLP {l}", float(att.mlps[l])) for l in range(L)]
    rows += [(f"L{int(i) // H} H{int(i) % H}", float(att.heads.flat[int(i)])) for i in flat]
    rest = float(att.heads.sum() - sum(att.heads.flat[int(i)] for i in flat))
    rows += [(f"the other {L * H - len(flat)} heads", rest), ("biases and norm shifts", att.other)]
    return rows


# ------------------------------------------------------------------------------------ patching job
class Cancelled(Exception):
    """Raised from a job's progress callback when its cancel button was pressed."""


@dataclass
class PatchJob:
    key: tuple
    owner: str  # the session that started it (the one that may cancel it)
    status: str = "running"  # "running" | "done" | "cancelled" | "error"
    fraction: float = 0.0
    stage: str = "residual stream"
    residual: PatchResult | None = None
    heads: PatchResult | None = None
    error: str | None = None
    started: float = field(default_factory=time.time)
    cancel: threading.Event = field(default_factory=threading.Event)

    def progress(self, part: float, offset: float) -> None:
        if self.cancel.is_set():
            raise Cancelled
        self.fraction = offset + 0.5 * part

    def run(self, model, clean: list[int], corrupt: list[int], target: int, foil: int) -> None:
        try:
            self.residual = attribution.patch_residual(model, clean, corrupt, target, foil,
                                                       progress=lambda f: self.progress(f, 0.0))
            self.stage = "heads"
            self.heads = attribution.patch_heads(model, clean, corrupt, target, foil,
                                                 progress=lambda f: self.progress(f, 0.5))
            self.status = "done"
        except Cancelled:
            self.status = "cancelled"
        except ValueError as e:  # the prompts' own problem (lengths, equal metrics): said on the page
            self.status, self.error = "error", str(e)
        except Exception as e:  # noqa: BLE001  (a thread's failure reaches the page as a message)
            self.status, self.error = "error", f"{type(e).__name__}: {e}"


class PatchRegistry:
    """Process-wide: one job per work key, at most MAX_RUNNING running; finished jobs kept."""

    def __init__(self):
        self.jobs: OrderedDict[tuple, PatchJob] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: tuple) -> PatchJob | None:
        with self.lock:
            return self.jobs.get(key)

    def start(self, key: tuple, owner: str, source: ModelSource, clean: list[int], corrupt: list[int],
              target: int, foil: int) -> PatchJob | str:
        """The job for `key` (a new one unless it exists and was not cancelled), or a message
        saying the server is busy. Small work (INLINE_WORK) is done before returning."""
        with self.lock:
            job = self.jobs.get(key)
            if job is not None and job.status in ("running", "done", "error"):
                return job
            if sum(j.status == "running" for j in self.jobs.values()) >= MAX_RUNNING:
                return (f"The server is running {MAX_RUNNING} patching jobs for other readers; "
                        "press the button again in a few seconds.")
            job = PatchJob(key, owner)
            self.jobs[key] = job
            self.jobs.move_to_end(key)
            while len(self.jobs) > RESULTS:
                old = next(k for k, j in self.jobs.items() if j.status != "running" or k == key)
                if old == key:
                    break
                del self.jobs[old]
        model, _ = get_model(source)
        if model.num_parameters() * model.cfg.n_layers * len(clean) < INLINE_WORK:
            job.run(model, clean, corrupt, target, foil)
            return job
        threading.Thread(target=PatchJob.run, args=(job, model, clean, corrupt, target, foil), daemon=True,
                         name=f"attribution-patch-{id(job)}").start()
        return job


@st.cache_resource
def registry() -> PatchRegistry:
    return PatchRegistry()


def session_id() -> str:
    import uuid
    return st.session_state.setdefault("_attr_session", uuid.uuid4().hex)


def patch_key(source: ModelSource, clean: list[int], corrupt: list[int], target: int, foil: int) -> tuple:
    return (source, tuple(clean), tuple(corrupt), int(target), int(foil))


def cancel(key: tuple) -> None:
    job = registry().get(key)
    if job is not None and job.owner == session_id():
        job.cancel.set()


def pick_head(pick_key: str = "attr_pick", head_key: str = "attr_head") -> None:
    """A click on one of the page's head buttons opens that head (its attention and value-weighted
    attention); a second click keeps it open."""
    v = st.session_state.get(pick_key)
    if v is not None:
        st.session_state[head_key] = v


def head_words(option: str) -> str:
    """ "L3 H5" -> "layer 3 · head 5" (a button's words)."""
    layer, head = option.split()
    return f"layer {layer[1:]} · head {head[1:]}"

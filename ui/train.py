"""Live training for the Train page: a background-thread registry owned by st.cache_resource.

Design (see ../shared/design.md, section 3, "Long work"):
- `registry()` is one process-wide `TrainingRegistry` (st.cache_resource). It holds at most one
  job per browser session (keyed by a random id kept in st.session_state) and runs at most
  `MAX_CONCURRENT` trainings at a time on the whole server (env ATTN_LAB_MAX_TRAININGS); a start
  beyond either limit raises `Busy` with a message the page shows as is.
- A job trains in a daemon thread with training.train.train() (public API only): a FRESH model built
  from the chosen config (never a model cached by ui.models.get_model). The thread only writes
  plain Python/numpy data into its Job under a lock; it never calls Streamlit.
- The page polls with @st.fragment(run_every=...) and reads `job.view()`, an immutable copy.
- When a job has finished, `adopt_finished()` (called by the sidebar at the top of every run)
  registers the checkpoint bytes with ui.session_models.register_model_bytes and adds a name to this
  session's `_session_model_ids`, so the sidebar's Model selector offers it on every page.
- Steps are capped (MAX_STEPS) so a job always ends in about a minute even if its session left.

Uploads: `validate_upload(name, data)` turns a file into (model bytes, summary) or a ValueError
whose message the page shows with st.error; the current model is never changed by an upload.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import streamlit as st
import torch

from model.checkpoint import from_bytes, to_bytes
from model.config import MIN_D_K, ModelConfig, valid_heads
from model.patterns import label_heads, pattern_scores_all
from model.transformer import Transformer
from training import corpus
from training import train as training

from .session_models import register_model_bytes, session_models

MAX_CONCURRENT = int(os.environ.get("ATTN_LAB_MAX_TRAININGS", "2"))
# d_model: a subset of the app's list (model.config.D_MODEL_CHOICES), what trains in about a minute
# on a shared CPU; heads: the app's one rule, model.config.valid_heads.
D_MODELS = [16, 32, 64, 128]
MAX_LAYERS = 4
# Defaults (issue 21, point 9): d_model 64, 4 heads, 2 layers, 300 steps. Measured 2026-11-25 on this
# 2-core machine (1 torch thread): 5.0 s alone, about 11 s with other work running; loss 5.7 -> 2.2 and
# on the default probe sentence a first-token sink head (0.56) and a self head (0.71) grow out of the
# random start. The old defaults (d 32, 2 heads, 100 steps) ended near loss 4 with every head flat.
MIN_STEPS, MAX_STEPS, DEFAULT_STEPS = 20, 300, 300
DEFAULT_D_MODEL, DEFAULT_HEADS, DEFAULT_LAYERS = 64, 4, 2
MAX_LEN = 128  # positions of a trained model (the corpus' sentences are far shorter)
BATCH_SIZE = 32
LR = 3e-3
PROBE_MAX_TOKENS = 24
# Sentences a page training samples from: the corpus' training split is a random sample, so its
# first TRAIN_POOL sentences keep the families' mix; at most MAX_STEPS * BATCH_SIZE = 9,600 are
# drawn, and tokenizing all ~26k up front took 2.6 s of every start on a busy 2-core machine.
TRAIN_POOL = 8000
N_SNAPSHOTS = 12  # about this many attention snapshots per run (plus step 0 and the end)
UPLOAD_MAX_MB = 32
UPLOAD_MAX_BYTES = UPLOAD_MAX_MB * 1024 * 1024
FINISHED_TTL_S = 3600  # finished jobs whose session never came back are dropped after this
# Pause after every step so the training thread hands the GIL to other sessions' script threads.
# Cost: ~2-4 % of a step. Benefit, measured with benchmarks/bench_train_responsive.py (2 cores,
# shared, 2026-11-23): median rerun of another page 1.30x slower during a training with the pause,
# 1.52x without; within the noise of this machine, so a cheap precaution rather than a proven win.
YIELD_S = float(os.environ.get("ATTN_LAB_TRAIN_YIELD_S", "0.002"))


class Busy(RuntimeError):
    """A training cannot start now; str(e) is the message for the user."""


@dataclass(frozen=True)
class TrainSpec:
    d_model: int = DEFAULT_D_MODEL
    n_heads: int = DEFAULT_HEADS
    n_layers: int = DEFAULT_LAYERS
    pos_encoding: str = "sinusoidal"
    norm: str = "pre"
    objective: str = "causal"  # "causal" | "mlm"
    steps: int = DEFAULT_STEPS
    seed: int = 0
    probe: str = corpus.DEFAULT_SENTENCE

    def config(self, vocab_size: int) -> ModelConfig:
        """The architecture (ValueError with the fix if the combination is invalid)."""
        return ModelConfig(vocab_size=vocab_size, d_model=self.d_model, n_heads=self.n_heads,
                           n_layers=self.n_layers, d_ff=2 * self.d_model, max_len=MAX_LEN,
                           pos_encoding=self.pos_encoding, norm=self.norm)

    def check(self) -> None:
        if not MIN_STEPS <= self.steps <= MAX_STEPS:
            raise ValueError(f"steps must be in {MIN_STEPS}..{MAX_STEPS}, got {self.steps}")
        if self.d_model not in D_MODELS:
            raise ValueError(f"d_model must be one of {D_MODELS}, got {self.d_model}")
        if self.n_heads not in valid_heads(self.d_model):
            raise ValueError(f"{self.n_heads} heads are not offered for d_model {self.d_model} (heads must divide "
                             f"d_model and leave d_k >= {MIN_D_K}); choose from {valid_heads(self.d_model)}")
        if not 1 <= self.n_layers <= MAX_LAYERS:
            raise ValueError(f"layers must be in 1..{MAX_LAYERS}, got {self.n_layers}")
        if self.objective not in training.OBJECTIVES:
            raise ValueError(f"objective must be one of {training.OBJECTIVES}")
        self.config(8)  # pos_encoding / norm validated by ModelConfig

    def short(self) -> str:
        obj = "causal LM" if self.objective == "causal" else "masked LM"
        return (f"d{self.d_model}·{self.n_heads}h·{self.n_layers}L {self.pos_encoding} PE "
                f"{self.norm}-LN {obj}, {self.steps} steps, seed {self.seed}")


@dataclass(frozen=True)
class SnapshotView:
    step: int
    loss: float  # nan at step 0
    weights: np.ndarray  # (L, H, T, T) attention of the probe sentence


@dataclass(frozen=True)
class JobView:
    """An immutable copy of a job's state for one page run."""
    job_id: str
    spec: TrainSpec
    status: str  # "starting" | "running" | "done" | "cancelled" | "error"
    step: int
    total: int
    losses: np.ndarray  # (step,) training loss per step
    snapshots: tuple[SnapshotView, ...]
    probe_labels: tuple[str, ...]
    causal: bool
    seconds: float
    error: str
    model_name: str  # sidebar name once adopted ("" before)

    @property
    def running(self) -> bool:
        return self.status in ("starting", "running")

    @property
    def fraction(self) -> float:
        return min(1.0, self.step / max(1, self.total))

    @property
    def final_loss(self) -> float | None:
        """Mean of the last 10 training losses (None before the first step)."""
        last = self.losses[-10:]
        last = last[np.isfinite(last)]
        return float(last.mean()) if len(last) else None


def vocab_size(objective: str) -> int:
    """Words the trained model chooses from (the corpus vocabulary, + <mask> for the masked LM)."""
    return len(training.tokenizer_for(objective))


def uniform_loss(objective: str) -> float:
    """Cross-entropy of a uniform guess over the vocabulary, ln(V): where training starts."""
    return math.log(vocab_size(objective))


@dataclass
class Job:
    spec: TrainSpec
    session: str
    job_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    status: str = "starting"
    step: int = 0
    losses: list[float] = field(default_factory=list)
    snapshots: list[SnapshotView] = field(default_factory=list)
    probe_labels: tuple[str, ...] = ()
    error: str = ""
    started: float = field(default_factory=time.time)
    finished: float = 0.0
    seconds: float = 0.0
    result_bytes: bytes | None = None  # the trained checkpoint (safetensors), until adopted
    model_name: str = ""
    adopted: bool = False
    cancel: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    thread: threading.Thread | None = None

    def view(self) -> JobView:
        with self.lock:
            return JobView(self.job_id, self.spec, self.status, self.step, self.spec.steps,
                           np.asarray(self.losses, dtype=np.float64), tuple(self.snapshots),
                           self.probe_labels, self.spec.objective == "causal",
                           (self.finished or time.time()) - self.started, self.error, self.model_name)

    # -- the worker thread ---------------------------------------------------------------------
    def run(self) -> None:
        try:
            self._train()
        except Exception as e:  # shown on the page; the server keeps running
            with self.lock:
                self.status, self.error = "error", f"{type(e).__name__}: {e}"
        finally:
            with self.lock:
                self.finished = time.time()
                self.seconds = self.finished - self.started

    def _on_step(self, step: int, loss: float) -> None:
        with self.lock:
            self.step = step
            self.losses.append(float(loss))
        if YIELD_S > 0:
            time.sleep(YIELD_S)

    def _on_snapshot(self, snap: training.Snapshot) -> None:
        view = SnapshotView(snap.step, float(snap.loss), np.asarray(snap.weights, dtype=np.float32))
        view.weights.flags.writeable = False
        with self.lock:  # live: the page shows snapshots while the training runs
            self.snapshots = [*self.snapshots, view]

    def _train(self) -> None:
        spec = self.spec
        tok = training.tokenizer_for(spec.objective)
        cfg = spec.config(len(tok))
        enc = tok.encode(spec.probe or corpus.DEFAULT_SENTENCE)
        probe_ids = enc.ids[:PROBE_MAX_TOKENS]
        with self.lock:
            self.probe_labels = tuple(enc.labels[:PROBE_MAX_TOKENS])
            self.status = "running"
        data = training_pool(spec.objective)  # (N, T) ids, encoded once per process
        every = max(1, spec.steps // N_SNAPSHOTS)
        res = training.train(cfg, tok, data, spec.steps, LR, spec.seed, spec.objective, batch_size=BATCH_SIZE,
                      callback=self._on_step, snapshot_every=every, snapshot_ids=probe_ids,
                      should_stop=self.cancel.is_set, on_snapshot=self._on_snapshot)
        snaps = [SnapshotView(s.step, float(s.loss), np.asarray(s.weights, dtype=np.float32))
                 for s in res.snapshots]
        for s in snaps:
            s.weights.flags.writeable = False
        data_bytes = None
        if not res.stopped:
            extra = {"trained_in_app": {**dataclasses.asdict(spec), "lr": LR, "batch_size": BATCH_SIZE,
                                        "final_loss": round(float(np.mean(res.losses[-10:])), 4)
                                        if res.losses else None,
                                        "seconds": round(res.seconds, 1)}}
            data_bytes = to_bytes(res.model, tok, extra=extra)
            # What joins the sidebar must load like any upload (names, shapes, finite values):
            # a diverged run (NaN weights) is reported here instead of breaking every page.
            if not np.isfinite(res.losses).all():
                raise ValueError("the training diverged (the loss became NaN or infinite); try pre-LN, "
                                 "fewer layers or another seed")
            from_bytes(data_bytes)
        with self.lock:
            self.snapshots = snaps
            self.losses = list(res.losses)
            self.step = res.steps_done
            self.result_bytes = data_bytes
            self.status = "cancelled" if res.stopped else "done"


@functools.lru_cache(maxsize=len(training.OBJECTIVES))
def training_pool(objective: str) -> torch.Tensor:
    """The first TRAIN_POOL training sentences as (N, T) ids for this objective's tokenizer, encoded
    once per process (~0.2 s of pure Python holding the GIL, which every start paid while other
    sessions waited). Shared by all jobs: train() only indexes it, never writes to it."""
    return training.encode_texts(training.tokenizer_for(objective), corpus.generate().train[:TRAIN_POOL], MAX_LEN)[0]


class TrainingRegistry:
    """Process-wide: one job per session, at most `limit` running at once."""

    def __init__(self, limit: int = MAX_CONCURRENT):
        self.limit = limit
        self.jobs: dict[str, Job] = {}
        self.lock = threading.Lock()

    def running(self) -> int:
        return sum(1 for j in self.jobs.values() if j.status in ("starting", "running"))

    def get(self, session: str) -> Job | None:
        with self.lock:
            return self.jobs.get(session)

    def start(self, session: str, spec: TrainSpec, target: Callable[[Job], None] | None = None) -> Job:
        spec.check()
        with self.lock:
            self._prune()
            mine = self.jobs.get(session)
            if mine is not None and mine.status in ("starting", "running"):
                raise Busy("Your training is still running: wait for it or cancel it "
                           "(one training per session).")
            if self.running() >= self.limit:
                raise Busy(f"The server is busy: {self.running()} trainings are running "
                           f"(the limit is {self.limit}). Try again in a minute.")
            job = Job(spec=spec, session=session)
            self.jobs[session] = job
        job.thread = threading.Thread(target=target or Job.run, args=(job,), daemon=True,
                                      name=f"attn-lab-train-{job.job_id}")
        job.thread.start()
        return job

    def cancel(self, session: str) -> bool:
        job = self.get(session)
        if job is None or job.status not in ("starting", "running"):
            return False
        job.cancel.set()
        return True

    def _prune(self) -> None:
        now = time.time()
        for k in [k for k, j in self.jobs.items()
                  if j.finished and now - j.finished > FINISHED_TTL_S]:
            del self.jobs[k]


@st.cache_resource
def registry() -> TrainingRegistry:
    """Made on the first visit to the Train page of this process. It also imports torch._dynamo,
    which torch's optimizers import on their first step: ~1.4 s of pure-Python imports holding the
    GIL. Inside the first training they stalled every other session's rerun (a p90 of 2.65x in
    benchmarks/bench_train_responsive.py); here they are paid once, by the page's first visitor."""
    import torch._dynamo  # noqa: F401  (here on purpose: see the docstring)
    return TrainingRegistry()


# --- session glue (script thread only) -----------------------------------------------------------
def session_key() -> str:
    return st.session_state.setdefault("_train_session", uuid.uuid4().hex)


def my_job() -> Job | None:
    return registry().get(session_key())


def start(spec: TrainSpec) -> Job:
    """Start this session's training; raises Busy or ValueError (message for the user)."""
    st.session_state.pop("_train_adopted", None)
    return registry().start(session_key(), spec)


def cancel() -> None:
    registry().cancel(session_key())


def add_session_model(name: str, data: bytes) -> str:
    """Register checkpoint bytes with ui.session_models and list them in this session's sidebar under a
    unique name (returned)."""
    digest = register_model_bytes(data)
    ids: dict[str, str] = st.session_state.setdefault("_session_model_ids", {})
    for existing, d in ids.items():
        if d == digest:
            return existing
    unique, n = name, 2
    while unique in ids:
        unique, n = f"{name} ({n})", n + 1
    ids[unique] = digest
    return unique


def adopt_finished() -> str | None:
    """If this session's training finished since the last run, make its model selectable in the
    sidebar (called by ui/sidebar.py before it lists the sources). Returns the new name."""
    key = st.session_state.get("_train_session")
    if key is None:
        return None
    job = registry().get(key)
    if job is None:
        return None
    with job.lock:
        if job.adopted or job.status != "done" or job.result_bytes is None:
            return None
        data, job.adopted = job.result_bytes, True
    n = st.session_state.get("_train_count", 0) + 1
    st.session_state["_train_count"] = n
    name = add_session_model(f"trained #{n}: {job.spec.short()}", data)
    with job.lock:
        job.model_name = name
        job.result_bytes = None  # ui.session_models keeps the bytes now
    st.session_state["_train_just_adopted"] = name
    return name


def checkpoint_bytes(name: str) -> bytes | None:
    """The safetensors bytes of a session model by its sidebar name (for the download button)."""
    digest = st.session_state.get("_session_model_ids", {}).get(name)
    return session_models().get(digest) if digest else None


# --- what the page shows (no math in pages) -------------------------------------------------------
def head_subtitles(weights: np.ndarray) -> list[str]:
    """'head h · kind score' for each head of one layer's (H, T, T) weights (model/patterns)."""
    return [f"head {h} · {p.title()}" for h, p in enumerate(label_heads(weights))]


def score_trajectories(view: JobView, kind: str = "previous-token") -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(steps (S,), scores (S, L*H), names) of one pattern score for every head over the snapshots."""
    if not view.snapshots:
        return np.zeros(0), np.zeros((0, 0)), []
    L, H = view.snapshots[0].weights.shape[:2]
    steps = np.array([s.step for s in view.snapshots], dtype=float)
    w = np.stack([s.weights for s in view.snapshots])  # (S, L, H, T, T)
    scores = pattern_scores_all(w)[kind].reshape(len(view.snapshots), L * H)  # (S, L*H), layer-major
    return steps, scores, [f"L{l} H{h}" for l in range(L) for h in range(H)]


@dataclass(frozen=True)
class HeadTrajectories:
    """One line per head over the S snapshots of a training (L layers × H heads, layer-major)."""
    steps: np.ndarray  # (S,) float: the snapshot steps
    scores: np.ndarray  # (S, L*H) each head's score of the pattern it ends with, at each snapshot
    names: list[str]  # (L*H,) "L0 H1 self/diagonal": the head and that pattern


def pattern_trajectories(view: JobView) -> HeadTrajectories:
    """Each head's line is the score of the pattern it ends with (its label at the last snapshot,
    or the nearest kind for an "other" head): how each head's own pattern grew during training."""
    if not view.snapshots:
        return HeadTrajectories(np.zeros(0), np.zeros((0, 0)), [])
    L, H = view.snapshots[0].weights.shape[:2]
    steps = np.array([s.step for s in view.snapshots], dtype=float)
    w = np.stack([s.weights for s in view.snapshots])  # (S, L, H, T, T)
    all_scores = pattern_scores_all(w)  # {kind: (S, L, H)}
    final = label_heads(view.snapshots[-1].weights)  # [[HeadPattern] * H] * L
    kinds = [final[l][h].nearest for l in range(L) for h in range(H)]
    scores = np.stack([all_scores[k].reshape(len(steps), L * H)[:, i] for i, k in enumerate(kinds)], axis=1)
    names = [f"L{l} H{h} {kinds[l * H + h]}" for l in range(L) for h in range(H)]
    return HeadTrajectories(steps, scores, names)


def probe_allowed(view: JobView) -> np.ndarray | None:
    """(T, T) causal mask of the probe for a causal job; None (all allowed) for the masked LM."""
    if not view.causal or not view.snapshots:
        return None
    T_ = view.snapshots[0].weights.shape[-1]
    return np.tril(np.ones((T_, T_), dtype=bool))


# --- uploads ---------------------------------------------------------------------------------------
def validate_upload(filename: str, data: bytes, max_bytes: int = UPLOAD_MAX_BYTES) -> tuple[Transformer, str]:
    """(model, one-line summary) of an uploaded checkpoint, or ValueError with a message for the
    user. Only single-file .safetensors decoder checkpoints with Attention Lab metadata pass;
    pickles, truncated files, wrong shapes and oversized files are refused (model.checkpoint)."""
    if not str(filename).lower().endswith(".safetensors"):
        raise ValueError(f"only .safetensors files are accepted (got {filename!r}); "
                         "download one from this page after training, or save it with "
                         "model.checkpoint.to_bytes")
    if len(data) > max_bytes:
        raise ValueError(f"the file is {len(data) / 1e6:.1f} MB; the limit is {max_bytes / 1e6:.0f} MB")
    if len(data) == 0:
        raise ValueError("the file is empty")
    model, tok = from_bytes(data, max_bytes=max_bytes)
    if not isinstance(model, Transformer):
        raise ValueError("this is an encoder–decoder checkpoint; the pages here need a decoder-only "
                         "(or encoder-only) Transformer checkpoint")
    c = model.cfg
    return model, (f"d_model {c.d_model} · {c.n_heads} heads · {c.n_layers} layers · {c.pos_encoding} PE · "
                   f"{c.norm}-LN · vocab {len(tok)}")


@dataclass(frozen=True)
class UploadResult:
    """What became of an uploaded checkpoint."""
    ok: bool  # it loaded and joined the sidebar's Model list
    text: str  # its sidebar name when ok, else the message saying why it was refused
    summary: str  # one line on its architecture ("" when refused)
    new: bool  # True on the run that registered it (the sidebar needs a rerun to list it)


def handle_upload(uploaded) -> UploadResult:
    """Validate an st.file_uploader file once (cached per upload in the session) and register a
    valid one as a session model. Never raises: any failure to read the file becomes a message;
    the current model is not changed."""
    cache: dict = st.session_state.setdefault("_train_uploads", {})
    fid = getattr(uploaded, "file_id", None) or f"{uploaded.name}:{uploaded.size}"
    new = fid not in cache
    if new:
        try:
            data = uploaded.getvalue()
            _, summary = validate_upload(uploaded.name, data)
            short = uploaded.name if len(uploaded.name) <= 40 else uploaded.name[:39] + "…"
            cache[fid] = (True, add_session_model(f"uploaded: {short}", data), summary)
        except ValueError as e:
            cache[fid] = (False, str(e), "")
        except Exception as e:  # noqa: BLE001 - a hostile file must never crash the page
            cache[fid] = (False, f"could not read this file ({type(e).__name__}); "
                                 "is it a .safetensors checkpoint saved by Attention Lab?", "")
    ok, text, summary = cache[fid]
    return UploadResult(ok, text, summary, new and ok)

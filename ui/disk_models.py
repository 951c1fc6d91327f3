"""Open a model from disk (issue 32): a model the user already has (a Hugging Face folder or a
.gguf file, model.pretrained.load_from_disk) joins the Model list of every session of this server.

The sidebar's "Open a model from disk" has a path box and the models found in the local Hugging
Face cache (read only, with their sizes). Opening one:
  1. refuses with a clear message, nothing loaded: opening switched off on this server
     (ATTENTION_LAB_DISK_MODELS=0, what the production image sets unless the admin turns it on),
     a path outside the allowed folders (model.pretrained.check_allowed), anything
     model.pretrained.inspect_model refuses (pickle weights, remote code, an unsupported
     architecture, shapes that disagree with the config, a missing tokenizer), or a model whose
     float32 weights do not fit in the memory available (with a margin for its traces);
  2. loads it in a background thread owned by the server-wide registry (DiskModels, a
     st.cache_resource) while the sidebar shows a progress bar (a fragment polling every second);
  3. then every session and every page of this server can pick it: its value in the Model list,
     and so in the URL, is "disk:<resolved path>", and that link reproduces the view for anyone on
     the same server (a link to a model not loaded yet loads it, through the same checks).
The server keeps at most MAX_LOADED opened models (ATTENTION_LAB_DISK_MODELS_MAX, default 2): the
least recently opened one is dropped when another is opened. Models are shared and read-only.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import streamlit as st

from labels import md_escape
from model.families import FAMILIES
from model.pretrained import (DiskModelInfo, available_memory_bytes, check_allowed, inspect_model,
                              list_cached_models, load_from_disk)

SWITCH = "ATTENTION_LAB_DISK_MODELS"  # "0"/"off": opening models from disk is switched off
MAX_LOADED = max(1, int(os.environ.get("ATTENTION_LAB_DISK_MODELS_MAX", 2)))
MEMORY_MARGIN = 1.5  # the float32 weights times this must fit in the available memory (traces, copies)
PREFIX = "disk:"  # a Model-list value (and URL value) "disk:<resolved path>"


def enabled() -> bool:
    """Whether this server may open models from disk: yes unless ATTENTION_LAB_DISK_MODELS is
    0/off/false/no (the production image and deploy/replicas.py set it to 0; an admin sets 1)."""
    return os.environ.get(SWITCH, "1").strip().lower() not in ("0", "off", "false", "no")


def is_disk(value: str | None) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX)


def value_of(path: str) -> str:
    return PREFIX + path


def path_of(value: str) -> str:
    return value[len(PREFIX):]


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


@dataclass
class Job:
    """One model being opened or opened (shared by every session; fields written by its thread)."""

    path: str  # resolved
    info: DiskModelInfo
    fraction: float = 0.0
    message: str = "starting"
    error: str | None = None
    model: object = field(default=None, repr=False)
    tok: object = field(default=None, repr=False)
    done: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def ok(self) -> bool:
        return self.done.is_set() and self.error is None and self.model is not None

    @property
    def title(self) -> str:
        """What the Model list shows: the folder (or file) name, the family, "from disk"."""
        p = Path(self.path)
        name = p.name
        if p.parent.name == "snapshots":  # an HF cache snapshot: the repo's name, not the revision
            name = p.parent.parent.name.removeprefix("models--").replace("--", "/")
        fam = FAMILIES.get(self.info.family)
        return f"{name} · {fam.title if fam else self.info.family} · from disk"


class DiskModels:
    """The server-wide registry of models opened from disk (st.cache_resource: one per process)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.jobs: OrderedDict[str, Job] = OrderedDict()

    def job(self, path: str) -> Job | None:
        with self.lock:
            return self.jobs.get(path)

    def loaded(self) -> list[Job]:
        with self.lock:
            return [j for j in self.jobs.values() if j.ok]

    def start(self, path: str, info: DiskModelInfo) -> Job:
        """The job for `path` (checked by prepare()): the running or finished one, or a new one
        whose thread loads the model. A failed job is replaced (try again)."""
        with self.lock:
            old = self.jobs.get(path)
            if old is not None and old.error is None:
                self.jobs.move_to_end(path)
                return old
            job = Job(path=path, info=info)
            self.jobs[path] = job
            while len(self.jobs) > MAX_LOADED:  # drop the least recently opened (its memory goes
                self.jobs.popitem(last=False)    # when no session's run holds it any more)
        threading.Thread(target=self._load, args=(job,), name=f"open-{Path(path).name}", daemon=True).start()
        return job

    @staticmethod
    def _load(job: Job) -> None:
        def progress(fraction: float, message: str) -> None:
            job.fraction, job.message = float(fraction), message
        try:
            job.model, job.tok = load_from_disk(job.path, progress=progress)
        except Exception as e:  # noqa: BLE001  shown in the sidebar, never a traceback
            job.error = str(e)
        finally:
            job.done.set()


@st.cache_resource
def registry() -> DiskModels:
    return DiskModels()


def prepare(path: str) -> DiskModelInfo:
    """Everything checked before loading (module docstring, step 1): ValueError with the reason."""
    if not enabled():
        raise ValueError("Opening models from disk is switched off on this server (its admin turns it on "
                         f"with {SWITCH}=1).")
    if not str(path).strip():
        raise ValueError("Type the path of a model folder or a .gguf file, or pick one found in the cache.")
    resolved = check_allowed(path)
    info = inspect_model(resolved)
    avail = available_memory_bytes()
    need = info.float32_bytes
    if avail is not None and need * MEMORY_MARGIN > avail:
        raise ValueError(f"This model needs {_gb(need)} of memory in float32 (the engine computes in float32; "
                         f"{MEMORY_MARGIN:g}× that with its traces); the server has {_gb(avail)} available. "
                         "Nothing was loaded.")
    return info


def open_path(path: str) -> Job:
    """Check `path` (prepare) and start loading it; ValueError with the reason when refused."""
    info = prepare(path)
    return registry().start(info.path, info)


def model_of(value: str):
    """(model, tokenizer) of an opened model's Model-list value; ValueError when it is not loaded."""
    job = registry().job(path_of(value))
    if job is None or not job.ok:
        raise ValueError(f"the model {path_of(value)} is not loaded")
    return job.model, job.tok


def options() -> list[str]:
    """Model-list values of the models opened on this server (every session sees them)."""
    return [value_of(j.path) for j in registry().loaded()]


def title(value: str) -> str:
    job = registry().job(path_of(value))
    return job.title if job is not None else f"{Path(path_of(value)).name} · from disk"


def encoder(value: str) -> bool | None:
    """Whether an opened model was trained bidirectionally (its config says encoder); None if unknown."""
    job = registry().job(path_of(value))
    return None if job is None else bool(job.info.config.encoder)


@st.cache_data(ttl=60, max_entries=1, show_spinner=False)
def cached_models() -> list[tuple[str, str]]:
    """[(path, label)] of the models in the local HF cache (model.pretrained.list_cached_models:
    read only), with their size; re-read at most once a minute."""
    out = []
    for m in list_cached_models():
        kind = "GGUF" if m.kind == "gguf" else m.architecture
        out.append((m.path, f"{m.repo} · {kind} · {_gb(m.file_bytes)}"))
    return out


# ---- the sidebar --------------------------------------------------------------------------------

def _pick_cached() -> None:
    picked = st.session_state.get("disk_pick")
    if picked:
        st.session_state["disk_path"] = picked


def _open_clicked() -> None:
    s = st.session_state
    s.pop("_disk_error", None)
    try:
        job = open_path(s.get("disk_path", ""))
    except ValueError as e:
        s["_disk_error"] = str(e)
        return
    s["_disk_pending"] = value_of(job.path)


def follow_link(default_src: str) -> None:
    """Before the Model list is drawn: a value "disk:<path>" (a link, or a model that was dropped)
    that is not loaded starts loading it (through the same checks) and the default model is used
    meanwhile; once it is loaded it becomes the choice again."""
    s = st.session_state
    pending = s.get("_disk_pending")
    if pending:
        job = registry().job(path_of(pending))
        if job is not None and job.ok:
            s["src"] = pending
            s.pop("_disk_pending", None)
        elif job is not None and job.done.is_set():
            s["_disk_error"] = job.error or "the model could not be loaded"
            s.pop("_disk_pending", None)
    src = s.get("src")
    if not is_disk(src):
        return
    job = registry().job(path_of(src))
    if job is not None and job.ok:
        return
    if job is not None and job.done.is_set():  # it failed: say why (Open tries again), no retry loop
        s["_disk_error"] = job.error or "the model could not be loaded"
        s["src"] = default_src
        return
    if job is None:
        try:
            job = open_path(path_of(src))
        except ValueError as e:
            s["_disk_error"] = str(e)
            s["src"] = default_src
            return
    s["_disk_pending"] = value_of(job.path)
    s["src"] = default_src


@st.fragment(run_every="1s")
def _progress() -> None:
    """The loading progress of this session's pending model; a full rerun when it is done."""
    pending = st.session_state.get("_disk_pending")
    job = registry().job(path_of(pending)) if pending else None
    if job is None:
        return
    if job.done.is_set():
        st.rerun()
    st.progress(min(1.0, job.fraction), text=f"Opening {md_escape(Path(job.path).name)}: {md_escape(job.message)}")


def panel() -> None:
    """The sidebar's "Open a model from disk" (nothing when switched off on this server)."""
    s = st.session_state
    if not enabled():  # a link to a model on disk was refused: say why
        err = s.pop("_disk_error", None)
        if err:
            st.error(md_escape(err), icon=":material/block:")
        return
    with st.expander("Open a model from disk", expanded=bool(s.get("_disk_pending") or s.get("_disk_error"))):
        found = cached_models()
        if found:
            labels = dict(found)
            st.selectbox("Found in your Hugging Face cache", [""] + [p for p, _ in found], key="disk_pick",
                         format_func=lambda p: labels.get(p, "(choose one)"), on_change=_pick_cached,
                         help="Models already downloaded to this computer (nothing is downloaded here).")
        else:
            st.caption("No models found in the local Hugging Face cache.")
        st.text_input("Path of a model folder or a .gguf file", key="disk_path",
                      help="A folder with config.json, *.safetensors and tokenizer.json (GPT-2, Llama, Qwen2, "
                           "Qwen3, Mistral, Gemma 2, BERT, RoBERTa, DistilBERT), or a .gguf file (llama, "
                           "qwen2, qwen3, gemma2).")
        st.button("Open", key="disk_open", on_click=_open_clicked, icon=":material/folder_open:")
        err = s.pop("_disk_error", None)
        if err:
            st.error(md_escape(err), icon=":material/block:")
        if s.get("_disk_pending"):
            _progress()

"""Models trained or uploaded in the app, kept in server memory (a few MB each), bounded in count
(MAX_SESSION_MODELS): a long-running class server does not grow without bound."""
from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict

import streamlit as st

# Trained/uploaded models kept in server memory (a few MB each). Beyond this many the least
# recently registered is dropped, so a long-running class server does not grow without bound; a
# session whose model was dropped is told so (ui/sidebar.py) and can upload its downloaded copy.
MAX_SESSION_MODELS = int(os.environ.get("ATTN_LAB_MAX_SESSION_MODELS", 64))


@st.cache_resource
def session_models() -> "OrderedDict[str, bytes]":
    """Server-wide store of models trained or uploaded in the app: digest -> safetensors bytes
    (oldest first; at most MAX_SESSION_MODELS)."""
    return OrderedDict()


_store_lock = threading.Lock()


def register_model_bytes(data: bytes) -> str:
    """Keep a trained/uploaded model (safetensors bytes) and return its id (the digest)."""
    digest = hashlib.sha256(data).hexdigest()[:16]
    with _store_lock:
        store = session_models()
        store[digest] = data
        store.move_to_end(digest)
        while len(store) > max(1, MAX_SESSION_MODELS):
            store.popitem(last=False)
    return digest


def forget_dropped_session_models() -> list[str]:
    """Remove from this session's Model list the names whose model the server dropped (limit
    MAX_SESSION_MODELS); returns those names (the sidebar says so)."""
    ids: dict[str, str] = st.session_state.get("_session_model_ids", {})
    gone = [name for name, digest in ids.items() if digest not in session_models()]
    for name in gone:
        del ids[name]
    return gone

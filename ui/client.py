"""Who is asking: the address of the browser behind this session's run, and whether it is on the
server's own machine (loopback).

`st.context.ip_address` is the WebSocket's client as uvicorn (Streamlit 1.67's server) reports it:
None when the browser is on this machine (Streamlit's own rule for localhost), else the TCP peer, or,
for a loopback peer, the last X-Forwarded-For entry that is not loopback (uvicorn's proxy headers). Behind the project's nginx
(deploy/nginx.conf.template, on the same host) every peer is loopback; nginx appends the address
it saw to X-Forwarded-For ($proxy_add_x_forwarded_for), so the client is that header's last entry,
trusted only when the peer is loopback (our proxy). A peer that is not loopback is the client, and
its X-Forwarded-For is ignored (anyone can send one). "Loopback" therefore never means "behind a
proxy on this machine": a student coming through nginx is the student's address.

When the project's nginx runs with a shared secret (deploy/replicas.py sets ATTN_LAB_PROXY_SECRET
for nginx and every replica; nginx sends it in PROXY_HEADER, overwriting whatever a client sent),
X-Forwarded-For is trusted only on requests that carry it: then a process on this machine that
talks to a replica directly cannot claim another address either. This is the one rule: the disk
models' loopback check and the live class's limits per client both use client_address().
"""
from __future__ import annotations

import hmac
import ipaddress
import os

import streamlit as st

PROXY_SECRET_ENV = "ATTN_LAB_PROXY_SECRET"  # the secret our nginx and the replicas share (deploy/replicas.py)
PROXY_HEADER = "X-Attention-Lab-Proxy"  # the header nginx sends it in


def _is_loopback(address: str | None) -> bool:
    if address is None:
        return True
    try:
        return ipaddress.ip_address(address.strip().strip("[]").split("%")[0]).is_loopback
    except ValueError:
        return False


def _connection() -> tuple[str | None, dict]:
    """(the WebSocket peer's address, the request's headers) of this run; (None, {}) outside one.
    A peer that is not a string (AppTest's stand-in client) counts as this machine."""
    try:
        peer = st.context.ip_address
        headers = st.context.headers
    except Exception:  # noqa: BLE001  outside a script run: nobody is asking
        return None, {}
    return (peer if isinstance(peer, str) else None), (headers if headers is not None else {})


def client_address() -> str | None:
    """The client's address as above; None means this machine (no proxy header, Streamlit's None)."""
    peer, headers = _connection()
    secret = os.environ.get(PROXY_SECRET_ENV, "")
    sent = headers.get(PROXY_HEADER, "") if secret and hasattr(headers, "get") else ""
    ours = bool(secret) and isinstance(sent, str) and hmac.compare_digest(sent.encode(), secret.encode())
    # (the peer Streamlit reports is uvicorn's: behind a loopback proxy it is already an entry of
    # X-Forwarded-For, the last one that is not loopback, which a client on this machine can write;
    # so with our proxy's secret the last entry itself decides, and nothing else does)
    if not ours and (secret or not _is_loopback(peer)):
        return peer
    forwarded = headers.get("X-Forwarded-For") if hasattr(headers, "get") else None
    if forwarded:
        last = str(forwarded).split(",")[-1].strip()
        try:
            return str(ipaddress.ip_address(last.strip("[]")))
        except ValueError:  # not an address: never this machine (a limit's key, cut short)
            return last[:64] or peer
    return peer


def is_loopback_client() -> bool:
    """Whether the browser of this run is on the server's own machine (module docstring)."""
    return _is_loopback(client_address())

"""Who is asking: the address of the browser behind this session's run, and whether it is on the
server's own machine (loopback).

`st.context.ip_address` is the peer of the WebSocket: None when the browser is on this machine
(Streamlit's own rule for localhost), else the address Tornado saw. Behind the project's nginx
(deploy/nginx.conf.template, on the same host) every peer is loopback; nginx appends the address
it saw to X-Forwarded-For ($proxy_add_x_forwarded_for), so the client is that header's last entry,
trusted only when the peer is loopback (our proxy). A peer that is not loopback is the client, and
its X-Forwarded-For is ignored (anyone can send one). "Loopback" therefore never means "behind a
proxy on this machine": a student coming through nginx is the student's address.
"""
from __future__ import annotations

import ipaddress

import streamlit as st


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
    if not _is_loopback(peer):
        return peer
    forwarded = headers.get("X-Forwarded-For")
    if forwarded:
        last = forwarded.split(",")[-1].strip()
        return last or peer
    return peer


def is_loopback_client() -> bool:
    """Whether the browser of this run is on the server's own machine (module docstring)."""
    return _is_loopback(client_address())

"""Which address students should open: this machine's network address and the join link's base.

Standard library only (psutil, when installed, is a fallback): nothing here sends a packet. The
network address is the one of the interface that routes outward, found by `connect()`ing a UDP
socket to a documentation address (192.0.2.1, TEST-NET-1): for UDP, connect only picks the route
and the local address; no datagram leaves the machine.

The join link's base is the first of these that exists (join_base):
1. ATTN_LAB_PUBLIC_URL (a server behind a proxy or a DNS name, e.g. https://attention.example.edu);
2. the lecturer's browser address, when it is not a loopback one;
3. when the server listens beyond loopback, this machine's network address and the server's port;
4. else the loopback address itself, which works only on this computer (the card says so).
"""
from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

PUBLIC_URL_ENV = "ATTN_LAB_PUBLIC_URL"
LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


def is_loopback_host(host: str | None) -> bool:
    h = (host or "").strip().strip("[]").lower()
    if not h or h in LOOPBACK_NAMES or h.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def listens_beyond_loopback(server_address: str | None) -> bool:
    """Whether a server bound to `server_address` (Streamlit's server.address) takes connections
    from other machines: an empty address, 0.0.0.0 or :: (every interface), or a non-loopback one."""
    a = (server_address or "").strip()
    return a in ("", "0.0.0.0", "::", "[::]") or not is_loopback_host(a)


def _usable(ip: str) -> bool:
    try:
        a = ipaddress.ip_address(ip)
    except ValueError:
        return False
    return not (a.is_loopback or a.is_link_local or a.is_unspecified or a.is_multicast)


def network_address() -> str | None:
    """This machine's address on the network (IPv4 of the interface that routes outward), or None
    when it has none but loopback. Sends nothing."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # UDP: chooses the route, sends no packet
            ip = s.getsockname()[0]
        if _usable(ip):
            return ip
    except OSError:  # no route out (an offline laptop): look at the interfaces
        pass
    try:
        import psutil
        for addrs in psutil.net_if_addrs().values():
            for a in addrs:
                if a.family == socket.AF_INET and _usable(a.address):
                    return a.address
    except Exception:  # noqa: BLE001  psutil missing or refused: no address
        pass
    return None


def public_url(raw: str | None) -> str | None:
    """ATTN_LAB_PUBLIC_URL as a base (scheme://host[:port][/path], no trailing slash), or None when
    it is empty. ValueError says what is wrong with a value that is not such a URL."""
    raw = (raw or "").strip()
    if not raw:
        return None
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ValueError(f"{PUBLIC_URL_ENV} must be an address like https://attention.example.edu "
                         f"(http or https, a host, no ?query), not {raw[:80]!r}")
    return raw.rstrip("/")


def join_base(*, public: str | None, browser_url: str | None, server_address: str | None, port: int,
              lan: str | None) -> tuple[str, str]:
    """(base URL, where it came from: "public" | "browser" | "network" | "loopback")."""
    if public:
        return public, "public"
    b = (browser_url or "").rstrip("/")
    host = urlsplit(b).hostname if b else None
    if b and not is_loopback_host(host):
        return b, "browser"
    if listens_beyond_loopback(server_address) and lan:
        return f"http://{lan}:{int(port)}", "network"
    return b or f"http://localhost:{int(port)}", "loopback"

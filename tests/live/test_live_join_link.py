"""Which address the join card offers (deploy/network.py): ATTN_LAB_PUBLIC_URL, else the lecturer's
browser address when it is not loopback, else this machine's network address when the server listens
beyond loopback, else a loopback link that the card says works only on this computer (no QR code).
No test connects anywhere: the network address is found without a packet and only checked as shown."""
from __future__ import annotations

import socket

import pytest

from deploy import network as N
from deploy.serve_class import students_address
from tests.helpers import app_test, errors


def test_join_base_takes_the_first_that_exists():
    kw = dict(browser_url="http://localhost:8501", server_address="localhost", port=8501, lan="10.1.2.3")
    assert N.join_base(public="https://attention.example.edu", **kw) == ("https://attention.example.edu", "public")
    assert N.join_base(public=None, **kw) == ("http://localhost:8501", "loopback")  # listens on loopback only
    assert N.join_base(public=None, **{**kw, "server_address": "0.0.0.0"}) == ("http://10.1.2.3:8501", "network")
    assert N.join_base(public=None, **{**kw, "server_address": "", "port": 8600}) == ("http://10.1.2.3:8600", "network")
    assert N.join_base(public=None, **{**kw, "server_address": "0.0.0.0", "lan": None})[1] == "loopback"
    assert N.join_base(public=None, **{**kw, "browser_url": "http://lab.example.edu:8501/"}) == \
        ("http://lab.example.edu:8501", "browser")
    assert N.join_base(public=None, **{**kw, "browser_url": "http://127.0.0.2:8501"})[1] == "loopback"
    assert N.join_base(public=None, **{**kw, "browser_url": "http://[::1]:8501"})[1] == "loopback"


def test_public_url_is_checked():
    assert N.public_url(" https://attention.example.edu/ ") == "https://attention.example.edu"
    assert N.public_url("") is None
    for bad in ("attention.example.edu", "ftp://x", "https://x/?room=1", "javascript:alert(1)"):
        with pytest.raises(ValueError, match="ATTN_LAB_PUBLIC_URL must be"):
            N.public_url(bad)


def test_network_address_is_this_machines_own():
    ip = N.network_address()
    if ip is None:
        pytest.skip("this machine has no network address but loopback")
    assert not N.is_loopback_host(ip)
    with socket.socket() as s:  # an address of this machine: binding to it works (nothing is sent)
        s.bind((ip, 0))


def test_make_class_prints_the_address_students_open(monkeypatch, capsys):
    from deploy.serve_class import main
    monkeypatch.setenv("ATTN_LAB_PUBLIC_URL", "https://attention.example.edu")
    assert main(["--dry-run", "--port", "8600"]) == 0
    out = capsys.readouterr().out
    assert "Students open https://attention.example.edu/" in out
    assert "--server.address 0.0.0.0 --server.port 8600" in out
    monkeypatch.delenv("ATTN_LAB_PUBLIC_URL")
    url, sentence = students_address(8600)
    lan = N.network_address()
    assert url == (f"http://{lan}:8600" if lan else None) and (lan or "loopback") in sentence


def test_loopback_only_card_says_so_and_offers_no_qr(monkeypatch):
    monkeypatch.delenv("ATTN_LAB_PUBLIC_URL", raising=False)
    at = app_test()  # .streamlit/config.toml: server.address = localhost
    at.run()
    at.button(key="live_start").click().run()
    code = at.session_state["_live"].code
    assert not errors(at)
    assert f"http://localhost:8501/?room={code}" in [c.value for c in at.code]
    said = " ".join(w.value for w in at.warning)
    assert "This link works only on this computer" in said and "make class" in said
    assert not at.get("image")  # no QR code offered as if it worked


def test_server_on_every_interface_offers_the_network_address(monkeypatch):
    lan = N.network_address()
    if lan is None:
        pytest.skip("this machine has no network address but loopback")
    monkeypatch.delenv("ATTN_LAB_PUBLIC_URL", raising=False)
    import ui.live
    monkeypatch.setattr(ui.live, "_server_address", lambda: "0.0.0.0")  # as `make class` serves (Streamlit
    at = app_test()  # cannot change server.address in a running process; the real one: test_live_card_e2e)
    at.run()
    at.button(key="live_start").click().run()
    code = at.session_state["_live"].code
    assert f"http://{lan}:8501/?room={code}" in [c.value for c in at.code] and at.get("image")
    assert not any("works only on this computer" in w.value for w in at.warning)

"""Real Chromium: the join card's link and QR code on a real server, with and without
ATTN_LAB_PUBLIC_URL, and with the server on every interface (as `make class` serves). The browser
only ever opens localhost: the link shown is checked, never opened."""
from __future__ import annotations

import re

import pytest

from deploy.network import network_address
from tests.e2e.browser import exceptions, guarded_page, screenshot, serving, wait_idle

pytestmark = pytest.mark.e2e


def card(browser, url: str, shot: str | None = None) -> tuple[str, int, str]:
    """Start a class at `url`: (the link shown, QR images on the card, the card's text)."""
    with guarded_page(browser, 1280, 720) as lec:
        lec.goto(url)
        wait_idle(lec)
        lec.get_by_role("button", name="Start a live class").click()
        wait_idle(lec)
        box = lec.locator(".st-key-live_card")
        box.wait_for()
        link = box.locator('[data-testid="stCode"]').inner_text().strip()
        if "works only on this computer" not in box.inner_text():
            # a QR code is offered: wait until the browser has drawn it (decoded, with a size); under
            # load the image element arrives after the run's other elements
            lec.wait_for_function("() => [...document.querySelectorAll('.st-key-live_card img')]"
                                  ".some(i => i.complete && i.naturalWidth > 0)", timeout=30_000)
        if shot:
            screenshot(lec, shot)
        assert exceptions(lec) == 0
        return link, box.locator("img").count(), box.inner_text()


def test_card_with_a_public_url(browser, monkeypatch):
    monkeypatch.setenv("ATTN_LAB_PUBLIC_URL", "https://attention.example.edu")
    with serving() as url:
        link, qr, _ = card(browser, url)
    assert re.fullmatch(r"https://attention\.example\.edu/\?room=[A-Z2-9]{5}", link), link
    assert qr == 1


def test_card_on_every_interface_shows_this_machines_address(browser, monkeypatch):
    lan = network_address()
    if lan is None:
        pytest.skip("this machine has no network address but loopback")
    monkeypatch.delenv("ATTN_LAB_PUBLIC_URL", raising=False)
    with serving(extra=["--server.address", "0.0.0.0"]) as url:
        port = url.rsplit(":", 1)[1]
        link, qr, text = card(browser, url, "live_card_make_class_1280x720")
    assert re.fullmatch(rf"http://{re.escape(lan)}:{port}/\?room=[A-Z2-9]{{5}}", link), link
    assert qr == 1 and "works only on this computer" not in text


def test_card_on_loopback_only_says_so(browser, monkeypatch):
    monkeypatch.delenv("ATTN_LAB_PUBLIC_URL", raising=False)
    with serving() as url:
        link, qr, text = card(browser, url, "live_card_loopback_1280x720")
    assert link.startswith("http://localhost:") and qr == 0
    assert "works only on this computer" in text and "make class" in text

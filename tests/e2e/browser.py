"""Helpers for the real-browser tier: a Streamlit server on localhost and Debian's Chromium via Playwright.
Every context is route-guarded: a request that leaves localhost fails the test."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage"]
SHOTS = ROOT / "screenshots"
LOCAL = {"localhost", "127.0.0.1", "[::1]", "::1"}
# Plotly's x tick labels of every subplot (class xtick, x2tick, x3tick, ...): a head grid shows key
# labels only under the lowest panel of each column
X_TICKS = 'g[class^="x"][class$="tick"] text'



def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serving(extra: list[str] | None = None):
    """`with serving() as url:` a Streamlit server of the app for a fixture; stopped afterwards."""
    proc, url = start_server(extra=extra)
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def start_server(app: str = "app.py", port: int | None = None, extra: list[str] | None = None):
    port = port or free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", app, "--server.headless", "true",
         "--server.address", "localhost", "--server.port", str(port), *(extra or [])],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://localhost:{port}"
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.3)
        if proc.poll() is not None:
            raise RuntimeError("streamlit server exited during start")
    proc.kill()
    raise RuntimeError("streamlit server did not become healthy in 90 s")


class Guard:
    def __init__(self):
        self.offsite: list[str] = []
        self.dialogs: list[str] = []

    def route(self, route):
        host = urlparse(route.request.url).hostname or ""
        if route.request.url.startswith(("data:", "blob:", "about:")) or host in LOCAL:
            route.continue_()
        else:
            self.offsite.append(route.request.url)
            route.abort()


@contextmanager
def guarded_page(browser, width: int, height: int, **options):
    """A fresh page in its own context (viewport width x height, more new_context options) whose
    requests may only go to localhost; closed afterwards, then the offsite requests checked."""
    ctx = browser.new_context(viewport={"width": width, "height": height}, **options)
    guard = Guard()
    ctx.route("**/*", guard.route)
    try:
        yield ctx.new_page()
    finally:
        ctx.close()
    assert not guard.offsite, f"requests left localhost: {guard.offsite[:5]}"


def wait_idle(page, timeout: float = 60_000) -> None:
    """Wait until the script run finished and the status widget is gone."""
    page.wait_for_selector('[data-testid="stApp"][data-test-script-state="notRunning"]', timeout=timeout)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=timeout)
    page.wait_for_timeout(300)


def page_url(url: str, path: str = "", query: str = "") -> str:
    """base URL + optional page path + optional query. A full URL (a copied link, with its own
    query) passes through unchanged: appending "/" to it would change its last query value."""
    if path:
        url = f"{url.rstrip('/')}/{path}"
    if query:
        url = f"{url}{'&' if '?' in url else '?'}{query}"
    return url


def open_page(page, url: str, path: str = "", query: str = "") -> None:
    page.goto(page_url(url, path, query))
    page.wait_for_selector('[data-testid="stApp"]', timeout=60_000)
    wait_idle(page)


def screenshot(page, name: str) -> Path:
    SHOTS.mkdir(exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def exceptions(page) -> int:
    return page.locator('[data-testid="stException"]').count()

"""Start/stop one Streamlit server of the app on localhost, and wait until it answers.

Production code: deploy/replicas.py starts its replicas with it. The benchmarks (benchmarks/) and
the load and deploy tests (tests/load, tests/deploy) start their servers with it too; production
never imports benchmarks/."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen | None = None, timeout: float = 90) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited during start (code {proc.returncode})")
    raise RuntimeError(f"{url} did not become healthy in {timeout:.0f} s")


class Server:
    """`with Server("app.py") as s:` -> s.url, s.pid. Extra args are Streamlit flags; env extra
    variables (e.g. thread settings) go to the server process only."""

    def __init__(self, app: str = "app.py", port: int | None = None, extra: list[str] | None = None,
                 env: dict[str, str] | None = None, log: Path | None = None):
        self.app, self.port = app, port or free_port()
        self.extra, self.env, self.log = extra or [], env or {}, log
        self.url = f"http://localhost:{self.port}"
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> "Server":
        out = open(self.log, "wb") if self.log else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", self.app, "--server.headless", "true",
             "--server.address", "localhost", "--server.port", str(self.port),
             "--browser.gatherUsageStats", "false", *self.extra],
            cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
            stdout=out, stderr=subprocess.STDOUT if self.log else subprocess.DEVNULL)
        try:
            wait_healthy(self.url, self.proc)
        except Exception:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
